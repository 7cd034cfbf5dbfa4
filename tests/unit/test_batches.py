"""Batch operations (docs/batches.md): one transaction, exactly the single calls in order."""

from __future__ import annotations

import contextlib
import copy
import sqlite3
import tempfile
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import worker
from tests.support import HookLog, read_rows

Ticket = dict[str, Any]


def add(con: sqlite3.Connection, *ids: str, ttl: int = 1000, budget: int = 3) -> None:
    for job_id in ids:
        assert worker.enqueue(con, {"id": job_id, "qty": 2}, 0, ttl, budget)


def result(ticket: Ticket, outcome: str = "ok", delay_ms: int = 0) -> dict[str, Any]:
    return {"ticket": ticket, "outcome": outcome, "delay_ms": delay_ms}


# --- enqueue_many ----------------------------------------------------------------------


def test_enqueue_many_adds_new_jobs_and_recognises_intake_retries(
    con: sqlite3.Connection,
) -> None:
    add(con, "old")
    events = [{"id": "a", "qty": 1}, {"id": "old", "qty": 2}, {"id": "a", "qty": 1}]
    assert worker.enqueue_many(con, events, 5, 100, 4) == [True, False, False]
    assert [row[1:6] for row in read_rows(con)["jobs"]] == [
        ("old", 2, "pending", 0, 3),
        ("a", 1, "pending", 0, 4),
    ]


def test_enqueue_many_returns_a_conflict_and_still_applies_the_other_events(
    con: sqlite3.Connection,
) -> None:
    add(con, "old")
    results = worker.enqueue_many(con, [{"id": "old", "qty": 9}, {"id": "b", "qty": 1}], 0, 100)
    conflict, new = results
    assert isinstance(conflict, worker.Conflict)
    assert str(conflict) == "job 'old' exists with qty 2, not 9"
    assert new is True
    assert [row[1] for row in read_rows(con)["jobs"]] == ["old", "b"]


def test_enqueue_many_conflicts_with_an_event_earlier_in_the_same_batch(
    con: sqlite3.Connection,
) -> None:
    results = worker.enqueue_many(con, [{"id": "a", "qty": 1}, {"id": "a", "qty": 2}], 0, 100)
    assert results[0] is True
    assert isinstance(results[1], worker.Conflict)


def test_an_empty_batch_changes_nothing(con: sqlite3.Connection) -> None:
    add(con, "a")
    before = read_rows(con)
    assert worker.enqueue_many(con, [], 0, 100) == []
    assert worker.finish_many(con, [], 0, HookLog()) == []
    assert read_rows(con) == before


EVENTS = st.lists(
    st.fixed_dictionaries({"id": st.sampled_from("abcd"), "qty": st.integers(1, 3)}), max_size=8
)


@settings(max_examples=60)
@given(events=EVENTS, ttl=st.integers(1, 60000), budget=st.integers(1, 16))
def test_enqueue_many_equals_enqueue_called_in_order(
    events: list[dict[str, Any]], ttl: int, budget: int
) -> None:
    with two_queues() as (batch, single):
        results = worker.enqueue_many(batch, copy.deepcopy(events), 7, ttl, budget)
        expected = [outcome_of(partial(worker.enqueue, single, e, 7, ttl, budget)) for e in events]
        assert [summary(r) for r in results] == expected
        assert read_rows(batch) == read_rows(single)


# --- claim_many ---------------------------------------------------------------------------


def test_claim_many_leases_the_lowest_seq_jobs_up_to_the_limit(con: sqlite3.Connection) -> None:
    add(con, "a", "b", "c")
    tickets = worker.claim_many(con, "c1", 10, 2, 50)
    assert tickets == [
        {"id": "a", "qty": 2, "owner": "c1", "token": 1, "attempt": 1, "lease_until": 60},
        {"id": "b", "qty": 2, "owner": "c1", "token": 1, "attempt": 1, "lease_until": 60},
    ]
    assert [row[3] for row in read_rows(con)["jobs"]] == ["leased", "leased", "pending"]


def test_claim_many_stops_when_nothing_is_claimable(con: sqlite3.Connection) -> None:
    add(con, "a")
    hooks = HookLog()
    assert [t["id"] for t in worker.claim_many(con, "c1", 10, 5, fault=hooks)] == ["a"]
    assert hooks.points == ["after-claim", "after-commit"]


