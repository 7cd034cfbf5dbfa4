"""Section 4: claim(con, owner, now_ms, lease_ms=1000, fault=None), on every implementation."""

from __future__ import annotations

import pytest

from tests.contract.cases import by_argument
from tests.contract.implementations import Queue
from tests.support import BAD_IDENTIFIERS, MAX_NOW, HookLog, bad_ints


def add(queue: Queue, job_id: str, now: int = 0, ttl: int = 1000, budget: int = 3):
    assert queue.enqueue({"id": job_id, "qty": 2}, now, ttl, budget)


def take(queue: Queue, now: int, owner: str = "courier-1", lease: int = 100):
    ticket = queue.claim(owner, now, lease)
    assert ticket is not None
    return ticket


def test_returns_a_ticket_with_exactly_the_six_keys(queue: Queue) -> None:
    add(queue, "a", now=10, ttl=1000)
    ticket = queue.claim("courier-1", 20, 100)
    assert ticket == {
        "id": "a",
        "qty": 2,
        "owner": "courier-1",
        "token": 1,
        "attempt": 1,
        "lease_until": 120,
    }
    assert list(ticket) == ["id", "qty", "owner", "token", "attempt", "lease_until"]


def test_leases_the_row_and_bumps_attempts_and_fencing_token(queue: Queue) -> None:
    add(queue, "a", now=10, ttl=1000)
    take(queue, 20)
    assert queue.rows()["jobs"] == [
        (1, "a", 2, "leased", 1, 3, 1, 10, 1010, "courier-1", 120, None)
    ]


def test_default_lease_is_one_second(queue: Queue) -> None:
    add(queue, "a", ttl=60000)
    ticket = queue.claim("courier-1", 5)
    assert ticket is not None
    assert ticket["lease_until"] == 1005


def test_lease_never_outlives_the_deadline(queue: Queue) -> None:
    add(queue, "a", now=0, ttl=50)
    assert take(queue, 10, lease=100)["lease_until"] == 50
    add(queue, "b", now=0, ttl=110)
    assert take(queue, 10, lease=100)["lease_until"] == 110  # exactly reaching it is fine


@pytest.mark.parametrize(("now", "lease"), [(20_000, 20_000), (32_767, 1), (1, 32_767)])
def test_a_lease_ends_at_now_plus_lease_ms_whatever_their_sizes(
    queue: Queue, now: int, lease: int
) -> None:
    """Two small numbers whose sum does not fit a 16-bit int (PostgreSQL's smallint,
    which psycopg picks for a small Python int) still add up."""
    add(queue, "a", now=now, ttl=60_000)
    assert take(queue, now, lease=lease)["lease_until"] == now + lease
    assert queue.claim_many("courier-2", now + lease, 1, lease) != []


def test_takes_the_lowest_seq_claimable_job(queue: Queue) -> None:
    for name in ["z", "y", "x"]:
        add(queue, name)
    assert [take(queue, 0)["id"] for _ in range(3)] == ["z", "y", "x"]
    assert queue.claim("courier-1", 0) is None


def test_a_pending_job_is_due_when_available_at_equals_now(queue: Queue) -> None:
    add(queue, "a", now=100)
    assert queue.claim("courier-1", 99) is None
    assert take(queue, 100)["id"] == "a"


def test_a_job_not_yet_available_does_not_block_later_jobs(queue: Queue) -> None:
    add(queue, "a", now=500)
    add(queue, "b", now=0)
    assert take(queue, 10)["id"] == "b"


def test_a_live_lease_is_not_claimable(queue: Queue) -> None:
    add(queue, "a")
    take(queue, 0, lease=100)
    assert queue.claim("courier-2", 99) is None


def test_an_expired_lease_is_reclaimable_at_exactly_lease_until(
    queue: Queue,
) -> None:
    add(queue, "a")
    first = take(queue, 0, owner="courier-1", lease=100)
    second = take(queue, first["lease_until"], owner="courier-2", lease=100)
    assert second == {
        "id": "a",
        "qty": 2,
        "owner": "courier-2",
        "token": 2,
        "attempt": 2,
        "lease_until": 200,
    }


def test_the_same_owner_reclaiming_gets_a_newer_token(queue: Queue) -> None:
    add(queue, "a")
    first = take(queue, 0)
    second = take(queue, first["lease_until"])
    assert second["owner"] == first["owner"]
    assert second["token"] == first["token"] + 1


