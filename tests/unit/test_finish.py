"""Section 5: finish(con, ticket, outcome, now_ms, delay_ms=0, fault=None)."""

from __future__ import annotations

import copy
import sqlite3
from typing import Any

import pytest

import worker
from tests.support import (
    BAD_IDENTIFIERS,
    MAX_NOW,
    DictSubclass,
    HookLog,
    StrSubclass,
    bad_ints,
    job,
    read_rows,
)


def leased(
    con: sqlite3.Connection, ttl: int = 1000, budget: int = 3, lease: int = 100, now: int = 0
) -> dict[str, Any]:
    """Enqueue job "a" at ``now`` and claim it at ``now``: the live ticket."""
    worker.enqueue(con, {"id": "a", "qty": 2}, now, ttl, budget)
    ticket = worker.claim(con, "courier-1", now, lease)
    assert ticket is not None
    return ticket


# --- outcomes (a table: outcome and timing -> status, reason, available_at) --------


@pytest.mark.parametrize(
    ("budget", "outcome", "now", "delay", "status", "reason", "available_at"),
    [
        (3, "ok", 50, 0, "done", None, 50),
        (3, "ok", 50, 7, "done", None, 50),  # delay only matters when pending
        (3, "permanent", 50, 0, "dead", "permanent", 50),
        (1, "permanent", 50, 0, "dead", "permanent", 50),
        (3, "retry", 50, 20, "pending", "retry", 70),
        (3, "retry", 50, 0, "pending", "retry", 50),
        (3, "retry", 50, 949, "pending", "retry", 999),  # one ms before the deadline
        (3, "retry", 50, 950, "dead", "deadline", 50),  # now + delay == deadline
        (3, "retry", 50, 60000, "dead", "deadline", 50),
        (1, "retry", 50, 0, "dead", "exhausted", 50),  # budget checked first
        (1, "retry", 50, 950, "dead", "exhausted", 50),
    ],
)
def test_outcome_table(
    con: sqlite3.Connection,
    budget: int,
    outcome: str,
    now: int,
    delay: int,
    status: str,
    reason: str | None,
    available_at: int,
) -> None:
    ticket = leased(con, ttl=1000, budget=budget, lease=100)
    assert worker.finish(con, ticket, outcome, now, delay) == status
    assert read_rows(con)["jobs"] == [
        (1, "a", 2, status, 1, budget, 1, available_at, 1000, None, None, reason)
    ]


def test_retry_is_exhausted_only_when_attempts_reach_max_attempts(
    con: sqlite3.Connection,
) -> None:
    ticket = leased(con, budget=2)
    assert worker.finish(con, ticket, "retry", 1) == "pending"
    second = worker.claim(con, "courier-1", 1)
    assert second is not None and second["attempt"] == 2
    assert worker.finish(con, second, "retry", 2) == "dead"
    assert job(con, "a")["reason"] == "exhausted"


def test_default_delay_is_zero(con: sqlite3.Connection) -> None:
    ticket = leased(con)
    worker.finish(con, ticket, "retry", 30)
    assert job(con, "a")["available_at"] == 30


# --- stale tickets (each returns False and changes nothing) ------------------------


def mismatched(ticket: dict[str, Any], key: str) -> dict[str, Any]:
    replacement = {
        "id": "b",
        "qty": 3,
        "owner": "courier-2",
        "token": ticket["token"] + 1,
        "attempt": ticket["attempt"] + 1,
        "lease_until": ticket["lease_until"] + 1,
    }
    return {**ticket, key: replacement[key]}


@pytest.mark.parametrize("key", ["id", "qty", "owner", "token", "attempt", "lease_until"])
def test_a_ticket_differing_in_any_field_is_stale(con: sqlite3.Connection, key: str) -> None:
    ticket = leased(con)
    worker.enqueue(con, {"id": "b", "qty": 3}, 0, 1000)  # "b" exists but is not leased
    before = read_rows(con)
    hooks = HookLog()
    assert worker.finish(con, mismatched(ticket, key), "ok", 1, fault=hooks) is False
    assert read_rows(con) == before
    assert hooks.points == []


def test_a_ticket_for_an_unknown_job_is_stale(con: sqlite3.Connection) -> None:
    ticket = leased(con)
    assert worker.finish(con, {**ticket, "id": "nobody"}, "ok", 1) is False


def test_a_ticket_is_stale_at_exactly_lease_until(con: sqlite3.Connection) -> None:
    ticket = leased(con, lease=100)
    before = read_rows(con)
    assert worker.finish(con, ticket, "ok", 100) is False
    assert read_rows(con) == before
    assert worker.finish(con, ticket, "ok", 99) == "done"


def test_a_ticket_is_stale_at_exactly_the_deadline(
    con: sqlite3.Connection,
) -> None:
    ticket = leased(con, ttl=1000, lease=100)
    # Only a file edited from outside can have a deadline before lease_until.
    con.execute("UPDATE jobs SET deadline = 60 WHERE id = 'a'")
    assert worker.finish(con, ticket, "ok", 60) is False
    assert worker.finish(con, ticket, "ok", 59) == "done"


def test_an_older_run_of_the_same_owner_cannot_finish_the_newer_lease(
    con: sqlite3.Connection,
) -> None:
    old = leased(con, lease=100)
    new = worker.claim(con, "courier-1", 100, 100)  # same owner, after the lease expired
    assert new is not None
    assert worker.finish(con, old, "permanent", 101) is False
    assert worker.finish(con, new, "ok", 101) == "done"
    assert worker.finish(con, old, "ok", 102) is False
    assert job(con, "a")["status"] == "done"
    assert job(con, "a")["token"] == 2