def test_claim_many_commits_the_quarantine_even_when_it_claims_nothing(
    con: sqlite3.Connection,
) -> None:
    add(con, "a", ttl=10)
    hooks = HookLog()
    assert worker.claim_many(con, "c1", 10, 3, fault=hooks) == []
    assert [row[3:4] + row[11:] for row in read_rows(con)["jobs"]] == [("dead", "deadline")]
    assert hooks.points == [], "an empty claim calls no hook"


def test_claim_many_calls_each_hook_once_after_the_last_lease(con: sqlite3.Connection) -> None:
    add(con, "a", "b")
    seen: list[list[str]] = []
    hooks = HookLog().on(
        "after-claim",
        lambda: seen.append([r[3] for r in con.execute("SELECT * FROM jobs ORDER BY seq")]),
    )
    worker.claim_many(con, "c1", 10, 2, fault=hooks)
    assert hooks.points == ["after-claim", "after-commit"]
    assert seen == [["leased", "leased"]]


@pytest.mark.parametrize(
    ("point", "kept"), [("after-claim", False), ("after-commit", True)], ids=["before", "after"]
)
def test_a_claim_many_fault_rolls_back_before_commit_and_keeps_after(
    con: sqlite3.Connection, point: str, kept: bool
) -> None:
    add(con, "a", "b")
    add(con, "late", ttl=5)
    before = read_rows(con)
    with pytest.raises(RuntimeError):
        worker.claim_many(con, "c1", 10, 2, fault=HookLog(fail_at=point))
    statuses = [row[3] for row in read_rows(con)["jobs"]]
    assert statuses == (["leased", "leased", "dead"] if kept else [r[3] for r in before["jobs"]])


@settings(max_examples=60)
@given(
    ttls=st.lists(st.integers(1, 30), min_size=1, max_size=6),
    now=st.integers(0, 40),
    limit=st.integers(1, 8),
)
def test_claim_many_equals_claim_called_until_none(ttls: list[int], now: int, limit: int) -> None:
    with two_queues() as (batch, single):
        for con in (batch, single):
            for i, ttl in enumerate(ttls):
                worker.enqueue(con, {"id": f"j{i}", "qty": 1}, 0, ttl, 1 + i % 2)
            worker.claim(con, "c0", 0, 15)  # one lease that expires meanwhile
        tickets = worker.claim_many(batch, "c1", now, limit, 7)
        expected: list[Ticket] = []
        while len(expected) < limit and (ticket := worker.claim(single, "c1", now, 7)):
            expected.append(ticket)
        assert tickets == expected
        assert read_rows(batch) == read_rows(single)


# --- finish_many ---------------------------------------------------------------------------


def test_finish_many_settles_each_live_ticket_and_rejects_the_rest(
    con: sqlite3.Connection,
) -> None:
    add(con, "a", "b", "c")
    a, b, c = worker.claim_many(con, "c1", 10, 3, 100)
    stale = {**c, "token": 7}
    results = [result(a), result(b, "retry", 5), result(stale), result(a, "permanent")]
    hooks = HookLog()
    assert worker.finish_many(con, results, 20, hooks) == ["done", "pending", False, False]
    assert hooks.points == ["after-finish", "after-commit"]
    assert [row[3] for row in read_rows(con)["jobs"]] == ["done", "pending", "leased"]


def test_finish_many_with_nothing_live_calls_no_hook(con: sqlite3.Connection) -> None:
    add(con, "a")
    ticket = worker.claim(con, "c1", 0, 10)
    assert ticket is not None
    before, hooks = read_rows(con), HookLog()
    assert worker.finish_many(con, [result(ticket)], 10, hooks) == [False]  # lease ended
    assert hooks.points == []
    assert read_rows(con) == before


@pytest.mark.parametrize(
    ("point", "kept"), [("after-finish", False), ("after-commit", True)], ids=["before", "after"]
)
def test_a_finish_many_fault_rolls_back_before_commit_and_keeps_after(
    con: sqlite3.Connection, point: str, kept: bool
) -> None:
    add(con, "a", "b")
    tickets = worker.claim_many(con, "c1", 0, 2)
    with pytest.raises(RuntimeError):
        worker.finish_many(con, [result(t) for t in tickets], 1, HookLog(fail_at=point))
    expected = ["done", "done"] if kept else ["leased", "leased"]
    assert [row[3] for row in read_rows(con)["jobs"]] == expected


