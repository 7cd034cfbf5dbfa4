"""Batch operations (docs/batches.md): one transaction, exactly the single calls in order;
on every implementation."""

from __future__ import annotations

import copy
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import worker
from tests.contract.implementations import Queue
from tests.support import HookLog

Ticket = dict[str, Any]


def add(queue: Queue, *ids: str, ttl: int = 1000, budget: int = 3) -> None:
    for job_id in ids:
        assert queue.enqueue({"id": job_id, "qty": 2}, 0, ttl, budget)


def result(ticket: Ticket, outcome: str = "ok", delay_ms: int = 0) -> dict[str, Any]:
    return {"ticket": ticket, "outcome": outcome, "delay_ms": delay_ms}


# --- enqueue_many ----------------------------------------------------------------------


def test_enqueue_many_adds_new_jobs_and_recognises_intake_retries(
    queue: Queue,
) -> None:
    add(queue, "old")
    events = [{"id": "a", "qty": 1}, {"id": "old", "qty": 2}, {"id": "a", "qty": 1}]
    assert queue.enqueue_many(events, 5, 100, 4) == [True, False, False]
    assert [row[1:6] for row in queue.rows()["jobs"]] == [
        ("old", 2, "pending", 0, 3),
        ("a", 1, "pending", 0, 4),
    ]


def test_enqueue_many_returns_a_conflict_and_still_applies_the_other_events(
    queue: Queue,
) -> None:
    add(queue, "old")
    results = queue.enqueue_many([{"id": "old", "qty": 9}, {"id": "b", "qty": 1}], 0, 100)
    conflict, new = results
    assert isinstance(conflict, worker.Conflict)
    assert str(conflict) == "job 'old' exists with qty 2, not 9"
    assert new is True
    assert [row[1] for row in queue.rows()["jobs"]] == ["old", "b"]


def test_enqueue_many_conflicts_with_an_event_earlier_in_the_same_batch(
    queue: Queue,
) -> None:
    results = queue.enqueue_many([{"id": "a", "qty": 1}, {"id": "a", "qty": 2}], 0, 100)
    assert results[0] is True
    assert isinstance(results[1], worker.Conflict)


def test_an_empty_batch_changes_nothing(queue: Queue) -> None:
    add(queue, "a")
    before = queue.rows()
    assert queue.enqueue_many([], 0, 100) == []
    assert queue.finish_many([], 0, HookLog()) == []
    assert queue.rows() == before


EVENTS = st.lists(
    st.fixed_dictionaries({"id": st.sampled_from("abcd"), "qty": st.integers(1, 3)}), max_size=8
)


# Each example resets the fixture's queue and its twin (no new file or database).
EXAMPLES = settings(max_examples=60, suppress_health_check=[HealthCheck.function_scoped_fixture])


@EXAMPLES
@given(events=EVENTS, ttl=st.integers(1, 60000), budget=st.integers(1, 16))
def test_enqueue_many_equals_enqueue_called_in_order(
    queue: Queue, events: list[dict[str, Any]], ttl: int, budget: int
) -> None:
    batch, single = two_queues(queue)
    results = batch.enqueue_many(copy.deepcopy(events), 7, ttl, budget)
    expected = [outcome_of(partial(single.enqueue, e, 7, ttl, budget)) for e in events]
    assert [summary(r) for r in results] == expected
    assert batch.rows() == single.rows()


# --- claim_many ---------------------------------------------------------------------------


def test_claim_many_leases_the_lowest_seq_jobs_up_to_the_limit(queue: Queue) -> None:
    add(queue, "a", "b", "c")
    tickets = queue.claim_many("c1", 10, 2, 50)
    assert tickets == [
        {"id": "a", "qty": 2, "owner": "c1", "token": 1, "attempt": 1, "lease_until": 60},
        {"id": "b", "qty": 2, "owner": "c1", "token": 1, "attempt": 1, "lease_until": 60},
    ]
    assert [row[3] for row in queue.rows()["jobs"]] == ["leased", "leased", "pending"]


def test_claim_many_stops_when_nothing_is_claimable(queue: Queue) -> None:
    add(queue, "a")
    hooks = HookLog()
    assert [t["id"] for t in queue.claim_many("c1", 10, 5, fault=hooks)] == ["a"]
    assert hooks.points == ["after-claim", "after-commit"]


def test_claim_many_commits_the_quarantine_even_when_it_claims_nothing(
    queue: Queue,
) -> None:
    add(queue, "a", ttl=10)
    hooks = HookLog()
    assert queue.claim_many("c1", 10, 3, fault=hooks) == []
    assert [row[3:4] + row[11:] for row in queue.rows()["jobs"]] == [("dead", "deadline")]
    assert hooks.points == [], "an empty claim calls no hook"


