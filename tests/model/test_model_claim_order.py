"""The claim orders of ``model.lifecycle.CLAIM_ORDERS``, as ``QueueModel`` keeps them."""

from __future__ import annotations

import pytest

import model
from model.lifecycle import CLAIM_ORDERS

NOW = 1000


def queue_of(claim_order: str, *ids: str, ttl_ms: int = 100) -> model.QueueModel:
    queue = model.QueueModel(claim_order)
    for job_id in ids:
        queue.enqueue({"id": job_id, "qty": 1}, NOW, ttl_ms)
    return queue


def test_the_orders_are_the_backends_rows():
    assert sorted(CLAIM_ORDERS) == ["relaxed", "strict"]
    with pytest.raises(ValueError, match="claim order must be one of"):
        model.QueueModel("fifo")


def test_a_strict_queue_holds_no_row_elsewhere():
    queue = queue_of("strict", "a")
    with pytest.raises(ValueError, match="strict claim order holds no rows elsewhere"):
        queue.held_elsewhere({"a"})
    queue.held_elsewhere(())  # releasing nothing is always allowed


def test_a_relaxed_claim_passes_over_held_jobs_and_leases_the_next():
    queue = queue_of("relaxed", "a", "b", "c")
    queue.held_elsewhere({"a"})
    ticket = queue.claim("c1", NOW)
    assert ticket is not None and ticket["id"] == "b"
    assert [ticket["id"] for ticket in queue.claim_many("c2", NOW, 5)] == ["c"]


def test_a_relaxed_claim_returns_nothing_only_when_every_claimable_job_is_held():
    queue = queue_of("relaxed", "a", "b")
    queue.held_elsewhere({"a", "b"})
    assert queue.claim("c1", NOW) is None
    queue.held_elsewhere(())
    ticket = queue.claim("c1", NOW)
    assert ticket is not None and ticket["id"] == "a"


def test_a_relaxed_quarantine_passes_over_held_jobs_too():
    queue = queue_of("relaxed", "a", "b", ttl_ms=10)
    queue.held_elsewhere({"a"})
    assert queue.claim("c1", NOW + 10) is None
    statuses = {row[1]: (row[3], row[11]) for row in queue.rows()["jobs"]}
    assert statuses == {"a": ("pending", None), "b": ("dead", "deadline")}


def test_with_nothing_held_the_orders_agree():
    strict, relaxed = queue_of("strict", "a", "b"), queue_of("relaxed", "a", "b")
    for queue in (strict, relaxed):
        queue.claim("c1", NOW)
        queue.claim_many("c2", NOW, 2)
    assert strict.rows() == relaxed.rows()


def test_what_a_claim_would_touch():
    queue = queue_of("strict", "a", "b", "c", ttl_ms=10)
    queue.enqueue({"id": "d", "qty": 1}, NOW + 5, 100)
    assert queue.quarantinable(NOW + 10) == ["a", "b", "c"]
    assert queue.claimable(NOW + 10) == ["d"]
    assert queue.claimable(NOW) == ["a", "b", "c"]
