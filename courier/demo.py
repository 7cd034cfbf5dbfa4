"""The demo: two courier processes, one killed mid-delivery, the other recovers.

On a temporary queue file and a receiver on a free loopback port, it enqueues a
batch of orders and starts courier c1 as a child process. Right after the receiver
has committed c1's N-th delivery, and before c1 records it in the queue, c1 is
killed with SIGKILL (c1 stalls at that point and reports, so the kill is not left
to timing luck). Courier c2, another child process, delivers the remaining orders
and, once c1's lease has expired, claims the killed order with a new fencing token
and delivers it again; the receiver's inbox absorbs the duplicate.

With ``backend="postgres"`` the queue is a database on a throwaway PostgreSQL
server (``courier.embedded``), the couriers are the same ``courier run`` processes
given its URL, and every lease is judged on the server's clock; the story and its
checks are the same. The receiver's inbox stays a SQLite file.

It prints each order's final status, token and attempts, the receiver's HTTP
requests and effects, and exits non-zero if any invariant fails: the audit of the
queue file against the inbox (``courier.audit``: nothing lost, no effect twice, no
done order without its effect), every order done, more requests than effects, the
killed order re-sent once with token 2.
"""

from __future__ import annotations

import contextlib
import signal
import sqlite3
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from courier import backend, queueview
from courier import backend as _backend
from courier.audit import Audit, audit_files
from courier.clock import clock_ms
from courier.procs import Children, courier_command, wait_for_report
from courier.receiver import Receiver

__all__ = ["KILL_AFTER", "LEASE_MS", "ORDERS", "run_demo"]

ORDERS = 8
LEASE_MS = 800
KILL_AFTER = 3
TTL_MS = 30_000
MAX_ATTEMPTS = 3
# Worst case (nothing works): 10 s for c1's stall report, then 15 s + 2 s for c2.
REPORT_TIMEOUT_S = 10.0
COURIER_TIMEOUT_S = 15.0
LOG_LINES = 30

Out = Callable[[str], None]


def _print(line: str = "") -> None:
    print(line, flush=True)


def make_orders(count: int) -> list[dict[str, Any]]:
    """``count`` orders with ids ``order-01``... and small, varied quantities."""
    return [{"id": f"order-{n:02d}", "qty": 1 + (n * 7) % 10} for n in range(1, count + 1)]


def enqueue_orders(target: backend.Target, orders: list[dict[str, Any]]) -> None:
    """Create the queue at ``target`` (a file or a conninfo) and enqueue every order (all new)."""
    module = backend.queue_module(target)
    con = backend.open_queue(target)
    try:
        now = backend.server_clock_ms(con) if backend.is_conninfo(target) else clock_ms()
        for order in orders:
            if not module.enqueue(con, dict(order), now, TTL_MS, MAX_ATTEMPTS):
                raise RuntimeError(f"order {order['id']} was already queued")
    finally:
        con.close()


@contextlib.contextmanager
def demo_queue(workdir: Path, kind: str) -> Iterator[backend.Target]:
    """The demo's queue: a file in ``workdir``, or a database on a throwaway server."""
    if kind == "sqlite":
        yield workdir / "queue.sqlite"
        return
    from courier.embedded import embedded_server

    with embedded_server() as conninfo:
        yield conninfo


def _courier(queue: backend.Target, url: str, owner: str, lease_ms: int, *extra: str) -> list[str]:
    return courier_command(
        "run",
        str(queue),
        "--url",
        url,
        "--owner",
        owner,
        "--lease-ms",
        str(lease_ms),
        "--max-seconds",
        str(COURIER_TIMEOUT_S),
        *extra,
    )


class Run:
    """What happened in one demo run, gathered for the table and the checks."""

    def __init__(self, orders: list[dict[str, Any]]) -> None:
        self.orders = orders
        self.stall: dict[str, Any] | None = None
        self.c1_exit: int | None = None
        self.c2_exit: int | None = None
        self.at_kill: dict[str, Any] | None = None  # the killed order's row right after
        self.jobs: list[dict[str, Any]] = []
        self.inbox: dict[str, Any] = {}
        self.audit: Audit | None = None
        self.logs: dict[str, str] = {}

    @property
    def killed_id(self) -> str | None:
        return None if self.stall is None else str(self.stall["event"]["id"])


