"""The batch operations (docs/batches.md): the single calls one after another, in one write.

``enqueue_many(events, now_ms, ttl_ms, max_attempts=3)``, ``claim_many(owner, now_ms,
limit, lease_ms=1000, fault=None)`` and ``finish_many(results, now_ms, fault=None)``.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import pytest

from model import ARGUMENT_RULES, Conflict, QueueModel
from tests.model.scenario import OTHER, OWNER, job, queue_with, take
from tests.support import DictSubclass, HookLog

TICKET_KEYS = "['attempt', 'id', 'lease_until', 'owner', 'qty', 'token']"


def item(ticket: dict[str, Any], outcome: str = "ok", delay_ms: int = 0) -> dict[str, Any]:
    """One item of ``finish_many``'s list."""
    return {"ticket": ticket, "outcome": outcome, "delay_ms": delay_ms}


def leased(*job_ids: str, lease: int = 100) -> tuple[QueueModel, list[dict[str, Any]]]:
    """A queue whose jobs ``job_ids`` (ttl 1000) are all leased at 0, and their tickets."""
    queue = queue_with(*job_ids, ttl=1000)
    return queue, [take(queue, 0, lease=lease) for _ in job_ids]


def same_message(got: object, expected: Exception) -> bool:
    """Exceptions are not equal by value: compare their type and message."""
    return type(got) is type(expected) and str(got) == str(expected)


# --- enqueue_many ---------------------------------------------------------------


def test_enqueue_many_is_enqueue_for_each_event_in_order() -> None:
    events = [{"id": "a", "qty": 2}, {"id": "b", "qty": 1}, {"id": "a", "qty": 2}]
    batch, single = queue_with("z"), queue_with("z")
    assert batch.enqueue_many(events, 10, 500, 4) == [True, True, False]
    assert [single.enqueue(event, 10, 500, 4) for event in events] == [True, True, False]
    assert batch.rows() == single.rows()


def test_a_duplicate_id_inside_one_batch_is_an_intake_retry_of_the_first() -> None:
    queue = QueueModel()
    events = [{"id": "a", "qty": 2}, {"id": "a", "qty": 2}]
    assert queue.enqueue_many(events, 0, 100) == [True, False]
    assert queue.rows()["jobs"] == [(1, "a", 2, "pending", 0, 3, 0, 0, 100, None, None, None)]


def test_an_intake_retry_in_a_batch_keeps_the_whole_existing_row() -> None:
    queue = queue_with("a", now=0, ttl=1000, budget=3)
    before = queue.rows()
    assert queue.enqueue_many([{"id": "a", "qty": 2}], 50, 9, 1) == [False]
    assert queue.rows() == before


def test_a_conflicting_qty_is_returned_as_a_conflict_and_the_others_still_apply() -> None:
    queue = queue_with("a")  # qty 2
    events = [{"id": "b", "qty": 1}, {"id": "a", "qty": 3}, {"id": "b", "qty": 5}]
    results = queue.enqueue_many([*events, {"id": "c", "qty": 1}], 0, 100)
    assert results[0] is True
    assert same_message(results[1], Conflict("job 'a' exists with qty 2, not 3"))
    assert same_message(results[2], Conflict("job 'b' exists with qty 1, not 5"))
    assert results[3] is True
    assert [(row[1], row[2]) for row in queue.rows()["jobs"]] == [("a", 2), ("b", 1), ("c", 1)]


def test_the_returned_conflict_has_the_message_enqueue_raises() -> None:
    queue = queue_with("a")
    with pytest.raises(Conflict) as raised:
        queue.enqueue({"id": "a", "qty": 3}, 0, 100)
    [returned] = queue.enqueue_many([{"id": "a", "qty": 3}], 0, 100)
    assert same_message(returned, raised.value)


def test_seq_numbers_in_a_batch_follow_the_inserts_only() -> None:
    queue = queue_with("a")
    queue.enqueue_many([{"id": "a", "qty": 9}, {"id": "b", "qty": 1}, {"id": "b", "qty": 1}], 0, 9)
    queue.enqueue({"id": "c", "qty": 1}, 0, 100)
    assert [row[:2] for row in queue.rows()["jobs"]] == [(1, "a"), (2, "b"), (3, "c")]