OUTCOME_DRAWS = st.lists(
    st.tuples(
        st.integers(0, 5), st.sampled_from(worker.OUTCOMES), st.sampled_from([0, 1, 25, 60000])
    ),
    max_size=8,
)


@settings(max_examples=60)
@given(draws=OUTCOME_DRAWS, now=st.integers(0, 30))
def test_finish_many_equals_finish_called_in_order(
    draws: list[tuple[int, str, int]], now: int
) -> None:
    with two_queues() as (batch, single):
        for con in (batch, single):
            add(con, "a", "b", "c", ttl=30, budget=2)
        tickets = worker.claim_many(batch, "c1", 0, 3, 20)
        assert worker.claim_many(single, "c1", 0, 3, 20) == tickets
        tickets.append({**tickets[0], "token": 2})  # never issued
        picked = [result(tickets[i % len(tickets)], o, d) for i, o, d in draws]
        statuses = worker.finish_many(batch, copy.deepcopy(picked), now)
        expected = [
            worker.finish(single, r["ticket"], r["outcome"], now, r["delay_ms"]) for r in picked
        ]
        assert statuses == expected
        assert read_rows(batch) == read_rows(single)


# --- Validation -----------------------------------------------------------------------------

TICKET = {"id": "a", "qty": 1, "owner": "c1", "token": 1, "attempt": 1, "lease_until": 100}
ITEM = "a dict with exactly the keys"


def rejections() -> list[tuple[Callable[[sqlite3.Connection], object], str]]:
    good = {"id": "a", "qty": 1}
    return [
        (
            lambda con: worker.enqueue_many(con, (good,), 0, 10),  # type: ignore[arg-type]
            "'events' must be a list of 0..1000 items (got ({'id': 'a', 'qty': 1},) "
            "that is a 'tuple')",
        ),
        (
            lambda con: worker.enqueue_many(con, [good, {"id": "b"}], 0, 10),
            f"'events[1]' must be {ITEM} ['id', 'qty'] (got {{'id': 'b'}} that is a 'dict')",
        ),
        (
            lambda con: worker.enqueue_many(con, [good, {"id": "b c", "qty": 1}], 0, 10),
            "'events[1]['id']' must be a str of 1-64 ASCII letters, digits, '_' or '-' "
            "(got 'b c' that is a 'str')",
        ),
        (
            lambda con: worker.enqueue_many(con, [{"id": "b", "qty": 0}], 0, 10),
            "'events[0]['qty']' must be an int in 1..1000 (got 0 that is a 'int')",
        ),
        (
            lambda con: worker.enqueue_many(con, [good], 0, 10, True),
            "'max_attempts' must be an int in 1..16 (got True that is a 'bool')",
        ),
        (
            lambda con: worker.claim_many(con, "c1", 0, 0),
            "'limit' must be an int in 1..1000 (got 0 that is a 'int')",
        ),
        (
            lambda con: worker.claim_many(con, "c1", 0, 1001),
            "'limit' must be an int in 1..1000 (got 1001 that is a 'int')",
        ),
        (
            lambda con: worker.finish_many(con, [{"ticket": TICKET, "outcome": "ok"}], 0),
            f"'results[0]' must be {ITEM} ['delay_ms', 'outcome', 'ticket'] "
            "(got {'ticket': {'id': 'a', 'qty': 1, 'owner': 'c1', 'token': 1, 'attempt': 1, "
            "'lease_until': 100}, 'outcome': 'ok'} that is a 'dict')",
        ),
        (
            lambda con: worker.finish_many(con, [result({**TICKET, "owner": ""})], 0),
            "'results[0]['ticket']['owner']' must be a str of 1-64 ASCII letters, digits, "
            "'_' or '-' (got '' that is a 'str')",
        ),
        (
            lambda con: worker.finish_many(con, [result(TICKET), result(TICKET, "done")], 0),
            "'results[1]['outcome']' must be one of ('ok', 'retry', 'permanent') "
            "(got 'done' that is a 'str')",
        ),
        (
            lambda con: worker.finish_many(con, [result(TICKET, "ok", 60001)], 0),
            "'results[0]['delay_ms']' must be an int in 0..60000 (got 60001 that is a 'int')",
        ),
        (
            lambda con: worker.finish_many(con, [result(TICKET)], 0, fault="x"),  # type: ignore[arg-type]
            "'fault' must be None or a callable (got 'x' that is a 'str')",
        ),
    ]