def test_claim_many_calls_each_hook_once_after_the_last_lease(queue: Queue) -> None:
    add(queue, "a", "b")
    seen: list[list[str]] = []
    hooks = HookLog().on("after-claim", lambda: seen.append([r[3] for r in queue.rows()["jobs"]]))
    queue.claim_many("c1", 10, 2, fault=hooks)
    assert hooks.points == ["after-claim", "after-commit"]
    assert seen == [["leased", "leased"]]


def before_and_after(change_point: str) -> pytest.MarkDecorator:
    """Parametrize ``(point, kept)``: a fault at ``change_point`` (before the commit) rolls
    the batch back; one at ``after-commit`` keeps it."""
    return pytest.mark.parametrize(
        ("point", "kept"), [(change_point, False), ("after-commit", True)], ids=["before", "after"]
    )


@before_and_after("after-claim")
def test_a_claim_many_fault_rolls_back_before_commit_and_keeps_after(
    queue: Queue, point: str, kept: bool
) -> None:
    add(queue, "a", "b")
    add(queue, "late", ttl=5)
    before = queue.rows()
    with pytest.raises(RuntimeError):
        queue.claim_many("c1", 10, 2, fault=HookLog(fail_at=point))
    statuses = [row[3] for row in queue.rows()["jobs"]]
    assert statuses == (["leased", "leased", "dead"] if kept else [r[3] for r in before["jobs"]])


@EXAMPLES
@given(
    ttls=st.lists(st.integers(1, 30), min_size=1, max_size=6),
    now=st.integers(0, 40),
    limit=st.integers(1, 8),
)
def test_claim_many_equals_claim_called_until_none(
    queue: Queue, ttls: list[int], now: int, limit: int
) -> None:
    batch, single = two_queues(queue)
    for side in (batch, single):
        for i, ttl in enumerate(ttls):
            side.enqueue({"id": f"j{i}", "qty": 1}, 0, ttl, 1 + i % 2)
        side.claim("c0", 0, 15)  # one lease that expires meanwhile
    tickets = batch.claim_many("c1", now, limit, 7)
    expected: list[Ticket] = []
    while len(expected) < limit and (ticket := single.claim("c1", now, 7)):
        expected.append(ticket)
    assert tickets == expected
    assert batch.rows() == single.rows()


# --- finish_many ---------------------------------------------------------------------------


def test_finish_many_settles_each_live_ticket_and_rejects_the_rest(
    queue: Queue,
) -> None:
    add(queue, "a", "b", "c")
    a, b, c = queue.claim_many("c1", 10, 3, 100)
    stale = {**c, "token": 7}
    results = [result(a), result(b, "retry", 5), result(stale), result(a, "permanent")]
    hooks = HookLog()
    assert queue.finish_many(results, 20, hooks) == ["done", "pending", False, False]
    assert hooks.points == ["after-finish", "after-commit"]
    assert [row[3] for row in queue.rows()["jobs"]] == ["done", "pending", "leased"]


def test_finish_many_with_nothing_live_calls_no_hook(queue: Queue) -> None:
    add(queue, "a")
    ticket = queue.claim("c1", 0, 10)
    assert ticket is not None
    before, hooks = queue.rows(), HookLog()
    assert queue.finish_many([result(ticket)], 10, hooks) == [False]  # lease ended
    assert hooks.points == []
    assert queue.rows() == before


@before_and_after("after-finish")
def test_a_finish_many_fault_rolls_back_before_commit_and_keeps_after(
    queue: Queue, point: str, kept: bool
) -> None:
    add(queue, "a", "b")
    tickets = queue.claim_many("c1", 0, 2)
    with pytest.raises(RuntimeError):
        queue.finish_many([result(t) for t in tickets], 1, HookLog(fail_at=point))
    expected = ["done", "done"] if kept else ["leased", "leased"]
    assert [row[3] for row in queue.rows()["jobs"]] == expected


OUTCOME_DRAWS = st.lists(
    st.tuples(
        st.integers(0, 5), st.sampled_from(worker.OUTCOMES), st.sampled_from([0, 1, 25, 60000])
    ),
    max_size=8,
)


