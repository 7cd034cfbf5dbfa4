"""Fault hooks: called only on paths that changed something; before commit, all or nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from model import QueueModel
from tests.model.scenario import OWNER, dead_job, job, queue_with, take
from tests.support import HookLog

Operation = Callable[[QueueModel, HookLog | None], object]


def claimable() -> tuple[QueueModel, Operation]:
    """A queue with one claimable job, and a second one whose deadline passes at 100."""
    queue = queue_with("a", ttl=10000)
    queue.enqueue({"id": "late", "qty": 1}, 0, 100)
    return queue, lambda q, hooks: q.claim(OWNER, 100, 100, fault=hooks)


def leased() -> tuple[QueueModel, Operation]:
    queue = queue_with("a", ttl=10000)
    ticket = take(queue, 0, lease=100)
    return queue, lambda q, hooks: q.finish(ticket, "retry", 50, 10, fault=hooks)


def dead() -> tuple[QueueModel, Operation]:
    queue, _ = dead_job("a")
    return queue, lambda q, hooks: q.redrive("a", 100, 1000, "n", fault=hooks)


WRITES = {
    "claim": (claimable, ["after-claim", "after-commit"]),
    "finish": (leased, ["after-finish", "after-commit"]),
    "redrive": (dead, ["after-audit", "after-redrive", "after-commit"]),
}
BEFORE_COMMIT = [(write, point) for write, (_, points) in WRITES.items() for point in points[:-1]]


@pytest.mark.parametrize("write", WRITES)
def test_a_write_calls_its_hooks_in_order(write: str) -> None:
    setup, points = WRITES[write]
    queue, operation = setup()
    hooks = HookLog()
    operation(queue, hooks)
    assert hooks.points == points


@pytest.mark.parametrize(("write", "point"), BEFORE_COMMIT)
@pytest.mark.parametrize("error", [RuntimeError("crash"), KeyboardInterrupt()])
def test_an_error_before_commit_rolls_everything_back(
    write: str, point: str, error: BaseException
) -> None:
    setup, _ = WRITES[write]
    queue, operation = setup()
    before = queue.rows()
    with pytest.raises(type(error)) as raised:
        operation(queue, HookLog(fail_at=point, error=error))
    assert raised.value is error
    assert queue.rows() == before
    # The machine's states were restored too: the same write succeeds now.
    assert operation(queue, HookLog()) not in (None, False)


@pytest.mark.parametrize("write", WRITES)
def test_an_error_after_commit_keeps_the_change(write: str) -> None:
    setup, _ = WRITES[write]
    queue, operation = setup()
    expected_queue, expected_operation = setup()
    expected_operation(expected_queue, HookLog())
    with pytest.raises(RuntimeError):
        operation(queue, HookLog(fail_at="after-commit"))
    assert queue.rows() == expected_queue.rows()


def test_the_quarantine_rolls_back_with_the_claim() -> None:
    queue, operation = claimable()
    with pytest.raises(RuntimeError):
        operation(queue, HookLog(fail_at="after-claim"))
    assert job(queue, "late")["status"] == "pending"


def test_a_claim_that_finds_nothing_calls_no_hook_but_keeps_its_quarantine() -> None:
    queue = queue_with("late", ttl=100)
    hooks = HookLog(fail_at="after-commit")
    assert queue.claim(OWNER, 100, fault=hooks) is None
    assert hooks.points == []
    assert job(queue, "late")["status"] == "dead"


def test_a_stale_finish_calls_no_hook() -> None:
    queue = queue_with("a")
    stale: dict[str, Any] = {**take(queue, 0, lease=100), "token": 9}
    hooks = HookLog(fail_at="after-finish")
    assert queue.finish(stale, "ok", 10, fault=hooks) is False
    assert hooks.points == []


def test_a_rolled_back_audit_row_gives_its_seq_number_back() -> None:
    queue, operation = dead()
    with pytest.raises(RuntimeError):
        operation(queue, HookLog(fail_at="after-redrive"))
    operation(queue, HookLog())
    assert [row[0] for row in queue.rows()["redrives"]] == [1]


def test_no_fault_means_no_hook() -> None:
    for setup, _ in WRITES.values():
        queue, operation = setup()
        assert operation(queue, None) not in (None, False)
