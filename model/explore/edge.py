"""The edges out of a world: every step within the bounds (``steps``), run on the model
as the lockstep's rule runs it, failing at each hook point it reaches (``successors``),
each told as an ``Edge``: the world before and after, the answer, what happened inside."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from model.explore.bounds import Bounds
from model.explore.vocabulary import BOUNDARIES, CLOCK_RULE, TICKET_FIELDS, Held, Step, forged, step
from model.explore.world import Result, Snapshot
from model.job import recording
from model.queue import QueueModel, Rows
from worker import Conflict

Combo = tuple[str, str, str]
"""(source state, trigger, guard outcome): what ``model.job``'s recorder is told."""


@dataclass(frozen=True)
class Edge:
    """One step of the search: the world before, the step, what the model answered, the
    world after, and what happened inside: the hook points called (in order), the world
    the same step leaves with no fault (``after`` itself when it has none), the
    triggers tried, and the ticket a claim issued or a finish presented, if any."""

    before: Snapshot
    step: Step
    result: Result
    after: Snapshot
    points: tuple[str, ...]
    unfaulted: Snapshot
    tried: frozenset[Combo]
    issued: dict[str, Any] | None = None
    presented: dict[str, Any] | None = None

    @property
    def failed_at(self) -> str | None:
        """The hook point whose fault was raised, or ``None``."""
        point = self.step.fail_at
        return point if point is not None and point in self.points else None


class InjectedFault(Exception):
    """Raised by a fault hook at the point it was told to fail at."""


class _Hook:
    """A fault hook that records every point it is called at and raises at ``fail_at``."""

    def __init__(self, fail_at: str | None) -> None:
        self.fail_at = fail_at
        self.points: list[str] = []

    def __call__(self, point: str) -> None:
        self.points.append(point)
        if point == self.fail_at:
            raise InjectedFault(point)


QueueFactory = Callable[[Rows], QueueModel]
"""Builds the queue of given rows (``QueueModel.from_rows``, or a planted bug's)."""


def unused_but_one(names: tuple[str, ...], used: Iterable[str | None]) -> tuple[str, ...]:
    """``names`` less every unused one but the first: two names a world does not use are
    interchangeable there (their swap maps it onto itself), so a step naming the second
    leads where the same step naming the first does, up to names."""
    seen = set(used)
    spare = [name for name in names if name not in seen]
    return tuple(name for name in names if name in seen or name == spare[0])


def steps(world: Snapshot, bounds: Bounds, symmetric: bool = False) -> Iterator[Step]:
    """Every step from ``world`` within ``bounds``, without faults, in a fixed order.

    The steps that seldom change the world come first (forged and stale tickets, the
    redrive of a job that is not dead), so that the model they share is rebuilt less
    often. With ``symmetric`` (every renaming of ids and of owners is a symmetry),
    steps that name an unused id or owner are taken for one such name only
    (``unused_but_one``).
    """
    ids, owners = bounds.ids, bounds.owners
    if symmetric:
        ids = unused_but_one(ids, world.jobs)
        owners = unused_but_one(
            owners,
            [*(job.owner for job in world.jobs.values()), *(t["owner"] for t in world.tickets)],
        )
    for index, ticket in enumerate(world.tickets):
        if world.is_live(ticket):
            for name in TICKET_FIELDS:
                for outcome in bounds.forged:
                    yield step("finish_forged", ticket=Held(index), field=name, outcome=outcome)
    for job_id in ids if len(world.audit) < bounds.redrives else ():
        for ttl_ms in bounds.ttls:
            for note in bounds.notes:
                yield step("redrive", job_id=job_id, ttl_ms=ttl_ms, note_text=note, fail_at=None)
    for index in range(len(world.tickets)):
        for outcome in bounds.outcomes:
            for delay in bounds.delays if outcome == "retry" else (0,):
                yield step("finish", ticket=Held(index), outcome=outcome, delay=delay, fail_at=None)
    for job_id in ids:
        for qty in bounds.qtys:
            for ttl_ms in bounds.ttls:
                for budget in bounds.budgets:
                    yield step(
                        "enqueue", job_id=job_id, qty=qty, ttl_ms=ttl_ms, max_attempts=budget
                    )
    for owner in owners:
        for lease_ms in bounds.leases:
            yield step("claim", owner=owner, lease_ms=lease_ms, fail_at=None)
    # The clock calls no model: one step per time it can move to makes every world it can.
    targets = {world.now}
    for boundary in BOUNDARIES:
        for offset in bounds.offsets:
            target = world.clock_target(boundary, offset)
            if target not in targets:
                targets.add(target)
                yield step("advance_clock_to", boundary=boundary, offset=offset)


