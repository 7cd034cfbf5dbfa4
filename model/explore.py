"""A bounded model checker of the queue: every state ``QueueModel`` reaches within bounds.

What TLC does for a TLA+ specification and Stateright for a Rust model, for ``model/``::

    python -m model.explore                    # the default bounds (docs/state-machine.md)
    python -m model.explore --budgets 1,2      # larger bounds: every bound is an option
    python -m model.explore --trace NAME       # also print the shortest trace for NAME
    python -m model.explore --record PATH      # write the run's numbers as JSON

Theory of operation:

1. A *world* is what the lockstep machine's world holds between two steps: the
   queue's two tables, the tickets the couriers hold and the clock.
2. The search is breadth first from the empty queue at time 0. Every step of the
   lockstep's vocabulary, with every argument from ``Bounds``, is a successor:
   ``enqueue``, ``claim``, ``finish`` of each held ticket, ``finish_forged`` of each
   live one, ``redrive`` and ``advance_clock_to`` (the clock moves only onto a
   boundary among the rows, or one ms beside it, so time is finite without losing
   a boundary). Each hook point a call reaches is a successor too, failing there:
   before COMMIT the model must be left as it was, after COMMIT the write must
   stay (a point the call never reaches is the call without a fault). The
   composite operations are left to the lockstep: a batch is the single calls in
   one write (``QueueModel``'s rule 6) and ``run_once`` a claim and a finish at a
   second clock reading, so neither reaches a state the single calls do not.
3. Worlds are deduplicated by a fingerprint (``canonical``): the tables, the live
   tickets and every time relative to the clock, under a renaming of ids and
   owners chosen alike for worlds that differ only in names. Each merge is sound:
   see ``fingerprint`` (times), ``Bounds.symmetry`` (names) and point 4 (stale
   tickets). Each new state keeps the first world found for it, as TLC keeps
   states, and is expanded from that world; ``Bounds.depth`` bounds the search.
4. A ticket is held from its claim until the step after it goes stale, so every
   stale ticket is presented to ``finish`` once more, but it is not part of the
   fingerprint: a stale ticket stays stale (its lease is behind the clock for good,
   or its token below its job's, which never goes down), and each presentation is
   checked (``only_a_live_ticket_finishes``). ``Bounds.keep_stale`` holds every
   ticket for ever and fingerprints it, as the lockstep's bundle holds it.
5. Each edge is checked against every ``always`` property of steps and every
   ``sometimes`` goal not yet witnessed, each new state against every invariant
   of states (``model.properties``). Breadth first, the first edge that breaks or
   witnesses a property ends the shortest trace to it; a trace is printed as a
   runnable program of ``tests/stateful/lockstep.py``'s rules.
6. The rows are the model's whole state (``QueueModel.from_rows``): the model a
   world's steps share is built when a step first calls it, and again only after
   a step changed it.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import sys
import textwrap
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import asdict, dataclass, field, fields, replace
from functools import cached_property
from pathlib import Path
from typing import Any, NamedTuple

from model.job import FIRES, Recorder, recording
from model.properties import ALWAYS, BY_NAME, SOMETIMES
from model.queue import QueueModel, Rows
from model.rules import MAX_TIME_MS
from worker import Conflict

# --- bounds ----------------------------------------------------------------------


@dataclass(frozen=True)
class Bounds:
    """What the search may do, TLC's CONSTANTS and state constraint; the defaults are
    the bounds ``docs/state-machine.md`` reports and ``make test`` runs."""

    ids: tuple[str, ...] = ("a", "b")
    owners: tuple[str, ...] = ("c1", "c2")
    budgets: tuple[int, ...] = (1, 2)
    ttls: tuple[int, ...] = (2,)
    leases: tuple[int, ...] = (1, 3)
    delays: tuple[int | str, ...] = (0, "before_deadline", "to_deadline")
    offsets: tuple[int, ...] = (0, -1, 1)
    outcomes: tuple[str, ...] = ("ok", "retry", "permanent")
    forged: tuple[str, ...] = ("ok",)
    qtys: tuple[int, ...] = (1,)
    notes: tuple[str, ...] = ("ops",)
    redrives: int = 1
    depth: int = 7
    faults: bool = True
    keep_stale: bool = False

    def __post_init__(self) -> None:
        if max(self.offsets, default=0) > 1:
            raise ValueError("an offset above 1 could reach a past time: fingerprint ranks them")

    def symmetry(self) -> Symmetry:
        """The renamings of the ids and of the owners that are symmetries of the steps.

        Names are only ever compared for equality (claim order follows ``seq``), so a
        renaming maps a world onto one with the same futures, unless it disagrees with
        the lockstep's ``forged`` rule, which picks a name: a renaming must commute with it.
        """
        renamings = [
            Renaming(
                dict(zip(self.ids, ids, strict=True)), dict(zip(self.owners, owners, strict=True))
            )
            for ids in itertools.permutations(self.ids)
            if _commutes(dict(zip(self.ids, ids, strict=True)), "id")
            for owners in itertools.permutations(self.owners)
            if _commutes(dict(zip(self.owners, owners, strict=True)), "owner")
        ]
        every = math.factorial(len(self.ids)) * math.factorial(len(self.owners))
        return Symmetry(self.ids, self.owners, renamings, len(renamings) == every)

    def describe(self) -> str:
        """The bounds in one line, as the report prints them."""
        return "; ".join(
            f"{item.name} {','.join(map(str, value)) if isinstance(value, tuple) else value}"
            for item in fields(self)
            for value in [getattr(self, item.name)]
        )


BOUND_HELP: dict[str, str] = {
    "ids": "the job ids `enqueue` and `redrive` name",
    "owners": "the couriers that `claim`",
    "budgets": "each `max_attempts` an `enqueue` may give",
    "ttls": "each `ttl_ms` of `enqueue` and `redrive`",
    "leases": "each `lease_ms` of `claim`",
    "delays": "each delay of a retry: ms, or aimed at the deadline (`to_deadline`,"
    " `before_deadline`)",
    "offsets": "where `advance_clock_to` moves the clock: onto a boundary (0), 1 ms before"
    " it (-1) or after it (1)",
    "outcomes": "each outcome of `finish`",
    "forged": "each outcome of `finish_forged` (a forged ticket must change nothing,"
    " whatever its outcome)",
    "qtys": "each `qty` of `enqueue` (two give `Conflict`)",
    "notes": "each note of `redrive`",
    "redrives": "audit rows in all, at most: the state constraint that keeps tokens finite",
    "depth": "steps from the empty queue, at most (0: no bound, until no new state is found)",
    "faults": "each hook point a call reaches is also a step that fails there",
    "keep_stale": "every ticket stays held and in the fingerprint, as in the lockstep's"
    " bundle (many more states)",
}
"""What each bound of ``Bounds`` means (the command's help, the doc's table)."""


# --- the lockstep's vocabulary ------------------------------------------------------

# Deliberate copies of the lockstep's constants and rules (tests/stateful: the model never
# imports the tests); tests/model/test_explore_vocabulary.py pins them to the originals.
TICKET_FIELDS = ("id", "qty", "owner", "token", "attempt", "lease_until")
BOUNDARIES = ("available_at", "deadline", "lease_until")


class JobView(NamedTuple):
    """One row of the ``jobs`` table, by column name."""

    seq: int
    id: str
    qty: int
    status: str
    attempts: int
    max_attempts: int
    token: int
    available_at: int
    deadline: int
    owner: str | None
    lease_until: int | None
    reason: str | None


class AuditView(NamedTuple):
    """One row of the ``redrives`` table, by column name."""

    seq: int
    id: str
    token: int
    at_ms: int
    note: str


@dataclass(frozen=True)
class Held:
    """A ticket the couriers hold, by its place among the tickets held."""

    index: int


@dataclass(frozen=True)
class Step:
    """One rule of the lockstep machine with its arguments, in the rule's signature order."""

    rule: str
    arguments: tuple[tuple[str, Any], ...]

    def __getitem__(self, name: str) -> Any:
        return dict(self.arguments)[name]

    @property
    def fail_at(self) -> str | None:
        """The hook point this step fails at (``None``: no fault)."""
        return dict(self.arguments).get("fail_at")

    def failing_at(self, point: str | None) -> Step:
        """The same step with a fault at ``point`` (``None``: without a fault)."""
        return replace(
            self,
            arguments=tuple((k, point if k == "fail_at" else v) for k, v in self.arguments),
        )


