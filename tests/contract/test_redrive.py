"""Section 6: redrive(con, job_id, now_ms, ttl_ms, note, fault=None), on every implementation."""

from __future__ import annotations

import pytest

from tests.contract.cases import by_argument
from tests.contract.implementations import Queue
from tests.support import BAD_IDENTIFIERS, MAX_NOW, HookLog, bad_ints


def dead(queue: Queue, job_id: str = "a", budget: int = 2) -> None:
    """Enqueue ``job_id`` and fail it permanently after one redelivered attempt."""
    queue.enqueue({"id": job_id, "qty": 4}, 0, 1000, budget)
    for now in (0, 100):  # the first lease expires unfinished, the second fails
        ticket = queue.claim("courier-1", now, 100)
    assert ticket is not None
    assert queue.finish(ticket, "permanent", 150) == "dead"


def test_requeues_a_dead_job_with_a_fresh_budget_and_keeps_its_token(
    queue: Queue,
) -> None:
    dead(queue, budget=2)
    assert queue.job("a")["token"] == 2
    assert queue.redrive("a", 500, 300, "fixed-address") is True
    assert queue.rows() == {
        "jobs": [(1, "a", 4, "pending", 0, 2, 2, 500, 800, None, None, None)],
        "redrives": [(1, "a", 2, 500, "fixed-address")],
    }


def test_each_redrive_appends_an_audit_row_with_the_token_at_that_time(
    queue: Queue,
) -> None:
    dead(queue)
    queue.redrive("a", 200, 1000, "first")
    ticket = queue.claim("courier-2", 200)
    assert ticket is not None
    queue.finish(ticket, "permanent", 201)
    queue.redrive("a", 300, 1000, "second")
    assert queue.rows()["redrives"] == [(1, "a", 2, 200, "first"), (2, "a", 3, 300, "second")]


def test_the_redriven_job_is_claimable_with_the_next_token(queue: Queue) -> None:
    dead(queue)
    queue.redrive("a", 200, 1000, "again")
    ticket = queue.claim("courier-2", 200, 100)
    assert ticket == dict(id="a", qty=4, owner="courier-2", token=3, attempt=1, lease_until=300)


@pytest.mark.parametrize("reason", ["deadline", "exhausted", "permanent"])
def test_redrives_a_job_whatever_its_reason(queue: Queue, reason: str) -> None:
    queue.enqueue({"id": "a", "qty": 1}, 0, 100, 1)
    ticket = queue.claim("courier-1", 0, 10)
    assert ticket is not None
    if reason == "deadline":
        queue.claim("courier-1", 100)
    elif reason == "exhausted":
        queue.claim("courier-1", 10)
    else:
        queue.finish(ticket, "permanent", 1)
    assert queue.job("a")["reason"] == reason
    assert queue.redrive("a", 200, 100, "ops") is True


@pytest.mark.parametrize("state", ["missing", "pending", "leased", "done"])
def test_a_missing_or_not_dead_job_raises_value_error_without_an_audit_row(
    queue: Queue, state: str
) -> None:
    if state != "missing":
        queue.enqueue({"id": "a", "qty": 1}, 0, 100)
    if state in ("leased", "done"):
        ticket = queue.claim("courier-1", 0)
        assert ticket is not None
        if state == "done":
            queue.finish(ticket, "ok", 1)
    before = queue.rows()
    hooks = HookLog()
    with pytest.raises(ValueError, match="'a'"):
        queue.redrive("a", 10, 100, "ops", fault=hooks)
    assert queue.rows() == before
    assert hooks.points == []
    assert not queue.in_transaction()


# --- hooks and atomicity --------------------------------------------------------------


def test_hooks_run_audit_then_redrive_then_commit(queue: Queue) -> None:
    dead(queue)
    seen: list[tuple[str, bool, int, str]] = []

    def look(point: str) -> None:
        audit = len(queue.rows()["redrives"])
        seen.append((point, queue.in_transaction(), audit, queue.job("a")["status"]))

    queue.redrive("a", 200, 1000, "ops", fault=look)
    inside = queue.name != "model"  # the model has no connection
    assert seen == [
        ("after-audit", inside, 1, "dead"),  # the audit row is written first
        ("after-redrive", inside, 1, "pending"),
        ("after-commit", False, 1, "pending"),
    ]