def presented(world: Snapshot, action: Step) -> dict[str, Any] | None:
    """The ticket a ``finish`` or ``finish_forged`` step presents (a fresh dict), else ``None``."""
    if action.rule == "finish":
        return dict(world.tickets[action["ticket"].index])
    if action.rule == "finish_forged":
        return forged(world.tickets[action["ticket"].index], action["field"])
    return None


def perform(
    queue: QueueModel | None, world: Snapshot, action: Step, hook: _Hook
) -> tuple[Any, int]:
    """Call the model as the lockstep's rule ``action`` does; return its answer and the
    clock after it (only the clock's rule moves it, with no model: ``queue`` is ``None``)."""
    now = world.now
    if action.rule == CLOCK_RULE:
        return None, world.clock_target(action["boundary"], action["offset"])
    assert queue is not None, f"{action.rule} calls the model"
    ticket = presented(world, action)
    if ticket is not None:
        delay = world.delay_for(action["delay"], ticket) if action.rule == "finish" else 0
        return queue.finish(ticket, action["outcome"], now, delay, fault=hook), now
    if action.rule == "enqueue":
        event = {"id": action["job_id"], "qty": action["qty"]}
        return queue.enqueue(event, now, action["ttl_ms"], action["max_attempts"]), now
    if action.rule == "claim":
        return queue.claim(action["owner"], now, action["lease_ms"], fault=hook), now
    if action.rule == "redrive":
        answer = queue.redrive(action["job_id"], now, action["ttl_ms"], action["note_text"], hook)
        return answer, now
    raise ValueError(f"no rule {action.rule!r}")


def attempt(queue: QueueModel | None, world: Snapshot, action: Step, keep_stale: bool) -> Edge:
    """Run ``action`` on ``queue`` (which holds ``world``'s rows; ``None`` for the clock's
    rule) and say what happened.

    The tickets held after it: each held before that is live before or after the
    step (one stale for a whole step is let go, unless ``keep_stale``), then the one
    it issued, if any.
    """
    tried: set[Combo] = set()
    hook = _Hook(action.fail_at)
    now = world.now
    with recording(lambda source, trigger, outcome: tried.add((source, trigger, outcome))):
        try:
            answer, now = perform(queue, world, action, hook)
            result: Result = ("returned", answer)
        except (ValueError, Conflict, InjectedFault) as error:
            result = ("raised", type(error).__name__)
    issued = None
    if action.rule == "claim" and result[0] == "returned" and result[1] is not None:
        issued = dict(result[1])
    moved = Snapshot(now, world.rows if queue is None else queue.rows(), world.tickets)
    held = [t for t in world.tickets if keep_stale or world.is_live(t) or moved.is_live(t)]
    after = Snapshot(now, moved.rows, (*held, *([issued] if issued is not None else [])))
    points = tuple(hook.points)
    return Edge(
        world,
        action,
        result,
        after,
        points,
        after,
        frozenset(tried),
        issued,
        presented(world, action),
    )


def successors(
    world: Snapshot, bounds: Bounds, factory: QueueFactory, symmetric: bool = False
) -> Iterator[Edge]:
    """Every edge out of ``world``: each step, then the same step failing at each hook
    point it reached. One model serves every step that leaves its rows unchanged; it is
    built when a step first calls it, and again after a step changed it."""
    queue: QueueModel | None = None

    def model_for(action: Step) -> QueueModel | None:
        nonlocal queue
        if action.rule == CLOCK_RULE:
            return None
        if queue is None:
            queue = factory(world.rows)
        return queue

    for action in steps(world, bounds, symmetric):
        edge = attempt(model_for(action), world, action, bounds.keep_stale)
        if edge.after.rows != world.rows:
            queue = None
        yield edge
        if not bounds.faults:
            continue
        for point in dict.fromkeys(edge.points):
            faulted = attempt(model_for(action), world, action.failing_at(point), bounds.keep_stale)
            if faulted.after.rows != world.rows:
                queue = None
            yield replace(faulted, unfaulted=edge.after)


def edge_from(world: Snapshot, action: Step, bounds: Bounds, factory: QueueFactory) -> Edge:
    """The edge ``action`` makes from ``world`` on a fresh model, as ``successors`` makes it."""

    def fresh() -> QueueModel | None:
        return None if action.rule == CLOCK_RULE else factory(world.rows)

    edge = attempt(fresh(), world, action, bounds.keep_stale)
    if action.fail_at is None:
        return edge
    plain = attempt(fresh(), world, action.failing_at(None), bounds.keep_stale)
    return replace(edge, unfaulted=plain.after)
