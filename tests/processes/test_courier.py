"""The courier's HTTP send and loop against the real receiver and a real queue file.

How each answer is classified, that a timeout after the receiver's commit is
retried and absorbed by the inbox, and that a busy database pauses a courier
process instead of killing it.
"""

from __future__ import annotations

import fcntl
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

import worker
from courier.attempts import AttemptLog
from courier.clock import clock_ms
from courier.delivery import HttpSend, classify_status
from courier.file_rounds import FileRounds
from courier.interference import ReplyDelay
from courier.procs import Children, courier_command, project_root
from courier.receiver import Receiver
from courier.runner import CourierReport, run_courier
from courier.stop_rules import StopRules
from tests.processes.counting_server import counting_server

WAIT_S = 20.0


def queue_of(
    folder: Path, *job_ids: str, qty: int = 1, ttl_ms: int = 30_000, max_attempts: int = 3
) -> Path:
    """A new queue file in ``folder`` holding each job (``qty`` each), enqueued now."""
    queue = folder / "queue.sqlite"
    con = worker.open_queue(queue)
    now = clock_ms()
    for job_id in job_ids:
        assert worker.enqueue(con, {"id": job_id, "qty": qty}, now, ttl_ms, max_attempts)
    con.close()
    return queue


def drain(target: Path | str, url: str, *, record_attempts: bool = False) -> CourierReport:
    """Run courier c1 quietly on ``target`` (a queue file or a conninfo) until it is drained.

    Each delivery goes to ``url``; the run is bounded by ``WAIT_S``. With
    ``record_attempts`` every attempt goes to the queue file's attempt log.
    """
    attempts = AttemptLog(target) if record_attempts else None
    try:
        return run_courier(
            target,
            "c1",
            HttpSend(url, "c1"),
            stop_rules=StopRules(max_seconds=WAIT_S, until_drained=True),
            log=lambda line: None,
            attempts=attempts,
        )
    finally:
        if attempts is not None:
            attempts.close()


@pytest.mark.parametrize("status", [200, 201, 204, 299])
def test_2xx_is_an_acknowledgement(status: int) -> None:
    assert classify_status(status) is True


@pytest.mark.parametrize("status", [408, 429, 500, 502, 503, 599])
def test_timeouts_throttling_and_5xx_are_retryable(status: int) -> None:
    with pytest.raises(worker.Retryable):
        classify_status(status)


@pytest.mark.parametrize("status", [301, 303, 400, 401, 404, 405, 409, 413, 422])
def test_other_statuses_are_permanent(status: int) -> None:
    with pytest.raises(worker.Permanent):
        classify_status(status)


def test_send_is_true_for_a_new_delivery_and_for_a_duplicate(receiver: Receiver) -> None:
    send = HttpSend(receiver.url, "c1")
    assert send({"id": "a", "qty": 2}) is True
    assert send({"id": "a", "qty": 2}) is True
    assert receiver.inbox.summary()["effects"] == 1
    assert [row["sender"] for row in receiver.inbox.requests()] == ["c1", "c1"]


def test_send_refused_by_the_receiver_is_permanent(receiver: Receiver) -> None:
    send = HttpSend(receiver.url, "c1")
    send({"id": "a", "qty": 2})
    with pytest.raises(worker.Permanent, match="409"):
        send({"id": "a", "qty": 3})
    with pytest.raises(worker.Permanent, match="422"):
        send({"id": "not valid", "qty": 3})  # the receiver closes after a refusal
    assert send({"id": "c", "qty": 1}) is True  # on a new connection
    with pytest.raises(worker.Permanent, match="404"):
        HttpSend(receiver.base_url + "/elsewhere", "c1")({"id": "b", "qty": 1})


@pytest.mark.parametrize("closing", [False, True])
def test_send_keeps_its_connection_while_the_server_does(closing: bool) -> None:
    with counting_server(closing) as server, HttpSend(server.url, "c1") as send:
        assert [send({"id": f"j{n}", "qty": 1}) for n in range(3)] == [True] * 3
    assert server.connections == (3 if closing else 1)


