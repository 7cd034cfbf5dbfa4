"""The ceilings of a call: what the disk and SQLite allow before any queue logic runs, and each
single call beside the contract's ceiling for it. See docs/benchmarks.md, ``bench.ceilings``."""

from __future__ import annotations

import collections
import contextlib
import os
import sqlite3
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import worker
from bench.measure import T0_MS, Timed, paired, run_counted
from bench.ops import CYCLE_T0_MS, LEASE_MS, OWNER, TTL_MS, Calls, event, expect, phases
from bench.rows import fill
from tests.stores.sqlite import SQLiteStore, pragmas

__all__ = ["CALLS", "Paired", "bare_connection", "bare_transaction", "bare_transactions"]
__all__ += ["ceilings", "raw_fsync", "rows_of"]

CALLS = ("enqueue", "claim", "finish", "cycle", "redrive")
_TX_PER_STEP = {"enqueue": 1, "claim": 1, "finish": 1, "cycle": 2, "redrive": 1}
_MAX_ATTEMPTS = 3  # enqueue's default budget
REDRIVE_T0_MS = CYCLE_T0_MS + 1_000_000  # after every cycle's millisecond
NOTE = "bench"

_INSERT = """INSERT INTO jobs (id, qty, status, attempts, max_attempts, token,
  available_at, deadline, owner, lease_until, reason)
  VALUES (?, ?, 'pending', 0, ?, 0, ?, ?, NULL, NULL, NULL)"""
_LEASE = """UPDATE jobs SET status = 'leased', attempts = ?, token = ?, owner = ?,
  lease_until = ?, reason = NULL WHERE seq = ?"""
_SETTLE_DONE = """UPDATE jobs SET status = 'done', reason = NULL, available_at = ?,
  owner = NULL, lease_until = NULL WHERE seq = ?"""
_AUDIT = "INSERT INTO redrives (id, token, at_ms, note) VALUES (?, ?, ?, ?)"
_REQUEUE = """UPDATE jobs SET status = 'pending', attempts = 0, available_at = ?,
  deadline = ?, owner = NULL, lease_until = NULL, reason = NULL WHERE seq = ?"""
_ROWS_FROM = "SELECT seq, id, token, deadline FROM jobs WHERE seq > ? ORDER BY seq"
_LAST_SEQ = "SELECT coalesce(max(seq), 0) FROM jobs"


def bare_connection(path: Path, journal: str = "DELETE", sync: str = "FULL") -> sqlite3.Connection:
    """A fresh file holding one row, on a connection in the given journal and sync modes."""
    con = sqlite3.connect(path, timeout=1, isolation_level=None)
    con.execute(f"PRAGMA journal_mode={journal}").fetchall()
    con.execute(f"PRAGMA synchronous={sync}")
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
    con.execute("INSERT INTO t VALUES (1, 0)")
    return con


def bare_transaction(con: sqlite3.Connection) -> int:
    """One limit transaction on a ``bare_connection``: update its one row and commit; 1."""
    con.execute("BEGIN IMMEDIATE")
    con.execute("UPDATE t SET n = n + 1 WHERE id = 1")
    con.execute("COMMIT")
    return 1


def bare_transactions(
    folder: Path, count: int, max_seconds: float, journal: str, sync: str
) -> dict[str, Any]:
    """``count`` one-row write transactions, timed, with the pragmas read back."""
    con = bare_connection(folder / f"bare-{journal.lower()}-{sync.lower()}.sqlite", journal, sync)
    try:
        timed = run_counted(lambda _: bare_transaction(con), count, max_seconds)
        got_journal, got_sync = pragmas(con)
        return timed.as_dict(journal_mode=got_journal, synchronous=got_sync)
    finally:
        con.close()


def raw_fsync(folder: Path, count: int, max_seconds: float) -> Timed:
    """Time ``count`` rounds of "write 4 KiB at offset 0, then fsync" on one file."""
    fd = os.open(folder / "fsync.bin", os.O_RDWR | os.O_CREAT, 0o644)

    def step(_: int) -> int:
        os.pwrite(fd, b"\0" * 4096, 0)
        os.fsync(fd)
        return 1

    try:
        return run_counted(step, count, max_seconds)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Paired:
    """``count`` steps of ``tx`` transactions each, ceiling and call side by side."""

    count: int
    tx: int
    ceiling_seconds: float
    call_seconds: float

    def as_dict(self) -> dict[str, Any]:
        """The figure as JSON: microseconds per transaction of each side, and the share
        (the call's transactions per second as a share of its ceiling's)."""
        transactions = max(1, self.count * self.tx)
        return {
            "count": self.count,
            "tx_per_step": self.tx,
            "ceiling_us_per_tx": round(1e6 * self.ceiling_seconds / transactions, 1),
            "call_us_per_tx": round(1e6 * self.call_seconds / transactions, 1),
            "share": round(self.ceiling_seconds / self.call_seconds, 3) if self.call_seconds else 0,
        }


