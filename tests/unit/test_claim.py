"""Section 4: claim(con, owner, now_ms, lease_ms=1000, fault=None)."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import worker
from tests.support import BAD_IDENTIFIERS, MAX_NOW, HookLog, bad_ints, job, read_rows


def add(con: sqlite3.Connection, job_id: str, now: int = 0, ttl: int = 1000, budget: int = 3):
    assert worker.enqueue(con, {"id": job_id, "qty": 2}, now, ttl, budget)


def take(con: sqlite3.Connection, now: int, owner: str = "courier-1", lease: int = 100):
    ticket = worker.claim(con, owner, now, lease)
    assert ticket is not None
    return ticket


def test_returns_a_ticket_with_exactly_the_six_keys(con: sqlite3.Connection) -> None:
    add(con, "a", now=10, ttl=1000)
    ticket = worker.claim(con, "courier-1", 20, 100)
    assert ticket == {
        "id": "a",
        "qty": 2,
        "owner": "courier-1",
        "token": 1,
        "attempt": 1,
        "lease_until": 120,
    }
    assert list(ticket) == ["id", "qty", "owner", "token", "attempt", "lease_until"]


def test_leases_the_row_and_bumps_attempts_and_fencing_token(con: sqlite3.Connection) -> None:
    add(con, "a", now=10, ttl=1000)
    take(con, 20)
    assert read_rows(con)["jobs"] == [
        (1, "a", 2, "leased", 1, 3, 1, 10, 1010, "courier-1", 120, None)
    ]


def test_default_lease_is_one_second(con: sqlite3.Connection) -> None:
    add(con, "a", ttl=60000)
    ticket = worker.claim(con, "courier-1", 5)
    assert ticket is not None
    assert ticket["lease_until"] == 1005


def test_lease_never_outlives_the_deadline(con: sqlite3.Connection) -> None:
    add(con, "a", now=0, ttl=50)
    assert take(con, 10, lease=100)["lease_until"] == 50
    add(con, "b", now=0, ttl=110)
    assert take(con, 10, lease=100)["lease_until"] == 110  # exactly reaching it is fine


def test_takes_the_lowest_seq_claimable_job(con: sqlite3.Connection) -> None:
    for name in ["z", "y", "x"]:
        add(con, name)
    assert [take(con, 0)["id"] for _ in range(3)] == ["z", "y", "x"]
    assert worker.claim(con, "courier-1", 0) is None


def test_a_pending_job_is_due_when_available_at_equals_now(con: sqlite3.Connection) -> None:
    add(con, "a", now=100)
    assert worker.claim(con, "courier-1", 99) is None
    assert take(con, 100)["id"] == "a"


def test_a_job_not_yet_available_does_not_block_later_jobs(con: sqlite3.Connection) -> None:
    add(con, "a", now=500)
    add(con, "b", now=0)
    assert take(con, 10)["id"] == "b"


def test_a_live_lease_is_not_claimable(con: sqlite3.Connection) -> None:
    add(con, "a")
    take(con, 0, lease=100)
    assert worker.claim(con, "courier-2", 99) is None


def test_an_expired_lease_is_reclaimable_at_exactly_lease_until(
    con: sqlite3.Connection,
) -> None:
    add(con, "a")
    first = take(con, 0, owner="courier-1", lease=100)
    second = take(con, first["lease_until"], owner="courier-2", lease=100)
    assert second == {
        "id": "a",
        "qty": 2,
        "owner": "courier-2",
        "token": 2,
        "attempt": 2,
        "lease_until": 200,
    }


def test_the_same_owner_reclaiming_gets_a_newer_token(con: sqlite3.Connection) -> None:
    add(con, "a")
    first = take(con, 0)
    second = take(con, first["lease_until"])
    assert second["owner"] == first["owner"]
    assert second["token"] == first["token"] + 1


def test_claim_clears_the_retry_reason(con: sqlite3.Connection) -> None:
    add(con, "a")
    ticket = take(con, 0)
    assert worker.finish(con, ticket, "retry", 1, 0) == "pending"
    assert job(con, "a")["reason"] == "retry"
    take(con, 1)
    assert job(con, "a")["reason"] is None


# --- quarantine (step 1) ---------------------------------------------------------


def test_quarantines_a_pending_job_at_exactly_its_deadline(con: sqlite3.Connection) -> None:
    add(con, "a", now=0, ttl=100)
    assert worker.claim(con, "courier-1", 100) is None
    assert read_rows(con)["jobs"] == [(1, "a", 2, "dead", 0, 3, 0, 0, 100, None, None, "deadline")]


def test_a_job_one_ms_before_its_deadline_is_still_claimable(con: sqlite3.Connection) -> None:
    add(con, "a", now=0, ttl=100)
    assert take(con, 99, lease=100)["lease_until"] == 100


def test_quarantines_pending_jobs_whatever_their_available_at(con: sqlite3.Connection) -> None:
    add(con, "a", now=0, ttl=100)
    ticket = take(con, 0)
    assert worker.finish(con, ticket, "retry", 10, 80) == "pending"  # available at 90
    assert worker.claim(con, "courier-1", 100) is None  # deadline passed before due
    assert job(con, "a")["status"] == "dead"
    assert job(con, "a")["reason"] == "deadline"
    assert job(con, "a")["available_at"] == 90


def test_quarantines_an_expired_lease_whose_budget_is_spent(con: sqlite3.Connection) -> None:
    add(con, "a", ttl=1000, budget=1)
    take(con, 0, lease=100)
    assert worker.claim(con, "courier-2", 100) is None
    assert read_rows(con)["jobs"] == [
        (1, "a", 2, "dead", 1, 1, 1, 0, 1000, None, None, "exhausted")
    ]


def test_does_not_quarantine_a_live_lease_whose_budget_is_spent(
    con: sqlite3.Connection,
) -> None:
    add(con, "a", ttl=1000, budget=1)
    take(con, 0, lease=100)
    before = read_rows(con)
    assert worker.claim(con, "courier-2", 99) is None
    assert read_rows(con) == before


def test_an_expired_lease_at_its_deadline_is_quarantined_as_deadline(
    con: sqlite3.Connection,
) -> None:
    add(con, "a", ttl=100, budget=1)
    take(con, 0, lease=1000)  # lease capped at the deadline, 100
    assert worker.claim(con, "courier-2", 100) is None
    assert job(con, "a")["reason"] == "deadline"  # deadline wins over exhausted


def test_quarantine_is_committed_even_when_nothing_is_claimed(
    con: sqlite3.Connection, queue_path: Path
) -> None:
    add(con, "a", ttl=10)
    hooks = HookLog()
    assert worker.claim(con, "courier-1", 10, fault=hooks) is None
    assert hooks.points == [], "claim returning None calls no hook"
    fresh = sqlite3.connect(queue_path)
    assert fresh.execute("SELECT status, reason FROM jobs").fetchall() == [("dead", "deadline")]
    fresh.close()


def test_quarantine_happens_before_the_pick_in_the_same_call(con: sqlite3.Connection) -> None:
    add(con, "old", ttl=10)
    add(con, "new", ttl=1000)
    assert take(con, 10)["id"] == "new"
    assert job(con, "old")["status"] == "dead"


def test_done_and_dead_jobs_are_never_claimed(con: sqlite3.Connection) -> None:
    add(con, "a")
    add(con, "b")
    worker.finish(con, take(con, 0), "ok", 1)
    worker.finish(con, take(con, 1), "permanent", 2)
    before = read_rows(con)
    assert worker.claim(con, "courier-1", 10**6) is None
    assert read_rows(con) == before


# --- hooks -----------------------------------------------------------------------


def test_calls_after_claim_then_after_commit(con: sqlite3.Connection) -> None:
    add(con, "a")
    hooks = HookLog()
    worker.claim(con, "courier-1", 0, fault=hooks)
    assert hooks.points == ["after-claim", "after-commit"]


def test_after_claim_sees_the_leased_row_inside_the_transaction(
    con: sqlite3.Connection,
) -> None:
    add(con, "a")
    seen = []
    hooks = HookLog().on("after-claim", lambda: seen.append((con.in_transaction, job(con, "a"))))
    worker.claim(con, "courier-1", 0, fault=hooks)
    in_transaction, row = seen[0]
    assert in_transaction
    assert row["status"] == "leased"
    assert row["token"] == 1


def test_after_commit_runs_outside_the_transaction(con: sqlite3.Connection) -> None:
    add(con, "a")
    seen = []
    hooks = HookLog().on("after-commit", lambda: seen.append(con.in_transaction))
    worker.claim(con, "courier-1", 0, fault=hooks)
    assert seen == [False]


def test_an_error_at_after_claim_rolls_back_the_claim_and_the_quarantine(
    con: sqlite3.Connection,
) -> None:
    add(con, "expired", ttl=10)
    add(con, "a", ttl=1000)
    before = read_rows(con)
    error = RuntimeError("crash before commit")
    with pytest.raises(RuntimeError) as raised:
        worker.claim(con, "courier-1", 10, fault=HookLog("after-claim", error))
    assert raised.value is error
    assert read_rows(con) == before
    assert not con.in_transaction


def test_a_base_exception_at_after_claim_also_rolls_back(con: sqlite3.Connection) -> None:
    add(con, "a")
    before = read_rows(con)
    with pytest.raises(KeyboardInterrupt):
        worker.claim(con, "courier-1", 0, fault=HookLog("after-claim", KeyboardInterrupt()))
    assert read_rows(con) == before
    assert not con.in_transaction


def test_an_error_at_after_commit_keeps_the_claim(con: sqlite3.Connection) -> None:
    add(con, "a")
    error = RuntimeError("crash after commit")
    with pytest.raises(RuntimeError) as raised:
        worker.claim(con, "courier-1", 0, fault=HookLog("after-commit", error))
    assert raised.value is error
    assert job(con, "a")["status"] == "leased"
    assert job(con, "a")["token"] == 1


# --- validation --------------------------------------------------------------------

VALID: dict[str, object] = {"owner": "courier-1", "now_ms": 0, "lease_ms": 100, "fault": None}

INVALID_CASES = (
    [("owner", v) for v in BAD_IDENTIFIERS]
    + [("now_ms", v) for v in bad_ints(0, MAX_NOW)]
    + [("lease_ms", v) for v in bad_ints(1, 60000)]
    + [("fault", v) for v in ["after-claim", 1, True, object()]]
)


@pytest.mark.parametrize(("argument", "value"), INVALID_CASES)
def test_rejects_malformed_argument_before_any_change(
    con: sqlite3.Connection, argument: str, value: object
) -> None:
    add(con, "expired", ttl=10)
    add(con, "a", ttl=1000)
    before = read_rows(con)
    hooks = HookLog()
    arguments = {**VALID, "now_ms": 10, argument: value}
    if argument != "fault":
        arguments["fault"] = hooks
    with pytest.raises(ValueError, match=argument):
        worker.claim(con, **arguments)  # type: ignore[arg-type]
    assert read_rows(con) == before, "not even the quarantine may happen"
    assert hooks.points == []
    assert not con.in_transaction


def test_accepts_the_range_edges(con: sqlite3.Connection) -> None:
    add(con, "a", now=0, ttl=60000)
    assert take(con, 0, lease=1)["lease_until"] == 1
    add(con, "b", now=MAX_NOW, ttl=60000)
    assert take(con, MAX_NOW, lease=60000)["lease_until"] == MAX_NOW + 60000
