"""The batch operations (docs/batches.md): the single calls one after another, in one write.

What only the model shows: an interruption between two items, and each batch
argument's rule (``model.rules``). The examples of what the batches do run on
every backend in ``tests/contract/test_batches.py``.

``enqueue_many(events, now_ms, ttl_ms, max_attempts=3)``, ``claim_many(owner, now_ms,
limit, lease_ms=1000, fault=None)`` and ``finish_many(results, now_ms, fault=None)``.
"""

from __future__ import annotations

import copy
import inspect
from typing import Any

import pytest

from model import ARGUMENT_RULES, QueueModel
from tests.model.scenario import OWNER, job, queue_with, take
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
