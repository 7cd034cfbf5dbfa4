"""Section 6: redrive(con, job_id, now_ms, ttl_ms, note, fault=None)."""

from __future__ import annotations

import sqlite3

import pytest

import worker
from tests.support import BAD_IDENTIFIERS, MAX_NOW, HookLog, bad_ints, job, read_rows


def dead(con: sqlite3.Connection, job_id: str = "a", budget: int = 2) -> None:
    """Enqueue ``job_id`` and fail it permanently after one redelivered attempt."""
    worker.enqueue(con, {"id": job_id, "qty": 4}, 0, 1000, budget)
    for now in (0, 100):  # the first lease expires unfinished, the second fails
        ticket = worker.claim(con, "courier-1", now, 100)
    assert ticket is not None
    assert worker.finish(con, ticket, "permanent", 150) == "dead"


def test_requeues_a_dead_job_with_a_fresh_budget_and_keeps_its_token(
    con: sqlite3.Connection,
) -> None:
    dead(con, budget=2)
    assert job(con, "a")["token"] == 2
    assert worker.redrive(con, "a", 500, 300, "fixed-address") is True
    assert read_rows(con) == {
        "jobs": [(1, "a", 4, "pending", 0, 2, 2, 500, 800, None, None, None)],
        "redrives": [(1, "a", 2, 500, "fixed-address")],
    }


def test_each_redrive_appends_an_audit_row_with_the_token_at_that_time(
    con: sqlite3.Connection,
) -> None:
    dead(con)
    worker.redrive(con, "a", 200, 1000, "first")
    ticket = worker.claim(con, "courier-2", 200)
    assert ticket is not None
    worker.finish(con, ticket, "permanent", 201)
    worker.redrive(con, "a", 300, 1000, "second")
    assert read_rows(con)["redrives"] == [(1, "a", 2, 200, "first"), (2, "a", 3, 300, "second")]


def test_the_redriven_job_is_claimable_with_the_next_token(con: sqlite3.Connection) -> None:
    dead(con)
    worker.redrive(con, "a", 200, 1000, "again")
    ticket = worker.claim(con, "courier-2", 200, 100)
    assert ticket == {
        "id": "a",
        "qty": 4,
        "owner": "courier-2",
        "token": 3,
        "attempt": 1,
        "lease_until": 300,
    }


@pytest.mark.parametrize("reason", ["deadline", "exhausted", "permanent"])
def test_redrives_a_job_whatever_its_reason(con: sqlite3.Connection, reason: str) -> None:
    worker.enqueue(con, {"id": "a", "qty": 1}, 0, 100, 1)
    ticket = worker.claim(con, "courier-1", 0, 10)
    assert ticket is not None
    if reason == "deadline":
        worker.claim(con, "courier-1", 100)
    elif reason == "exhausted":
        worker.claim(con, "courier-1", 10)
    else:
        worker.finish(con, ticket, "permanent", 1)
    assert job(con, "a")["reason"] == reason
    assert worker.redrive(con, "a", 200, 100, "ops") is True


@pytest.mark.parametrize("state", ["missing", "pending", "leased", "done"])
def test_a_missing_or_not_dead_job_raises_value_error_without_an_audit_row(
    con: sqlite3.Connection, state: str
) -> None:
    if state != "missing":
        worker.enqueue(con, {"id": "a", "qty": 1}, 0, 100)
    if state in ("leased", "done"):
        ticket = worker.claim(con, "courier-1", 0)
        assert ticket is not None
        if state == "done":
            worker.finish(con, ticket, "ok", 1)
    before = read_rows(con)
    hooks = HookLog()
    with pytest.raises(ValueError, match="'a'"):
        worker.redrive(con, "a", 10, 100, "ops", fault=hooks)
    assert read_rows(con) == before
    assert hooks.points == []
    assert not con.in_transaction


# --- hooks and atomicity --------------------------------------------------------------


def test_hooks_run_audit_then_redrive_then_commit(con: sqlite3.Connection) -> None:
    dead(con)
    seen: list[tuple[str, bool, int, str]] = []

    def look(point: str) -> None:
        audit = len(read_rows(con)["redrives"])
        seen.append((point, con.in_transaction, audit, job(con, "a")["status"]))

    worker.redrive(con, "a", 200, 1000, "ops", fault=look)
    assert seen == [
        ("after-audit", True, 1, "dead"),  # the audit row is written first
        ("after-redrive", True, 1, "pending"),
        ("after-commit", False, 1, "pending"),
    ]


@pytest.mark.parametrize("point", ["after-audit", "after-redrive"])
def test_an_error_before_commit_leaves_neither_audit_nor_redrive(
    con: sqlite3.Connection, point: str
) -> None:
    dead(con)
    before = read_rows(con)
    error = RuntimeError(f"crash at {point}")
    with pytest.raises(RuntimeError) as raised:
        worker.redrive(con, "a", 200, 1000, "ops", fault=HookLog(point, error))
    assert raised.value is error
    assert read_rows(con) == before
    assert not con.in_transaction


def test_an_error_after_commit_keeps_both_audit_and_redrive(con: sqlite3.Connection) -> None:
    dead(con)
    with pytest.raises(RuntimeError):
        worker.redrive(con, "a", 200, 1000, "ops", fault=HookLog("after-commit"))
    assert job(con, "a")["status"] == "pending"
    assert len(read_rows(con)["redrives"]) == 1


# --- validation -----------------------------------------------------------------------

VALID: dict[str, object] = {"job_id": "a", "now_ms": 200, "ttl_ms": 1000, "note": "ops"}

INVALID_CASES = (
    [("job_id", v) for v in BAD_IDENTIFIERS]
    + [("now_ms", v) for v in bad_ints(0, MAX_NOW)]
    + [("ttl_ms", v) for v in bad_ints(1, 60000)]
    + [("note", v) for v in BAD_IDENTIFIERS]
    + [("fault", v) for v in ["after-audit", 1, object()]]
)


@pytest.mark.parametrize(("argument", "value"), INVALID_CASES)
def test_rejects_malformed_argument_before_any_change(
    con: sqlite3.Connection, argument: str, value: object
) -> None:
    dead(con)
    before = read_rows(con)
    hooks = HookLog()
    arguments = {**VALID, "fault": hooks, argument: value}
    with pytest.raises(ValueError, match=argument):
        worker.redrive(con, **arguments)  # type: ignore[arg-type]
    assert read_rows(con) == before
    assert hooks.points == []
    assert not con.in_transaction


def test_accepts_the_range_edges(con: sqlite3.Connection) -> None:
    dead(con)
    assert worker.redrive(con, "a", MAX_NOW, 60000, "n" * 64) is True
    assert job(con, "a")["deadline"] == 10**15


def test_the_shortest_ttl_is_one_ms(con: sqlite3.Connection) -> None:
    dead(con)
    assert worker.redrive(con, "a", 500, 1, "ops") is True
    assert job(con, "a")["deadline"] == 501
