"""Every malformed argument raises ValueError before anything changes (CONTRACT.md, Decisions)."""

from __future__ import annotations

import copy
import inspect
import math
from collections.abc import Callable
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest

from model import ARGUMENT_RULES, QueueModel, retry_delay
from tests.model.scenario import dead_job, queue_with, take
from tests.support import (
    BAD_IDENTIFIERS,
    GOOD_IDENTIFIERS,
    MAX_NOW,
    DictSubclass,
    HookLog,
    IntSubclass,
    RecordingSend,
    ScriptedClock,
    StrSubclass,
    bad_ints,
)

MAX_TOKEN = 10**15


class FloatSubclass(float):
    """A float that is not an exact float: the contract rejects it as a jitter."""


NOT_CALLABLE: list[object] = [1, "after-claim", True, object()]
BAD_JITTERS: list[object] = [
    -0.1,
    1.0000001,
    math.nan,
    math.inf,
    -math.inf,
    2,
    True,
    False,
    "0.5",
    None,
    Fraction(1, 2),
    Decimal("0.5"),
    IntSubclass(1),
    FloatSubclass(0.5),
]
EVENT = {"id": "a", "qty": 2}
BAD_EVENTS: list[object] = [
    None,
    [("id", "a"), ("qty", 2)],
    DictSubclass(EVENT),
    {"id": "a"},
    {"qty": 2},
    {**EVENT, "extra": 1},
    *({**EVENT, "id": value} for value in BAD_IDENTIFIERS),
    *({**EVENT, "qty": value} for value in bad_ints(1, 1000)),
]
TICKET = {"id": "a", "qty": 2, "owner": "courier-1", "token": 1, "attempt": 1, "lease_until": 100}
BAD_TICKETS: list[object] = [
    None,
    DictSubclass(TICKET),
    {key: value for key, value in TICKET.items() if key != "lease_until"},
    {**TICKET, "status": "leased"},
    *({**TICKET, "id": value} for value in BAD_IDENTIFIERS),
    *({**TICKET, "owner": value} for value in BAD_IDENTIFIERS),
    *({**TICKET, "qty": value} for value in bad_ints(1, 1000)),
    *({**TICKET, "token": value} for value in bad_ints(1, MAX_TOKEN)),
    *({**TICKET, "attempt": value} for value in bad_ints(1, 16)),
    *({**TICKET, "lease_until": value} for value in bad_ints(1, MAX_TOKEN)),
]
BAD_OUTCOMES: list[object] = ["OK", "done", "stale", "", " ok", StrSubclass("ok"), None, b"ok"]


def enqueue_call() -> tuple[QueueModel, Callable[..., object], dict[str, Any]]:
    return (
        QueueModel(),
        QueueModel.enqueue,
        {
            "event": dict(EVENT),
            "now_ms": 0,
            "ttl_ms": 100,
            "max_attempts": 3,
        },
    )


def claim_call() -> tuple[QueueModel, Callable[..., object], dict[str, Any]]:
    return (
        queue_with("a"),
        QueueModel.claim,
        {
            "owner": "courier-1",
            "now_ms": 0,
            "lease_ms": 100,
            "fault": HookLog(),
        },
    )


def finish_call() -> tuple[QueueModel, Callable[..., object], dict[str, Any]]:
    queue = queue_with("a")
    return (
        queue,
        QueueModel.finish,
        {
            "ticket": take(queue, 0, lease=100),
            "outcome": "ok",
            "now_ms": 10,
            "delay_ms": 0,
            "fault": HookLog(),
        },
    )


def redrive_call() -> tuple[QueueModel, Callable[..., object], dict[str, Any]]:
    queue, _ = dead_job("a")
    return (
        queue,
        QueueModel.redrive,
        {
            "job_id": "a",
            "now_ms": 20,
            "ttl_ms": 100,
            "note": "n",
            "fault": HookLog(),
        },
    )


def run_once_call() -> tuple[QueueModel, Callable[..., object], dict[str, Any]]:
    return (
        queue_with("a"),
        QueueModel.run_once,
        {
            "owner": "courier-1",
            "clock": ScriptedClock(0, 10),
            "send": RecordingSend(),
            "jitter": 0.5,
            "lease_ms": 100,
        },
    )


