"""(c) The story end to end on PostgreSQL, with real courier processes and the real receiver.

The same story as ``test_story.py``, with the couriers on one PostgreSQL database
(``drills.pg_courier``: ``pgworker.run_database`` rounds over real HTTP, spawned
interpreters). Courier c1 delivers the one order; the receiver commits the effect
and answers 200; c1 is SIGKILLed before it records ``finish``. Courier c2 finds the
job still leased, waits for the lease to expire, claims it with fencing token 2
and sends it again. The receiver sees two HTTP requests but keeps one inbox row and
one effect. c1's ticket, captured by c1 itself before sending, can no longer finish
anything.
"""

from __future__ import annotations

import json
import signal
import time
from multiprocessing.context import SpawnProcess
from pathlib import Path
from typing import Any

import pgworker
from courier.receiver import Receiver
from courier.runner import clock_ms
from tests.processes import drills
from tests.processes.conftest import Spawner

TTL_MS = 30_000
ORDER = {"id": "order-1", "qty": 5}
REPORT_TIMEOUT_S = 30.0
COURIER_TIMEOUT_S = 20.0


def one_order_queue(conninfo: str) -> None:
    con = pgworker.open_queue(conninfo)
    try:
        assert pgworker.enqueue(con, dict(ORDER), clock_ms(), TTL_MS)
    finally:
        con.close()


def wait_for_report(path: Path, proc: SpawnProcess) -> dict[str, Any] | None:
    """The stalled courier's report, once written, while ``proc`` runs (bounded)."""
    until = time.monotonic() + REPORT_TIMEOUT_S
    while time.monotonic() < until and proc.is_alive():
        if path.exists():
            report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return report
        time.sleep(0.01)
    return None


def the_job(conninfo: str) -> dict[str, Any]:
    con = pgworker.open_queue(conninfo)
    try:
        (row,) = con.execute("SELECT status, owner, token, attempts, lease_until FROM jobs")
        return dict(zip(("status", "owner", "token", "attempts", "lease_until"), row, strict=True))
    finally:
        con.close()


def start_courier(
    spawner: Spawner, conninfo: str, receiver: Receiver, owner: str, log: Path, *stall: Any
) -> SpawnProcess:
    return spawner.start(
        drills.pg_courier, conninfo, receiver.url, owner, str(log), COURIER_TIMEOUT_S, *stall
    )


def test_killed_courier_is_recovered_and_the_receiver_applies_the_effect_once(
    tmp_path: Path, pg_conninfo: str, receiver: Receiver, spawner: Spawner
) -> None:
    one_order_queue(pg_conninfo)
    report_path = tmp_path / "c1.stalled.json"
    c1 = start_courier(
        spawner, pg_conninfo, receiver, "c1", tmp_path / "c1.log", 1, str(report_path), 20.0
    )
    report = wait_for_report(report_path, c1)
    assert report is not None, "c1 never reported its stall"
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
    c1.kill()
    c1.join(10)
    assert c1.exitcode == -signal.SIGKILL
    job = the_job(pg_conninfo)
    assert (job["status"], job["owner"], job["token"], job["lease_until"]) == (
        "leased",
        "c1",
        1,
        old_ticket["lease_until"],
    )

    c2 = start_courier(spawner, pg_conninfo, receiver, "c2", tmp_path / "c2.log")
    c2.join(COURIER_TIMEOUT_S + 10)
    assert c2.exitcode == 0, (tmp_path / "c2.log").read_text()

    inbox = receiver.inbox.summary()
    assert (inbox["requests"], inbox["inbox_rows"], inbox["effects"]) == (2, 1, 1)
    assert inbox["total_qty"] == ORDER["qty"]
    first, second = receiver.inbox.requests()
    assert (first["sender"], first["status"]) == ("c1", 200)
    assert (second["sender"], second["status"]) == ("c2", 200)
    assert second["at_ms"] >= old_ticket["lease_until"], "c2 re-sent before c1's lease expired"
    job = the_job(pg_conninfo)
    assert (job["status"], job["token"], job["attempts"], job["owner"]) == ("done", 2, 2, None)

    # c1 wakes up late with its old ticket: the fencing token keeps it out.
    con = pgworker.open_queue(pg_conninfo)
    try:
        rows_before = con.execute("SELECT * FROM jobs").fetchall()
        assert pgworker.finish(con, old_ticket, "ok", clock_ms()) is False
        assert con.execute("SELECT * FROM jobs").fetchall() == rows_before
    finally:
        con.close()


def test_a_late_courier_that_was_not_killed_finds_its_result_stale(
    tmp_path: Path, pg_conninfo: str, receiver: Receiver, spawner: Spawner
) -> None:
    one_order_queue(pg_conninfo)
    report_path = tmp_path / "c1.stalled.json"
    c1_log = tmp_path / "c1.log"
    c1 = start_courier(spawner, pg_conninfo, receiver, "c1", c1_log, 1, str(report_path), 2.5)
    assert wait_for_report(report_path, c1) is not None

    c2 = start_courier(spawner, pg_conninfo, receiver, "c2", tmp_path / "c2.log")
    c2.join(COURIER_TIMEOUT_S + 10)
    assert c2.exitcode == 0, (tmp_path / "c2.log").read_text()
    c1.join(COURIER_TIMEOUT_S + 10)
    assert c1.exitcode == 0, c1_log.read_text()

    assert "c1: order-1 token=1 -> stale" in c1_log.read_text()
    job = the_job(pg_conninfo)
    assert (job["status"], job["token"], job["attempts"]) == ("done", 2, 2)
    inbox = receiver.inbox.summary()
    assert (inbox["requests"], inbox["inbox_rows"], inbox["effects"]) == (2, 1, 1)