class Ceiling:
    """The ceiling's writes as a ``bench.ops.Queue`` of size 1, plus ``redrive``: the rows
    the calls write, each call's writes alone in one transaction."""

    size = 1

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.due: collections.deque[tuple[int, str, int, int]] = collections.deque()

    def _transaction(self, *writes: tuple[str, tuple[Any, ...]]) -> None:
        self.con.execute("BEGIN IMMEDIATE")
        try:
            for sql, parameters in writes:
                changed = self.con.execute(sql, parameters).rowcount
                expect(f"rows written by {sql}", changed, 1)
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise

    def put(self, i: int) -> None:
        job, deadline = event(i), T0_MS + TTL_MS
        self._transaction((_INSERT, (job["id"], job["qty"], _MAX_ATTEMPTS, T0_MS, deadline)))
        self.due.append((i + 1, job["id"], 0, deadline))  # a fresh file: job i has seq i + 1

    def take(self, now_ms: int) -> list[Any]:
        seq, _, _, deadline = self.due.popleft()
        # every job leased here is fresh: its first attempt, token 1
        self._transaction((_LEASE, (1, 1, OWNER, min(now_ms + LEASE_MS, deadline), seq)))
        return [seq]

    def ack(self, taken: list[Any], now_ms: int) -> None:
        self._transaction((_SETTLE_DONE, (now_ms, taken[0])))

    def refill(self, jobs: int, fill_rows: Callable[[], None] | None = None) -> None:
        """``jobs`` due jobs (or what ``fill_rows()`` writes), kept in seq order."""
        (before,) = self.con.execute(_LAST_SEQ).fetchone()
        (fill_rows or (lambda: fill(self.con, jobs, CYCLE_T0_MS, prefix="cycle-")))()
        self.due.extend(self.con.execute(_ROWS_FROM, (before,)).fetchall())

    def redrive(self, i: int) -> None:
        seq, job_id, token, _ = self.due.popleft()
        now = REDRIVE_T0_MS + i
        self._transaction(
            (_AUDIT, (job_id, token, now, NOTE)), (_REQUEUE, (now, now + TTL_MS, seq))
        )


def rows_of(con: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of both tables, in seq order: what the two files must agree on."""
    return {
        "jobs": con.execute("SELECT * FROM jobs ORDER BY seq").fetchall(),
        "redrives": con.execute("SELECT * FROM redrives ORDER BY seq").fetchall(),
    }


def _fill_dead(con: sqlite3.Connection, n: int) -> None:
    """``n`` jobs that spent their budget of 3 (``dead-00000001``...): each can be redriven."""
    fill(con, n, REDRIVE_T0_MS, "dead-", status="dead", attempts=3, reason="exhausted")


def ceilings(
    folder: Path, count: int, max_seconds: float, without_sync: bool = False
) -> dict[str, Any]:
    """Every call beside its ceiling: ``{call: Paired.as_dict()}``, whether the two files
    ended with the same rows (``same_rows``), and the enqueue ceiling beside itself.

    ``without_sync`` runs both files with ``synchronous=OFF`` (not durable, never the
    queue's figure): what the code costs apart from the syncs.
    """
    files = SQLiteStore(str(folder))

    def timer(phase: str, steps: Sequence[Callable[[int], object]], n: int) -> Paired:
        done, ceiling_s, call_s = paired(steps, n, max_seconds)
        return Paired(done, _TX_PER_STEP[phase], ceiling_s, call_s)

    with contextlib.ExitStack() as stack:
        names = ("ceiling", "calls", "twin-1", "twin-2")
        cons = [stack.enter_context(files.queue(f"{name}-{without_sync}")) for name in names]
        for con in cons if without_sync else ():
            con.execute(files.unsynced)
        ceiling, calls, *twins = cons
        figures = phases([Ceiling(ceiling), Calls(worker, calls)], count, timer)
        dead = Ceiling(ceiling)
        dead.refill(count, lambda: _fill_dead(ceiling, count))
        _fill_dead(calls, count)

        def redrive(i: int) -> None:
            job_id = f"dead-{i + 1:08d}"
            expect("redrive", worker.redrive(calls, job_id, REDRIVE_T0_MS + i, TTL_MS, NOTE), True)

        figures["redrive"] = timer("redrive", [dead.redrive, redrive], count)
        same = rows_of(ceiling) == rows_of(calls)
        # The enqueue ceiling on one file beside the same on another: the share two equal
        # sides get, the resolution of the method on this disk at this load.
        noise = timer("enqueue", [Ceiling(con).put for con in twins], count)
    return {
        "same_rows": same,
        **{name: figures[name].as_dict() for name in CALLS},
        "ceiling_beside_itself": noise.as_dict(),
    }
