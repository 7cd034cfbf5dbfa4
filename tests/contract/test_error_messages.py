"""Clear errors for bad input, the same on every implementation: each message names the
argument, what was expected and what came (with its type), so an operator can fix
the call without reading code."""

from __future__ import annotations

from collections.abc import Callable

import pytest

import worker
from tests.contract.implementations import Bound, Queue
from tests.support import RecordingSend, ScriptedClock

TICKET = {"id": "a", "qty": 1, "owner": "c1", "token": 1, "attempt": 1, "lease_until": 100}
IDENTIFIER = "a str of 1-64 ASCII letters, digits, '_' or '-'"


def messages(queue: Queue) -> list[tuple[Callable[[], object], str]]:
    return [
        (
            lambda: queue.enqueue({"id": "a"}, 0, 10),
            "'event' must be a dict with exactly the keys ['id', 'qty'] "
            "(got {'id': 'a'} that is a 'dict')",
        ),
        (
            lambda: queue.enqueue({"id": "a b", "qty": 1}, 0, 10),
            f"'event['id']' must be {IDENTIFIER} (got 'a b' that is a 'str')",
        ),
        (
            lambda: queue.enqueue({"id": "a", "qty": True}, 0, 10),
            "'event['qty']' must be an int in 1..1000 (got True that is a 'bool')",
        ),
        (
            lambda: queue.enqueue({"id": "a", "qty": 1}, -1, 10),
            "'now_ms' must be an int in 0..999999999940000 (got -1 that is a 'int')",
        ),
        (
            lambda: queue.enqueue({"id": "a", "qty": 1}, 0, 0),
            "'ttl_ms' must be an int in 1..60000 (got 0 that is a 'int')",
        ),
        (
            lambda: queue.enqueue({"id": "a", "qty": 1}, 0, 10, 17),
            "'max_attempts' must be an int in 1..16 (got 17 that is a 'int')",
        ),
        (
            lambda: queue.claim("", 0),
            f"'owner' must be {IDENTIFIER} (got '' that is a 'str')",
        ),
        (
            lambda: queue.claim("c1", 0, 60001),
            "'lease_ms' must be an int in 1..60000 (got 60001 that is a 'int')",
        ),
        (
            lambda: queue.claim("c1", 0, fault="after-claim"),
            "'fault' must be None or a callable (got 'after-claim' that is a 'str')",
        ),
        (
            lambda: queue.finish({**TICKET, "token": 0}, "ok", 1),
            "'ticket['token']' must be an int in 1..1000000000000000 (got 0 that is a 'int')",
        ),
        (
            lambda: queue.finish(dict(TICKET), "done", 1),
            "'outcome' must be one of ('ok', 'retry', 'permanent') (got 'done' that is a 'str')",
        ),
        (
            lambda: queue.redrive("a", 0, 10, "with space"),
            f"'note' must be {IDENTIFIER} (got 'with space' that is a 'str')",
        ),
        (
            lambda: queue.redrive("nobody", 0, 10, "ops"),
            "no job 'nobody' to redrive",
        ),
        (
            lambda: queue.module.retry_delay(1, 1, 1, float("nan")),
            "'jitter' must be a finite int or float in 0..1 (got nan that is a 'float')",
        ),
        (
            lambda: queue.module.retry_delay(1, 100, 99, 1),
            "'cap_ms' must be an int in 100..60000 (got 99 that is a 'int')",
        ),
        (
            lambda: queue.run_once("c1", 10, RecordingSend(), 1),
            "'clock' must be a callable (got 10 that is a 'int')",
        ),
    ]


def test_each_malformed_argument_gets_a_message_that_names_it(queue: Queue) -> None:
    for call, expected in messages(queue):
        with pytest.raises(ValueError) as raised:
            call()
        assert str(raised.value) == expected


def test_a_caller_transaction_is_named_as_the_problem(database: Bound) -> None:
    database.con.execute("BEGIN")
    with pytest.raises(ValueError) as raised:
        database.claim("c1", 0)
    database.con.execute("ROLLBACK")
    assert str(raised.value) == (
        "'con' has an open transaction; finish it before calling the queue"
    )


def test_redriving_a_live_job_says_its_status(queue: Queue) -> None:
    queue.enqueue({"id": "a", "qty": 1}, 0, 10)
    with pytest.raises(ValueError) as raised:
        queue.redrive("a", 0, 10, "ops")
    assert str(raised.value) == "job 'a' is pending, only a dead job can be redriven"


def test_conflict_says_both_quantities(queue: Queue) -> None:
    queue.enqueue({"id": "a", "qty": 1}, 0, 10)
    with pytest.raises(worker.Conflict) as raised:
        queue.enqueue({"id": "a", "qty": 2}, 0, 10)
    assert str(raised.value) == "job 'a' exists with qty 1, not 2"


def test_bad_ack_shows_what_send_returned(queue: Queue) -> None:
    queue.enqueue({"id": "a", "qty": 1}, 0, 10)
    with pytest.raises(worker.BadAck) as raised:
        queue.run_once("c1", ScriptedClock(0), RecordingSend("yes"), 1)
    assert str(raised.value) == "send must return exactly True, got 'yes'"


def test_a_backwards_clock_shows_both_readings(queue: Queue) -> None:
    queue.enqueue({"id": "a", "qty": 1}, 0, 10)
    with pytest.raises(ValueError) as raised:
        queue.run_once("c1", ScriptedClock(5, 4), RecordingSend(), 1)
    assert str(raised.value) == "clock went backwards: 4 after 5"


def test_an_invalid_second_reading_is_named(queue: Queue) -> None:
    queue.enqueue({"id": "a", "qty": 1}, 0, 10)
    with pytest.raises(ValueError) as raised:
        queue.run_once("c1", ScriptedClock(5, 5.0), RecordingSend(), 1)
    assert str(raised.value) == (
        "'second clock()' must be an int in 0..999999999940000 (got 5.0 that is a 'float')"
    )


def test_a_thing_that_is_not_a_connection_is_named(database: Bound) -> None:
    kind = "sqlite3.Connection" if database.module is worker else "psycopg.Connection"
    with pytest.raises(ValueError) as raised:
        database.module.claim("queue.sqlite", "c1", 0)
    assert str(raised.value) == (f"'con' must be a {kind} (got 'queue.sqlite' that is a 'str')")
