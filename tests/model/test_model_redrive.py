"""redrive(job_id, now_ms, ttl_ms, note, fault=None): audited, renewed budget, same token."""

from __future__ import annotations

import pytest

from tests.model.scenario import OWNER, dead_job, job, queue_with, take
from tests.support import HookLog


def test_a_dead_job_is_pending_again_with_a_renewed_budget_and_its_token_kept() -> None:
    queue, _ = dead_job("a", now=0)
    assert queue.redrive("a", 500, 2000, "operator-7") is True
    assert queue.rows() == {
        "jobs": [(1, "a", 2, "pending", 0, 3, 1, 500, 2500, None, None, None)],
        "redrives": [(1, "a", 1, 500, "operator-7")],
    }


def test_the_next_claim_gets_a_newer_token_and_old_tickets_stay_stale() -> None:
    queue, old = dead_job("a", now=0)
    queue.redrive("a", 500, 2000, "again")
    new = take(queue, 500)
    assert (new["token"], new["attempt"]) == (2, 1)
    assert queue.finish(old, "ok", 510) is False
    assert queue.finish(new, "ok", 510) == "done"


def test_the_audit_row_is_written_before_the_job_changes() -> None:
    queue, _ = dead_job("a", now=0)
    seen: dict[str, object] = {}

    def look(point: str) -> None:
        seen[point] = (job(queue, "a")["status"], len(queue.rows()["redrives"]))

    hooks = HookLog().on("after-audit", lambda: look("after-audit"))
    hooks.on("after-redrive", lambda: look("after-redrive"))
    queue.redrive("a", 100, 1000, "n", fault=hooks)
    assert hooks.points == ["after-audit", "after-redrive", "after-commit"]
    assert seen == {"after-audit": ("dead", 1), "after-redrive": ("pending", 1)}


def test_each_redrive_is_audited_with_the_token_of_its_time() -> None:
    queue, _ = dead_job("a", now=0)
    queue.redrive("a", 100, 1000, "first")
    assert queue.finish(take(queue, 100), "permanent", 110) == "dead"
    queue.redrive("a", 200, 1000, "second")
    assert queue.rows()["redrives"] == [(1, "a", 1, 100, "first"), (2, "a", 2, 200, "second")]


@pytest.mark.parametrize("status", ["pending", "leased", "done"])
def test_only_a_dead_job_can_be_redriven(status: str) -> None:
    queue = queue_with("a")
    if status != "pending":
        ticket = take(queue, 0, owner=OWNER)
        if status == "done":
            queue.finish(ticket, "ok", 10)
    assert job(queue, "a")["status"] == status
    before, hooks = queue.rows(), HookLog()
    with pytest.raises(ValueError):
        queue.redrive("a", 20, 1000, "n", fault=hooks)
    assert (queue.rows(), hooks.points) == (before, [])


def test_an_unknown_job_cannot_be_redriven() -> None:
    queue, hooks = queue_with("a"), HookLog()
    with pytest.raises(ValueError):
        queue.redrive("nobody", 0, 1000, "n", fault=hooks)
    assert (queue.rows()["redrives"], hooks.points) == ([], [])