def step(rule: str, **arguments: Any) -> Step:
    """A ``Step``; the keywords are given in the rule's signature order."""
    return Step(rule, tuple(arguments.items()))


def forged(ticket: dict[str, Any], field_name: str) -> dict[str, Any]:
    """A well-formed ticket that differs from ``ticket`` in one field (the lockstep's rule)."""
    change: dict[str, Any] = {
        "id": "b" if ticket["id"] != "b" else "a",
        "qty": ticket["qty"] % 2 + 1,
        "owner": "c2" if ticket["owner"] != "c2" else "c1",
        "token": ticket["token"] + 1,
        "attempt": ticket["attempt"] % 16 + 1,
        "lease_until": ticket["lease_until"] + 1,
    }
    return {**ticket, field_name: change[field_name]}


# --- worlds and their fingerprints ------------------------------------------------

Result = tuple[Any, ...]
"""``("returned", value)`` or ``("raised", exception type name)``, as the lockstep compares."""


@dataclass(frozen=True)
class Snapshot:
    """A world between two steps: both tables, the tickets held (in the order they were
    issued), the clock."""

    now: int
    rows: Rows
    tickets: tuple[dict[str, Any], ...]

    @cached_property
    def jobs(self) -> dict[str, JobView]:
        """The jobs by id."""
        return {values[1]: JobView(*values) for values in self.rows["jobs"]}

    @cached_property
    def audit(self) -> list[AuditView]:
        """The audit rows, in seq order."""
        return [AuditView(*values) for values in self.rows["redrives"]]

    def is_live(self, ticket: dict[str, Any]) -> bool:
        """Would ``finish`` accept ``ticket`` now? Judged from the rows alone, as the
        lockstep judges it: the job is leased to exactly this ticket, before its
        ``lease_until`` and its deadline."""
        job = self.jobs.get(ticket["id"])
        return (
            job is not None
            and job.status == "leased"
            and job.qty == ticket["qty"]
            and job.owner == ticket["owner"]
            and job.token == ticket["token"]
            and job.attempts == ticket["attempt"]
            and job.lease_until == ticket["lease_until"]
            and self.now < ticket["lease_until"]
            and self.now < job.deadline
        )

    def clock_target(self, boundary: str, offset: int) -> int:
        """Where ``advance_clock_to(boundary, offset)`` moves the clock: the earliest
        ``boundary + offset`` of the rows after now; with none, the clock stays."""
        ahead = [
            value + offset
            for job in self.jobs.values()
            if (value := getattr(job, boundary)) is not None
            and self.now < value + offset <= MAX_TIME_MS
        ]
        return min(ahead, default=self.now)

    def delay_for(self, aim: int | str, ticket: dict[str, Any]) -> int:
        """A number, or the delay that lands on (``to_deadline``) or one ms before
        (``before_deadline``) the deadline of the ticket's job (the lockstep's rule)."""
        if isinstance(aim, int):
            return aim
        job = self.jobs.get(ticket["id"])
        deadline = job.deadline if job is not None else self.now
        delay = deadline - self.now - (1 if aim == "before_deadline" else 0)
        return min(max(delay, 0), 60000)