CALLS = {
    "enqueue": enqueue_call,
    "claim": claim_call,
    "finish": finish_call,
    "redrive": redrive_call,
    "run_once": run_once_call,
}
BAD_VALUES: dict[str, list[object]] = {
    "event": BAD_EVENTS,
    "now_ms": bad_ints(0, MAX_NOW),
    "ttl_ms": bad_ints(1, 60000),
    "max_attempts": bad_ints(1, 16),
    "owner": BAD_IDENTIFIERS,
    "lease_ms": bad_ints(1, 60000),
    "fault": NOT_CALLABLE,
    "ticket": BAD_TICKETS,
    "outcome": BAD_OUTCOMES,
    "delay_ms": bad_ints(0, 60000),
    "job_id": BAD_IDENTIFIERS,
    "note": BAD_IDENTIFIERS,
    "clock": [None, *NOT_CALLABLE],
    "send": [None, *NOT_CALLABLE],
    "jitter": BAD_JITTERS,
}
# A bare object() is named by its type: its repr holds an address, and the ids must be
# the same in every process that collects the suite.
CASES = [
    pytest.param(
        operation,
        argument,
        value,
        id=f"{operation}-{argument}-{'object()' if type(value) is object else repr(value):.30}",
    )
    for operation, setup in CALLS.items()
    for argument in setup()[2]
    for value in BAD_VALUES[argument]
]


@pytest.mark.parametrize(("operation", "argument", "value"), CASES)
def test_a_malformed_argument_raises_value_error_and_changes_nothing(
    operation: str, argument: str, value: object
) -> None:
    queue, method, arguments = CALLS[operation]()
    arguments[argument] = value
    before, given = queue.rows(), copy.deepcopy(arguments)
    # The message names the argument, or the field of a dict argument: 'event['id']'.
    with pytest.raises(ValueError, match=rf"^'{argument}(\[|')"):
        method(queue, **arguments)
    assert queue.rows() == before
    for name, kept in arguments.items():
        if isinstance(kept, HookLog):
            assert kept.points == [], "no hook on a malformed call"
        elif isinstance(kept, ScriptedClock):
            assert kept.calls == 0, "the clock is not read on a malformed call"
        elif isinstance(kept, RecordingSend):
            assert kept.received == []
        elif name in ("event", "ticket") and type(kept) is dict:
            assert kept == given[name], "inputs are never mutated"


@pytest.mark.parametrize(
    ("operation", "argument", "value"),
    [
        ("enqueue", "now_ms", MAX_NOW),
        ("enqueue", "ttl_ms", 60000),
        ("enqueue", "max_attempts", 16),
        ("enqueue", "max_attempts", 1),
        *(("enqueue", "event", {"id": name, "qty": 1000}) for name in GOOD_IDENTIFIERS),
        ("claim", "lease_ms", 60000),
        ("claim", "fault", None),
        ("claim", "fault", print),
        ("finish", "delay_ms", 60000),
        ("finish", "fault", None),
        ("redrive", "now_ms", MAX_NOW),
        ("redrive", "note", "a" * 64),
        ("run_once", "jitter", 0),
        ("run_once", "jitter", 1),
        ("run_once", "jitter", 0.0),
        ("run_once", "jitter", 1.0),
    ],
)
def test_a_value_at_the_edge_of_its_range_is_accepted(
    operation: str, argument: str, value: object
) -> None:
    queue, method, arguments = CALLS[operation]()
    arguments[argument] = value
    method(queue, **arguments)


@pytest.mark.parametrize(
    "ticket",
    [{**TICKET, "token": MAX_TOKEN}, {**TICKET, "lease_until": MAX_TOKEN}],
    ids=["token", "lease_until"],
)
def test_a_ticket_at_the_edge_of_its_ranges_is_well_formed_but_stale(
    ticket: dict[str, Any],
) -> None:
    assert queue_with("a").finish(ticket, "ok", 0) is False


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        *(("attempt", value) for value in bad_ints(1, 16)),
        *(("base_ms", value) for value in bad_ints(1, 60000)),
        *(("cap_ms", value) for value in bad_ints(100, 60000)),
        *(("jitter", value) for value in BAD_JITTERS),
    ],
)
def test_retry_delay_rejects_a_malformed_argument(argument: str, value: object) -> None:
    arguments: dict[str, Any] = {"attempt": 1, "base_ms": 100, "cap_ms": 1000, "jitter": 0.5}
    arguments[argument] = value
    # The message names the argument, or the field of a dict argument: 'event['id']'.
    with pytest.raises(ValueError, match=rf"^'{argument}(\[|')"):
        retry_delay(**arguments)


def test_every_argument_of_every_operation_has_a_rule() -> None:
    operations = [retry_delay, *(getattr(QueueModel, name) for name in CALLS)]
    for operation in operations:
        for name in inspect.signature(operation).parameters:
            assert name == "self" or name in ARGUMENT_RULES, (operation.__name__, name)
