"""Entry points run inside spawned child interpreters, and the state they act on.

A ``multiprocessing`` "spawn" child imports this module afresh, so everything a
child needs is a module-level function here. Times are fixed numbers (``NOW``...),
not the wall clock, so the parent can replay any operation on a copy of the queue
and know exactly which state a crash must leave behind.

Every drill runs on either backend, named as the contract suite names them:
``worker`` (the target is a queue file's path or a folder of them) or
``pgworker`` (the target is a PostgreSQL database's conninfo).
"""

from __future__ import annotations

import json
import os
import random
import signal
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from functools import partial
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from types import ModuleType
from typing import Any

import psycopg

import pgworker
import worker
from courier.clock import clock_ms
from courier.delivery import HttpSend
from courier.receiver import Receiver
from courier.transient import is_busy

NOW = 1_000_000
TTL_MS = 60_000
LEASE_MS = 1000
LATER = NOW + 5_000  # past every lease taken at NOW, before every deadline
WAIT_S = 30.0
BUSY_RETRIES = 20

MODULES: dict[str, ModuleType] = {"worker": worker, "pgworker": pgworker}
MARK = {"worker": "?", "pgworker": "%s"}  # each driver's parameter placeholder

Rows = dict[str, list[tuple[Any, ...]]]
Operation = Callable[[ModuleType, Any, worker.Fault | None, dict[str, Any] | None], object]


def open_queue(backend: str, target: str | Path) -> Any:
    """``open_queue`` of ``backend`` on ``target`` (a file path or a conninfo)."""
    return MODULES[backend].open_queue(target)


# --- Reading a whole queue -----------------------------------------------------------


def full_rows(con: Any) -> Rows:
    """Every row of ``jobs`` and ``redrives``, all columns, in order; on SQLite also
    ``sqlite_sequence`` (a PostgreSQL sequence is not transactional: a rolled-back
    insert moves it, so it is no part of the state a crash must keep)."""
    rows: Rows = {
        "jobs": con.execute("SELECT * FROM jobs ORDER BY seq").fetchall(),
        "redrives": con.execute("SELECT * FROM redrives ORDER BY seq").fetchall(),
    }
    if isinstance(con, sqlite3.Connection):
        has_sequence = con.execute(
            "SELECT count(*) FROM sqlite_master WHERE name = 'sqlite_sequence'"
        ).fetchone()[0]
        rows["sqlite_sequence"] = (
            con.execute("SELECT * FROM sqlite_sequence ORDER BY name").fetchall()
            if has_sequence
            else []
        )
    return rows


def retry_busy(action: Callable[[], Any]) -> Any:
    """Run ``action``; on SQLite's "database is locked" (which changed nothing) try
    again, bounded. PostgreSQL never answers busy: its claims skip locked rows."""
    for attempt in range(BUSY_RETRIES):
        try:
            return action()
        except sqlite3.OperationalError as error:
            if not is_busy(error) or attempt == BUSY_RETRIES - 1:
                raise
            time.sleep(0.01)
    raise AssertionError("unreachable")


# --- (a) two processes race claim behind a barrier -----------------------------------


def round_target(backend: str, target: str, round_no: int) -> str | Path:
    """The queue of one race round: a fresh file per round on SQLite; on PostgreSQL
    the one database, where each round enqueues its own job."""
    if backend == "worker":
        return Path(target) / f"race-{round_no:02d}.sqlite"
    return target


def race_claims(
    backend: str, target: str, owner: str, rounds: int, barrier: Barrier, results: Queue[Any]
) -> None:
    """Each round: wait for the round's job, connect, wait for the rival, claim; report.

    The barrier has three parties (two racers and the parent): the first wait
    means "round job ready", the second "both racers connected, go". Any error
    breaks the barrier so the parent fails fast instead of timing out.
    """
    module = MODULES[backend]
    try:
        for round_no in range(rounds):
            barrier.wait(WAIT_S)
            queue = round_target(backend, target, round_no)
            con = retry_busy(partial(module.open_queue, queue))
            try:
                barrier.wait(WAIT_S)
                ticket = retry_busy(partial(module.claim, con, owner, NOW, LEASE_MS))
            finally:
                con.close()
            results.put((round_no, owner, ticket))
    except BaseException:
        barrier.abort()
        raise


