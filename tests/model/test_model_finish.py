"""finish(ticket, outcome, now_ms, delay_ms=0, fault=None): a compare-and-set on a live ticket."""

from __future__ import annotations

import pytest

from tests.model.scenario import OTHER, OWNER, job, queue_with, take


def test_ok_makes_the_job_done_and_releases_the_lease() -> None:
    queue = queue_with("a", ttl=1000)
    ticket = take(queue, 0, lease=100)
    assert queue.finish(ticket, "ok", 50) == "done"
    assert queue.rows()["jobs"] == [(1, "a", 2, "done", 1, 3, 1, 50, 1000, None, None, None)]


def test_permanent_quarantines_the_job() -> None:
    queue = queue_with("a")
    assert queue.finish(take(queue, 0), "permanent", 50, 30) == "dead"
    assert job(queue, "a")["reason"] == "permanent"
    assert job(queue, "a")["available_at"] == 50  # the delay only counts for pending


def test_retry_within_budget_and_deadline_is_pending_after_the_backoff() -> None:
    queue = queue_with("a", ttl=1000)
    assert queue.finish(take(queue, 0), "retry", 50, 30) == "pending"
    assert queue.rows()["jobs"] == [(1, "a", 2, "pending", 1, 3, 1, 80, 1000, None, None, "retry")]


def test_retry_with_the_budget_spent_is_exhausted_even_past_the_deadline() -> None:
    queue = queue_with("a", ttl=100, budget=1)
    assert queue.finish(take(queue, 0, lease=100), "retry", 50, 60) == "dead"
    assert job(queue, "a")["reason"] == "exhausted"


def test_retry_due_exactly_at_the_deadline_is_dead_by_deadline() -> None:
    queue = queue_with("a", ttl=1000)
    assert queue.finish(take(queue, 0, lease=1000), "retry", 500, 500) == "dead"
    assert job(queue, "a")["reason"] == "deadline"
    assert job(queue, "a")["available_at"] == 500


def test_retry_due_one_millisecond_before_the_deadline_is_pending() -> None:
    queue = queue_with("a", ttl=1000)
    assert queue.finish(take(queue, 0, lease=1000), "retry", 500, 499) == "pending"
    assert job(queue, "a")["available_at"] == 999


def test_a_ticket_is_stale_at_exactly_lease_until() -> None:
    queue = queue_with("a", ttl=1000)
    ticket = take(queue, 0, lease=100)
    before = queue.rows()
    assert queue.finish(ticket, "ok", 100) is False
    assert queue.rows() == before
    assert queue.finish(ticket, "ok", 99) == "done"


def test_an_older_ticket_of_the_same_owner_is_stale() -> None:
    queue = queue_with("a", ttl=10000)
    old = take(queue, 0, owner=OWNER, lease=100)
    new = take(queue, 100, owner=OWNER, lease=100)  # the lease expired: same owner, token 2
    assert (old["owner"], new["owner"], old["token"], new["token"]) == (OWNER, OWNER, 1, 2)
    assert queue.finish(old, "ok", 150) is False
    assert queue.finish(new, "ok", 150) == "done"


@pytest.mark.parametrize(
    ("field", "other"),
    [("qty", 3), ("owner", OTHER), ("token", 2), ("attempt", 2), ("lease_until", 99)],
)
def test_a_ticket_differing_in_any_field_is_stale(field: str, other: object) -> None:
    queue = queue_with("a")
    ticket = take(queue, 0, lease=100)
    before = queue.rows()
    assert queue.finish({**ticket, field: other}, "ok", 10) is False
    assert queue.rows() == before


def test_a_ticket_for_an_unknown_or_unleased_job_is_stale() -> None:
    queue = queue_with("a", "b")
    ticket = take(queue, 0, lease=100)
    assert queue.finish({**ticket, "id": "nobody"}, "ok", 10) is False
    assert queue.finish({**ticket, "id": "b"}, "ok", 10) is False  # b is pending
    assert queue.finish(ticket, "ok", 10) == "done"
    assert queue.finish(ticket, "ok", 10) is False  # done is final


def test_a_late_result_never_removes_the_current_lease() -> None:
    queue = queue_with("a", ttl=10000)
    old = take(queue, 0, owner=OWNER, lease=100)
    take(queue, 100, owner=OTHER, lease=100)
    before = queue.rows()
    for outcome in ("ok", "retry", "permanent"):
        assert queue.finish(old, outcome, 150) is False
    assert queue.rows() == before


def test_the_ticket_is_not_mutated() -> None:
    queue = queue_with("a")
    ticket = take(queue, 0)
    copy = dict(ticket)
    queue.finish(ticket, "retry", 10, 5)
    assert ticket == copy