def _find(jobs: list[dict[str, Any]], job_id: str | None) -> dict[str, Any] | None:
    return next((job for job in jobs if job["id"] == job_id), None)


def _row_text(job: dict[str, Any] | None) -> str:
    if job is None:
        return "no order was in flight"
    owner = f" to {job['owner']}" if job["owner"] else ""
    return f"{job['id']} is {job['status']}{owner} with token {job['token']}"


def _exit_text(code: int | None) -> str:
    if code is None:
        return "still running"
    if code < 0:
        return f"killed by {signal.Signals(-code).name}"
    return f"exited with status {code}"


def _wait(proc: subprocess.Popen[bytes], timeout_s: float) -> int | None:
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return None


def _play(
    run: Run, workdir: Path, queue: backend.Target, lease_ms: int, kill_after: int, out: Out
) -> None:
    """Run the story on ``queue`` (inbox in ``workdir``) and fill ``run`` with what happened."""
    enqueue_orders(queue, run.orders)
    with Receiver(workdir / "inbox.sqlite") as receiver, Children() as children:
        out(f"receiver listening on {receiver.url}")
        report_path = workdir / "c1.stalled.json"
        drill = ["--stall-after-acks", str(kill_after), "--stall-report", str(report_path)]
        c1 = children.start(
            _courier(queue, receiver.url, "c1", lease_ms, *drill), workdir / "c1.log"
        )
        out(f"c1 started (pid {c1.pid}); it stalls right after its delivery #{kill_after} is acked")
        run.stall = wait_for_report(report_path, c1, REPORT_TIMEOUT_S)
        if run.stall is not None:
            ticket = run.stall["ticket"] or {}
            out(
                f"c1 got 200 for {run.killed_id} (token {ticket.get('token')}): the receiver "
                "has committed it, the queue has not been told"
            )
        run.c1_exit = children.kill(c1)
        run.at_kill = _find(queueview.read_queue(queue)["jobs"], run.killed_id)
        out(f"c1 {_exit_text(run.c1_exit)}; {_row_text(run.at_kill)}")
        c2 = children.start(
            _courier(queue, receiver.url, "c2", lease_ms, "--until-drained"),
            workdir / "c2.log",
        )
        out(f"c2 started (pid {c2.pid}); it takes over once c1's lease expires")
        run.c2_exit = _wait(c2, COURIER_TIMEOUT_S + 2)
        run.inbox = receiver.inbox.summary()
    run.jobs = queueview.read_queue(queue)["jobs"]
    expected = {order["id"]: order["qty"] for order in run.orders}
    run.audit = audit_files(queue, workdir / "inbox.sqlite", expected)
    for name in ("c1", "c2"):
        run.logs[name] = (workdir / f"{name}.log").read_text(encoding="utf-8", errors="replace")


def check(run: Run) -> list[str]:
    """Every invariant of the story that does not hold, as one line each."""
    failures: list[str] = []
    total = len(run.orders)
    if run.stall is None:
        failures.append("c1 never reported its stall, so it was not killed mid-delivery")
    if run.c1_exit != -signal.SIGKILL:
        failures.append(f"c1 should have died by SIGKILL, exit status {run.c1_exit}")
    if run.c2_exit != 0:
        failures.append(f"c2 should have exited 0, exit status {run.c2_exit}")
    if run.audit is not None:
        failures += [f"audit: {failure}" for failure in run.audit.failures()]
    not_done = [job["id"] for job in run.jobs if job["status"] != "done"]
    if not_done or len(run.jobs) != total:
        failures.append(f"every order should be done; not done: {not_done}")
    inbox = run.inbox
    if not inbox.get("requests", 0) > inbox.get("effects", 0):
        failures.append("expected more HTTP requests than effects (the re-send after the kill)")
    if run.at_kill is not None and (run.at_kill["status"], run.at_kill["owner"]) != (
        "leased",
        "c1",
    ):
        failures.append(f"c1 should have been killed before finish, but: {run.at_kill}")
    killed = _find(run.jobs, run.killed_id)
    if killed is not None and (killed["token"], killed["attempts"]) != (2, 2):
        failures.append(f"the killed order should end with token 2 after 2 attempts: {killed}")
    rows = {row["id"]: row for row in inbox.get("rows", [])}
    if run.killed_id is not None and rows.get(run.killed_id, {}).get("requests") != 2:
        failures.append(f"the killed order should have been sent exactly twice: {rows}")
    return failures


