"""The explorer speaks the lockstep's language, and its fingerprints merge only what they may.

``model.explore`` keeps copies of the lockstep's constants and aims (the model never
imports the tests): each copy is pinned here to its original, and each step the
explorer emits must be a call of a lockstep rule with exactly that rule's parameters.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import pytest

from model import QueueModel, properties
from model.explore import (
    BOUNDARIES,
    EMPTY,
    TICKET_FIELDS,
    AuditView,
    Bounds,
    JobView,
    Snapshot,
    canonical,
    explore,
    fingerprint,
    forged,
    replay,
    step,
    steps,
)
from model.rules import MAX_TIME_MS, TICKET
from tests.stateful import strategies
from tests.stateful.lockstep import QueueLockstep
from tests.support import JOB_COLUMNS, MAX_NOW, REDRIVE_COLUMNS

SMALL = Bounds(ids=("a",), owners=("c1",))


@pytest.fixture(scope="module")
def machine() -> Iterator[QueueLockstep]:
    """One lockstep machine whose model and clock the tests set by hand."""
    state = QueueLockstep()
    yield state
    state.teardown()


@pytest.fixture(scope="module")
def worlds() -> list[Snapshot]:
    """The worlds along every trace two small explorations find (one job with a redrive,
    two jobs without): boundaries of every kind, before and after now."""
    found = [explore(SMALL), explore(Bounds(ids=("a", "b"), budgets=(1,), redrives=0))]
    return [edge.after for run in found for name in run.findings for edge in run.trace(name).edges]


def test_the_copied_constants_are_the_lockstep_s() -> None:
    assert TICKET_FIELDS == strategies.TICKET_FIELDS
    assert BOUNDARIES == strategies.BOUNDARIES
    assert MAX_TIME_MS == MAX_NOW  # the clock's bound, in the lockstep and the explorer
    assert (*properties.BEFORE_COMMIT, properties.AFTER_COMMIT) == strategies.HOOK_POINTS
    assert JobView._fields == JOB_COLUMNS
    assert AuditView._fields == REDRIVE_COLUMNS


@pytest.mark.parametrize("field", TICKET_FIELDS)
@pytest.mark.parametrize(
    "ticket",
    [
        {"id": "a", "qty": 1, "owner": "c1", "token": 1, "attempt": 1, "lease_until": 5},
        {"id": "b", "qty": 2, "owner": "c2", "token": 7, "attempt": 16, "lease_until": 9},
    ],
)
def test_forged_differs_in_its_field_alone_and_is_well_formed(
    ticket: dict[str, Any], field: str
) -> None:
    fake = forged(ticket, field)
    assert [name for name in TICKET_FIELDS if fake[name] != ticket[name]] == [field]
    assert TICKET.accepts(fake, {}), f"{fake} is not a well-formed ticket"


def test_the_lockstep_forges_with_the_model_s_rule() -> None:
    assert strategies.forged is forged  # one home: tests/stateful imports it from the model


def test_every_step_is_a_lockstep_rule_with_its_parameters() -> None:
    path = [
        step("enqueue", job_id="a", qty=1, ttl_ms=2, max_attempts=1),
        step("claim", owner="c1", lease_ms=1, fail_at=None),
    ]
    ticket_held = replay(path, SMALL).edges[-1]
    emitted = {action.rule: action for action in steps(ticket_held.after, Bounds())}
    assert sorted(emitted) == [
        "advance_clock_to",
        "claim",
        "enqueue",
        "finish",
        "finish_forged",
        "redrive",
    ]
    for rule, action in emitted.items():
        parameters = list(inspect.signature(getattr(QueueLockstep, rule)).parameters)[1:]
        assert parameters == [name for name, _ in action.arguments], rule


def test_the_clock_moves_as_the_lockstep_s(machine: QueueLockstep, worlds: list[Snapshot]) -> None:
    compared = 0
    for world in worlds:
        for boundary in BOUNDARIES:
            for offset in (0, -1, 1):
                machine.model = QueueModel.from_rows(world.rows)
                machine.now = world.now
                machine.advance_clock_to(boundary=boundary, offset=offset)
                assert machine.now == world.clock_target(boundary, offset)
                compared += 1
    assert compared > 100


def test_delays_are_aimed_as_the_lockstep_aims_them(
    machine: QueueLockstep, worlds: list[Snapshot]
) -> None:
    compared = 0
    for world in worlds:
        machine.model = QueueModel.from_rows(world.rows)
        machine.now = world.now
        for ticket in world.tickets:
            for aim in (0, 5, "to_deadline", "before_deadline"):
                assert machine.delay_for(aim, ticket) == world.delay_for(aim, ticket)
                compared += 1
    assert compared > 20


def shifted(world: Snapshot, by: int) -> Snapshot:
    """``world`` with every time (the clock's included) ``by`` ms later."""

    def later(t: int | None) -> int | None:
        return None if t is None else t + by

    jobs = [
        (*r[:7], later(r[7]), later(r[8]), r[9], later(r[10]), r[11]) for r in world.rows["jobs"]
    ]
    audit = [(*r[:3], later(r[3]), r[4]) for r in world.rows["redrives"]]
    tickets = tuple({**t, "lease_until": later(t["lease_until"])} for t in world.tickets)
    return Snapshot(world.now + by, {"jobs": jobs, "redrives": audit}, tickets)


def test_a_shift_of_every_time_merges(worlds: list[Snapshot]) -> None:
    for world in worlds:
        assert fingerprint(shifted(world, 1234)) == fingerprint(world)


def job_row(job_id: str, seq: int, available_at: int, deadline: int) -> tuple[Any, ...]:
    return (seq, job_id, 1, "pending", 0, 2, 0, available_at, deadline, None, None, None)


def test_past_times_keep_their_order_and_lose_their_distance() -> None:
    def world(a: int, b: int) -> Snapshot:
        rows = {"jobs": [job_row("a", 1, a, 50), job_row("b", 2, b, 50)], "redrives": []}
        return Snapshot(10, rows, ())

    assert fingerprint(world(1, 5)) == fingerprint(world(3, 4))  # a before b, both past
    assert fingerprint(world(1, 5)) != fingerprint(world(5, 1))  # the order differs
    assert fingerprint(world(1, 5)) != fingerprint(world(1, 10))  # b at now, not past
    assert fingerprint(world(1, 11)) != fingerprint(world(1, 12))  # future times keep distance


def test_worlds_that_differ_only_in_names_merge() -> None:
    symmetry = Bounds().symmetry()
    rows = {"jobs": [job_row("a", 1, 0, 5), job_row("b", 2, 1, 9)], "redrives": []}
    swapped = {"jobs": [job_row("b", 1, 0, 5), job_row("a", 2, 1, 9)], "redrives": []}
    assert canonical(Snapshot(0, rows, ()), symmetry) == canonical(
        Snapshot(0, swapped, ()), symmetry
    )
    other = {"jobs": [job_row("a", 1, 1, 9), job_row("b", 2, 0, 5)], "redrives": []}
    assert canonical(Snapshot(0, rows, ()), symmetry) != canonical(Snapshot(0, other, ()), symmetry)


def test_three_ids_are_not_symmetric_under_the_forged_rule() -> None:
    symmetry = Bounds(ids=("a", "b", "c")).symmetry()
    assert not symmetry.complete  # forged sends a and c to b, and b to a
    assert {tuple(r.ids.items()) for r in symmetry.renamings} == {
        (("a", "a"), ("b", "b"), ("c", "c"))
    }
    assert {tuple(r.owners.items()) for r in symmetry.renamings} == {
        (("c1", "c1"), ("c2", "c2")),
        (("c1", "c2"), ("c2", "c1")),
    }


def verdicts(found: Any) -> tuple[Any, ...]:
    """What a run proves: each finding with its trace length, and the combinations tried."""
    lengths = {name: finding.depth + 1 for name, finding in found.findings.items()}
    return lengths, set(found.reachable)


def test_holding_every_stale_ticket_finds_the_same() -> None:
    """Holding each ticket only until the step after it goes stale loses no verdict."""
    held_for_ever = explore(replace(SMALL, keep_stale=True))
    default = explore(SMALL)
    assert held_for_ever.distinct > 2 * default.distinct
    assert verdicts(held_for_ever) == verdicts(default)


def test_absolute_times_find_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without relative times (every time as it is) the search finds the same, slower."""
    import model.explore.state

    def absolute(world: Snapshot, every_ticket: bool = False) -> Any:
        tickets = tuple(
            tuple(t.values()) for t in world.tickets if every_ticket or world.is_live(t)
        )
        rows = world.rows
        return (tuple(rows["jobs"]), tuple(rows["redrives"]), tickets, ((world.now,),))

    default = explore(SMALL)
    monkeypatch.setattr(model.explore.state, "fingerprint", absolute)
    plain = explore(SMALL)
    assert plain.distinct > default.distinct
    assert verdicts(plain) == verdicts(default)


def test_without_symmetry_the_search_finds_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    bounds = Bounds(ids=("a", "b"), budgets=(1,), leases=(1,), redrives=0)
    default = explore(bounds)
    identity = bounds.symmetry()._replace(renamings=bounds.symmetry().renamings[:1])
    monkeypatch.setattr(Bounds, "symmetry", lambda self: identity)
    plain = explore(bounds)
    assert plain.distinct > default.distinct
    assert verdicts(plain) == verdicts(default)


def test_the_search_starts_from_the_empty_queue_at_time_0() -> None:
    assert EMPTY.now == 0
    assert EMPTY.rows == QueueModel().rows()