def test_claim_clears_the_retry_reason(queue: Queue) -> None:
    add(queue, "a")
    ticket = take(queue, 0)
    assert queue.finish(ticket, "retry", 1, 0) == "pending"
    assert queue.job("a")["reason"] == "retry"
    take(queue, 1)
    assert queue.job("a")["reason"] is None


# --- quarantine (step 1) ---------------------------------------------------------


def test_quarantines_a_pending_job_at_exactly_its_deadline(queue: Queue) -> None:
    add(queue, "a", now=0, ttl=100)
    assert queue.claim("courier-1", 100) is None
    assert queue.rows()["jobs"] == [(1, "a", 2, "dead", 0, 3, 0, 0, 100, None, None, "deadline")]


def test_a_job_one_ms_before_its_deadline_is_still_claimable(queue: Queue) -> None:
    add(queue, "a", now=0, ttl=100)
    assert take(queue, 99, lease=100)["lease_until"] == 100


def test_quarantines_pending_jobs_whatever_their_available_at(queue: Queue) -> None:
    add(queue, "a", now=0, ttl=100)
    ticket = take(queue, 0)
    assert queue.finish(ticket, "retry", 10, 80) == "pending"  # available at 90
    assert queue.claim("courier-1", 100) is None  # deadline passed before due
    assert queue.job("a")["status"] == "dead"
    assert queue.job("a")["reason"] == "deadline"
    assert queue.job("a")["available_at"] == 90


def test_quarantines_an_expired_lease_whose_budget_is_spent(queue: Queue) -> None:
    add(queue, "a", ttl=1000, budget=1)
    take(queue, 0, lease=100)
    assert queue.claim("courier-2", 100) is None
    assert queue.rows()["jobs"] == [(1, "a", 2, "dead", 1, 1, 1, 0, 1000, None, None, "exhausted")]


def test_does_not_quarantine_a_live_lease_whose_budget_is_spent(
    queue: Queue,
) -> None:
    add(queue, "a", ttl=1000, budget=1)
    take(queue, 0, lease=100)
    before = queue.rows()
    assert queue.claim("courier-2", 99) is None
    assert queue.rows() == before


def test_an_expired_lease_at_its_deadline_is_quarantined_as_deadline(
    queue: Queue,
) -> None:
    add(queue, "a", ttl=100, budget=1)
    take(queue, 0, lease=1000)  # lease capped at the deadline, 100
    assert queue.claim("courier-2", 100) is None
    assert queue.job("a")["reason"] == "deadline"  # deadline wins over exhausted


def test_quarantine_is_committed_even_when_nothing_is_claimed(queue: Queue) -> None:
    add(queue, "a", ttl=10)
    hooks = HookLog()
    assert queue.claim("courier-1", 10, fault=hooks) is None
    assert hooks.points == [], "claim returning None calls no hook"
    assert [(row[3], row[11]) for row in queue.other().rows()["jobs"]] == [("dead", "deadline")]


def test_quarantine_happens_before_the_pick_in_the_same_call(queue: Queue) -> None:
    add(queue, "old", ttl=10)
    add(queue, "new", ttl=1000)
    assert take(queue, 10)["id"] == "new"
    assert queue.job("old")["status"] == "dead"


def test_done_and_dead_jobs_are_never_claimed(queue: Queue) -> None:
    add(queue, "a")
    add(queue, "b")
    queue.finish(take(queue, 0), "ok", 1)
    queue.finish(take(queue, 1), "permanent", 2)
    before = queue.rows()
    assert queue.claim("courier-1", 10**6) is None
    assert queue.rows() == before


# --- hooks -----------------------------------------------------------------------


def test_calls_after_claim_then_after_commit(queue: Queue) -> None:
    add(queue, "a")
    hooks = HookLog()
    queue.claim("courier-1", 0, fault=hooks)
    assert hooks.points == ["after-claim", "after-commit"]


def test_after_claim_sees_the_leased_row_inside_the_transaction(
    queue: Queue,
) -> None:
    add(queue, "a")
    seen = []
    hooks = HookLog().on(
        "after-claim", lambda: seen.append((queue.in_transaction(), queue.job("a")))
    )
    queue.claim("courier-1", 0, fault=hooks)
    in_transaction, row = seen[0]
    assert in_transaction is (queue.name != "model"), "the model has no connection"
    assert row["status"] == "leased"
    assert row["token"] == 1


