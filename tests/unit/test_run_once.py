"""Section 7: run_once(con, owner, clock, send, jitter, lease_ms=1000)."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

import worker
from tests.support import MAX_NOW, RecordingSend, ScriptedClock, bad_ints, job, read_rows


def add(con: sqlite3.Connection, job_id: str = "a", ttl: int = 5000, budget: int = 3) -> None:
    assert worker.enqueue(con, {"id": job_id, "qty": 6}, 0, ttl, budget)


def test_an_empty_queue_returns_none_without_sending(con: sqlite3.Connection) -> None:
    clock, send = ScriptedClock(10), RecordingSend()
    assert worker.run_once(con, "courier-1", clock, send, 0.5) is None
    assert clock.calls == 1
    assert send.deliveries == []


def test_delivers_id_and_qty_and_records_done(con: sqlite3.Connection) -> None:
    add(con)
    clock, send = ScriptedClock(10, 20), RecordingSend(True)
    result = worker.run_once(con, "courier-1", clock, send, 0.5)
    assert result == {"id": "a", "token": 1, "status": "done"}
    assert send.deliveries == [{"id": "a", "qty": 6}]
    assert clock.calls == 2
    row = job(con, "a")
    assert (row["status"], row["available_at"], row["token"]) == ("done", 20, 1)


def test_the_claim_uses_the_first_clock_reading_and_the_lease(con: sqlite3.Connection) -> None:
    add(con)
    seen = []
    send = RecordingSend(True, during=lambda _: seen.append(job(con, "a")))
    worker.run_once(con, "courier-1", ScriptedClock(10, 20), send, 0.5, lease_ms=250)
    assert (seen[0]["status"], seen[0]["lease_until"], seen[0]["owner"]) == (
        "leased",
        260,
        "courier-1",
    )


def test_sends_outside_any_transaction_so_others_can_write(
    con: sqlite3.Connection, queue_path: Path
) -> None:
    add(con)
    other = worker.open_queue(queue_path)
    observed = []

    def meddle(delivery: dict[str, Any]) -> None:
        observed.append(con.in_transaction)
        assert worker.enqueue(other, {"id": "b", "qty": 1}, 11, 100) is True

    result = worker.run_once(
        con, "courier-1", ScriptedClock(10, 20), RecordingSend(True, meddle), 1
    )
    other.close()
    assert observed == [False]
    assert result == {"id": "a", "token": 1, "status": "done"}
    assert job(con, "b")["status"] == "pending"


def test_send_gets_a_fresh_dict_and_mutating_it_does_not_touch_the_ticket(
    con: sqlite3.Connection,
) -> None:
    add(con)

    def vandalise(delivery: dict[str, Any]) -> None:
        delivery["id"] = "b"
        delivery["qty"] = 999
        delivery["token"] = 42

    send = RecordingSend(True, during=vandalise)
    result = worker.run_once(con, "courier-1", ScriptedClock(10, 20), send, 1)
    assert result == {"id": "a", "token": 1, "status": "done"}
    assert job(con, "a")["status"] == "done"


def test_each_run_sends_a_new_dict(con: sqlite3.Connection) -> None:
    add(con, "a")
    add(con, "b")
    send = RecordingSend(True)
    for _ in range(2):
        worker.run_once(con, "courier-1", ScriptedClock(10, 20), send, 1)
    assert send.received[0] is not send.received[1]
    assert send.deliveries == [{"id": "a", "qty": 6}, {"id": "b", "qty": 6}]


@pytest.mark.parametrize("answer", [1, "True", None, False, [True], object()])
def test_any_answer_but_exactly_true_is_a_bad_ack_and_the_job_stays_leased(
    con: sqlite3.Connection, answer: object
) -> None:
    add(con)
    clock = ScriptedClock(10)
    with pytest.raises(worker.BadAck):
        worker.run_once(con, "courier-1", clock, RecordingSend(answer), 1)
    assert clock.calls == 1, "no second clock read after a bad ack"
    assert job(con, "a")["status"] == "leased"


class SlowDown(worker.Retryable):
    """A subclass of Retryable is still a retry."""


@pytest.mark.parametrize("error", [worker.Retryable("timeout"), SlowDown("429")])
def test_retryable_retries_after_the_jittered_backoff(
    con: sqlite3.Connection, error: Exception
) -> None:
    add(con)
    result = worker.run_once(con, "courier-1", ScriptedClock(10, 20), RecordingSend(error), 0.5)
    assert result == {"id": "a", "token": 1, "status": "pending"}
    row = job(con, "a")
    assert (row["reason"], row["available_at"]) == ("retry", 20 + 50)  # floor(100 * 0.5)


def test_the_backoff_grows_with_the_attempt_and_is_capped(con: sqlite3.Connection) -> None:
    add(con, budget=16, ttl=60000)
    available = []
    now = 0
    for _ in range(6):
        now = max(now, job(con, "a")["available_at"])
        worker.run_once(
            con, "courier-1", ScriptedClock(now, now), RecordingSend(worker.Retryable()), 1
        )
        available.append(job(con, "a")["available_at"] - now)
    assert available == [100, 200, 400, 800, 1000, 1000]


def test_permanent_quarantines_the_job(con: sqlite3.Connection) -> None:
    add(con)
    result = worker.run_once(
        con, "courier-1", ScriptedClock(10, 20), RecordingSend(worker.Permanent("410")), 1
    )
    assert result == {"id": "a", "token": 1, "status": "dead"}
    assert job(con, "a")["reason"] == "permanent"


def test_a_retry_with_no_budget_left_is_dead(con: sqlite3.Connection) -> None:
    add(con, budget=1)
    send = RecordingSend(worker.Retryable())
    result = worker.run_once(con, "courier-1", ScriptedClock(10, 20), send, 1)
    assert result == {"id": "a", "token": 1, "status": "dead"}
    assert job(con, "a")["reason"] == "exhausted"


@pytest.mark.parametrize(
    "error", [RuntimeError("boom"), worker.BadAck("from send"), KeyboardInterrupt(), SystemExit(3)]
)
def test_any_other_error_propagates_untouched_and_the_job_stays_leased(
    con: sqlite3.Connection, error: BaseException
) -> None:
    add(con)
    clock = ScriptedClock(10)
    with pytest.raises(type(error)) as raised:
        worker.run_once(con, "courier-1", clock, RecordingSend(error), 1)
    assert raised.value is error
    assert clock.calls == 1
    assert job(con, "a")["status"] == "leased"
    assert not con.in_transaction


def test_a_send_that_outlives_the_lease_comes_back_stale(con: sqlite3.Connection) -> None:
    add(con)
    before_finish = {}

    def record(_: dict[str, Any]) -> None:
        before_finish.update(job(con, "a"))

    result = worker.run_once(
        con, "courier-1", ScriptedClock(10, 110), RecordingSend(True, record), 1, lease_ms=100
    )
    assert result == {"id": "a", "token": 1, "status": "stale"}
    assert job(con, "a") == before_finish, "a stale finish changes nothing"


def test_a_send_one_ms_inside_the_lease_still_finishes(con: sqlite3.Connection) -> None:
    add(con)
    result = worker.run_once(
        con, "courier-1", ScriptedClock(10, 109), RecordingSend(True), 1, lease_ms=100
    )
    assert result is not None and result["status"] == "done"


def test_the_second_reading_may_equal_the_first(con: sqlite3.Connection) -> None:
    add(con)
    result = worker.run_once(con, "courier-1", ScriptedClock(10, 10), RecordingSend(True), 1)
    assert result == {"id": "a", "token": 1, "status": "done"}


@pytest.mark.parametrize("second", [9, 0, -1, True, 10.5, "20", None, MAX_NOW + 1])
def test_a_backwards_or_invalid_second_reading_raises_and_keeps_the_claim(
    con: sqlite3.Connection, second: object
) -> None:
    add(con)
    with pytest.raises(ValueError):
        worker.run_once(con, "courier-1", ScriptedClock(10, second), RecordingSend(True), 1)
    row = job(con, "a")
    assert (row["status"], row["token"], row["owner"]) == ("leased", 1, "courier-1")
    assert not con.in_transaction


@pytest.mark.parametrize("first", [-1, True, 1.5, None, MAX_NOW + 1])
def test_an_invalid_first_reading_raises_before_any_change(
    con: sqlite3.Connection, first: object
) -> None:
    add(con)
    before = read_rows(con)
    send = RecordingSend(True)
    with pytest.raises(ValueError, match="now_ms"):
        worker.run_once(con, "courier-1", ScriptedClock(first), send, 1)
    assert read_rows(con) == before
    assert send.deliveries == []


def test_a_failing_clock_propagates_before_any_change(con: sqlite3.Connection) -> None:
    add(con)
    before = read_rows(con)

    def broken() -> int:
        raise OSError("no time")

    with pytest.raises(OSError, match="no time"):
        worker.run_once(con, "courier-1", broken, RecordingSend(True), 1)
    assert read_rows(con) == before


BAD_JITTERS: list[object] = [-0.1, 1.1, float("nan"), float("inf"), True, "0.5", None]


@pytest.mark.parametrize("jitter", BAD_JITTERS)
def test_jitter_is_validated_before_the_clock_is_read(
    con: sqlite3.Connection, jitter: object
) -> None:
    add(con)
    before = read_rows(con)
    clock, send = ScriptedClock(10, 20), RecordingSend(True)
    with pytest.raises(ValueError, match="jitter"):
        worker.run_once(con, "courier-1", clock, send, jitter)  # type: ignore[arg-type]
    assert clock.calls == 0
    assert read_rows(con) == before


@pytest.mark.parametrize(
    ("argument", "value"),
    [("owner", v) for v in ["", "a b", None, 1]]
    + [("lease_ms", v) for v in bad_ints(1, 60000)]
    + [("clock", v) for v in [None, 10]]
    + [("send", v) for v in [None, "http://x"]],
)
def test_rejects_malformed_arguments_before_any_change(
    con: sqlite3.Connection, argument: str, value: object
) -> None:
    add(con)
    before = read_rows(con)
    clock, send = ScriptedClock(10, 20), RecordingSend(True)
    arguments: dict[str, object] = {
        "owner": "courier-1",
        "clock": clock,
        "send": send,
        "jitter": 0.5,
        "lease_ms": 100,
        argument: value,
    }
    with pytest.raises(ValueError, match=argument):
        worker.run_once(con, **arguments)  # type: ignore[arg-type]
    assert read_rows(con) == before
    assert send.deliveries == []


def lease_seen_by_send(con: sqlite3.Connection, run: Any) -> int:
    seen: list[int] = []
    run(RecordingSend(True, during=lambda _: seen.append(job(con, "a")["lease_until"])))
    return seen[0]


def test_the_default_lease_is_one_second(con: sqlite3.Connection) -> None:
    add(con)
    lease_until = lease_seen_by_send(
        con, lambda send: worker.run_once(con, "c1", ScriptedClock(10, 20), send, 1)
    )
    assert lease_until == 1010


def test_the_shortest_lease_is_one_ms(con: sqlite3.Connection) -> None:
    add(con)
    lease_until = lease_seen_by_send(
        con, lambda send: worker.run_once(con, "c1", ScriptedClock(10, 10), send, 1, lease_ms=1)
    )
    assert lease_until == 11
