"""Entry points run inside spawned child interpreters, and the state they act on.

A ``multiprocessing`` "spawn" child imports this module afresh, so everything a
child needs is a module-level function here. Times are fixed numbers (``NOW``...),
not the wall clock, so the parent can replay any operation on a copy of the file
and know exactly which state a crash must leave behind.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import sys
import time
from collections.abc import Callable
from functools import partial
from multiprocessing.queues import Queue
from multiprocessing.synchronize import Barrier
from pathlib import Path
from typing import Any

import worker
from courier.runner import is_busy

NOW = 1_000_000
TTL_MS = 60_000
LEASE_MS = 1000
LATER = NOW + 5_000  # past every lease taken at NOW, before every deadline
WAIT_S = 30.0
BUSY_RETRIES = 20

Rows = dict[str, list[tuple[Any, ...]]]
Operation = Callable[[sqlite3.Connection, worker.Fault | None, dict[str, Any] | None], object]


# --- Reading a whole file ------------------------------------------------------------


def full_rows(con: sqlite3.Connection) -> Rows:
    """Every row of ``jobs``, ``redrives`` and ``sqlite_sequence``, all columns, in order."""
    rows: Rows = {
        "jobs": con.execute("SELECT * FROM jobs ORDER BY seq").fetchall(),
        "redrives": con.execute("SELECT * FROM redrives ORDER BY seq").fetchall(),
    }
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
    """Run ``action``; on "database is locked" (which changed nothing) try again, bounded."""
    for attempt in range(BUSY_RETRIES):
        try:
            return action()
        except sqlite3.OperationalError as error:
            if not is_busy(error) or attempt == BUSY_RETRIES - 1:
                raise
            time.sleep(0.01)
    raise AssertionError("unreachable")


# --- (a) two processes race claim behind a barrier -----------------------------------


def round_path(folder: str, round_no: int) -> Path:
    """The queue file of one race round."""
    return Path(folder) / f"race-{round_no:02d}.sqlite"


def race_claims(
    folder: str, owner: str, rounds: int, barrier: Barrier, results: Queue[Any]
) -> None:
    """Each round: wait for the file, connect, wait for the rival, claim; report the ticket.

    The barrier has three parties (two racers and the parent): the first wait
    means "round file ready", the second "both racers connected, go". Any error
    breaks the barrier so the parent fails fast instead of timing out.
    """
    try:
        for round_no in range(rounds):
            barrier.wait(WAIT_S)
            con = retry_busy(partial(worker.open_queue, round_path(folder, round_no)))
            try:
                barrier.wait(WAIT_S)
                ticket = retry_busy(partial(worker.claim, con, owner, NOW, LEASE_MS))
            finally:
                con.close()
            results.put((round_no, owner, ticket))
    except BaseException:
        barrier.abort()
        raise


# --- (b) a process killed at a fault hook --------------------------------------------


def setup_claim(path: Path) -> dict[str, Any] | None:
    """Two pending jobs; the operation under test claims the first."""
    con = worker.open_queue(path)
    try:
        worker.enqueue(con, {"id": "a", "qty": 3}, NOW, TTL_MS)
        worker.enqueue(con, {"id": "b", "qty": 4}, NOW, TTL_MS)
    finally:
        con.close()
    return None


def setup_finish(path: Path) -> dict[str, Any] | None:
    """Job ``a`` leased to ``crasher`` (its ticket is returned), job ``b`` pending."""
    setup_claim(path)
    con = worker.open_queue(path)
    try:
        return worker.claim(con, "crasher", NOW, LEASE_MS)
    finally:
        con.close()


def setup_redrive(path: Path) -> dict[str, Any] | None:
    """Job ``a`` dead (refused permanently, token 1), job ``b`` pending."""
    ticket = setup_finish(path)
    assert ticket is not None
    con = worker.open_queue(path)
    try:
        assert worker.finish(con, ticket, "permanent", NOW + 1) == "dead"
    finally:
        con.close()
    return None


def op_claim(con: sqlite3.Connection, fault: worker.Fault | None, ticket: Any) -> object:
    return worker.claim(con, "crasher", NOW + 10, LEASE_MS, fault)


def op_finish(con: sqlite3.Connection, fault: worker.Fault | None, ticket: Any) -> object:
    return worker.finish(con, ticket, "ok", NOW + 20, 0, fault)


def op_redrive(con: sqlite3.Connection, fault: worker.Fault | None, ticket: Any) -> object:
    return worker.redrive(con, "a", NOW + 30, TTL_MS, "drill", fault)


SETUPS: dict[str, Callable[[Path], dict[str, Any] | None]] = {
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


def die_at(point: str) -> worker.Fault:
    """A fault hook that SIGKILLs this very process when ``point`` is reached."""

    def fault(reached: str) -> None:
        if reached == point:
            os.kill(os.getpid(), signal.SIGKILL)

    return fault


def crash_at(path: str, operation: str, point: str, ticket: dict[str, Any] | None) -> None:
    """Run ``operation`` on the queue at ``path`` and die by SIGKILL at hook ``point``.

    Exits with ``HOOK_NEVER_FIRED`` if the operation returns: the hook was not reached.
    """
    con = worker.open_queue(path)
    OPERATIONS[operation](con, die_at(point), ticket)
    con.close()
    sys.exit(HOOK_NEVER_FIRED)