def test_after_commit_runs_outside_the_transaction(queue: Queue) -> None:
    add(queue, "a")
    seen = []
    hooks = HookLog().on("after-commit", lambda: seen.append(queue.in_transaction()))
    queue.claim("courier-1", 0, fault=hooks)
    assert seen == [False]


def test_an_error_at_after_claim_rolls_back_the_claim_and_the_quarantine(
    queue: Queue,
) -> None:
    add(queue, "expired", ttl=10)
    add(queue, "a", ttl=1000)
    before = queue.rows()
    error = RuntimeError("crash before commit")
    with pytest.raises(RuntimeError) as raised:
        queue.claim("courier-1", 10, fault=HookLog("after-claim", error))
    assert raised.value is error
    assert queue.rows() == before
    assert not queue.in_transaction()


def test_a_base_exception_at_after_claim_also_rolls_back(queue: Queue) -> None:
    add(queue, "a")
    before = queue.rows()
    with pytest.raises(KeyboardInterrupt):
        queue.claim("courier-1", 0, fault=HookLog("after-claim", KeyboardInterrupt()))
    assert queue.rows() == before
    assert not queue.in_transaction()


def test_an_error_at_after_commit_keeps_the_claim(queue: Queue) -> None:
    add(queue, "a")
    error = RuntimeError("crash after commit")
    with pytest.raises(RuntimeError) as raised:
        queue.claim("courier-1", 0, fault=HookLog("after-commit", error))
    assert raised.value is error
    assert queue.job("a")["status"] == "leased"
    assert queue.job("a")["token"] == 1


# --- validation --------------------------------------------------------------------

VALID: dict[str, object] = {"owner": "courier-1", "now_ms": 0, "lease_ms": 100, "fault": None}

INVALID_CASES = (
    [("owner", v) for v in BAD_IDENTIFIERS]
    + [("now_ms", v) for v in bad_ints(0, MAX_NOW)]
    + [("lease_ms", v) for v in bad_ints(1, 60000)]
    + [("fault", v) for v in ["after-claim", 1, True, object()]]
)


@pytest.mark.parametrize(("argument", "values"), by_argument(INVALID_CASES))
def test_rejects_malformed_argument_before_any_change(
    queue: Queue, argument: str, values: list[object]
) -> None:
    add(queue, "expired", ttl=10)
    add(queue, "a", ttl=1000)
    before = queue.rows()
    hooks = HookLog()
    for value in values:
        arguments = {**VALID, "now_ms": 10, argument: value}
        if argument != "fault":
            arguments["fault"] = hooks
        with pytest.raises(ValueError, match=argument):
            queue.claim(**arguments)
        assert queue.rows() == before, f"{value!r}: not even the quarantine may happen"
        assert hooks.points == []
        assert not queue.in_transaction()


def test_accepts_the_range_edges(queue: Queue) -> None:
    add(queue, "a", now=0, ttl=60000)
    assert take(queue, 0, lease=1)["lease_until"] == 1
    add(queue, "b", now=MAX_NOW, ttl=60000)
    assert take(queue, MAX_NOW, lease=60000)["lease_until"] == MAX_NOW + 60000


def test_a_job_in_backoff_does_not_block_later_jobs(queue: Queue) -> None:
    add(queue, "a", ttl=10000)
    add(queue, "b", ttl=10000)
    assert queue.finish(take(queue, 0), "retry", 10, 500) == "pending"
    assert take(queue, 20)["id"] == "b"


def test_the_quarantine_looks_at_every_job_not_only_up_to_the_claimed_one(queue: Queue) -> None:
    add(queue, "fresh", now=50, ttl=1000)
    add(queue, "late", now=0, ttl=100)
    assert take(queue, 100)["id"] == "fresh"
    assert queue.job("late")["status"] == "dead"


def test_the_returned_ticket_is_a_fresh_dict(queue: Queue) -> None:
    add(queue, "a")
    ticket = take(queue, 0)
    ticket["token"] = 99
    assert queue.job("a")["token"] == 1


def test_an_empty_queue_has_nothing_to_claim(queue: Queue) -> None:
    assert queue.claim("courier-1", 0) is None
    assert queue.rows() == {"jobs": [], "redrives": []}