EMPTY = Snapshot(now=0, rows={"jobs": [], "redrives": []}, tickets=())
"""The world the search starts from: an empty queue at time 0, no ticket held."""

State = tuple[tuple[tuple[Any, ...], ...], ...]
"""A world's fingerprint: its jobs, audit rows and tickets as tuples, every time relative
to the clock (``fingerprint``), names as ``canonical`` gives them."""


def fingerprint(world: Snapshot, every_ticket: bool = False) -> State:
    """The world as a hashable value, equal for two worlds with the same futures: its
    jobs, its audit rows and its live tickets (``every_ticket``: all it holds).

    Every time becomes relative to the clock: a time at or after now as its
    distance from now; a time before now as its rank among the past times (-1 the
    latest, -2 the one before, ...). Sound because nothing in the model, its
    properties or the lockstep's clock does more with a time than compare it with
    another time or with ``now + d`` for a duration ``d >= 0``, add a duration to
    ``now``, or move the clock to a time (+1, 0 or -1) that lies after now. A map
    that keeps every time from now on and the order of the past ones answers each
    of these alike (a past time is below ``now + d`` and never a clock target), so
    two worlds with one fingerprint have the same futures step for step: a shift of
    all times merges, and so do histories that differ only in how long ago.
    """
    now = world.now
    jobs, audit = world.rows["jobs"], world.rows["redrives"]
    tickets = [t for t in world.tickets if every_ticket or world.is_live(t)]
    times = {time for row in jobs for time in (row[7], row[8], row[10])}
    times |= {row[3] for row in audit} | {t["lease_until"] for t in tickets}
    times.discard(None)
    past = sorted((t for t in times if t < now), reverse=True)
    at: dict[int | None, int | None] = {t: t - now for t in times if t >= now}
    at |= {t: -place for place, t in enumerate(past, start=1)}
    at[None] = None
    return (
        tuple((*row[:7], at[row[7]], at[row[8]], row[9], at[row[10]], row[11]) for row in jobs),
        tuple((*row[:3], at[row[3]], row[4]) for row in audit),
        tuple(
            (t["id"], t["qty"], t["owner"], t["token"], t["attempt"], at[t["lease_until"]])
            for t in tickets
        ),
    )


