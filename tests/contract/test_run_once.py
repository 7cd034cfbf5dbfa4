"""Section 7: run_once(con, owner, clock, send, jitter, lease_ms=1000), on every implementation."""

from __future__ import annotations

from typing import Any

import pytest

import worker
from tests.contract.cases import by_argument
from tests.contract.implementations import Queue
from tests.support import MAX_NOW, RecordingSend, ScriptedClock, bad_ints


def add(queue: Queue, job_id: str = "a", ttl: int = 5000, budget: int = 3) -> None:
    assert queue.enqueue({"id": job_id, "qty": 6}, 0, ttl, budget)


def test_an_empty_queue_returns_none_without_sending(queue: Queue) -> None:
    clock, send = ScriptedClock(10), RecordingSend()
    assert queue.run_once("courier-1", clock, send, 0.5) is None
    assert clock.calls == 1
    assert send.deliveries == []


def test_delivers_id_and_qty_and_records_done(queue: Queue) -> None:
    add(queue)
    clock, send = ScriptedClock(10, 20), RecordingSend(True)
    result = queue.run_once("courier-1", clock, send, 0.5)
    assert result == {"id": "a", "token": 1, "status": "done"}
    assert send.deliveries == [{"id": "a", "qty": 6}]
    assert clock.calls == 2
    row = queue.job("a")
    assert (row["status"], row["available_at"], row["token"]) == ("done", 20, 1)


def test_the_claim_uses_the_first_clock_reading_and_the_lease(queue: Queue) -> None:
    add(queue)
    seen = []
    send = RecordingSend(True, during=lambda _: seen.append(queue.job("a")))
    queue.run_once("courier-1", ScriptedClock(10, 20), send, 0.5, lease_ms=250)
    assert (seen[0]["status"], seen[0]["lease_until"], seen[0]["owner"]) == (
        "leased",
        260,
        "courier-1",
    )


def test_sends_outside_any_transaction_so_others_can_write(queue: Queue) -> None:
    add(queue)
    other = queue.other()
    observed = []

    def meddle(delivery: dict[str, Any]) -> None:
        observed.append(queue.in_transaction())
        assert other.enqueue({"id": "b", "qty": 1}, 11, 100) is True

    result = queue.run_once("courier-1", ScriptedClock(10, 20), RecordingSend(True, meddle), 1)
    assert observed == [False]
    assert result == {"id": "a", "token": 1, "status": "done"}
    assert queue.job("b")["status"] == "pending"


def test_send_gets_a_fresh_dict_and_mutating_it_does_not_touch_the_ticket(
    queue: Queue,
) -> None:
    add(queue)

    def vandalise(delivery: dict[str, Any]) -> None:
        delivery["id"] = "b"
        delivery["qty"] = 999
        delivery["token"] = 42

    send = RecordingSend(True, during=vandalise)
    result = queue.run_once("courier-1", ScriptedClock(10, 20), send, 1)
    assert result == {"id": "a", "token": 1, "status": "done"}
    assert queue.job("a")["status"] == "done"


def test_each_run_sends_a_new_dict(queue: Queue) -> None:
    add(queue, "a")
    add(queue, "b")
    send = RecordingSend(True)
    for _ in range(2):
        queue.run_once("courier-1", ScriptedClock(10, 20), send, 1)
    assert send.received[0] is not send.received[1]
    assert send.deliveries == [{"id": "a", "qty": 6}, {"id": "b", "qty": 6}]


@pytest.mark.parametrize("answer", [1, "True", None, False, [True], object()])
def test_any_answer_but_exactly_true_is_a_bad_ack_and_the_job_stays_leased(
    queue: Queue, answer: object
) -> None:
    add(queue)
    clock = ScriptedClock(10)
    with pytest.raises(worker.BadAck):
        queue.run_once("courier-1", clock, RecordingSend(answer), 1)
    assert clock.calls == 1, "no second clock read after a bad ack"
    assert queue.job("a")["status"] == "leased"


class SlowDown(worker.Retryable):
    """A subclass of Retryable is still a retry."""


@pytest.mark.parametrize("error", [worker.Retryable("timeout"), SlowDown("429")])
def test_retryable_retries_after_the_jittered_backoff(queue: Queue, error: Exception) -> None:
    add(queue)
    result = queue.run_once("courier-1", ScriptedClock(10, 20), RecordingSend(error), 0.5)
    assert result == {"id": "a", "token": 1, "status": "pending"}
    row = queue.job("a")
    assert (row["reason"], row["available_at"]) == ("retry", 20 + 50)  # floor(100 * 0.5)


def test_the_backoff_grows_with_the_attempt_and_is_capped(queue: Queue) -> None:
    add(queue, budget=16, ttl=60000)
    available = []
    now = 0
    for _ in range(6):
        now = max(now, queue.job("a")["available_at"])
        queue.run_once("courier-1", ScriptedClock(now, now), RecordingSend(worker.Retryable()), 1)
        available.append(queue.job("a")["available_at"] - now)
    assert available == [100, 200, 400, 800, 1000, 1000]


def test_permanent_quarantines_the_job(queue: Queue) -> None:
    add(queue)
    result = queue.run_once(
        "courier-1", ScriptedClock(10, 20), RecordingSend(worker.Permanent("410")), 1
    )
    assert result == {"id": "a", "token": 1, "status": "dead"}
    assert queue.job("a")["reason"] == "permanent"