@EXAMPLES
@given(draws=OUTCOME_DRAWS, now=st.integers(0, 30))
def test_finish_many_equals_finish_called_in_order(
    queue: Queue, draws: list[tuple[int, str, int]], now: int
) -> None:
    batch, single = two_queues(queue)
    for side in (batch, single):
        add(side, "a", "b", "c", ttl=30, budget=2)
    tickets = batch.claim_many("c1", 0, 3, 20)
    assert single.claim_many("c1", 0, 3, 20) == tickets
    tickets.append({**tickets[0], "token": 2})  # never issued
    picked = [result(tickets[i % len(tickets)], o, d) for i, o, d in draws]
    statuses = batch.finish_many(copy.deepcopy(picked), now)
    expected = [single.finish(r["ticket"], r["outcome"], now, r["delay_ms"]) for r in picked]
    assert statuses == expected
    assert batch.rows() == single.rows()


# --- Validation -----------------------------------------------------------------------------

TICKET = {"id": "a", "qty": 1, "owner": "c1", "token": 1, "attempt": 1, "lease_until": 100}
ITEM = "a dict with exactly the keys"


def rejections() -> list[tuple[Callable[[Queue], object], str]]:
    good = {"id": "a", "qty": 1}
    return [
        (
            lambda q: q.enqueue_many((good,), 0, 10),
            "'events' must be a list of 0..1000 items (got ({'id': 'a', 'qty': 1},) "
            "that is a 'tuple')",
        ),
        (
            lambda q: q.enqueue_many([good, {"id": "b"}], 0, 10),
            f"'events[1]' must be {ITEM} ['id', 'qty'] (got {{'id': 'b'}} that is a 'dict')",
        ),
        (
            lambda q: q.enqueue_many([good, {"id": "b c", "qty": 1}], 0, 10),
            "'events[1]['id']' must be a str of 1-64 ASCII letters, digits, '_' or '-' "
            "(got 'b c' that is a 'str')",
        ),
        (
            lambda q: q.enqueue_many([{"id": "b", "qty": 0}], 0, 10),
            "'events[0]['qty']' must be an int in 1..1000 (got 0 that is a 'int')",
        ),
        (
            lambda q: q.enqueue_many([good], 0, 10, True),
            "'max_attempts' must be an int in 1..16 (got True that is a 'bool')",
        ),
        (
            lambda q: q.claim_many("c1", 0, 0),
            "'limit' must be an int in 1..1000 (got 0 that is a 'int')",
        ),
        (
            lambda q: q.claim_many("c1", 0, 1001),
            "'limit' must be an int in 1..1000 (got 1001 that is a 'int')",
        ),
        (
            lambda q: q.finish_many([{"ticket": TICKET, "outcome": "ok"}], 0),
            f"'results[0]' must be {ITEM} ['delay_ms', 'outcome', 'ticket'] "
            "(got {'ticket': {'id': 'a', 'qty': 1, 'owner': 'c1', 'token': 1, 'attempt': 1, "
            "'lease_until': 100}, 'outcome': 'ok'} that is a 'dict')",
        ),
        (
            lambda q: q.finish_many([result({**TICKET, "owner": ""})], 0),
            "'results[0]['ticket']['owner']' must be a str of 1-64 ASCII letters, digits, "
            "'_' or '-' (got '' that is a 'str')",
        ),
        (
            lambda q: q.finish_many([result(TICKET), result(TICKET, "done")], 0),
            "'results[1]['outcome']' must be one of ('ok', 'retry', 'permanent') "
            "(got 'done' that is a 'str')",
        ),
        (
            lambda q: q.finish_many([result(TICKET, "ok", 60001)], 0),
            "'results[0]['delay_ms']' must be an int in 0..60000 (got 60001 that is a 'int')",
        ),
        (
            lambda q: q.finish_many([result(TICKET)], 0, fault="x"),
            "'fault' must be None or a callable (got 'x' that is a 'str')",
        ),
    ]


@pytest.mark.parametrize("index", range(len(rejections())))
def test_a_malformed_batch_is_a_value_error_naming_the_item_and_changes_nothing(
    queue: Queue, index: int
) -> None:
    add(queue, "a")
    queue.claim("c1", 0, 50)
    call, message = rejections()[index]
    before = queue.rows()
    with pytest.raises(ValueError) as raised:
        call(queue)
    assert str(raised.value) == message
    assert queue.rows() == before


def test_a_batch_over_a_thousand_items_is_rejected_whole(queue: Queue) -> None:
    events = [{"id": f"j{i}", "qty": 1} for i in range(1001)]
    with pytest.raises(ValueError, match=r"^'events' must be a list of 0\.\.1000 items"):
        queue.enqueue_many(events, 0, 10)
    assert queue.enqueue_many(events[:1000], 0, 10) == [True] * 1000