class Renaming(NamedTuple):
    """A renaming of job ids and owners (any other name stays)."""

    ids: dict[str, str]
    owners: dict[str, str]

    def state(self, state: State) -> State:
        """``state`` with its names renamed."""
        jobs, audit, tickets = state
        i, o = self.ids, self.owners
        return (
            tuple((r[0], i.get(r[1], r[1]), *r[2:9], o.get(r[9], r[9]), *r[10:]) for r in jobs),
            tuple((r[0], i.get(r[1], r[1]), *r[2:]) for r in audit),
            tuple((i.get(t[0], t[0]), t[1], o.get(t[2], t[2]), *t[3:]) for t in tickets),
        )


class Symmetry(NamedTuple):
    """The renamings of ``ids`` and ``owners`` that are symmetries; ``complete`` when
    every renaming is one."""

    ids: tuple[str, ...]
    owners: tuple[str, ...]
    renamings: list[Renaming]
    complete: bool


def _commutes(names: dict[str, str], field_name: str) -> bool:
    """Whether renaming by ``names`` (any other name stays) commutes with forging ``field_name``."""

    def forge(name: str) -> str:
        return str(forged({**PLAIN_TICKET, field_name: name}, field_name)[field_name])

    return all(names.get(forge(name), forge(name)) == forge(names[name]) for name in names)


PLAIN_TICKET: dict[str, Any] = dict.fromkeys(TICKET_FIELDS, 1) | {"id": "a", "owner": "c1"}


