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
from contextlib import closing
from multiprocessing.context import SpawnProcess
from pathlib import Path
from typing import Any

import pgworker
from courier.receiver import Receiver
from tests.processes import drills
from tests.processes.conftest import Spawner
from tests.processes.test_story import (
    ORDER,
    assert_c2_resent_after_the_lease,
    assert_done_by_c2_and_fenced,
    assert_still_leased_to_c1,
    c1s_first_ticket,
    one_order_queue,
)

REPORT_TIMEOUT_S = 30.0
COURIER_TIMEOUT_S = 20.0


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
    one_order_queue(pgworker, pg_conninfo)
    report_path = tmp_path / "c1.stalled.json"
    c1 = start_courier(
        spawner, pg_conninfo, receiver, "c1", tmp_path / "c1.log", 1, str(report_path), 20.0
    )
    report = wait_for_report(report_path, c1)
    assert report is not None, "c1 never reported its stall"
    old_ticket = c1s_first_ticket(report)
    assert receiver.inbox.summary()["effects"] == 1
    c1.kill()
    c1.join(10)
    assert c1.exitcode == -signal.SIGKILL
    assert_still_leased_to_c1(the_job(pg_conninfo), old_ticket)

    c2 = start_courier(spawner, pg_conninfo, receiver, "c2", tmp_path / "c2.log")
    c2.join(COURIER_TIMEOUT_S + 10)
    assert c2.exitcode == 0, (tmp_path / "c2.log").read_text()

    inbox = receiver.inbox.summary()
    assert (inbox["requests"], inbox["inbox_rows"], inbox["effects"]) == (2, 1, 1)
    assert inbox["total_qty"] == ORDER["qty"]
    assert_c2_resent_after_the_lease(receiver, old_ticket)
    with closing(pgworker.open_queue(pg_conninfo)) as con:
        assert_done_by_c2_and_fenced(pgworker, con, the_job(pg_conninfo), old_ticket)


def test_a_late_courier_that_was_not_killed_finds_its_result_stale(
    tmp_path: Path, pg_conninfo: str, receiver: Receiver, spawner: Spawner
) -> None:
    one_order_queue(pgworker, pg_conninfo)
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
