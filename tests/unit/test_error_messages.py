"""Clear errors for bad input: each message names the argument, what was expected
and what came (with its type), so an operator can fix the call without reading code."""

from __future__ import annotations

import errno
import sqlite3
from collections.abc import Callable
from pathlib import Path

import pytest

import worker
from tests.support import RecordingSend, ScriptedClock

TICKET = {"id": "a", "qty": 1, "owner": "c1", "token": 1, "attempt": 1, "lease_until": 100}
IDENTIFIER = "a str of 1-64 ASCII letters, digits, '_' or '-'"


def messages(con: sqlite3.Connection) -> list[tuple[Callable[[], object], str]]:
    return [
        (
            lambda: worker.enqueue(con, {"id": "a"}, 0, 10),
            "'event' must be a dict with exactly the keys ['id', 'qty'] "
            "(got {'id': 'a'} that is a 'dict')",
        ),
        (
            lambda: worker.enqueue(con, {"id": "a b", "qty": 1}, 0, 10),
            f"'event['id']' must be {IDENTIFIER} (got 'a b' that is a 'str')",
        ),
        (
            lambda: worker.enqueue(con, {"id": "a", "qty": True}, 0, 10),
            "'event['qty']' must be an int in 1..1000 (got True that is a 'bool')",
        ),
        (
            lambda: worker.enqueue(con, {"id": "a", "qty": 1}, -1, 10),
            "'now_ms' must be an int in 0..999999999940000 (got -1 that is a 'int')",
        ),
        (
            lambda: worker.enqueue(con, {"id": "a", "qty": 1}, 0, 0),
            "'ttl_ms' must be an int in 1..60000 (got 0 that is a 'int')",
        ),
        (
            lambda: worker.enqueue(con, {"id": "a", "qty": 1}, 0, 10, 17),
            "'max_attempts' must be an int in 1..16 (got 17 that is a 'int')",
        ),
        (
            lambda: worker.claim(con, "", 0),
            f"'owner' must be {IDENTIFIER} (got '' that is a 'str')",
        ),
        (
            lambda: worker.claim(con, "c1", 0, 60001),
            "'lease_ms' must be an int in 1..60000 (got 60001 that is a 'int')",
        ),
        (
            lambda: worker.claim(con, "c1", 0, fault="after-claim"),  # type: ignore[arg-type]
            "'fault' must be None or a callable (got 'after-claim' that is a 'str')",
        ),
        (
            lambda: worker.finish(con, {**TICKET, "token": 0}, "ok", 1),
            "'ticket['token']' must be an int in 1..1000000000000000 (got 0 that is a 'int')",
        ),
        (
            lambda: worker.finish(con, dict(TICKET), "done", 1),
            "'outcome' must be one of ('ok', 'retry', 'permanent') (got 'done' that is a 'str')",
        ),
        (
            lambda: worker.redrive(con, "a", 0, 10, "with space"),
            f"'note' must be {IDENTIFIER} (got 'with space' that is a 'str')",
        ),
        (
            lambda: worker.redrive(con, "nobody", 0, 10, "ops"),
            "no job 'nobody' to redrive",
        ),
        (
            lambda: worker.retry_delay(1, 1, 1, float("nan")),
            "'jitter' must be a finite int or float in 0..1 (got nan that is a 'float')",
        ),
        (
            lambda: worker.retry_delay(1, 100, 99, 1),
            "'cap_ms' must be an int in 100..60000 (got 99 that is a 'int')",
        ),
        (
            lambda: worker.run_once(con, "c1", 10, RecordingSend(), 1),  # type: ignore[arg-type]
            "'clock' must be a callable (got 10 that is a 'int')",
        ),
        (
            lambda: worker.claim("queue.sqlite", "c1", 0),  # type: ignore[arg-type]
            "'con' must be a sqlite3.Connection (got 'queue.sqlite' that is a 'str')",
        ),
        (
            lambda: worker.open_queue(":memory:"),
            "'path' must be a local file path (not in-memory, not empty) "
            "(got ':memory:' that is a 'str')",
        ),
        (
            lambda: worker.open_queue(7),  # type: ignore[arg-type]
            "'path' must be a str or os.PathLike naming a local file (got 7 that is a 'int')",
        ),
    ]


def test_each_malformed_argument_gets_a_message_that_names_it(con: sqlite3.Connection) -> None:
    for call, expected in messages(con):
        with pytest.raises(ValueError) as raised:
            call()
        assert str(raised.value) == expected


def test_a_caller_transaction_is_named_as_the_problem(con: sqlite3.Connection) -> None:
    con.execute("BEGIN")
    with pytest.raises(ValueError) as raised:
        worker.claim(con, "c1", 0)
    con.execute("ROLLBACK")
    assert str(raised.value) == (
        "'con' has an open transaction; finish it before calling the queue"
    )


def test_redriving_a_live_job_says_its_status(con: sqlite3.Connection) -> None:
    worker.enqueue(con, {"id": "a", "qty": 1}, 0, 10)
    with pytest.raises(ValueError) as raised:
        worker.redrive(con, "a", 0, 10, "ops")
    assert str(raised.value) == "job 'a' is pending, only a dead job can be redriven"


def test_conflict_says_both_quantities(con: sqlite3.Connection) -> None:
    worker.enqueue(con, {"id": "a", "qty": 1}, 0, 10)
    with pytest.raises(worker.Conflict) as raised:
        worker.enqueue(con, {"id": "a", "qty": 2}, 0, 10)
    assert str(raised.value) == "job 'a' exists with qty 1, not 2"


def test_bad_ack_shows_what_send_returned(con: sqlite3.Connection) -> None:
    worker.enqueue(con, {"id": "a", "qty": 1}, 0, 10)
    with pytest.raises(worker.BadAck) as raised:
        worker.run_once(con, "c1", ScriptedClock(0), RecordingSend("yes"), 1)
    assert str(raised.value) == "send must return exactly True, got 'yes'"


def test_a_backwards_clock_shows_both_readings(con: sqlite3.Connection) -> None:
    worker.enqueue(con, {"id": "a", "qty": 1}, 0, 10)
    with pytest.raises(ValueError) as raised:
        worker.run_once(con, "c1", ScriptedClock(5, 4), RecordingSend(), 1)
    assert str(raised.value) == "clock went backwards: 4 after 5"


def test_an_invalid_second_reading_is_named(con: sqlite3.Connection) -> None:
    worker.enqueue(con, {"id": "a", "qty": 1}, 0, 10)
    with pytest.raises(ValueError) as raised:
        worker.run_once(con, "c1", ScriptedClock(5, 5.0), RecordingSend(), 1)
    assert str(raised.value) == (
        "'second clock()' must be an int in 0..999999999940000 (got 5.0 that is a 'float')"
    )


def test_a_missing_queue_file_is_reported_as_enoent_with_its_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(FileNotFoundError) as raised:
        worker.run_file(missing, "c1", ScriptedClock(0), RecordingSend(), 1)
    assert raised.value.errno == errno.ENOENT
    assert raised.value.filename == str(missing)
    assert raised.value.strerror == "no queue file (run open_queue to create one)"