def test_a_bad_item_late_in_the_batch_stops_the_whole_batch(queue: Queue) -> None:
    events = [{"id": "a", "qty": 1}, {"id": "b", "qty": 1}, {"id": "c", "qty": True}]
    with pytest.raises(ValueError, match=r"^'events\[2\]\['qty'\]'"):
        queue.enqueue_many(events, 0, 10)
    assert queue.rows()["jobs"] == []


def test_batches_never_mutate_their_inputs(queue: Queue) -> None:
    events = [{"id": "a", "qty": 1}, {"id": "b", "qty": 1}]
    kept = copy.deepcopy(events)
    queue.enqueue_many(events, 0, 100)
    tickets = queue.claim_many("c1", 0, 2)
    results = [result(t, "retry", 3) for t in tickets]
    kept_results = copy.deepcopy(results)
    queue.finish_many(results, 1)
    assert events == kept and results == kept_results


def test_a_list_subclass_is_not_a_batch(queue: Queue) -> None:
    class Events(list):  # type: ignore[type-arg]
        pass

    with pytest.raises(ValueError, match=r"^'events' must be a list"):
        queue.enqueue_many(Events([{"id": "a", "qty": 1}]), 0, 10)


# --- Helpers ------------------------------------------------------------------------------


def two_queues(queue: Queue) -> tuple[Queue, Queue]:
    """The fixture's queue and its twin, both emptied: one example's pair."""
    if not hasattr(queue, "pair"):
        queue.pair = queue.twin()  # type: ignore[attr-defined]
    batch, single = queue, queue.pair
    batch.reset()
    single.reset()
    return batch, single


def outcome_of(call: Callable[[], object]) -> object:
    """What ``call`` returned, or the Conflict it raised, as ``summary`` shows it."""
    try:
        return summary(call())
    except worker.Conflict as conflict:
        return summary(conflict)


def summary(value: object) -> object:
    """A Conflict as its message (exceptions compare by identity), anything else as is."""
    return ("Conflict", str(value)) if isinstance(value, worker.Conflict) else value


def test_seq_numbers_in_a_batch_follow_the_inserts_only(queue: Queue) -> None:
    add(queue, "a")
    events = [{"id": "a", "qty": 9}, {"id": "b", "qty": 1}, {"id": "b", "qty": 1}]
    results = queue.enqueue_many(events, 0, 9)
    conflict = ("Conflict", "job 'a' exists with qty 2, not 9")
    assert [summary(r) for r in results] == [conflict, True, False]
    queue.enqueue({"id": "c", "qty": 1}, 0, 100)
    assert [row[:2] for row in queue.rows()["jobs"]] == [(1, "a"), (2, "b"), (3, "c")]


def test_claim_many_takes_each_job_once_even_an_expired_lease_it_reclaims(queue: Queue) -> None:
    add(queue, "a", "b", ttl=10000)
    assert queue.claim("c1", 0, 100) is not None  # "a" leased until 100
    tickets = queue.claim_many("c2", 100, 5, 50)
    assert [(ticket["id"], ticket["attempt"], ticket["lease_until"]) for ticket in tickets] == [
        ("a", 2, 150),
        ("b", 1, 150),
    ]


def test_every_ticket_of_a_batch_is_judged_at_the_batch_now_ms(queue: Queue) -> None:
    add(queue, "a", "b")
    short, long = queue.claim("c1", 0, 50), queue.claim("c1", 0, 100)
    assert queue.finish_many([result(short), result(long)], 50) == [False, "done"]


def test_the_retry_outcomes_of_a_batch_follow_the_single_finish(queue: Queue) -> None:
    add(queue, "a", "b", "c", budget=1)
    add(queue, "d", "e", budget=3)
    tickets = queue.claim_many("c1", 0, 5, 1000)
    statuses = queue.finish_many(
        [
            result(tickets[0], "retry", 0),  # budget 1 spent: exhausted
            result(tickets[3], "retry", 500),  # due exactly at the deadline
            result(tickets[4], "retry", 499),  # due one millisecond before it
        ],
        500,
    )
    assert statuses == ["dead", "dead", "pending"]
    assert [queue.job(job_id)["reason"] for job_id in "ade"] == ["exhausted", "deadline", "retry"]


def test_a_batch_of_stale_tickets_calls_no_hook(queue: Queue) -> None:
    add(queue, "a")
    ticket = queue.claim("c1", 0, 100)
    hooks = HookLog(fail_at="after-finish")
    assert queue.finish_many([result(ticket), result(ticket)], 100, hooks) == [False, False]
    assert hooks.points == []
