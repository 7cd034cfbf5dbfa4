"""(c) The story end to end, with real courier processes and the real receiver.

Courier c1 (a child ``python -m courier run``) delivers the one order; the receiver
commits the effect and answers 200; c1 is SIGKILLed before it records ``finish``.
Courier c2 (another child) finds the job still leased, waits for the lease to
expire, claims it with fencing token 2 and sends it again. The receiver sees two
HTTP requests but keeps one inbox row and one effect (``courier.audit`` holds the
queue file against the inbox). c1's ticket, captured by c1 itself before sending,
can no longer finish anything.
"""

from __future__ import annotations

import signal
import subprocess
from contextlib import closing
from pathlib import Path
from types import ModuleType
from typing import Any

import worker
from courier import queueview
from courier.audit import audit_files
from courier.clock import clock_ms
from courier.procs import Children, courier_command, wait_for_report
from courier.receiver import Receiver

LEASE_MS = 1000
TTL_MS = 30_000
ORDER: dict[str, Any] = {"id": "order-1", "qty": 5}
REPORT_TIMEOUT_S = 15.0
COURIER_TIMEOUT_S = 20.0


def one_order_queue(queue: ModuleType, target: str | Path) -> None:
    """The story's queue: the one order, enqueued now (``queue``: worker or pgworker)."""
    with closing(queue.open_queue(target)) as con:
        assert queue.enqueue(con, dict(ORDER), clock_ms(), TTL_MS)


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


def stalled_c1(
    tmp_path: Path, receiver: Receiver, children: Children, stall_s: float
) -> tuple[Path, subprocess.Popen[bytes], dict[str, Any]]:
    """The one order's queue, and c1 stalled right after its first 2xx, with its report
    (the ticket it captured before sending)."""
    queue = tmp_path / "queue.sqlite"
    one_order_queue(worker, queue)
    report_path = tmp_path / "c1.stalled.json"
    drill = ["--stall-after-acks", "1", "--stall-report", str(report_path)]
    argv = courier(
        queue, receiver, "c1", "--until-drained", *drill, "--stall-seconds", str(stall_s)
    )
    c1 = children.start(argv, tmp_path / "c1.log")
    report = wait_for_report(report_path, c1, REPORT_TIMEOUT_S)
    assert report is not None, (tmp_path / "c1.log").read_text()
    return queue, c1, report


def drain_with_c2(tmp_path: Path, queue: Path, receiver: Receiver, children: Children) -> None:
    """c2 delivers until nothing is pending or leased, and exits 0."""
    c2 = children.start(courier(queue, receiver, "c2", "--until-drained"), tmp_path / "c2.log")
    assert wait(c2) == 0, (tmp_path / "c2.log").read_text()


def the_job(queue: Path) -> dict[str, Any]:
    (job,) = queueview.read_queue(queue)["jobs"]
    return job


def wait(proc: subprocess.Popen[bytes]) -> int:
    return proc.wait(timeout=COURIER_TIMEOUT_S + 5)


def assert_one_effect_for_two_sends(queue: Path, receiver: Receiver) -> None:
    """The audit of the files holds, with two delivery requests and one effect."""
    audit = audit_files(queue, receiver.inbox.path, {ORDER["id"]: ORDER["qty"]})
    assert audit.ok, audit.failures()
    assert (audit.done, audit.effects, audit.deliveries) == (1, 1, 2)


# The steps of the story that every backend shares (test_story_postgres.py uses them).


def c1s_first_ticket(report: dict[str, Any]) -> dict[str, Any]:
    """The ticket in c1's stall report, which must be the order's first lease; and the
    receiver has committed that delivery while the queue has not heard of it."""
    ticket: dict[str, Any] = report["ticket"]
    first = {**ORDER, "owner": "c1", "token": 1, "attempt": 1}
    assert ticket == {**first, "lease_until": ticket["lease_until"]}
    return ticket


def assert_still_leased_to_c1(job: dict[str, Any], old_ticket: dict[str, Any]) -> None:
    """After c1's SIGKILL the job is still c1's lease, untouched."""
    held = (job["status"], job["owner"], job["token"], job["lease_until"])
    assert held == ("leased", "c1", 1, old_ticket["lease_until"])


def assert_c2_resent_after_the_lease(receiver: Receiver, old_ticket: dict[str, Any]) -> None:
    """Two requests, c1's then c2's, both answered 200; c2's after c1's lease ran out."""
    first, second = receiver.inbox.requests()
    assert (first["sender"], first["status"]) == ("c1", 200)
    assert (second["sender"], second["status"]) == ("c2", 200)
    assert second["at_ms"] >= old_ticket["lease_until"], "c2 re-sent before c1's lease expired"


def assert_done_by_c2_and_fenced(
    queue: ModuleType, con: Any, job: dict[str, Any], old_ticket: dict[str, Any]
) -> None:
    """The job is done by c2's lease (token 2); c1 wakes up late with its old ticket,
    and the fencing token keeps it out (``queue`` is ``worker`` or ``pgworker``)."""
    assert (job["status"], job["token"], job["attempts"], job["owner"]) == ("done", 2, 2, None)
    rows_before = con.execute("SELECT * FROM jobs").fetchall()
    assert queue.finish(con, old_ticket, "ok", clock_ms()) is False
    assert con.execute("SELECT * FROM jobs").fetchall() == rows_before


def test_killed_courier_is_recovered_and_the_receiver_applies_the_effect_once(
    tmp_path: Path, receiver: Receiver, children: Children
) -> None:
    queue, c1, report = stalled_c1(tmp_path, receiver, children, 20)
    old_ticket = c1s_first_ticket(report)
    assert the_job(queue)["status"] == "leased"
    assert children.kill(c1) == -signal.SIGKILL
    assert_still_leased_to_c1(the_job(queue), old_ticket)

    drain_with_c2(tmp_path, queue, receiver, children)

    assert_one_effect_for_two_sends(queue, receiver)
    assert_c2_resent_after_the_lease(receiver, old_ticket)
    with closing(worker.open_queue(queue)) as con:
        assert_done_by_c2_and_fenced(worker, con, the_job(queue), old_ticket)


def test_a_late_courier_that_was_not_killed_finds_its_result_stale(
    tmp_path: Path, receiver: Receiver, children: Children
) -> None:
    queue, c1, _ = stalled_c1(tmp_path, receiver, children, LEASE_MS / 1000 * 2.5)

    drain_with_c2(tmp_path, queue, receiver, children)
    assert wait(c1) == 0, (tmp_path / "c1.log").read_text()

    assert "c1: order-1 token=1 -> stale" in (tmp_path / "c1.log").read_text()
    job = the_job(queue)
    assert (job["status"], job["token"], job["attempts"]) == ("done", 2, 2)
    assert_one_effect_for_two_sends(queue, receiver)