def _by_appearance(seen: Iterable[str | None], names: tuple[str, ...]) -> dict[str, str]:
    """The renaming that gives ``names``, in order, to the names as they first appear in
    ``seen`` (then to the names that never appear, in order)."""
    order = dict.fromkeys(name for name in seen if name in names)
    return dict(zip([*order, *(n for n in names if n not in order)], names, strict=True))


def canonical(world: Snapshot, symmetry: Symmetry, every_ticket: bool = False) -> State:
    """The world's fingerprint under a renaming chosen alike for every world that
    differs from it only in names (TLC's symmetry sets).

    With every renaming a symmetry, names are given in order of first appearance
    (ids by seq; owners in the rows by seq, then in the tickets); otherwise the
    smallest fingerprint over the symmetries is taken.
    """
    plain = fingerprint(world, every_ticket)
    if len(symmetry.renamings) == 1:
        return plain
    if symmetry.complete:
        jobs, _, tickets = plain
        renaming = Renaming(
            _by_appearance((row[1] for row in jobs), symmetry.ids),
            _by_appearance([*(row[9] for row in jobs), *(t[2] for t in tickets)], symmetry.owners),
        )
        unchanged = all(k == v for names in renaming for k, v in names.items())
        return plain if unchanged else renaming.state(plain)
    return min((renaming.state(plain) for renaming in symmetry.renamings), key=repr)


# --- steps and edges ----------------------------------------------------------------

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


CLOCK_RULE = "advance_clock_to"
"""The one rule that moves the clock; it calls no model."""


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


# --- the search ------------------------------------------------------------------


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
    bounds: Bounds = Bounds(),
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


# --- traces ------------------------------------------------------------------------


@dataclass(frozen=True)
class Trace:
    """A path from the empty queue at time 0, edge by edge."""

    edges: tuple[Edge, ...]

    def program(self) -> list[str]:
        """The trace as the lockstep's rule calls, ``state.promises_hold()`` after each
        (as hypothesis prints a shrunk run); a claim that issued a ticket names it
        ``tickets_<n>`` in the order issued, and a finish presents it by that name."""
        names: dict[int, str] = {}  # id() of a ticket held -> its name in the program
        lines = ["state = QueueLockstep()"]
        for edge in self.edges:

            def shown(value: Any, held: tuple[dict[str, Any], ...] = edge.before.tickets) -> str:
                return names[id(held[value.index])] if isinstance(value, Held) else repr(value)

            arguments = ", ".join(f"{key}={shown(value)}" for key, value in edge.step.arguments)
            call = f"state.{edge.step.rule}({arguments})"
            if edge.issued is not None:
                names[id(edge.issued)] = f"tickets_{len(names)}"
                call = f"{names[id(edge.issued)]} = {call}"
            lines += [call, "state.promises_hold()"]
        return [*lines, "state.teardown()"]

    def regression_test(self, name: str, summary: str) -> str:
        """The trace as a test to paste into ``tests/stateful/test_regressions.py``."""
        body = self.program()
        return "\n".join(
            [
                f"def test_regression_{name}() -> None:",
                f'    """Found by python -m model.explore ({len(self.edges)} steps):',
                "",
                *textwrap.wrap(f"{summary}.", 92, initial_indent="    ", subsequent_indent="    "),
                '    """',
                f"    {body[0]}",
                "    try:",
                *(f"        {line}" for line in body[1:-1]),
                "    finally:",
                f"        {body[-1]}",
            ]
        )


def replay(
    path: Iterable[Step], bounds: Bounds, factory: QueueFactory = QueueModel.from_rows
) -> Trace:
    """Run ``path`` from the empty queue at time 0, each step on a fresh model."""
    world, edges = EMPTY, []
    for action in path:
        edge = edge_from(world, action, bounds, factory)
        edges.append(edge)
        world = edge.after
    return Trace(tuple(edges))


