"""The batched courier's pipeline (``courier.batch_rounds``, rule 2; ``courier.runner``, rule 8).

``run_courier`` over ``BatchRounds`` on a real queue file (the production
``FileRounds``), sending over real HTTP on loopback to a real receiver with
``HttpSends``. What is checked: the next batch is claimed while this one's deliveries
are in flight, and this one is finished while the next one's are; ``--max-runs``
counts rounds exactly and leaves nothing claimed ahead; a stop (the event SIGTERM
sets) mid-pipeline delivers and finishes the batch held ahead before the courier
ends; the deliveries back are finished in one group, or earlier once a lease among them
has a quarter left, so that a slow delivery does not hold them (rule 3). No test
asserts a duration: every wait is for a state, and bounded, and a wait that runs out
fails with what it waited for.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import worker
from courier.batch_rounds import BatchRounds
from courier.delivery import HttpSends
from courier.file_rounds import FileRounds
from courier.receiver import Receiver
from courier.runner import CourierReport, run_courier
from courier.stop_rules import StopRules
from tests.processes.test_batches import effects_by_id, jobs_of, queue_of

T = TypeVar("T")
WAIT_S = 30.0
LEASE_MS, TIMEOUT_MS = 8000, 750  # 2 batches of 4 on 2 threads: 4 in a row, 3 s < 8 s


class _Watched:
    """``claim_many`` and ``finish_many`` of ``worker``, counted, with a hook before
    each ``finish_many`` (for ``_Calls``)."""

    def __init__(self, calls: _Calls) -> None:
        self.calls = calls

    def claim_many(self, *args: Any) -> list[dict[str, Any]]:
        tickets: list[dict[str, Any]] = worker.claim_many(*args)
        with self.calls.lock:
            self.calls.claims.append([ticket["id"] for ticket in tickets])
        self.calls.claimed.set()
        return tickets

    def finish_many(self, *args: Any) -> list[Any]:
        self.calls.before_finish()
        statuses: list[Any] = worker.finish_many(*args)
        with self.calls.lock:
            self.calls.finishes += 1
        return statuses


class _Calls:
    """``FileRounds`` (``courier.batch_rounds.QueueCalls``) whose calls go through
    ``_Watched``: the claims made, in order, and how many finishes."""

    def __init__(self, path: Path, before_finish: Callable[[], None] = lambda: None) -> None:
        self.rounds = FileRounds(path)
        self.before_finish = before_finish
        self.lock = threading.Lock()
        self.claims: list[list[str]] = []
        self.finishes = 0
        self.claimed = threading.Event()

    def now_ms(self) -> int:
        return self.rounds.now_ms()

    def call(self, action: Callable[[Any, Any, int], T]) -> T:
        watched = _Watched(self)
        return self.rounds.call(lambda module, con, now_ms: action(watched, con, now_ms))

    def drained(self) -> bool:
        return self.rounds.drained()

    def close(self) -> None:
        self.rounds.close()


def _run(
    queue: Path,
    calls: _Calls,
    send: Callable[[dict[str, Any]], bool],
    rules: StopRules,
    stop: threading.Event | None = None,
) -> CourierReport:
    rounds = BatchRounds(calls, 4, 2, TIMEOUT_MS)
    try:
        return run_courier(
            queue, "c1", send, lease_ms=LEASE_MS, stop_rules=rules, stop=stop, rounds=rounds
        )
    finally:
        rounds.close()


def _statuses(queue: Path) -> dict[str, int]:
    counts: dict[str, int] = {}
    for row in jobs_of(queue).values():
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    return counts


def test_the_next_claim_and_the_last_finish_run_while_deliveries_are_in_flight(
    tmp_path: Path, receiver: Receiver
) -> None:
    """Each delivery of the first batch waits until the second batch is claimed, and the first
    batch's finish waits until a delivery of the second batch has started: a round
    that claimed, delivered and finished one after another would never get past
    either wait."""
    queue, ids = queue_of(tmp_path, 12)
    second_started = threading.Event()
    first_finish: list[bool] = []

    def before_finish() -> None:
        if not first_finish:
            first_finish.append(second_started.wait(WAIT_S))

    calls = _Calls(queue, before_finish)
    http = HttpSends(receiver.url, "c1", TIMEOUT_MS, 2)
    seen: list[bool] = []

    def send(event: dict[str, Any]) -> bool:
        with calls.lock:
            claims = [list(batch) for batch in calls.claims]
        if event["id"] in claims[0]:
            seen.append(_two_claims(calls))
        elif len(claims) > 1 and event["id"] in claims[1]:
            second_started.set()
        return http(event)

    with http:
        report = _run(queue, calls, send, StopRules(max_runs=3, max_seconds=WAIT_S))
    assert seen == [True] * 4, "the second batch was not claimed while the first was in flight"
    assert first_finish == [True], "the first batch was finished before the second was sent"
    assert calls.claims == [ids[0:4], ids[4:8], ids[8:12]], calls.claims
    assert (report.runs, report.stop_reason) == (3, "max-runs")
    assert [r["status"] for r in report.results] == ["done"] * 12
    assert effects_by_id(receiver.inbox.path) == dict.fromkeys(ids, 1)


def _two_claims(calls: _Calls) -> bool:
    """Wait (bounded) until a second ``claim_many`` came back."""
    for _ in range(int(WAIT_S / 0.01)):
        with calls.lock:
            if len(calls.claims) >= 2:
                return True
        calls.claimed.clear()
        calls.claimed.wait(0.01)
    return False


def test_max_runs_counts_rounds_exactly_and_leaves_nothing_claimed_ahead(
    tmp_path: Path, receiver: Receiver
) -> None:
    queue, ids = queue_of(tmp_path, 20)
    calls = _Calls(queue)
    with HttpSends(receiver.url, "c1", TIMEOUT_MS, 2) as send:
        report = _run(queue, calls, send, StopRules(max_runs=3, max_seconds=WAIT_S))
    assert (report.runs, report.stop_reason) == (3, "max-runs")
    assert len(calls.claims) == 3, "the last round claimed nothing ahead"
    assert [r["status"] for r in report.results] == ["done"] * 12
    assert _statuses(queue) == {"done": 12, "pending": 8}
    assert effects_by_id(receiver.inbox.path) == dict.fromkeys(ids[:12], 1)


def test_a_stop_mid_pipeline_delivers_and_finishes_the_batch_held_ahead(
    tmp_path: Path, receiver: Receiver
) -> None:
    """The stop comes during the first round, once the second batch is claimed ahead:
    one more round delivers and finishes it, and nothing stays leased."""
    queue, ids = queue_of(tmp_path, 20)
    calls = _Calls(queue)
    stop = threading.Event()
    http = HttpSends(receiver.url, "c1", TIMEOUT_MS, 2)

    def send(event: dict[str, Any]) -> bool:
        if _two_claims(calls):
            stop.set()
        return http(event)

    with http:
        report = _run(queue, calls, send, StopRules(max_runs=100, max_seconds=WAIT_S), stop)
    assert (report.runs, report.stop_reason) == (2, "stopped")
    assert calls.claims == [ids[0:4], ids[4:8]], calls.claims
    assert [r["status"] for r in report.results] == ["done"] * 8
    assert _statuses(queue) == {"done": 8, "pending": 12}
    assert effects_by_id(receiver.inbox.path) == dict.fromkeys(ids[:8], 1)


def test_the_last_batch_claims_nothing_ahead_once_the_queue_is_empty(
    tmp_path: Path, receiver: Receiver
) -> None:
    """A claim ahead that finds nothing holds nothing: the next round claims anew,
    finds nothing, and the courier stops drained with every job done once."""
    queue, ids = queue_of(tmp_path, 6)
    calls = _Calls(queue)
    rules = StopRules(max_runs=100, max_seconds=WAIT_S, until_drained=True)
    with HttpSends(receiver.url, "c1", TIMEOUT_MS, 2) as send:
        report = _run(queue, calls, send, rules)
    assert report.stop_reason == "drained"
    assert calls.claims == [ids[0:4], ids[4:6], [], []], calls.claims
    assert _statuses(queue) == {"done": 6}
    assert effects_by_id(receiver.inbox.path) == dict.fromkeys(ids, 1)


def test_a_slow_delivery_does_not_hold_the_others_past_three_quarters_of_their_lease(
    tmp_path: Path,
) -> None:
    """Rule 3: the deliveries back are finished as one group once the first lease among
    them has a quarter left, while a slow one is still out; the slow one is finished in a
    group of its own when it is back. The slow delivery waits (bounded, inside its lease)
    until it sees the others done in the queue: a round that finished only once the
    whole batch was back would never let it see that."""
    queue, ids = queue_of(tmp_path, 3)
    calls = _Calls(queue)
    lease_ms = 2000  # the others' group is due 1,500 ms after the claim
    seen_done: list[bool] = []

    def send(event: dict[str, Any]) -> bool:
        if event["id"] != ids[0]:
            return True
        for _ in range(190):  # up to 1.9 s, inside the slow one's own lease
            others = [jobs_of(queue)[job_id]["status"] for job_id in ids[1:]]
            if others == ["done", "done"]:
                break
            threading.Event().wait(0.01)
        seen_done.append(others == ["done", "done"])
        return True

    rounds = BatchRounds(calls, 3, 3, 100)
    try:
        report = run_courier(
            queue, "c1", send, lease_ms=lease_ms, stop_rules=StopRules(max_runs=1), rounds=rounds
        )
    finally:
        rounds.close()
    assert seen_done == [True], "the others waited for the slow delivery to be finished"
    assert calls.finishes == 2
    assert [r["id"] for r in report.results] == [ids[1], ids[2], ids[0]]
    assert [r["status"] for r in report.results] == ["done"] * 3


def test_deliveries_back_well_inside_their_leases_are_finished_in_one_group(
    tmp_path: Path,
) -> None:
    """Rule 3's other half: while no lease is near its last quarter, the round waits for
    the whole batch and finishes it with one ``finish_many`` (one commit), however far
    apart the deliveries come back."""
    queue, ids = queue_of(tmp_path, 3)
    calls = _Calls(queue)
    back: list[str] = []
    turn = threading.Condition()

    def send(event: dict[str, Any]) -> bool:
        with turn:  # each comes back after the one before it, 50 ms later
            turn.wait_for(lambda: back == ids[: ids.index(event["id"])], timeout=WAIT_S)
        threading.Event().wait(0.05)
        with turn:
            back.append(event["id"])
            turn.notify_all()
        return True

    rounds = BatchRounds(calls, 3, 3, TIMEOUT_MS)
    try:
        report = run_courier(
            queue, "c1", send, lease_ms=LEASE_MS, stop_rules=StopRules(max_runs=1), rounds=rounds
        )
    finally:
        rounds.close()
    assert back == ids
    assert calls.finishes == 1
    assert [r["status"] for r in report.results] == ["done"] * 3