def test_an_interruption_inside_a_batch_leaves_no_half_batch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """One write: even an interrupt between two events takes back the first."""
    queue = queue_with("a")
    before = queue.rows()
    admit = QueueModel._admit
    calls = 0

    def admit_then_interrupt(self: QueueModel, *args: Any) -> bool:
        nonlocal calls
        calls += 1
        if calls == 2:
            raise KeyboardInterrupt
        return admit(self, *args)

    monkeypatch.setattr(QueueModel, "_admit", admit_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        queue.enqueue_many([{"id": "b", "qty": 1}, {"id": "c", "qty": 1}], 0, 100)
    monkeypatch.undo()
    assert queue.rows() == before
    assert queue.enqueue_many([{"id": "c", "qty": 1}], 0, 100) == [True]  # seq 2 again
    assert [row[:2] for row in queue.rows()["jobs"]] == [(1, "a"), (2, "c")]


def test_an_empty_list_of_events_returns_an_empty_list_and_changes_nothing() -> None:
    queue = queue_with("a")
    before = queue.rows()
    assert queue.enqueue_many([], 0, 100) == []
    assert queue.rows() == before


# --- claim_many -----------------------------------------------------------------


def test_claim_many_is_claim_limit_times_stopping_at_the_first_none() -> None:
    batch, single = queue_with("a", "b", "c"), queue_with("a", "b", "c")
    tickets = batch.claim_many(OWNER, 10, 2, 100)
    assert tickets == [single.claim(OWNER, 10, 100), single.claim(OWNER, 10, 100)]
    assert [ticket["id"] for ticket in tickets] == ["a", "b"]
    assert batch.rows() == single.rows()


def test_claim_many_stops_when_nothing_more_is_claimable() -> None:
    queue = queue_with("a", "b")
    tickets = queue.claim_many(OWNER, 0, 5)
    assert [(ticket["id"], ticket["token"]) for ticket in tickets] == [("a", 1), ("b", 1)]
    assert queue.claim(OTHER, 0) is None


def test_claim_many_takes_each_job_once_even_an_expired_lease_it_reclaims() -> None:
    queue = queue_with("a", "b", ttl=10000)
    take(queue, 0, lease=100)  # "a" leased until 100
    tickets = queue.claim_many(OTHER, 100, 5, 50)
    assert [(ticket["id"], ticket["attempt"], ticket["lease_until"]) for ticket in tickets] == [
        ("a", 2, 150),
        ("b", 1, 150),
    ]


def test_claim_many_tickets_are_the_dicts_claim_returns() -> None:
    queue = queue_with("a", now=10, ttl=1000)
    assert queue.claim_many(OWNER, 20, 1, 100) == [
        {"id": "a", "qty": 2, "owner": OWNER, "token": 1, "attempt": 1, "lease_until": 120}
    ]


def test_claim_many_commits_the_quarantine_even_when_nothing_is_claimable() -> None:
    queue = queue_with("late", ttl=100)
    hooks = HookLog(fail_at="after-commit")
    assert queue.claim_many(OWNER, 100, 3, fault=hooks) == []
    assert hooks.points == []
    assert (job(queue, "late")["status"], job(queue, "late")["reason"]) == ("dead", "deadline")


def test_claim_many_calls_each_hook_once_after_the_last_lease() -> None:
    queue = queue_with("a", "b", "c")
    seen: list[list[str]] = []
    hooks = HookLog().on(
        "after-claim", lambda: seen.append([row[3] for row in queue.rows()["jobs"]])
    )
    assert len(queue.claim_many(OWNER, 0, 3, fault=hooks)) == 3
    assert hooks.points == ["after-claim", "after-commit"]
    assert seen == [["leased", "leased", "leased"]]


@pytest.mark.parametrize("error", [RuntimeError("crash"), KeyboardInterrupt()])
def test_a_fault_before_commit_rolls_back_every_lease_and_the_quarantine(
    error: BaseException,
) -> None:
    queue = queue_with("a", "b", ttl=10000)
    queue.enqueue({"id": "late", "qty": 1}, 0, 100)
    before = queue.rows()
    with pytest.raises(type(error)) as raised:
        queue.claim_many(OWNER, 100, 5, fault=HookLog(fail_at="after-claim", error=error))
    assert raised.value is error
    assert queue.rows() == before
    assert [ticket["id"] for ticket in queue.claim_many(OWNER, 100, 5)] == ["a", "b"]


def test_a_fault_after_commit_keeps_every_lease() -> None:
    queue, expected = queue_with("a", "b"), queue_with("a", "b")
    expected.claim_many(OWNER, 0, 2)
    with pytest.raises(RuntimeError):
        queue.claim_many(OWNER, 0, 2, fault=HookLog(fail_at="after-commit"))
    assert queue.rows() == expected.rows()


# --- finish_many ----------------------------------------------------------------


def test_finish_many_is_finish_for_each_item_in_order() -> None:
    batch, batch_tickets = leased("a", "b", "c")
    single, single_tickets = leased("a", "b", "c")
    outcomes = [("ok", 0), ("retry", 30), ("permanent", 0)]
    statuses = batch.finish_many(
        [item(ticket, *outcome) for ticket, outcome in zip(batch_tickets, outcomes, strict=True)],
        50,
    )
    assert statuses == ["done", "pending", "dead"]
    assert [
        single.finish(ticket, outcome, 50, delay)
        for ticket, (outcome, delay) in zip(single_tickets, outcomes, strict=True)
    ] == statuses
    assert batch.rows() == single.rows()


def test_the_same_ticket_twice_in_one_batch_is_stale_the_second_time() -> None:
    queue, [ticket] = leased("a")
    assert queue.finish_many([item(ticket, "retry", 10), item(ticket, "ok")], 50) == [
        "pending",
        False,
    ]
    assert (job(queue, "a")["status"], job(queue, "a")["available_at"]) == ("pending", 60)


def test_a_stale_ticket_in_a_batch_is_false_and_the_others_still_apply() -> None:
    queue, [a, b] = leased("a", "b")
    stale = {**a, "token": a["token"] + 1}
    assert queue.finish_many([item(stale), item(b, "permanent")], 50) == [False, "dead"]
    assert job(queue, "a")["status"] == "leased"
    assert (job(queue, "b")["status"], job(queue, "b")["reason"]) == ("dead", "permanent")


def test_every_ticket_is_judged_at_the_batch_now_ms() -> None:
    queue = queue_with("a", "b", ttl=1000)
    short, long = take(queue, 0, lease=50), take(queue, 0, lease=100)
    assert queue.finish_many([item(short), item(long)], 50) == [False, "done"]


def test_the_retry_outcomes_of_a_batch_follow_the_single_finish() -> None:
    queue = queue_with("a", "b", "c", ttl=1000, budget=1)
    queue.enqueue({"id": "d", "qty": 2}, 0, 1000, 3)
    queue.enqueue({"id": "e", "qty": 2}, 0, 1000, 3)
    tickets = queue.claim_many(OWNER, 0, 5, 1000)
    statuses = queue.finish_many(
        [
            item(tickets[0], "retry", 0),  # budget 1 spent: exhausted
            item(tickets[3], "retry", 500),  # due exactly at the deadline
            item(tickets[4], "retry", 499),  # due one millisecond before it
        ],
        500,
    )
    assert statuses == ["dead", "dead", "pending"]
    assert [job(queue, job_id)["reason"] for job_id in "ade"] == ["exhausted", "deadline", "retry"]


def test_finish_many_calls_each_hook_once_after_the_last_update() -> None:
    queue, tickets = leased("a", "b")
    seen: list[list[str]] = []
    hooks = HookLog().on(
        "after-finish", lambda: seen.append([row[3] for row in queue.rows()["jobs"]])
    )
    assert queue.finish_many([item(ticket) for ticket in tickets], 50, hooks) == ["done", "done"]
    assert hooks.points == ["after-finish", "after-commit"]
    assert seen == [["done", "done"]]


def test_a_batch_of_stale_tickets_calls_no_hook() -> None:
    queue, [ticket] = leased("a")
    hooks = HookLog(fail_at="after-finish")
    assert queue.finish_many([item(ticket), item(ticket)], 100, hooks) == [False, False]
    assert hooks.points == []


@pytest.mark.parametrize("error", [RuntimeError("crash"), KeyboardInterrupt()])
def test_a_fault_before_commit_rolls_back_the_whole_batch(error: BaseException) -> None:
    queue, tickets = leased("a", "b")
    before = queue.rows()
    with pytest.raises(type(error)):
        queue.finish_many(
            [item(ticket) for ticket in tickets], 50, HookLog(fail_at="after-finish", error=error)
        )
    assert queue.rows() == before
    assert queue.finish_many([item(ticket) for ticket in tickets], 50) == ["done", "done"]


def test_a_fault_after_commit_keeps_the_whole_batch() -> None:
    queue, tickets = leased("a", "b")
    with pytest.raises(RuntimeError):
        queue.finish_many([item(ticket) for ticket in tickets], 50, HookLog(fail_at="after-commit"))
    assert [row[3] for row in queue.rows()["jobs"]] == ["done", "done"]


def test_an_empty_list_of_results_returns_an_empty_list_and_calls_no_hook() -> None:
    queue, _ = leased("a")
    before, hooks = queue.rows(), HookLog()
    assert queue.finish_many([], 50, hooks) == []
    assert queue.rows() == before
    assert hooks.points == []


# --- arguments ------------------------------------------------------------------

EVENT = {"id": "a", "qty": 2}
TICKET = {"id": "a", "qty": 2, "owner": OWNER, "token": 1, "attempt": 1, "lease_until": 100}


class ListSubclass(list):  # type: ignore[type-arg]
    """A list that is not an exact list: a batch must be an exact list."""


def expected(name: str, rule: str, value: object) -> str:
    return f"'{name}' must be {rule} (got {value!r} that is a {type(value).__name__!r})"


@pytest.mark.parametrize(
    ("events", "name", "rule", "value"),
    [
        ((EVENT,), "events", "a list of 0..1000 items", (EVENT,)),
        (ListSubclass([EVENT]), "events", "a list of 0..1000 items", ListSubclass([EVENT])),
        ([EVENT] * 1001, "events", "a list of 0..1000 items", [EVENT] * 1001),
        (None, "events", "a list of 0..1000 items", None),
        (
            [EVENT, {"id": "b"}],
            "events[1]",
            "a dict with exactly the keys ['id', 'qty']",
            {"id": "b"},
        ),
        (
            [DictSubclass(EVENT)],
            "events[0]",
            "a dict with exactly the keys ['id', 'qty']",
            DictSubclass(EVENT),
        ),
        (
            [EVENT, EVENT, EVENT, {"id": "a b", "qty": 2}],
            "events[3]['id']",
            "a str of 1-64 ASCII letters, digits, '_' or '-'",
            "a b",
        ),
        ([{"id": "b", "qty": True}], "events[0]['qty']", "an int in 1..1000", True),
    ],
)
def test_enqueue_many_names_the_malformed_list_item_or_field(
    events: object, name: str, rule: str, value: object
) -> None:
    queue = queue_with("z")
    before = queue.rows()
    with pytest.raises(ValueError) as raised:
        queue.enqueue_many(events, 0, 100)  # type: ignore[arg-type]
    assert str(raised.value) == expected(name, rule, value)
    assert queue.rows() == before


@pytest.mark.parametrize(
    ("limit", "value"), [(0, 0), (1001, 1001), (True, True), (1.0, 1.0), (None, None)]
)
def test_claim_many_rejects_a_limit_outside_1_to_1000(limit: object, value: object) -> None:
    queue = queue_with("a")
    before = queue.rows()
    with pytest.raises(ValueError) as raised:
        queue.claim_many(OWNER, 0, limit)  # type: ignore[arg-type]
    assert str(raised.value) == expected("limit", "an int in 1..1000", value)
    assert queue.rows() == before


@pytest.mark.parametrize(
    ("results", "name", "rule", "value"),
    [
        ((item(TICKET),), "results", "a list of 0..1000 items", (item(TICKET),)),
        (
            [item(TICKET), {"ticket": TICKET, "outcome": "ok"}],
            "results[1]",
            "a dict with exactly the keys ['delay_ms', 'outcome', 'ticket']",
            {"ticket": TICKET, "outcome": "ok"},
        ),
        (
            [item({**TICKET, "status": "leased"})],
            "results[0]['ticket']",
            f"a dict with exactly the keys {TICKET_KEYS}",
            {**TICKET, "status": "leased"},
        ),
        (
            [item(TICKET), item(TICKET), item(TICKET), item({**TICKET, "token": 0})],
            "results[3]['ticket']['token']",
            "an int in 1..1000000000000000",
            0,
        ),
        (
            [item(TICKET, "OK")],
            "results[0]['outcome']",
            "one of ('ok', 'retry', 'permanent')",
            "OK",
        ),
        ([item(TICKET, "retry", 60001)], "results[0]['delay_ms']", "an int in 0..60000", 60001),
    ],
)
def test_finish_many_names_the_malformed_list_item_or_field(
    results: object, name: str, rule: str, value: object
) -> None:
    queue, _ = leased("a")
    before = queue.rows()
    with pytest.raises(ValueError) as raised:
        queue.finish_many(results, 50)  # type: ignore[arg-type]
    assert str(raised.value) == expected(name, rule, value)
    assert queue.rows() == before


def subject(error: pytest.ExceptionInfo[ValueError]) -> str:
    """The name an error message starts with: ``'results[0]['qty']' must be ...`` -> its name."""
    return str(error.value).partition(" must be ")[0].strip("'")


def test_a_list_is_checked_item_by_item_each_item_fully_before_the_next() -> None:
    queue = QueueModel()
    events: list[dict[str, Any]] = [EVENT, {"id": "", "qty": 0}, {"id": 1}]
    with pytest.raises(ValueError) as raised:
        queue.enqueue_many(events, -1, 0)
    assert subject(raised) == "events[1]['id']"


def test_a_ticket_is_checked_field_by_field_in_finish_order() -> None:
    """id, owner, qty, token, attempt, lease_until; then the item's outcome, then delay_ms."""
    queue = QueueModel()
    bad = {"id": "", "owner": "", "qty": 0, "token": 0, "attempt": 0, "lease_until": 0}
    names = []
    for field in ["id", "owner", "qty", "token", "attempt", "lease_until"]:
        with pytest.raises(ValueError) as raised:
            queue.finish_many([item(bad, "OK", -1)], 0)
        names.append(subject(raised))
        bad[field] = TICKET[field]
    for last in [item(bad, "OK", -1), item(bad, "ok", -1)]:
        with pytest.raises(ValueError) as raised:
            queue.finish_many([last], 0)
        names.append(subject(raised))
    prefix = "results[0]['ticket']"
    assert names == [
        f"{prefix}['id']",
        f"{prefix}['owner']",
        f"{prefix}['qty']",
        f"{prefix}['token']",
        f"{prefix}['attempt']",
        f"{prefix}['lease_until']",
        "results[0]['outcome']",
        "results[0]['delay_ms']",
    ]


@pytest.mark.parametrize(
    ("call", "name"),
    [
        (lambda q: q.enqueue_many([{"id": "a", "qty": 0}], -1, 0, 0), "events[0]['qty']"),
        (lambda q: q.enqueue_many([], -1, 0, 0), "now_ms"),
        (lambda q: q.enqueue_many([], 0, 0, 0), "ttl_ms"),
        (lambda q: q.enqueue_many([], 0, 1, 0), "max_attempts"),
        (lambda q: q.claim_many("", -1, 0, 0, 1), "owner"),
        (lambda q: q.claim_many("c1", -1, 0, 0, 1), "now_ms"),
        (lambda q: q.claim_many("c1", 0, 0, 0, 1), "limit"),
        (lambda q: q.claim_many("c1", 0, 1, 0, 1), "lease_ms"),
        (lambda q: q.claim_many("c1", 0, 1, 1, 1), "fault"),
        (lambda q: q.finish_many([item({})], -1, 1), "results[0]['ticket']"),
        (lambda q: q.finish_many([], -1, 1), "now_ms"),
        (lambda q: q.finish_many([], 0, 1), "fault"),
    ],
)
def test_arguments_are_checked_in_signature_order(call: Any, name: str) -> None:
    with pytest.raises(ValueError) as raised:
        call(QueueModel())
    assert subject(raised) == name


def test_the_whole_batch_is_checked_before_anything_changes() -> None:
    queue, [ticket] = leased("a")
    before = queue.rows()
    with pytest.raises(ValueError):
        queue.enqueue_many([{"id": "b", "qty": 1}, {"id": "c", "qty": 1}, {"id": "d"}], 0, 100)
    with pytest.raises(ValueError):
        queue.finish_many([item(ticket), item(ticket, "done")], 50, HookLog())
    assert queue.rows() == before


def test_a_thousand_items_is_the_largest_batch() -> None:
    queue = QueueModel()
    assert queue.enqueue_many([EVENT] * 1000, 0, 100) == [True] + [False] * 999
    [ticket] = queue.claim_many(OWNER, 0, 1000)
    assert queue.finish_many([item(ticket)] * 1000, 0) == ["done"] + [False] * 999


def test_the_inputs_are_never_mutated_nor_kept() -> None:
    queue = QueueModel()
    events = [{"id": "a", "qty": 2}, {"id": "b", "qty": 2}, {"id": "a", "qty": 3}]
    given = copy.deepcopy(events)
    queue.enqueue_many(events, 0, 1000)
    assert events == given
    tickets = queue.claim_many(OWNER, 0, 2, 100)
    results = [item(tickets[0], "retry", 5), item(tickets[1]), item(tickets[1])]
    given = copy.deepcopy(results)
    queue.finish_many(results, 10)
    assert results == given
    tickets[1]["token"] = 99  # a ticket handed out is the caller's
    assert job(queue, "b")["token"] == 1


def test_every_argument_of_every_batch_operation_has_a_rule() -> None:
    for operation in (QueueModel.enqueue_many, QueueModel.claim_many, QueueModel.finish_many):
        for name in inspect.signature(operation).parameters:
            assert name == "self" or name in ARGUMENT_RULES, (operation.__name__, name)