@pytest.mark.parametrize("index", range(len(rejections())))
def test_a_malformed_batch_is_a_value_error_naming_the_item_and_changes_nothing(
    con: sqlite3.Connection, index: int
) -> None:
    add(con, "a")
    worker.claim(con, "c1", 0, 50)
    call, message = rejections()[index]
    before = read_rows(con)
    with pytest.raises(ValueError) as raised:
        call(con)
    assert str(raised.value) == message
    assert read_rows(con) == before


def test_a_batch_over_a_thousand_items_is_rejected_whole(con: sqlite3.Connection) -> None:
    events = [{"id": f"j{i}", "qty": 1} for i in range(1001)]
    with pytest.raises(ValueError, match=r"^'events' must be a list of 0\.\.1000 items"):
        worker.enqueue_many(con, events, 0, 10)
    assert worker.enqueue_many(con, events[:1000], 0, 10) == [True] * 1000


def test_a_bad_item_late_in_the_batch_stops_the_whole_batch(con: sqlite3.Connection) -> None:
    events = [{"id": "a", "qty": 1}, {"id": "b", "qty": 1}, {"id": "c", "qty": True}]
    with pytest.raises(ValueError, match=r"^'events\[2\]\['qty'\]'"):
        worker.enqueue_many(con, events, 0, 10)
    assert read_rows(con)["jobs"] == []


def test_batches_never_mutate_their_inputs(con: sqlite3.Connection) -> None:
    events = [{"id": "a", "qty": 1}, {"id": "b", "qty": 1}]
    kept = copy.deepcopy(events)
    worker.enqueue_many(con, events, 0, 100)
    tickets = worker.claim_many(con, "c1", 0, 2)
    results = [result(t, "retry", 3) for t in tickets]
    kept_results = copy.deepcopy(results)
    worker.finish_many(con, results, 1)
    assert events == kept and results == kept_results


def test_a_list_subclass_is_not_a_batch(con: sqlite3.Connection) -> None:
    class Events(list):  # type: ignore[type-arg]
        pass

    with pytest.raises(ValueError, match=r"^'events' must be a list"):
        worker.enqueue_many(con, Events([{"id": "a", "qty": 1}]), 0, 10)


def test_batches_refuse_a_connection_with_an_open_transaction(con: sqlite3.Connection) -> None:
    con.execute("BEGIN")
    try:
        for call in (
            lambda: worker.enqueue_many(con, [], 0, 10),
            lambda: worker.claim_many(con, "c1", 0, 1),
            lambda: worker.finish_many(con, [], 0),
        ):
            with pytest.raises(ValueError, match="open transaction"):
                call()
            assert con.in_transaction, "the caller's transaction is left alone"
    finally:
        con.execute("ROLLBACK")


# --- Helpers ------------------------------------------------------------------------------


@contextlib.contextmanager
def two_queues() -> Iterator[tuple[sqlite3.Connection, sqlite3.Connection]]:
    """Two fresh queue files in a temporary folder, for one example."""
    with tempfile.TemporaryDirectory(prefix="batches-") as folder:
        batch = worker.open_queue(Path(folder, "batch.sqlite"))
        single = worker.open_queue(Path(folder, "single.sqlite"))
        try:
            yield batch, single
        finally:
            batch.close()
            single.close()


def outcome_of(call: Callable[[], object]) -> object:
    """What ``call`` returned, or the Conflict it raised, as ``summary`` shows it."""
    try:
        return summary(call())
    except worker.Conflict as conflict:
        return summary(conflict)


def summary(value: object) -> object:
    """A Conflict as its message (exceptions compare by identity), anything else as is."""
    return ("Conflict", str(value)) if isinstance(value, worker.Conflict) else value
