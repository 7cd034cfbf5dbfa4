"""The breadth-first search: ``explore`` from the empty queue, checking every edge and
every new state against ``model.properties``, and what it found (``Exploration``, each
property's first ``Finding``)."""

from __future__ import annotations

import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import NamedTuple

from model.explore.bounds import DEFAULT_BOUNDS, Bounds
from model.explore.edge import Combo, Edge, QueueFactory, successors
from model.explore.state import State, canonical
from model.explore.trace import Trace, replay
from model.explore.vocabulary import Step
from model.explore.world import EMPTY
from model.properties import ALWAYS, BY_NAME, SOMETIMES
from model.queue import QueueModel


class Finding(NamedTuple):
    """The first edge that broke (``always``) or witnessed (``sometimes``) a property,
    taken from a state at ``depth``: its trace has ``depth + 1`` steps."""

    state: State
    depth: int
    edge: Edge


@dataclass
class Exploration:
    """What one search found: TLC's numbers, each property's first finding, every
    (source, trigger, guard outcome) the model tried, and how each state was reached."""

    bounds: Bounds
    factory: QueueFactory
    generated: int = 0
    distinct: int = 0
    depth: int = 0
    unexpanded: int = 0  # states at the depth bound, reached and checked, not expanded
    seconds: float = 0.0
    findings: dict[str, Finding] = field(default_factory=dict)
    reachable: Counter[Combo] = field(default_factory=Counter)
    parents: dict[State, tuple[State, Step] | None] = field(default_factory=dict)

    def trace(self, name: str) -> Trace:
        """The shortest trace to ``name``'s finding, run again from the empty queue.

        Raises:
            KeyError: nothing was found for ``name``.
        """
        finding = self.findings[name]
        path = [finding.edge.step]
        link = self.parents[finding.state]
        while link is not None:
            parent, action = link
            path.append(action)
            link = self.parents[parent]
        trace = replay(reversed(path), self.bounds, self.factory)
        check = BY_NAME[name]
        assert check.holds(trace.edges[-1]) == (check.kind == "sometimes"), (
            f"the model is not deterministic: the trace to {name} ends otherwise"
        )
        return trace


def explore(
    bounds: Bounds = DEFAULT_BOUNDS,
    factory: QueueFactory = QueueModel.from_rows,
    stop_at_violation: bool = False,
) -> Exploration:
    """Breadth-first search of every state ``factory``'s queue reaches within ``bounds``.

    Each edge is checked against each ``always`` property of steps, each new state
    against each invariant of states (the first violation of each is kept), and each
    edge against each ``sometimes`` goal not yet witnessed. An invariant's verdict is
    the same for every world of one fingerprint (it reads the tables, the live
    tickets and how times compare), so one world per state is enough. With
    ``stop_at_violation`` the search ends at the first violation: the shortest.
    """
    started = time.monotonic()
    found = Exploration(bounds, factory)
    symmetry = bounds.symmetry()
    start = canonical(EMPTY, symmetry, bounds.keep_stale)
    found.parents[start] = None
    depth_of = {start: 0}
    frontier = deque([(start, EMPTY)])
    open_goals = list(SOMETIMES)
    on_steps = [check for check in ALWAYS if check.scope == "step"]
    in_states = [check for check in ALWAYS if check.scope == "state"]
    while frontier:
        state, world = frontier.popleft()
        depth = depth_of[state]
        if depth == bounds.depth > 0:
            found.unexpanded += 1
            continue
        for edge in successors(world, bounds, factory, symmetry.complete):
            found.generated += 1
            found.reachable.update(edge.tried)
            checks = on_steps
            child = (
                state if _same_world(edge) else canonical(edge.after, symmetry, bounds.keep_stale)
            )
            if child not in depth_of:
                depth_of[child] = depth + 1
                found.parents[child] = (state, edge.step)
                frontier.append((child, edge.after))
                checks = on_steps + in_states  # a new state: its one world's invariants
            for check in checks:
                if check.name not in found.findings and not check.holds(edge):
                    found.findings[check.name] = Finding(state, depth, edge)
            for goal in [goal for goal in open_goals if goal.holds(edge)]:
                found.findings[goal.name] = Finding(state, depth, edge)
                open_goals.remove(goal)
            if stop_at_violation and any(c.name in found.findings for c in ALWAYS):
                frontier.clear()
                break
    found.distinct = len(depth_of)
    found.depth = max(depth_of.values())
    found.seconds = time.monotonic() - started
    return found


def _same_world(edge: Edge) -> bool:
    """Whether the step left the world as it was (so the state is the same, unrenamed)."""
    before, after = edge.before, edge.after
    return after.now == before.now and after.tickets == before.tickets and after.rows == before.rows
