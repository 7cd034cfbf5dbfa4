"""Section 5: finish(con, ticket, outcome, now_ms, delay_ms=0, fault=None), everywhere."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tests.contract.cases import by_argument
from tests.contract.implementations import Queue
from tests.support import BAD_IDENTIFIERS, MAX_NOW, DictSubclass, HookLog, StrSubclass, bad_ints


def leased(
    queue: Queue, ttl: int = 1000, budget: int = 3, lease: int = 100, now: int = 0
) -> dict[str, Any]:
    """Enqueue job "a" at ``now`` and claim it at ``now``: the live ticket."""
    queue.enqueue({"id": "a", "qty": 2}, now, ttl, budget)
    ticket: dict[str, Any] | None = queue.claim("courier-1", now, lease)
    assert ticket is not None
    return ticket


# --- outcomes (a table: outcome and timing -> status, reason, available_at) --------


@pytest.mark.parametrize(
    ("budget", "outcome", "now", "delay", "status", "reason", "available_at"),
    [
        (3, "ok", 50, 0, "done", None, 50),
        (3, "ok", 50, 7, "done", None, 50),  # delay only matters when pending
        (3, "permanent", 50, 0, "dead", "permanent", 50),
        (1, "permanent", 50, 0, "dead", "permanent", 50),
        (3, "retry", 50, 20, "pending", "retry", 70),
        (3, "retry", 50, 0, "pending", "retry", 50),
        (3, "retry", 50, 949, "pending", "retry", 999),  # one ms before the deadline
        (3, "retry", 50, 950, "dead", "deadline", 50),  # now + delay == deadline
        (3, "retry", 50, 60000, "dead", "deadline", 50),
        (1, "retry", 50, 0, "dead", "exhausted", 50),  # budget checked first
        (1, "retry", 50, 950, "dead", "exhausted", 50),
    ],
)
def test_outcome_table(
    queue: Queue,
    budget: int,
    outcome: str,
    now: int,
    delay: int,
    status: str,
    reason: str | None,
    available_at: int,
) -> None:
    ticket = leased(queue, ttl=1000, budget=budget, lease=100)
    assert queue.finish(ticket, outcome, now, delay) == status
    assert queue.rows()["jobs"] == [
        (1, "a", 2, status, 1, budget, 1, available_at, 1000, None, None, reason)
    ]


def test_retry_is_exhausted_only_when_attempts_reach_max_attempts(
    queue: Queue,
) -> None:
    ticket = leased(queue, budget=2)
    assert queue.finish(ticket, "retry", 1) == "pending"
    second = queue.claim("courier-1", 1)
    assert second is not None and second["attempt"] == 2
    assert queue.finish(second, "retry", 2) == "dead"
    assert queue.job("a")["reason"] == "exhausted"


def test_default_delay_is_zero(queue: Queue) -> None:
    ticket = leased(queue)
    queue.finish(ticket, "retry", 30)
    assert queue.job("a")["available_at"] == 30


# --- stale tickets (each returns False and changes nothing) ------------------------


def mismatched(ticket: dict[str, Any], key: str) -> dict[str, Any]:
    replacement = {
        "id": "b",
        "qty": 3,
        "owner": "courier-2",
        "token": ticket["token"] + 1,
        "attempt": ticket["attempt"] + 1,
        "lease_until": ticket["lease_until"] + 1,
    }
    return {**ticket, key: replacement[key]}


@pytest.mark.parametrize("key", ["id", "qty", "owner", "token", "attempt", "lease_until"])
def test_a_ticket_differing_in_any_field_is_stale(queue: Queue, key: str) -> None:
    ticket = leased(queue)
    queue.enqueue({"id": "b", "qty": 3}, 0, 1000)  # "b" exists but is not leased
    before = queue.rows()
    hooks = HookLog()
    assert queue.finish(mismatched(ticket, key), "ok", 1, fault=hooks) is False
    assert queue.rows() == before
    assert hooks.points == []


def test_a_ticket_for_an_unknown_job_is_stale(queue: Queue) -> None:
    ticket = leased(queue)
    assert queue.finish({**ticket, "id": "nobody"}, "ok", 1) is False


def test_a_ticket_is_stale_at_exactly_lease_until(queue: Queue) -> None:
    ticket = leased(queue, lease=100)
    before = queue.rows()
    assert queue.finish(ticket, "ok", 100) is False
    assert queue.rows() == before
    assert queue.finish(ticket, "ok", 99) == "done"


def test_a_ticket_is_stale_at_exactly_the_deadline(
    queue: Queue,
) -> None:
    ticket = leased(queue, ttl=1000, lease=100)
    # Only a row edited from outside can have a deadline before lease_until.
    queue.rewrite("a", deadline=60)
    assert queue.finish(ticket, "ok", 60) is False
    assert queue.finish(ticket, "ok", 59) == "done"


def test_an_older_run_of_the_same_owner_cannot_finish_the_newer_lease(
    queue: Queue,
) -> None:
    old = leased(queue, lease=100)
    new = queue.claim("courier-1", 100, 100)  # same owner, after the lease expired
    assert new is not None
    assert queue.finish(old, "permanent", 101) is False
    assert queue.finish(new, "ok", 101) == "done"
    assert queue.finish(old, "ok", 102) is False
    assert queue.job("a")["status"] == "done"
    assert queue.job("a")["token"] == 2


@pytest.mark.parametrize("settle", ["ok", "permanent", "retry"])
def test_a_finished_ticket_cannot_be_finished_twice(queue: Queue, settle: str) -> None:
    ticket = leased(queue)
    assert queue.finish(ticket, settle, 1, 5)
    after = queue.rows()
    for outcome in ["ok", "retry", "permanent"]:
        assert queue.finish(ticket, outcome, 2) is False
    assert queue.rows() == after


def test_a_ticket_from_before_a_redrive_stays_stale(queue: Queue) -> None:
    ticket = leased(queue)
    queue.finish(ticket, "permanent", 1)
    queue.redrive("a", 2, 1000, "retry-after-fix")
    again = queue.claim("courier-1", 2, 100)
    assert again is not None
    assert again["attempt"] == ticket["attempt"] == 1
    assert again["token"] == 2
    assert queue.finish({**ticket, "lease_until": again["lease_until"]}, "ok", 3) is False


# --- hooks -------------------------------------------------------------------------


def test_calls_after_finish_then_after_commit(queue: Queue) -> None:
    ticket = leased(queue)
    hooks = HookLog()
    queue.finish(ticket, "ok", 1, fault=hooks)
    assert hooks.points == ["after-finish", "after-commit"]


def test_after_finish_sees_the_settled_row_inside_the_transaction(
    queue: Queue,
) -> None:
    ticket = leased(queue)
    seen = []
    hooks = HookLog().on(
        "after-finish", lambda: seen.append((queue.in_transaction(), queue.job("a")))
    )
    queue.finish(ticket, "retry", 1, 5, fault=hooks)
    assert seen[0][0] is (queue.name != "model"), "the model has no connection"
    assert seen[0][1]["status"] == "pending"


@pytest.mark.parametrize("outcome", ["ok", "retry", "permanent"])
def test_an_error_at_after_finish_rolls_everything_back(queue: Queue, outcome: str) -> None:
    ticket = leased(queue)
    before = queue.rows()
    error = RuntimeError("crash before commit")
    with pytest.raises(RuntimeError) as raised:
        queue.finish(ticket, outcome, 1, fault=HookLog("after-finish", error))
    assert raised.value is error
    assert queue.rows() == before
    assert not queue.in_transaction()
    assert queue.finish(ticket, outcome, 2) is not False, "the ticket is still live"


def test_an_error_at_after_commit_keeps_the_result(queue: Queue) -> None:
    ticket = leased(queue)
    error = RuntimeError("crash after commit")
    with pytest.raises(RuntimeError) as raised:
        queue.finish(ticket, "ok", 1, fault=HookLog("after-commit", error))
    assert raised.value is error
    assert queue.job("a")["status"] == "done"


# --- validation ----------------------------------------------------------------------

TICKET = {
    "id": "a",
    "qty": 2,
    "owner": "courier-1",
    "token": 1,
    "attempt": 1,
    "lease_until": 100,
}


def tickets_with(key: str, values: list[object]) -> list[object]:
    return [{**TICKET, key: value} for value in values]


BAD_TICKETS: list[object] = [
    None,
    list(TICKET.items()),
    DictSubclass(TICKET),
    {k: v for k, v in TICKET.items() if k != "lease_until"},
    {**TICKET, "deadline": 1000},
    *tickets_with("id", BAD_IDENTIFIERS),
    *tickets_with("owner", BAD_IDENTIFIERS),
    *tickets_with("qty", bad_ints(1, 1000)),
    *tickets_with("token", bad_ints(1, 10**15)),
    *tickets_with("attempt", bad_ints(1, 16)),
    *tickets_with("lease_until", bad_ints(1, 10**15)),
]

VALID: dict[str, object] = {"ticket": TICKET, "outcome": "ok", "now_ms": 1, "delay_ms": 0}

INVALID_CASES = (
    [("ticket", v) for v in BAD_TICKETS]
    + [("outcome", v) for v in ["OK", "done", "", "ok ", StrSubclass("ok"), None, True]]
    + [("now_ms", v) for v in bad_ints(0, MAX_NOW)]
    + [("delay_ms", v) for v in bad_ints(0, 60000)]
    + [("fault", v) for v in ["after-finish", 0, object()]]
)


@pytest.mark.parametrize(("argument", "values"), by_argument(INVALID_CASES))
def test_rejects_malformed_argument_before_any_change(
    queue: Queue, argument: str, values: list[object]
) -> None:
    assert leased(queue) == TICKET
    before = queue.rows()
    hooks = HookLog()
    for value in values:
        arguments = {**VALID, "fault": hooks, argument: value}
        snapshot = copy.deepcopy(arguments["ticket"])
        with pytest.raises(ValueError, match=argument):
            queue.finish(**arguments)
        assert queue.rows() == before, value
        assert hooks.points == []
        assert arguments["ticket"] == snapshot, value
        assert not queue.in_transaction()


def test_accepts_ticket_edges_even_though_no_job_matches(queue: Queue) -> None:
    edges = {**TICKET, "id": "z" * 64, "qty": 1000, "token": 10**15, "lease_until": 10**15}
    assert queue.finish({**edges, "attempt": 16}, "ok", MAX_NOW, 60000) is False


def test_does_not_mutate_the_ticket(queue: Queue) -> None:
    ticket = leased(queue)
    snapshot = dict(ticket)
    queue.finish(ticket, "retry", 1, 10)
    assert ticket == snapshot


def test_accepts_the_lowest_token_and_lease_until(queue: Queue) -> None:
    lowest = {**TICKET, "qty": 1, "token": 1, "attempt": 1, "lease_until": 1}
    assert queue.finish(lowest, "ok", 0, 0) is False


def test_a_late_result_never_removes_the_current_lease(queue: Queue) -> None:
    old = leased(queue, ttl=10000, lease=100)
    assert queue.claim("courier-2", 100, 100) is not None
    before = queue.rows()
    for outcome in ("ok", "retry", "permanent"):
        assert queue.finish(old, outcome, 150) is False
    assert queue.rows() == before