def test_send_opens_a_new_connection_once_the_server_closed_the_idle_one(
    tmp_path: Path,
) -> None:
    with Receiver(tmp_path / "inbox.sqlite", read_timeout_s=0.1) as receiver:
        send = HttpSend(receiver.url, "c1")
        assert send({"id": "a", "qty": 1}) is True
        time.sleep(0.4)  # the receiver closes the connection after 0.1 s idle
        assert send({"id": "b", "qty": 1}) is True
        send.close()
        summary = receiver.inbox.summary()
    assert (summary["requests"], summary["effects"]) == (2, 2)


def test_send_to_a_stopped_receiver_is_retryable(tmp_path: Path) -> None:
    with Receiver(tmp_path / "inbox.sqlite") as gone:
        url = gone.url
    with pytest.raises(worker.Retryable):
        HttpSend(url, "c1", timeout_ms=2000)({"id": "a", "qty": 1})


def test_a_timeout_after_the_commit_is_retried_and_the_inbox_absorbs_the_resend(
    tmp_path: Path,
) -> None:
    queue = queue_of(tmp_path, "slow", qty=3)
    with Receiver(tmp_path / "inbox.sqlite", interference=ReplyDelay(400)) as receiver:
        impatient = HttpSend(receiver.url, "c1", timeout_ms=100)
        first = worker.run_file(queue, "c1", clock_ms, impatient, 0.0)
        assert first == {"id": "slow", "token": 1, "status": "pending"}
        assert receiver.inbox.summary()["effects"] == 1  # the work was done all the same
        patient = HttpSend(receiver.url, "c1", timeout_ms=5000)
        report = run_courier(
            queue,
            "c1",
            patient,
            stop_rules=StopRules(max_seconds=WAIT_S, until_drained=True),
            log=lambda line: None,
        )
        summary = receiver.inbox.summary()
    assert report.stop_reason == "drained"
    assert report.results == [{"id": "slow", "token": 2, "status": "done"}]
    assert (summary["requests"], summary["effects"], summary["total_qty"]) == (2, 1, 3)


def test_run_courier_stops_when_idle_for_long_enough(tmp_path: Path, receiver: Receiver) -> None:
    queue = tmp_path / "queue.sqlite"
    worker.open_queue(queue).close()
    started = time.monotonic()
    report = run_courier(
        queue,
        "c1",
        HttpSend(receiver.url, "c1"),
        stop_rules=StopRules(max_seconds=WAIT_S, max_idle_ms=300),
        log=lambda line: None,
    )
    assert report.stop_reason == "idle"
    assert report.results == []
    assert 0.3 <= time.monotonic() - started < 5


def test_run_courier_refuses_a_missing_queue_file(tmp_path: Path, receiver: Receiver) -> None:
    with pytest.raises(FileNotFoundError):
        run_courier(tmp_path / "nope.sqlite", "c1", HttpSend(receiver.url, "c1"))
    assert not (tmp_path / "nope.sqlite").exists()


def wait_for_text(path: Path, text: str, timeout_s: float) -> bool:
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        if text in path.read_text(encoding="utf-8", errors="replace"):
            return True
        time.sleep(0.02)
    return False


def test_a_busy_database_pauses_the_courier_process_instead_of_killing_it(
    tmp_path: Path, receiver: Receiver, children: Children
) -> None:
    queue = tmp_path / "queue.sqlite"
    con = worker.open_queue(queue)
    assert worker.enqueue(con, {"id": "a", "qty": 1}, clock_ms(), 30_000)
    log = tmp_path / "c1.log"
    con.execute("BEGIN IMMEDIATE")  # hold the write lock past the courier's 1 s busy timeout
    try:
        courier = children.start(
            courier_command(
                "run",
                queue,
                "--url",
                receiver.url,
                "--owner",
                "c1",
                "--until-drained",
                "--max-seconds",
                str(WAIT_S),
            ),
            log,
        )
        assert wait_for_text(log, "queue busy", WAIT_S), log.read_text()
    finally:
        con.execute("COMMIT")
        con.close()
    assert courier.wait(timeout=WAIT_S + 5) == 0, log.read_text()
    assert "c1: a token=1 -> done" in log.read_text()


