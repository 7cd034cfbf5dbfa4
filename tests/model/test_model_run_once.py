"""run_once(owner, clock, send, jitter, lease_ms=1000): claim, deliver, finish at clock()."""

from __future__ import annotations

from typing import Any

import pytest

from model import BadAck, Permanent, QueueModel, Retryable, retry_delay
from tests.model.scenario import OWNER, job, queue_with
from tests.support import MAX_NOW, RecordingSend, ScriptedClock


def test_nothing_to_claim_returns_none_without_sending_or_a_second_reading() -> None:
    clock, send = ScriptedClock(0), RecordingSend()
    assert QueueModel().run_once(OWNER, clock, send, 0.5) is None
    assert (clock.calls, send.received) == (1, [])


def test_a_delivery_acknowledged_with_true_is_done() -> None:
    queue = queue_with("a", ttl=10000)
    clock, send = ScriptedClock(0, 30), RecordingSend(True)
    assert queue.run_once(OWNER, clock, send, 0.5, 100) == {
        "id": "a",
        "token": 1,
        "status": "done",
    }
    assert send.received == [{"id": "a", "qty": 2}]
    assert job(queue, "a")["available_at"] == 30


def test_retryable_is_a_retry_after_the_jittered_backoff_of_this_attempt() -> None:
    queue = queue_with("a", ttl=10000)
    result = queue.run_once(OWNER, ScriptedClock(0, 30), RecordingSend(Retryable()), 0.5, 100)
    assert result == {"id": "a", "token": 1, "status": "pending"}
    assert retry_delay(1, 100, 1000, 0.5) == 50
    assert (job(queue, "a")["available_at"], job(queue, "a")["reason"]) == (80, "retry")


def test_permanent_quarantines_the_job() -> None:
    queue = queue_with("a", ttl=10000)
    result = queue.run_once(OWNER, ScriptedClock(0, 30), RecordingSend(Permanent()), 0.5)
    assert result == {"id": "a", "token": 1, "status": "dead"}
    assert job(queue, "a")["reason"] == "permanent"


@pytest.mark.parametrize("answer", [1, "True", None, False, [True]])
def test_anything_but_exactly_true_is_a_bad_ack_and_the_job_stays_leased(answer: object) -> None:
    queue = queue_with("a", ttl=10000)
    clock = ScriptedClock(0)
    with pytest.raises(BadAck):
        queue.run_once(OWNER, clock, RecordingSend(answer), 0.5)
    assert (clock.calls, job(queue, "a")["status"]) == (1, "leased")


@pytest.mark.parametrize("error", [KeyError("boom"), TimeoutError(), KeyboardInterrupt()])
def test_any_other_error_propagates_untouched_and_the_job_stays_leased(
    error: BaseException,
) -> None:
    queue = queue_with("a", ttl=10000)
    clock = ScriptedClock(0)
    with pytest.raises(type(error)) as raised:
        queue.run_once(OWNER, clock, RecordingSend(error), 0.5)
    assert raised.value is error
    assert (clock.calls, job(queue, "a")["status"]) == (1, "leased")


def test_a_second_reading_at_lease_until_makes_the_result_stale() -> None:
    queue = queue_with("a", ttl=10000)
    result = queue.run_once(OWNER, ScriptedClock(0, 100), RecordingSend(True), 0.5, 100)
    assert result == {"id": "a", "token": 1, "status": "stale"}
    assert job(queue, "a")["status"] == "leased"


@pytest.mark.parametrize("second", [9, -1, MAX_NOW + 1, True, 10.0, "20", None])
def test_a_second_reading_that_is_malformed_or_earlier_raises_and_keeps_the_claim(
    second: object,
) -> None:
    queue = queue_with("a", ttl=10000)
    with pytest.raises(ValueError):
        queue.run_once(OWNER, ScriptedClock(10, second), RecordingSend(True), 0.5)
    assert (job(queue, "a")["status"], job(queue, "a")["token"]) == ("leased", 1)


def test_a_second_reading_equal_to_the_first_is_fine() -> None:
    queue = queue_with("a", ttl=10000)
    result = queue.run_once(OWNER, ScriptedClock(10, 10), RecordingSend(True), 0.5)
    assert result is not None and result["status"] == "done"


def test_a_malformed_first_reading_is_claims_value_error_and_nothing_changes() -> None:
    queue = queue_with("a")
    before, send = queue.rows(), RecordingSend()
    with pytest.raises(ValueError, match="'now_ms'"):
        queue.run_once(OWNER, ScriptedClock(-1), send, 0.5)
    assert (queue.rows(), send.received) == (before, [])


def test_the_jitter_is_checked_before_the_clock_is_read() -> None:
    clock = ScriptedClock(0, 10)
    with pytest.raises(ValueError, match="'jitter'"):
        queue_with("a").run_once(OWNER, clock, RecordingSend(), 1.5)
    assert clock.calls == 0


def test_send_gets_a_fresh_dict_and_meddling_with_it_changes_no_ticket() -> None:
    queue = queue_with("a", ttl=10000)

    def meddle(delivery: dict[str, Any]) -> None:
        delivery["id"], delivery["qty"] = "b", 999

    send = RecordingSend(True, during=meddle)
    result = queue.run_once(OWNER, ScriptedClock(0, 10), send, 0.5)
    assert result == {"id": "a", "token": 1, "status": "done"}
    assert send.deliveries == [{"id": "a", "qty": 2}]


def test_send_may_enqueue_more_work_while_it_runs() -> None:
    queue = queue_with("a", ttl=10000)
    send = RecordingSend(True, during=lambda _: queue.enqueue({"id": "b", "qty": 1}, 5, 100))
    result = queue.run_once(OWNER, ScriptedClock(0, 10), send, 0.5)
    assert result == {"id": "a", "token": 1, "status": "done"}
    assert [row[1:4] for row in queue.rows()["jobs"]] == [("a", 2, "done"), ("b", 1, "pending")]
