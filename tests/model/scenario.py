"""Helpers for the model's examples: read a job by column name, set up common situations."""

from __future__ import annotations

from typing import Any

from model import QueueModel
from tests.support import JOB_COLUMNS

OWNER = "courier-1"
OTHER = "courier-2"


def job(queue: QueueModel, job_id: str) -> dict[str, Any]:
    """One job of ``queue.rows()`` as a dict keyed by column name."""
    for row in queue.rows()["jobs"]:
        if row[1] == job_id:
            return dict(zip(JOB_COLUMNS, row, strict=True))
    raise AssertionError(f"no job {job_id!r}")


def queue_with(*job_ids: str, now: int = 0, ttl: int = 1000, budget: int = 3) -> QueueModel:
    """A queue holding the pending jobs ``job_ids`` (qty 2), enqueued at ``now``."""
    queue = QueueModel()
    for job_id in job_ids:
        assert queue.enqueue({"id": job_id, "qty": 2}, now, ttl, budget)
    return queue


def take(queue: QueueModel, now: int, owner: str = OWNER, lease: int = 100) -> dict[str, Any]:
    """Claim at ``now``; the example expects a ticket."""
    ticket = queue.claim(owner, now, lease)
    assert ticket is not None, f"nothing claimable at {now}"
    return ticket


def dead_job(job_id: str = "a", now: int = 0) -> tuple[QueueModel, dict[str, Any]]:
    """A queue whose job ``job_id`` was claimed once and then finished ``permanent``."""
    queue = queue_with(job_id, now=now)
    ticket = take(queue, now)
    assert queue.finish(ticket, "permanent", now + 10) == "dead"
    return queue, ticket