def test_sigterm_stops_a_courier_between_deliveries(
    tmp_path: Path, receiver: Receiver, children: Children
) -> None:
    queue = tmp_path / "queue.sqlite"
    worker.open_queue(queue).close()
    log = tmp_path / "c1.log"
    courier = children.start(
        courier_command(
            "run", queue, "--url", receiver.url, "--owner", "c1", "--max-seconds", str(WAIT_S)
        ),
        log,
    )
    assert wait_for_text(log, "c1: started", WAIT_S), log.read_text()  # handlers are set
    courier.send_signal(signal.SIGTERM)
    assert courier.wait(timeout=WAIT_S) == 0, log.read_text()
    assert "stopped (stopped)" in log.read_text()


def test_ctrl_c_during_a_hung_delivery_says_so_and_a_second_one_exits_130(
    tmp_path: Path, children: Children
) -> None:
    queue = queue_of(tmp_path, "slow", ttl_ms=60_000)
    log = tmp_path / "c1.log"
    # The answer comes only after 3 s (the hung delivery); the test is over long before.
    with Receiver(tmp_path / "inbox.sqlite", interference=ReplyDelay(3000)) as hung:
        argv: list[str | Path] = ["run", queue, "--url", hung.url, "--owner", "c1"]
        argv += ["--lease-ms", "30000"]
        courier = children.start(courier_command(*argv, "--max-seconds", str(WAIT_S)), log)
        until = time.monotonic() + WAIT_S
        while hung.inbox.summary()["requests"] == 0 and time.monotonic() < until:
            time.sleep(0.02)  # the delivery is on its way: the receiver holds its answer
        started = time.monotonic()
        courier.send_signal(signal.SIGINT)
        assert wait_for_text(log, "SIGINT: stopping after the current delivery", WAIT_S)
        courier.send_signal(signal.SIGINT)
        assert courier.wait(timeout=WAIT_S) == 130, log.read_text()
        assert time.monotonic() - started < 5, "the second Ctrl-C did not stop it at once"
    assert "interrupted" in log.read_text()