def render(run: Run, out: Out) -> None:
    """Print the orders table and the receiver's totals."""
    rows = {row["id"]: row for row in run.inbox.get("rows", [])}
    out("")
    out(
        f"{'order':<10}{'qty':>4}  {'status':<8}{'token':>5}{'attempts':>10}"
        f"{'requests':>10}{'effects':>9}  effect by"
    )
    for job in run.jobs:
        row = rows.get(job["id"], {})
        note = (
            "  <- c1 killed after this delivery; c2 re-sent it"
            if job["id"] == run.killed_id
            else ""
        )
        out(
            f"{job['id']:<10}{job['qty']:>4}  {job['status']:<8}{job['token']:>5}"
            f"{job['attempts']:>10}{row.get('requests', 0):>10}{row.get('effects', 0):>9}"
            f"  {row.get('sender')}{note}"
        )
    inbox = run.inbox
    out("")
    out(
        f"receiver: {inbox.get('requests')} HTTP requests, {inbox.get('effects')} effects, "
        f"{inbox.get('inbox_rows')} inbox rows, total qty {inbox.get('total_qty')}"
    )


def _show_logs(run: Run, out: Out) -> None:
    """Print the last lines of each courier's own output."""
    for name, text in run.logs.items():
        out(f"{name} said:")
        for line in text.splitlines()[-LOG_LINES:]:
            out(f"  {line}")


def run_demo(
    orders: int = ORDERS,
    lease_ms: int = LEASE_MS,
    kill_after: int = KILL_AFTER,
    out: Out = _print,
    backend: str = "sqlite",
) -> int:
    """Play the story once on a temporary queue; return 0 if every invariant holds, else 1.

    ``backend`` is ``sqlite`` (a temporary file) or ``postgres`` (a throwaway server).
    """
    if backend not in ("sqlite", "postgres"):
        raise ValueError(f"'backend' must be 'sqlite' or 'postgres', got {backend!r}")
    if not 1 <= kill_after < orders <= 99:
        raise ValueError(f"need 1 <= kill_after < orders <= 99, got {kill_after} and {orders}")
    if not 100 <= lease_ms <= 10_000:
        raise ValueError(f"'lease_ms' must be in 100..10000 for the demo, got {lease_ms}")
    started = time.monotonic()
    run = Run(make_orders(orders))
    where = "a queue file" if backend == "sqlite" else "an embedded PostgreSQL server"
    out(f"lease-queue demo: {orders} orders, couriers c1 and c2, lease {lease_ms} ms, on {where}")
    with tempfile.TemporaryDirectory(prefix="courier-demo-") as tmp:
        try:
            with demo_queue(Path(tmp), backend) as queue:
                _play(run, Path(tmp), queue, lease_ms, kill_after, out)
        except (OSError, RuntimeError, sqlite3.Error, _backend.Unreachable) as error:
            out(f"demo could not run: {error}")
            return 1
        failures = check(run)
        _show_logs(run, out)
        render(run, out)
    elapsed = time.monotonic() - started
    if failures:
        out(f"FAILED after {elapsed:.1f} s:")
        for failure in failures:
            out(f"  - {failure}")
        return 1
    out(
        f"OK in {elapsed:.1f} s: every order done, one effect per order, "
        f"{run.inbox['requests'] - run.inbox['effects']} duplicate send absorbed by the inbox"
    )
    return 0