def verdicts(found: Exploration) -> dict[str, dict[str, dict[str, Any]]]:
    """Each property's verdict and, when found, the length of its shortest trace."""

    def steps_to(name: str) -> int | None:
        finding = found.findings.get(name)
        return None if finding is None else finding.depth + 1

    return {
        "always": {
            p.name: {
                "summary": p.summary,
                "scope": p.scope,
                "holds": p.name not in found.findings,
                "steps": steps_to(p.name),
            }
            for p in ALWAYS
        },
        "sometimes": {
            p.name: {
                "summary": p.summary,
                "witnessed": p.name in found.findings,
                "expected": p.expected,
                "steps": steps_to(p.name),
            }
            for p in SOMETIMES
        },
    }


def failures(found: Exploration) -> list[str]:
    """The properties whose verdict fails the run: each ``always`` broken, each
    ``sometimes`` not witnessed, and each goal expected never to be witnessed that was."""
    judged = verdicts(found)
    return [
        *(name for name, v in judged["always"].items() if not v["holds"]),
        *(name for name, v in judged["sometimes"].items() if v["witnessed"] != v["expected"]),
    ]


def record(found: Exploration) -> dict[str, Any]:
    """The run as JSON data: bounds, numbers, verdicts and the reachable combinations
    (no wall time: the record must be the same on every machine)."""
    return {
        "command": "python -m model.explore --record docs/state-machine.json",
        "bounds": {
            name: list(v) if isinstance(v, tuple) else v for name, v in asdict(found.bounds).items()
        },
        "generated": found.generated,
        "distinct": found.distinct,
        "depth": found.depth,
        "unexpanded": found.unexpanded,
        **verdicts(found),
        "reachable": [list(combo) for combo in sorted(found.reachable)],
    }


def report(found: Exploration) -> list[str]:
    """TLC's summary and each property with its verdict, as the command prints them."""
    lines = [
        f"bounds: {found.bounds.describe()}",
        f"{found.generated:,} states generated, {found.distinct:,} distinct states found,"
        f" depth {found.depth}, {found.unexpanded:,} states left at the depth bound,"
        f" in {found.seconds:.1f} s",
        "always:",
    ]
    judged = verdicts(found)
    for name, verdict in judged["always"].items():
        mark = "holds   " if verdict["holds"] else f"BROKEN in {verdict['steps']} steps:"
        lines.append(f"  {mark} {name}: {verdict['summary']}")
    lines.append("sometimes:")
    for name, verdict in judged["sometimes"].items():
        if verdict["witnessed"]:
            mark = (
                f"seen in {verdict['steps']:>2}" if verdict["expected"] else "SEEN, NOT EXPECTED:"
            )
        else:
            mark = "never     " if not verdict["expected"] else "NEVER SEEN:"
        lines.append(f"  {mark} {name}: {verdict['summary']}")
    lines.append(
        f"coverage: {len(found.reachable)} (source, trigger, guard outcome) combinations tried"
    )
    return lines


def describe_finding(found: Exploration, name: str) -> list[str]:
    """The shortest trace to ``name``'s finding as a regression test of tests/stateful,
    with the last step's answer and the jobs before and after it."""
    if name not in found.findings:
        return [f"# {name}: nothing found"]
    prop = BY_NAME[name]
    trace = found.trace(name)
    last = trace.edges[-1]
    return [
        f"# {prop.kind} {name}: {prop.summary}",
        trace.regression_test(name, prop.summary),
        f"# the last step answered {last.result!r} at now={last.before.now}",
        f"# jobs before it: {last.before.rows['jobs']}",
        f"# jobs after it:  {last.after.rows['jobs']}",
    ]


RECORD_PATH = Path(__file__).resolve().parent.parent / "docs" / "state-machine.json"
"""Where ``--record`` writes the run of the default bounds (``docs/state-machine.md`` is
rendered from it; a test checks it against a fresh run)."""