def test_the_attempt_log_keeps_each_cause_in_a_sidecar_file(
    tmp_path: Path, receiver: Receiver
) -> None:
    from courier.attempts import attempts_of, sidecar_path

    now = clock_ms()
    queue = queue_of(tmp_path, "a", "b", max_attempts=1)
    HttpSend(receiver.url, "seed")({"id": "b", "qty": 5})  # b with qty 1 is now a 409
    report = drain(queue, receiver.url, record_attempts=True)
    assert [r["status"] for r in report.results] == ["done", "dead"]
    assert sidecar_path(queue).exists()
    assert sqlite_tables(queue) == {"jobs", "redrives", "sqlite_sequence"}, "log kept outside"
    (ok,) = attempts_of(queue, "a")
    assert (ok["outcome"], ok["status"], ok["http_status"], ok["token"]) == ("ok", "done", 200, 1)
    (refused,) = attempts_of(queue, "b")
    assert (refused["outcome"], refused["status"], refused["kind"]) == (
        "permanent",
        "dead",
        "answer",
    )
    assert refused["http_status"] == 409 and "conflict" in refused["detail"]
    assert refused["owner"] == "c1" and refused["at_ms"] >= now
    shown = subprocess.run(
        courier_command("show", queue, "b", "--json"),
        cwd=project_root(),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    # show pairs each outcome with its claimed row (none here: run_courier was given the
    # bare send; courier run announces each delivery, see test_operator_side.py)
    assert json.loads(shown.stdout)["attempts"] == [{**refused, "claimed_at_ms": None}]


def test_a_courier_with_no_round_or_time_limit_runs_until_a_limit_it_was_given(
    tmp_path: Path, receiver: Receiver
) -> None:
    queue = tmp_path / "queue.sqlite"
    worker.open_queue(queue).close()
    report = run_courier(
        queue,
        "c1",
        HttpSend(receiver.url, "c1"),
        stop_rules=StopRules(max_runs=None, max_seconds=None, max_idle_ms=300),
        log=lambda line: None,
    )
    assert report.stop_reason == "idle" and report.runs > 1


def test_a_refused_connection_and_a_timeout_are_told_apart(tmp_path: Path) -> None:
    with Receiver(tmp_path / "gone.sqlite") as gone:
        url = gone.url
    with pytest.raises(worker.Retryable) as refused:
        HttpSend(url, "c1", timeout_ms=2000)({"id": "a", "qty": 1})
    assert refused.value.courier_cause.kind == "connection"  # type: ignore[attr-defined]
    with (
        Receiver(tmp_path / "slow.sqlite", interference=ReplyDelay(1000)) as slow,
        pytest.raises(worker.Retryable) as late,
    ):
        HttpSend(slow.url, "c1", timeout_ms=200)({"id": "a", "qty": 1})
    assert late.value.courier_cause.kind == "timeout"  # type: ignore[attr-defined]


def sqlite_tables(path: Path) -> set[str]:
    import sqlite3

    con = sqlite3.connect(path)
    try:
        return {
            name for (name,) in con.execute("SELECT name FROM sqlite_master WHERE type='table'")
        }
    finally:
        con.close()


def no_jitter() -> float:
    return 0.0


def test_rounds_on_a_file_follow_the_file_at_the_path(tmp_path: Path) -> None:
    queue = tmp_path / "queue.sqlite"
    delivered: list[str] = []

    def send(event: dict[str, object]) -> bool:
        delivered.append(str(event["id"]))
        return True

    rounds = FileRounds(queue)
    try:
        for name in ("first", "second"):  # the second file replaces the first
            partial = tmp_path / "partial.sqlite"
            con = worker.open_queue(partial)
            assert worker.enqueue(con, {"id": name, "qty": 1}, clock_ms(), 30_000)
            con.close()
            partial.replace(queue)
            assert rounds.round("c1", send, no_jitter, 1000) != []
            assert rounds.round("c1", send, no_jitter, 1000) == []
        queue.unlink()
        with pytest.raises(FileNotFoundError):
            rounds.round("c1", send, no_jitter, 1000)
    finally:
        rounds.close()
    assert delivered == ["first", "second"]
    assert not queue.exists()  # nothing was created


def _turn_is_free(queue: Path) -> bool:
    """True if another courier could take its turn at writing ``queue`` right now."""
    fd = os.open(queue, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        os.close(fd)  # which also gives the turn back
    return True


def test_a_round_writes_in_its_turn_and_sends_out_of_it(tmp_path: Path) -> None:
    queue = queue_of(tmp_path, "a", "b")
    free_while_sending: list[bool] = []

    def send(event: dict[str, object]) -> bool:
        free_while_sending.append(_turn_is_free(queue))
        return True

    rounds = FileRounds(queue)
    results: list[dict[str, object]] = []
    free_between: list[bool] = []
    opened, go = threading.Event(), threading.Event()

    def two_rounds() -> None:  # a connection is used and closed on the thread that made it
        try:
            results.extend(rounds.round("c1", send, no_jitter, 1000))
            free_between.append(_turn_is_free(queue))  # given back when the round ends
            opened.set()
            if go.wait(WAIT_S):
                results.extend(rounds.round("c1", send, no_jitter, 1000))
        finally:
            rounds.close()

    courier = threading.Thread(target=two_rounds)
    other = os.open(queue, os.O_RDONLY)  # another courier, about to hold its turn
    try:
        courier.start()
        assert opened.wait(WAIT_S)
        fcntl.flock(other, fcntl.LOCK_EX)
        go.set()
        courier.join(timeout=0.3)
        assert courier.is_alive() and len(results) == 1  # the claim waits for its turn
        fcntl.flock(other, fcntl.LOCK_UN)
        courier.join(timeout=WAIT_S)
    finally:
        go.set()
        os.close(other)
    assert [result["id"] for result in results] == ["a", "b"]
    assert free_while_sending == [True, True] and free_between == [True]