@pytest.mark.parametrize("point", ["after-audit", "after-redrive"])
def test_an_error_before_commit_leaves_neither_audit_nor_redrive(queue: Queue, point: str) -> None:
    dead(queue)
    before = queue.rows()
    error = RuntimeError(f"crash at {point}")
    with pytest.raises(RuntimeError) as raised:
        queue.redrive("a", 200, 1000, "ops", fault=HookLog(point, error))
    assert raised.value is error
    assert queue.rows() == before
    assert not queue.in_transaction()


def test_an_error_after_commit_keeps_both_audit_and_redrive(queue: Queue) -> None:
    dead(queue)
    with pytest.raises(RuntimeError):
        queue.redrive("a", 200, 1000, "ops", fault=HookLog("after-commit"))
    assert queue.job("a")["status"] == "pending"
    assert len(queue.rows()["redrives"]) == 1


# --- validation -----------------------------------------------------------------------

VALID: dict[str, object] = {"job_id": "a", "now_ms": 200, "ttl_ms": 1000, "note": "ops"}

INVALID_CASES = (
    [("job_id", v) for v in BAD_IDENTIFIERS]
    + [("now_ms", v) for v in bad_ints(0, MAX_NOW)]
    + [("ttl_ms", v) for v in bad_ints(1, 60000)]
    + [("note", v) for v in BAD_IDENTIFIERS]
    + [("fault", v) for v in ["after-audit", 1, object()]]
)


# Every call's malformed-argument test has this shape on purpose (one per call, each with
# its own state and checks; tests/contract/cases.py groups the values by argument).
@pytest.mark.parametrize(("argument", "values"), by_argument(INVALID_CASES))
def test_rejects_malformed_argument_before_any_change(
    queue: Queue, argument: str, values: list[object]
) -> None:
    dead(queue)
    before = queue.rows()
    hooks = HookLog()
    for value in values:
        arguments = {**VALID, "fault": hooks, argument: value}
        with pytest.raises(ValueError, match=argument):
            queue.redrive(**arguments)
        assert queue.rows() == before, value
        assert hooks.points == []
        assert not queue.in_transaction()


def test_accepts_the_range_edges(queue: Queue) -> None:
    dead(queue)
    assert queue.redrive("a", MAX_NOW, 60000, "n" * 64) is True
    assert queue.job("a")["deadline"] == 10**15


def test_the_shortest_ttl_is_one_ms(queue: Queue) -> None:
    dead(queue)
    assert queue.redrive("a", 500, 1, "ops") is True
    assert queue.job("a")["deadline"] == 501


def test_a_rolled_back_audit_row_leaves_the_audit_log_in_order(queue: Queue) -> None:
    """SQLite and the model give the rolled-back seq number back; PostgreSQL's
    sequence does not (``dense_seq``): the audit row's seq is higher, never lower."""
    dead(queue)
    with pytest.raises(RuntimeError):
        queue.redrive("a", 200, 1000, "ops", fault=HookLog("after-redrive"))
    assert queue.redrive("a", 200, 1000, "ops") is True
    ((seq, *audit),) = queue.rows()["redrives"]
    assert audit == ["a", 2, 200, "ops"]
    assert seq == 1 if queue.dense_seq else seq == 2


def test_the_audit_row_is_written_before_the_job_changes(queue: Queue) -> None:
    dead(queue)
    seen: dict[str, object] = {}

    def look(point: str) -> None:
        seen[point] = (queue.job("a")["status"], len(queue.rows()["redrives"]))

    hooks = HookLog().on("after-audit", lambda: look("after-audit"))
    hooks.on("after-redrive", lambda: look("after-redrive"))
    queue.redrive("a", 100, 1000, "n", fault=hooks)
    assert hooks.points == ["after-audit", "after-redrive", "after-commit"]
    assert seen == {"after-audit": ("dead", 1), "after-redrive": ("pending", 1)}