def load_record(path: Path = RECORD_PATH) -> dict[str, Any]:
    """The recorded run (``record``'s data), read back."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data


def shown(combo: Combo) -> str:
    """A combination as the reports print it: ``leased --reclaim--> lease_expired fails``."""
    source, trigger, outcome = combo
    return f"{source} --{trigger}--> {outcome}"


def counting(reached: Counter[Combo]) -> Recorder:
    """A recorder for ``model.job.recording`` that counts each combination in ``reached``."""

    def count(source: str, trigger: str, outcome: str) -> None:
        reached[(source, trigger, outcome)] += 1

    return count


def coverage_report(reached: Counter[Combo], recorded: dict[str, Any]) -> list[str]:
    """What a random run (the lockstep, a fuzz campaign) made the model try, beside what
    the explorer found reachable: the transition rows fired, the (source, trigger,
    guard outcome) combinations reached, and by name each reachable one it missed."""
    reachable = {tuple(combo) for combo in recorded["reachable"]}
    got = set(reached)
    rows = {(s, t) for s, t, o in reachable if o == FIRES}
    fired = {(s, t) for s, t, o in got if o == FIRES}
    lines = [
        f"transitions fired: {len(fired & rows)} of the {len(rows)} rows the explorer fires",
        f"(source, trigger, guard outcome) reached: {len(got & reachable)} of the"
        f" {len(reachable)} the explorer found reachable (python -m model.explore)",
    ]
    lines += [f"  missing: {shown(combo)}" for combo in sorted(reachable - got)]
    lines += [
        f"  beyond the explorer's bounds: {shown(combo)} ({reached[combo]} times)"
        for combo in sorted(got - reachable)
    ]
    return lines


def _list(kind: Callable[[str], Any]) -> Callable[[str], tuple[Any, ...]]:
    return lambda text: tuple(kind(item) for item in text.split(",") if item)


def _delay(text: str) -> int | str:
    return int(text) if text.lstrip("-").isdigit() else text


def parse_bounds(arguments: argparse.Namespace) -> Bounds:
    """``Bounds`` from the command line: each option given replaces its default."""
    given = {
        item.name: getattr(arguments, item.name)
        for item in fields(Bounds)
        if getattr(arguments, item.name) is not None
    }
    return Bounds(**given)


def main(argv: Sequence[str] | None = None) -> int:
    """Explore and print the report; exit 1 if any verdict fails (``failures``)."""
    parser = argparse.ArgumentParser(
        prog="python -m model.explore", description=__doc__.splitlines()[0]
    )
    defaults = Bounds()
    for item in fields(Bounds):
        default = getattr(defaults, item.name)
        option = f"--{item.name.replace('_', '-')}"
        if isinstance(default, bool):
            parser.add_argument(
                option,
                dest=item.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f"{BOUND_HELP[item.name].replace('`', '')} (default: {default})",
            )
            continue
        if isinstance(default, int):
            kind: Callable[[str], Any] = int
        else:
            kind = _list(_delay if item.name == "delays" else type(default[0]))
        shown = default if isinstance(default, int) else ",".join(map(str, default))
        text = BOUND_HELP[item.name].replace("`", "")
        parser.add_argument(
            option, dest=item.name, type=kind, default=None, help=f"{text} (default: {shown})"
        )
    parser.add_argument(
        "--trace",
        action="append",
        default=[],
        metavar="NAME",
        help="print the shortest trace to this property's finding ('all': every one)",
    )
    parser.add_argument("--record", type=Path, help="write the run as JSON to this file")
    arguments = parser.parse_args(argv)
    found = explore(parse_bounds(arguments))
    print("\n".join(report(found)))
    names = list(found.findings) if "all" in arguments.trace else arguments.trace
    for name in names:
        print()
        print("\n".join(describe_finding(found, name)))
    if arguments.record is not None:
        arguments.record.write_text(json.dumps(record(found), indent=1) + "\n", encoding="utf-8")
    return 1 if failures(found) else 0


if __name__ == "__main__":
    sys.exit(main())
