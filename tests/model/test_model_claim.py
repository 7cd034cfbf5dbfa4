"""claim(owner, now_ms, lease_ms=1000, fault=None): quarantine first, then lease the oldest job."""

from __future__ import annotations

from model import QueueModel
from tests.model.scenario import OTHER, OWNER, job, queue_with, take


def test_a_claim_leases_the_job_with_a_new_fencing_token() -> None:
    queue = queue_with("a", now=10, ttl=1000)
    ticket = queue.claim(OWNER, 20, 100)
    assert ticket == {
        "id": "a",
        "qty": 2,
        "owner": OWNER,
        "token": 1,
        "attempt": 1,
        "lease_until": 120,
    }
    assert ticket is not None and list(ticket) == [
        "id",
        "qty",
        "owner",
        "token",
        "attempt",
        "lease_until",
    ]
    assert queue.rows()["jobs"] == [(1, "a", 2, "leased", 1, 3, 1, 10, 1010, OWNER, 120, None)]


def test_the_default_lease_is_one_second() -> None:
    queue = queue_with("a", ttl=60000)
    ticket = queue.claim(OWNER, 5)
    assert ticket is not None and ticket["lease_until"] == 1005


def test_a_lease_never_outlives_the_deadline() -> None:
    queue = queue_with("a", now=0, ttl=50)
    assert take(queue, 10, lease=100)["lease_until"] == 50


def test_the_lowest_seq_claimable_job_goes_first() -> None:
    queue = queue_with("z", "y", "x")
    assert [take(queue, 0)["id"] for _ in range(3)] == ["z", "y", "x"]
    assert queue.claim(OWNER, 0) is None


def test_a_job_is_due_when_available_at_equals_now() -> None:
    queue = queue_with("a", now=100)
    assert queue.claim(OWNER, 99) is None
    assert take(queue, 100)["id"] == "a"


def test_a_job_in_backoff_does_not_block_later_jobs() -> None:
    queue = queue_with("a", "b", ttl=10000)
    first = take(queue, 0)
    assert queue.finish(first, "retry", 10, 500) == "pending"
    assert take(queue, 20)["id"] == "b"


def test_a_live_lease_is_not_claimable() -> None:
    queue = queue_with("a")
    take(queue, 0, lease=100)
    assert queue.claim(OTHER, 99) is None


def test_an_expired_lease_is_reclaimable_at_exactly_lease_until() -> None:
    queue = queue_with("a", ttl=10000)
    take(queue, 0, owner=OWNER, lease=100)
    assert queue.claim(OTHER, 99) is None
    assert take(queue, 100, owner=OTHER) == {
        "id": "a",
        "qty": 2,
        "owner": OTHER,
        "token": 2,
        "attempt": 2,
        "lease_until": 200,
    }


def test_a_job_whose_deadline_equals_now_is_quarantined_not_claimed() -> None:
    queue = queue_with("a", now=0, ttl=100)
    assert queue.claim(OWNER, 100) is None
    assert job(queue, "a")["status"] == "dead" and job(queue, "a")["reason"] == "deadline"


def test_one_millisecond_before_the_deadline_the_job_is_still_claimable() -> None:
    queue = queue_with("a", now=0, ttl=100)
    assert take(queue, 99, lease=1000)["lease_until"] == 100


def test_the_quarantine_is_kept_when_nothing_is_claimed() -> None:
    queue = queue_with("late", now=0, ttl=100)
    queue.enqueue({"id": "later", "qty": 1}, 500, 1000)  # pending, not due before 500
    assert queue.claim(OWNER, 100) is None
    assert [(row[1], row[3], row[11]) for row in queue.rows()["jobs"]] == [
        ("late", "dead", "deadline"),
        ("later", "pending", None),
    ]


def test_the_quarantine_looks_at_every_job_not_only_up_to_the_claimed_one() -> None:
    queue = queue_with("fresh", now=50, ttl=1000)
    queue.enqueue({"id": "late", "qty": 1}, 0, 100)
    assert take(queue, 100)["id"] == "fresh"
    assert job(queue, "late")["status"] == "dead"


def test_an_expired_lease_with_its_budget_spent_is_quarantined_as_exhausted() -> None:
    queue = queue_with("a", ttl=10000, budget=1)
    take(queue, 0, lease=100)
    assert queue.claim(OTHER, 100) is None
    # Only status, reason, owner and lease_until change; attempts, token, available_at stay.
    assert queue.rows()["jobs"] == [(1, "a", 2, "dead", 1, 1, 1, 0, 10000, None, None, "exhausted")]


def test_a_passed_deadline_wins_over_a_spent_budget() -> None:
    queue = queue_with("a", ttl=100, budget=1)
    take(queue, 0, lease=100)
    assert queue.claim(OTHER, 100) is None
    assert job(queue, "a")["reason"] == "deadline"


def test_a_live_lease_is_never_quarantined() -> None:
    queue = queue_with("a", ttl=10000, budget=1)
    take(queue, 0, lease=100)
    assert queue.claim(OTHER, 99) is None
    assert job(queue, "a")["status"] == "leased"


def test_a_claim_clears_the_retry_reason() -> None:
    queue = queue_with("a", ttl=10000)
    assert queue.finish(take(queue, 0), "retry", 10, 0) == "pending"
    assert job(queue, "a")["reason"] == "retry"
    take(queue, 10)
    assert job(queue, "a")["reason"] is None


def test_the_returned_ticket_is_a_fresh_dict() -> None:
    queue = queue_with("a")
    ticket = take(queue, 0)
    ticket["token"] = 99
    assert job(queue, "a")["token"] == 1


def test_an_empty_queue_has_nothing_to_claim() -> None:
    assert QueueModel().claim(OWNER, 0) is None
