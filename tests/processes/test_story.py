"""(c) The story end to end, with real courier processes and the real receiver.

Courier c1 (a child ``python -m courier run``) delivers the one order; the receiver
commits the effect and answers 200; c1 is SIGKILLed before it records ``finish``.
Courier c2 (another child) finds the job still leased, waits for the lease to
expire, claims it with fencing token 2 and sends it again. The receiver sees two
HTTP requests but keeps one inbox row and one effect. c1's ticket, captured by c1
itself before sending, can no longer finish anything.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import worker
from courier import queueview
from courier.procs import Children, courier_command, wait_for_report
from courier.receiver import Receiver
from courier.runner import clock_ms

LEASE_MS = 1000
TTL_MS = 30_000
ORDER = {"id": "order-1", "qty": 5}
REPORT_TIMEOUT_S = 15.0
COURIER_TIMEOUT_S = 20.0


def one_order_queue(path: Path) -> None:
    con = worker.open_queue(path)
    try:
        assert worker.enqueue(con, dict(ORDER), clock_ms(), TTL_MS)
    finally:
        con.close()


def courier(queue: Path, receiver: Receiver, owner: str, *extra: str) -> list[str]:
    return courier_command(
        "run",
        queue,
        "--url",
        receiver.url,
        "--owner",
        owner,
        "--lease-ms",
        str(LEASE_MS),
        "--max-seconds",
        str(COURIER_TIMEOUT_S),
        *extra,
    )


def stalling_courier(queue: Path, receiver: Receiver, report: Path, seconds: float) -> list[str]:
    """c1: stalls right after its first 2xx, reporting the ticket it captured before sending."""
    return courier(
        queue,
        receiver,
        "c1",
        "--until-drained",
        "--stall-after-acks",
        "1",
        "--stall-report",
        str(report),
        "--stall-seconds",
        str(seconds),
    )


def the_job(queue: Path) -> dict[str, Any]:
    con = queueview.connect_existing(queue)
    try:
        (job,) = queueview.job_rows(con)
        return job
    finally:
        con.close()


def wait(proc: subprocess.Popen[bytes]) -> int:
    return proc.wait(timeout=COURIER_TIMEOUT_S + 5)


def test_killed_courier_is_recovered_and_the_receiver_applies_the_effect_once(
    tmp_path: Path, receiver: Receiver, children: Children
) -> None:
    queue = tmp_path / "queue.sqlite"
    one_order_queue(queue)
    report_path = tmp_path / "c1.stalled.json"
    c1 = children.start(stalling_courier(queue, receiver, report_path, 20), tmp_path / "c1.log")

    report = wait_for_report(report_path, c1, REPORT_TIMEOUT_S)
    assert report is not None, (tmp_path / "c1.log").read_text()
    old_ticket = report["ticket"]
    assert old_ticket == {
        **ORDER,
        "owner": "c1",
        "token": 1,
        "attempt": 1,
        "lease_until": old_ticket["lease_until"],
    }
    # The receiver has committed c1's delivery; the queue has not heard of it.
    assert receiver.inbox.summary()["effects"] == 1
    assert the_job(queue)["status"] == "leased"
    assert children.kill(c1) == -signal.SIGKILL
    job = the_job(queue)
    assert (job["status"], job["owner"], job["token"], job["lease_until"]) == (
        "leased",
        "c1",
        1,
        old_ticket["lease_until"],
    )

    c2 = children.start(courier(queue, receiver, "c2", "--until-drained"), tmp_path / "c2.log")
    assert wait(c2) == 0, (tmp_path / "c2.log").read_text()

    inbox = receiver.inbox.summary()
    assert (inbox["requests"], inbox["inbox_rows"], inbox["effects"]) == (2, 1, 1)
    assert inbox["total_qty"] == ORDER["qty"]
    first, second = receiver.inbox.requests()
    assert (first["sender"], first["status"]) == ("c1", 200)
    assert (second["sender"], second["status"]) == ("c2", 200)
    assert second["at_ms"] >= old_ticket["lease_until"], "c2 re-sent before c1's lease expired"
    job = the_job(queue)
    assert (job["status"], job["token"], job["attempts"], job["owner"]) == ("done", 2, 2, None)

    # c1 wakes up late with its old ticket: the fencing token keeps it out.
    con = worker.open_queue(queue)
    try:
        rows_before = con.execute("SELECT * FROM jobs").fetchall()
        assert worker.finish(con, old_ticket, "ok", clock_ms()) is False
        assert con.execute("SELECT * FROM jobs").fetchall() == rows_before
    finally:
        con.close()


def test_a_late_courier_that_was_not_killed_finds_its_result_stale(
    tmp_path: Path, receiver: Receiver, children: Children
) -> None:
    queue = tmp_path / "queue.sqlite"
    one_order_queue(queue)
    report_path = tmp_path / "c1.stalled.json"
    stall_s = LEASE_MS / 1000 * 2.5
    c1 = children.start(
        stalling_courier(queue, receiver, report_path, stall_s), tmp_path / "c1.log"
    )
    assert wait_for_report(report_path, c1, REPORT_TIMEOUT_S) is not None

    c2 = children.start(courier(queue, receiver, "c2", "--until-drained"), tmp_path / "c2.log")
    assert wait(c2) == 0, (tmp_path / "c2.log").read_text()
    assert wait(c1) == 0, (tmp_path / "c1.log").read_text()

    assert "c1: order-1 token=1 -> stale" in (tmp_path / "c1.log").read_text()
    job = the_job(queue)
    assert (job["status"], job["token"], job["attempts"]) == ("done", 2, 2)
    inbox = receiver.inbox.summary()
    assert (inbox["requests"], inbox["inbox_rows"], inbox["effects"]) == (2, 1, 1)