# --- (b) a process killed at a fault hook --------------------------------------------


def setup_claim(backend: str, target: str | Path) -> dict[str, Any] | None:
    """Two pending jobs; the operation under test claims the first."""
    module = MODULES[backend]
    con = module.open_queue(target)
    try:
        module.enqueue(con, {"id": "a", "qty": 3}, NOW, TTL_MS)
        module.enqueue(con, {"id": "b", "qty": 4}, NOW, TTL_MS)
    finally:
        con.close()
    return None


def setup_finish(backend: str, target: str | Path) -> dict[str, Any] | None:
    """Job ``a`` leased to ``crasher`` (its ticket is returned), job ``b`` pending."""
    setup_claim(backend, target)
    module = MODULES[backend]
    con = module.open_queue(target)
    try:
        ticket: dict[str, Any] | None = module.claim(con, "crasher", NOW, LEASE_MS)
        return ticket
    finally:
        con.close()


def setup_redrive(backend: str, target: str | Path) -> dict[str, Any] | None:
    """Job ``a`` dead (refused permanently, token 1), job ``b`` pending."""
    ticket = setup_finish(backend, target)
    assert ticket is not None
    module = MODULES[backend]
    con = module.open_queue(target)
    try:
        assert module.finish(con, ticket, "permanent", NOW + 1) == "dead"
    finally:
        con.close()
    return None


def op_claim(module: ModuleType, con: Any, fault: worker.Fault | None, ticket: Any) -> object:
    return module.claim(con, "crasher", NOW + 10, LEASE_MS, fault)


def op_finish(module: ModuleType, con: Any, fault: worker.Fault | None, ticket: Any) -> object:
    return module.finish(con, ticket, "ok", NOW + 20, 0, fault)


def op_redrive(module: ModuleType, con: Any, fault: worker.Fault | None, ticket: Any) -> object:
    return module.redrive(con, "a", NOW + 30, TTL_MS, "drill", fault)


SETUPS: dict[str, Callable[[str, str | Path], dict[str, Any] | None]] = {
    "claim": setup_claim,
    "finish": setup_finish,
    "redrive": setup_redrive,
}
OPERATIONS: dict[str, Operation] = {
    "claim": op_claim,
    "finish": op_finish,
    "redrive": op_redrive,
}
HOOK_NEVER_FIRED = 3


def run_operation(backend: str, con: Any, operation: str, ticket: Any) -> object:
    """``operation`` on ``con`` with no hook (the replay that computes the after-state)."""
    return OPERATIONS[operation](MODULES[backend], con, None, ticket)


def die_at(point: str) -> worker.Fault:
    """A fault hook that SIGKILLs this very process when ``point`` is reached."""

    def fault(reached: str) -> None:
        if reached == point:
            os.kill(os.getpid(), signal.SIGKILL)

    return fault


def crash_at(
    backend: str, target: str, operation: str, point: str, ticket: dict[str, Any] | None
) -> None:
    """Run ``operation`` on the queue at ``target`` and die by SIGKILL at hook ``point``.

    Exits with ``HOOK_NEVER_FIRED`` if the operation returns: the hook was not reached.
    """
    module = MODULES[backend]
    con = module.open_queue(target)
    OPERATIONS[operation](module, con, die_at(point), ticket)
    con.close()
    sys.exit(HOOK_NEVER_FIRED)


# --- (c) a courier on PostgreSQL, over real HTTP --------------------------------------

COURIER_PAUSE_S = 0.02
COURIER_LOG_LINE = "{owner}: {id} token={token} -> {status}"