@pytest.mark.parametrize("settle", ["ok", "permanent", "retry"])
def test_a_finished_ticket_cannot_be_finished_twice(con: sqlite3.Connection, settle: str) -> None:
    ticket = leased(con)
    assert worker.finish(con, ticket, settle, 1, 5)
    after = read_rows(con)
    for outcome in ["ok", "retry", "permanent"]:
        assert worker.finish(con, ticket, outcome, 2) is False
    assert read_rows(con) == after


def test_a_ticket_from_before_a_redrive_stays_stale(con: sqlite3.Connection) -> None:
    ticket = leased(con)
    worker.finish(con, ticket, "permanent", 1)
    worker.redrive(con, "a", 2, 1000, "retry-after-fix")
    again = worker.claim(con, "courier-1", 2, 100)
    assert again is not None
    assert again["attempt"] == ticket["attempt"] == 1
    assert again["token"] == 2
    assert worker.finish(con, {**ticket, "lease_until": again["lease_until"]}, "ok", 3) is False


# --- hooks -------------------------------------------------------------------------


def test_calls_after_finish_then_after_commit(con: sqlite3.Connection) -> None:
    ticket = leased(con)
    hooks = HookLog()
    worker.finish(con, ticket, "ok", 1, fault=hooks)
    assert hooks.points == ["after-finish", "after-commit"]


def test_after_finish_sees_the_settled_row_inside_the_transaction(
    con: sqlite3.Connection,
) -> None:
    ticket = leased(con)
    seen = []
    hooks = HookLog().on("after-finish", lambda: seen.append((con.in_transaction, job(con, "a"))))
    worker.finish(con, ticket, "retry", 1, 5, fault=hooks)
    assert seen[0][0] is True
    assert seen[0][1]["status"] == "pending"


@pytest.mark.parametrize("outcome", ["ok", "retry", "permanent"])
def test_an_error_at_after_finish_rolls_everything_back(
    con: sqlite3.Connection, outcome: str
) -> None:
    ticket = leased(con)
    before = read_rows(con)
    error = RuntimeError("crash before commit")
    with pytest.raises(RuntimeError) as raised:
        worker.finish(con, ticket, outcome, 1, fault=HookLog("after-finish", error))
    assert raised.value is error
    assert read_rows(con) == before
    assert not con.in_transaction
    assert worker.finish(con, ticket, outcome, 2) is not False, "the ticket is still live"


def test_an_error_at_after_commit_keeps_the_result(con: sqlite3.Connection) -> None:
    ticket = leased(con)
    error = RuntimeError("crash after commit")
    with pytest.raises(RuntimeError) as raised:
        worker.finish(con, ticket, "ok", 1, fault=HookLog("after-commit", error))
    assert raised.value is error
    assert job(con, "a")["status"] == "done"


# --- validation ----------------------------------------------------------------------

TICKET = {
    "id": "a",
    "qty": 2,
    "owner": "courier-1",
    "token": 1,
    "attempt": 1,
    "lease_until": 100,
}


def tickets_with(key: str, values: list[object]) -> list[object]:
    return [{**TICKET, key: value} for value in values]


BAD_TICKETS: list[object] = [
    None,
    list(TICKET.items()),
    DictSubclass(TICKET),
    {k: v for k, v in TICKET.items() if k != "lease_until"},
    {**TICKET, "deadline": 1000},
    *tickets_with("id", BAD_IDENTIFIERS),
    *tickets_with("owner", BAD_IDENTIFIERS),
    *tickets_with("qty", bad_ints(1, 1000)),
    *tickets_with("token", bad_ints(1, 10**15)),
    *tickets_with("attempt", bad_ints(1, 16)),
    *tickets_with("lease_until", bad_ints(1, 10**15)),
]

VALID: dict[str, object] = {"ticket": TICKET, "outcome": "ok", "now_ms": 1, "delay_ms": 0}

INVALID_CASES = (
    [("ticket", v) for v in BAD_TICKETS]
    + [("outcome", v) for v in ["OK", "done", "", "ok ", StrSubclass("ok"), None, True]]
    + [("now_ms", v) for v in bad_ints(0, MAX_NOW)]
    + [("delay_ms", v) for v in bad_ints(0, 60000)]
    + [("fault", v) for v in ["after-finish", 0, object()]]
)


@pytest.mark.parametrize(("argument", "value"), INVALID_CASES)
def test_rejects_malformed_argument_before_any_change(
    con: sqlite3.Connection, argument: str, value: object
) -> None:
    assert leased(con) == TICKET
    before = read_rows(con)
    hooks = HookLog()
    arguments = {**VALID, "fault": hooks, argument: value}
    snapshot = copy.deepcopy(arguments["ticket"])
    with pytest.raises(ValueError, match=argument):
        worker.finish(con, **arguments)  # type: ignore[arg-type]
    assert read_rows(con) == before
    assert hooks.points == []
    assert arguments["ticket"] == snapshot
    assert not con.in_transaction


def test_accepts_ticket_edges_even_though_no_job_matches(con: sqlite3.Connection) -> None:
    edges = {**TICKET, "id": "z" * 64, "qty": 1000, "token": 10**15, "lease_until": 10**15}
    assert worker.finish(con, {**edges, "attempt": 16}, "ok", MAX_NOW, 60000) is False


def test_does_not_mutate_the_ticket(con: sqlite3.Connection) -> None:
    ticket = leased(con)
    snapshot = dict(ticket)
    worker.finish(con, ticket, "retry", 1, 10)
    assert ticket == snapshot


def test_accepts_the_lowest_token_and_lease_until(con: sqlite3.Connection) -> None:
    lowest = {**TICKET, "qty": 1, "token": 1, "attempt": 1, "lease_until": 1}
    assert worker.finish(con, lowest, "ok", 0, 0) is False
