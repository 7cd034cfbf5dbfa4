"""enqueue(event, now_ms, ttl_ms, max_attempts=3): a new job is pending; an intake retry is not."""

from __future__ import annotations

import pytest

from model import Conflict, QueueModel
from tests.model.scenario import job, queue_with


def test_a_new_job_is_pending_with_no_attempts_and_token_zero() -> None:
    queue = QueueModel()
    assert queue.enqueue({"id": "a", "qty": 2}, 10, 500, 4) is True
    assert queue.rows() == {
        "jobs": [(1, "a", 2, "pending", 0, 4, 0, 10, 510, None, None, None)],
        "redrives": [],
    }


def test_the_default_budget_is_three_attempts() -> None:
    queue = QueueModel()
    queue.enqueue({"id": "a", "qty": 2}, 0, 100)
    assert job(queue, "a")["max_attempts"] == 3


def test_an_intake_retry_keeps_the_whole_row_even_with_another_ttl_or_budget() -> None:
    queue = queue_with("a", now=0, ttl=1000, budget=3)
    before = queue.rows()
    assert queue.enqueue({"id": "a", "qty": 2}, 50, 9, 1) is False
    assert queue.rows() == before


def test_the_same_id_with_another_qty_is_a_conflict_and_changes_nothing() -> None:
    queue = queue_with("a")
    before = queue.rows()
    with pytest.raises(Conflict):
        queue.enqueue({"id": "a", "qty": 3}, 0, 100)
    assert queue.rows() == before


def test_seq_numbers_follow_committed_inserts_only() -> None:
    queue = queue_with("a", "b")
    with pytest.raises(Conflict):
        queue.enqueue({"id": "a", "qty": 9}, 0, 100)
    queue.enqueue({"id": "c", "qty": 1}, 0, 100)
    assert [row[:2] for row in queue.rows()["jobs"]] == [(1, "a"), (2, "b"), (3, "c")]


def test_the_event_is_not_mutated_nor_kept() -> None:
    queue = QueueModel()
    event = {"id": "a", "qty": 2}
    queue.enqueue(event, 0, 100)
    event["qty"] = 7
    assert event == {"id": "a", "qty": 7}
    assert job(queue, "a")["qty"] == 2