def _leased_ticket(conninfo: str, job_id: str, owner: str) -> dict[str, Any] | None:
    """The ticket ``owner`` holds on ``job_id`` right now, read from the row (or ``None``)."""
    with psycopg.connect(conninfo, autocommit=True) as con:
        row = con.execute(
            "SELECT id, qty, owner, token, attempts, lease_until FROM jobs"
            " WHERE id = %s AND status = 'leased' AND owner = %s",
            (job_id, owner),
        ).fetchone()
    if row is None:
        return None
    return dict(zip(("id", "qty", "owner", "token", "attempt", "lease_until"), row, strict=True))


def _unfinished(conninfo: str) -> int:
    with psycopg.connect(conninfo, autocommit=True) as con:
        (count,) = con.execute(
            "SELECT count(*) FROM jobs WHERE status IN ('pending', 'leased')"
        ).fetchall()
    return int(count[0])


def pg_courier(
    conninfo: str,
    url: str,
    owner: str,
    log_path: str,
    max_seconds: float,
    stall_after_acks: int = 0,
    report_path: str = "",
    stall_seconds: float = 0.0,
) -> None:
    """A courier on PostgreSQL: ``pgworker.run_database`` rounds over real HTTP until
    nothing is pending or leased (or ``max_seconds``), one log line per result.

    With ``stall_after_acks`` it is the crash drill of ``courier.crash_drill.StallAfterAcks``:
    after that many acknowledged deliveries it writes ``{"pid", "ticket"}`` (the
    ticket it held, read before sending) to ``report_path`` and sleeps
    ``stall_seconds``, the moment for a supervisor to SIGKILL it.
    """
    http = HttpSend(url, owner)
    acks = 0

    def send(event: dict[str, Any]) -> bool:
        nonlocal acks
        ticket = _leased_ticket(conninfo, event["id"], owner)
        acked = http(event)
        acks += 1
        if acks == stall_after_acks:
            partial_path = Path(report_path + ".partial")
            partial_path.write_text(json.dumps({"pid": os.getpid(), "ticket": ticket}))
            os.replace(partial_path, report_path)
            time.sleep(stall_seconds)
        return acked

    until = time.monotonic() + max_seconds
    with open(log_path, "a", encoding="utf-8") as log:
        while time.monotonic() < until:
            result = pgworker.run_database(conninfo, owner, clock_ms, send, random.random(), 1000)
            if result is not None:
                log.write(COURIER_LOG_LINE.format(owner=owner, **result) + "\n")
                log.flush()
            elif _unfinished(conninfo) == 0:
                return
            else:
                time.sleep(COURIER_PAUSE_S)


# --- A receiver killed between its group commit and its answers ----------------------


class _DieOnceCommitted:
    """An interference that holds every committed delivery before its answer until
    ``together`` of them are held, then SIGKILLs this process: a crash after the inbox
    committed them and before any was answered. Bounded: after ``WAIT_S`` it answers."""

    def __init__(self, together: int) -> None:
        self.barrier = threading.Barrier(together)
        self.never = threading.Event()  # the others wait: none answers before the kill

    def before_apply(self, delivery_id: str, sender: str | None) -> _DieOnceCommitted:
        return self

    def refusal(self) -> None:
        return None

    def after_commit(self, verdict: str) -> bool:
        try:
            if self.barrier.wait(WAIT_S) == 0:
                os.kill(os.getpid(), signal.SIGKILL)
        except threading.BrokenBarrierError:
            return True
        self.never.wait(WAIT_S)
        return True


def receiver_dying_once_committed(inbox: str, port_file: str, together: int) -> None:
    """The real receiver on ``inbox`` (its port written to ``port_file``), killed by
    itself once ``together`` deliveries have committed and wait for their answers."""
    with Receiver(inbox, interference=_DieOnceCommitted(together)) as receiver:
        Path(port_file + ".partial").write_text(str(receiver.port))
        os.replace(port_file + ".partial", port_file)
        time.sleep(WAIT_S * 3)
