"""Fault hooks: called only on paths that changed something; before commit, all or nothing.

On every implementation; on the model an error before the commit point restores the
lifecycle machine's states too, so the same write succeeds afterwards.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.contract.implementations import Queue
from tests.support import HookLog

Operation = Callable[[Queue, HookLog | None], object]


def add(queue: Queue, job_id: str, ttl: int) -> None:
    assert queue.enqueue({"id": job_id, "qty": 2}, 0, ttl)


def claimable(queue: Queue) -> Operation:
    """One claimable job, and a second one whose deadline passes at 100."""
    add(queue, "a", 10000)
    add(queue, "late", 100)
    return lambda q, hooks: q.claim("courier-1", 100, 100, fault=hooks)


def leased(queue: Queue) -> Operation:
    add(queue, "a", 10000)
    ticket = queue.claim("courier-1", 0, 100)
    return lambda q, hooks: q.finish(ticket, "retry", 50, 10, fault=hooks)


def dead(queue: Queue) -> Operation:
    add(queue, "a", 1000)
    assert queue.finish(queue.claim("courier-1", 0, 100), "permanent", 10) == "dead"
    return lambda q, hooks: q.redrive("a", 100, 1000, "n", fault=hooks)


WRITES = {
    "claim": (claimable, ["after-claim", "after-commit"]),
    "finish": (leased, ["after-finish", "after-commit"]),
    "redrive": (dead, ["after-audit", "after-redrive", "after-commit"]),
}
BEFORE_COMMIT = [(write, point) for write, (_, points) in WRITES.items() for point in points[:-1]]


@pytest.mark.parametrize("write", WRITES)
def test_a_write_calls_its_hooks_in_order(queue: Queue, write: str) -> None:
    setup, points = WRITES[write]
    operation = setup(queue)
    hooks = HookLog()
    operation(queue, hooks)
    assert hooks.points == points


@pytest.mark.parametrize(("write", "point"), BEFORE_COMMIT)
@pytest.mark.parametrize(
    "error", [RuntimeError("crash"), KeyboardInterrupt()], ids=["error", "interrupt"]
)
def test_an_error_before_commit_rolls_everything_back(
    queue: Queue, write: str, point: str, error: BaseException
) -> None:
    setup, _ = WRITES[write]
    operation = setup(queue)
    before = queue.rows()
    with pytest.raises(type(error)) as raised:
        operation(queue, HookLog(fail_at=point, error=error))
    assert raised.value is error
    assert queue.rows() == before
    assert not queue.in_transaction()
    assert operation(queue, HookLog()) not in (None, False), "the same write succeeds now"


AFTER = {  # the job after each write: status, reason, audit rows
    "claim": ("leased", None, 0),
    "finish": ("pending", "retry", 0),
    "redrive": ("pending", None, 1),
}


@pytest.mark.parametrize("write", WRITES)
def test_an_error_after_commit_keeps_the_change(queue: Queue, write: str) -> None:
    setup, _ = WRITES[write]
    operation = setup(queue)
    with pytest.raises(RuntimeError):
        operation(queue, HookLog(fail_at="after-commit"))
    job = queue.other().job("a")  # committed: another connection sees it
    assert (job["status"], job["reason"], len(queue.rows()["redrives"])) == AFTER[write]
    assert not queue.in_transaction()


def test_the_quarantine_rolls_back_with_the_claim(queue: Queue) -> None:
    operation = claimable(queue)
    with pytest.raises(RuntimeError):
        operation(queue, HookLog(fail_at="after-claim"))
    assert queue.job("late")["status"] == "pending"


def test_a_claim_that_finds_nothing_calls_no_hook_but_keeps_its_quarantine(queue: Queue) -> None:
    add(queue, "late", 100)
    hooks = HookLog(fail_at="after-commit")
    assert queue.claim("courier-1", 100, fault=hooks) is None
    assert hooks.points == []
    assert queue.job("late")["status"] == "dead"


def test_a_stale_finish_calls_no_hook(queue: Queue) -> None:
    add(queue, "a", 1000)
    stale = {**queue.claim("courier-1", 0, 100), "token": 9}
    hooks = HookLog(fail_at="after-finish")
    assert queue.finish(stale, "ok", 10, fault=hooks) is False
    assert hooks.points == []


@pytest.mark.parametrize("write", WRITES)
def test_no_fault_means_no_hook(queue: Queue, write: str) -> None:
    setup, _ = WRITES[write]
    assert setup(queue)(queue, None) not in (None, False)