def test_a_retry_with_no_budget_left_is_dead(queue: Queue) -> None:
    add(queue, budget=1)
    send = RecordingSend(worker.Retryable())
    result = queue.run_once("courier-1", ScriptedClock(10, 20), send, 1)
    assert result == {"id": "a", "token": 1, "status": "dead"}
    assert queue.job("a")["reason"] == "exhausted"


@pytest.mark.parametrize(
    "error", [RuntimeError("boom"), worker.BadAck("from send"), KeyboardInterrupt(), SystemExit(3)]
)
def test_any_other_error_propagates_untouched_and_the_job_stays_leased(
    queue: Queue, error: BaseException
) -> None:
    add(queue)
    clock = ScriptedClock(10)
    with pytest.raises(type(error)) as raised:
        queue.run_once("courier-1", clock, RecordingSend(error), 1)
    assert raised.value is error
    assert clock.calls == 1
    assert queue.job("a")["status"] == "leased"
    assert not queue.in_transaction()


def test_a_send_that_outlives_the_lease_comes_back_stale(queue: Queue) -> None:
    add(queue)
    before_finish = {}

    def record(_: dict[str, Any]) -> None:
        before_finish.update(queue.job("a"))

    result = queue.run_once(
        "courier-1", ScriptedClock(10, 110), RecordingSend(True, record), 1, lease_ms=100
    )
    assert result == {"id": "a", "token": 1, "status": "stale"}
    assert queue.job("a") == before_finish, "a stale finish changes nothing"


def test_a_send_one_ms_inside_the_lease_still_finishes(queue: Queue) -> None:
    add(queue)
    result = queue.run_once(
        "courier-1", ScriptedClock(10, 109), RecordingSend(True), 1, lease_ms=100
    )
    assert result is not None and result["status"] == "done"


def test_the_second_reading_may_equal_the_first(queue: Queue) -> None:
    add(queue)
    result = queue.run_once("courier-1", ScriptedClock(10, 10), RecordingSend(True), 1)
    assert result == {"id": "a", "token": 1, "status": "done"}


SECOND_READINGS: list[object] = [9, 0, -1, True, 10.5, "20", None, MAX_NOW + 1]


def test_a_backwards_or_invalid_second_reading_raises_and_keeps_the_claim(queue: Queue) -> None:
    for n, second in enumerate(SECOND_READINGS):
        add(queue, f"j{n}")  # the claim of each reading takes its own job
        with pytest.raises(ValueError):
            queue.run_once("courier-1", ScriptedClock(10, second), RecordingSend(True), 1)
        row = queue.job(f"j{n}")
        assert (row["status"], row["token"], row["owner"]) == ("leased", 1, "courier-1"), second
        assert not queue.in_transaction()


def test_an_invalid_first_reading_raises_before_any_change(queue: Queue) -> None:
    add(queue)
    before = queue.rows()
    for first in [-1, True, 1.5, None, MAX_NOW + 1]:
        send = RecordingSend(True)
        with pytest.raises(ValueError, match="now_ms"):
            queue.run_once("courier-1", ScriptedClock(first), send, 1)
        assert queue.rows() == before, first
        assert send.deliveries == []


def test_a_failing_clock_propagates_before_any_change(queue: Queue) -> None:
    add(queue)
    before = queue.rows()

    def broken() -> int:
        raise OSError("no time")

    with pytest.raises(OSError, match="no time"):
        queue.run_once("courier-1", broken, RecordingSend(True), 1)
    assert queue.rows() == before


BAD_JITTERS: list[object] = [-0.1, 1.1, float("nan"), float("inf"), True, "0.5", None]


def test_jitter_is_validated_before_the_clock_is_read(queue: Queue) -> None:
    add(queue)
    before = queue.rows()
    for jitter in BAD_JITTERS:
        clock, send = ScriptedClock(10, 20), RecordingSend(True)
        with pytest.raises(ValueError, match="jitter"):
            queue.run_once("courier-1", clock, send, jitter)
        assert clock.calls == 0, jitter
        assert queue.rows() == before, jitter


INVALID_CASES = (
    [("owner", v) for v in ["", "a b", None, 1]]
    + [("lease_ms", v) for v in bad_ints(1, 60000)]
    + [("clock", v) for v in [None, 10]]
    + [("send", v) for v in [None, "http://x"]]
)


# Every call's malformed-argument test has this shape on purpose (one per call, each with
# its own state and checks; tests/contract/cases.py groups the values by argument).
@pytest.mark.parametrize(("argument", "values"), by_argument(INVALID_CASES))
def test_rejects_malformed_arguments_before_any_change(
    queue: Queue, argument: str, values: list[object]
) -> None:
    add(queue)
    before = queue.rows()
    for value in values:
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
            queue.run_once(**arguments)
        assert queue.rows() == before, value
        assert send.deliveries == []


def lease_seen_by_send(queue: Queue, run: Any) -> int:
    seen: list[int] = []
    run(RecordingSend(True, during=lambda _: seen.append(queue.job("a")["lease_until"])))
    return seen[0]


def test_the_default_lease_is_one_second(queue: Queue) -> None:
    add(queue)
    lease_until = lease_seen_by_send(
        queue, lambda send: queue.run_once("c1", ScriptedClock(10, 20), send, 1)
    )
    assert lease_until == 1010


def test_the_shortest_lease_is_one_ms(queue: Queue) -> None:
    add(queue)
    lease_until = lease_seen_by_send(
        queue, lambda send: queue.run_once("c1", ScriptedClock(10, 10), send, 1, lease_ms=1)
    )
    assert lease_until == 11
