"""The queue a soak runs on, as its supervisor reaches it: a SQLite file or a PostgreSQL database.

The intake, the operator, the lock holder and the checker reach the queue only
through one of these two, so the soak itself is written once:

- ``FileQueue``: ``worker.py`` on a queue file, the host's wall clock
  (``courier.clock.clock_ms``), "database is locked" as its busy error.
- ``DatabaseQueue``: ``pgworker.py`` on a PostgreSQL database, the database
  server's clock (``server_now_ms``: every host reads the one time base), and
  no busy error (a PostgreSQL write waits for a lock instead).

Both say whether a job could still be taken over by another courier
(``can_be_taken_over``: a forced partition needs one that can). Both read the
queue's rows for the checker with the contract's own schema; the
PostgreSQL statements here are written against that schema (``courier`` reads
files), never taken from ``pgworker``'s private ones.
"""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path
from typing import Any

import psycopg

import pgworker
import worker
from chaos.schedule import BUSY_TIMEOUT_MS
from courier import audit, queueview
from courier.clock import clock_ms
from courier.commands.conform import install_feed
from courier.delivery_request import DELIVERIES_PATH
from courier.inbox import Inbox
from courier.transient import is_busy

__all__ = ["DatabaseQueue", "FileQueue", "Store", "server_now_ms"]

STATUSES = ("pending", "leased", "done", "dead")
JOB_COLUMNS = (
    "seq, id, qty, status, attempts, max_attempts, token, available_at, deadline, "
    "owner, lease_until, reason"
)
SERVER_NOW_MS = "SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint"
PG_STATUS_COUNTS = "SELECT status, count(*) FROM jobs GROUP BY status"
PG_DEAD = "SELECT id, reason, token FROM jobs WHERE status = 'dead' ORDER BY seq"
PG_JOBS = f"SELECT {JOB_COLUMNS} FROM jobs ORDER BY seq"
PG_REDRIVES = "SELECT seq, id, token, at_ms, note FROM redrives ORDER BY seq"
PG_BUDGET = "SELECT status, attempts, max_attempts, deadline FROM jobs WHERE id = %s"
FILE_BUDGET = "SELECT status, attempts, max_attempts, deadline FROM jobs WHERE id = ?"
# A job taken over must have two claims left (one more if a takeover's claimer is
# killed before it logs its claim) and time for them before its deadline.
TAKEOVER_CLAIMS = 2
TAKEOVER_MARGIN_MS = 15_000
# Someone (a migration, a careless script) holding the whole table: every claim waits.
PG_LOCK_TIMEOUT = f"SET lock_timeout = {BUSY_TIMEOUT_MS}"
PG_HOLD = "LOCK TABLE jobs IN EXCLUSIVE MODE"


def server_now_ms(con: psycopg.Connection[Any]) -> int:
    """The database server's clock in whole milliseconds: the hosts' shared time base."""
    row = con.execute(SERVER_NOW_MS).fetchone()
    assert row is not None
    return int(row[0])


def _takeover_possible(row: Any, now_ms: int) -> bool:
    """Whether a job row (status, attempts, max_attempts, deadline) is held by a lease
    that another courier could take over, given its budget and deadline."""
    if row is None:
        return False
    status, attempts, max_attempts, deadline = row
    return (
        status == "leased"
        and int(attempts) + TAKEOVER_CLAIMS <= int(max_attempts)
        and int(deadline) - now_ms >= TAKEOVER_MARGIN_MS
    )


def _inbox_files(
    jobs: list[dict[str, Any]], redrives: list[dict[str, Any]], inbox: Path
) -> audit.Files:
    received = Inbox(inbox, create=False)
    answers = [
        int(request["status"])
        for request in received.requests()
        if request["path"] == DELIVERIES_PATH
    ]
    return audit.Files(jobs, redrives, received.effects(), answers)


class FileQueue:
    """The queue file at ``path`` (``worker.py``)."""

    kind = "sqlite"
    module: Any = worker

    def __init__(self, path: Path) -> None:
        self.path = path
        self.target = str(path)

    def create(self) -> None:
        worker.open_queue(self.path).close()
        install_feed(self.path)  # chaos.conformance replays it once the run is over

    def connect(self, bounded: bool = False) -> Any:
        """A connection (its lock waits are always bounded: the 1 s busy timeout)."""
        return worker.open_queue(self.path)

    def now_ms(self, con: Any) -> int:
        return clock_ms()

    def is_busy(self, error: BaseException) -> bool:
        """True for "database is locked": nothing changed, try again later."""
        return isinstance(error, sqlite3.OperationalError) and is_busy(error)

    def status_counts(self, con: Any) -> dict[str, int]:
        return queueview.status_counts(con)

    def dead_jobs(self, con: Any) -> list[dict[str, Any]]:
        return queueview.dead_jobs(con)

    def hold_lock(self) -> Any:
        """A connection holding the write lock (``BEGIN IMMEDIATE``); busy if it cannot."""
        con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        try:
            con.execute("BEGIN IMMEDIATE")
        except BaseException:
            con.close()
            raise
        return con

    def can_be_taken_over(self, job_id: str) -> bool:
        """Whether job ``job_id`` is leased with budget and time left for a takeover."""
        con = worker.open_queue(self.path)
        try:
            return _takeover_possible(con.execute(FILE_BUDGET, (job_id,)).fetchone(), clock_ms())
        finally:
            con.close()

    def read_files(self, inbox: Path) -> audit.Files:
        return audit.read_files(self.path, inbox)


class DatabaseQueue:
    """The queue in the database of ``conninfo`` (``pgworker.py``), over loopback."""

    kind = "postgres"
    module: Any = pgworker

    def __init__(self, conninfo: str) -> None:
        self.target = conninfo

    def create(self) -> None:
        pgworker.open_queue(self.target).close()
        install_feed(self.target)  # chaos.conformance replays it once the run is over

    def connect(self, bounded: bool = False) -> Any:
        """A connection; with ``bounded`` a lock is waited for 1 s at most (``lock_timeout``)."""
        con = pgworker.open_queue(self.target)
        if bounded:
            con.execute(PG_LOCK_TIMEOUT)
        return con

    def now_ms(self, con: Any) -> int:
        return server_now_ms(con)

    def is_busy(self, error: BaseException) -> bool:
        """A table lock held too long (``lock_timeout``); nothing else is busy here."""
        return isinstance(error, psycopg.errors.LockNotAvailable)

    def status_counts(self, con: Any) -> dict[str, int]:
        counts = dict.fromkeys(STATUSES, 0)
        counts.update({str(s): int(n) for s, n in con.execute(PG_STATUS_COUNTS).fetchall()})
        return counts

    def dead_jobs(self, con: Any) -> list[dict[str, Any]]:
        rows = con.execute(PG_DEAD).fetchall()
        return [{"id": i, "reason": reason, "token": token} for i, reason, token in rows]

    def hold_lock(self) -> Any:
        """A connection holding ``LOCK TABLE jobs IN EXCLUSIVE MODE``; busy if it cannot."""
        with contextlib.ExitStack() as on_failure:  # closes the connection if a step fails
            con = on_failure.enter_context(psycopg.connect(self.target, autocommit=True))
            for statement in (PG_LOCK_TIMEOUT, "BEGIN", PG_HOLD):
                con.execute(statement)
            on_failure.pop_all()
        return con

    def can_be_taken_over(self, job_id: str) -> bool:
        """Whether job ``job_id`` is leased with budget and time left for a takeover."""
        with psycopg.connect(self.target, autocommit=True) as con:
            row = con.execute(PG_BUDGET, (job_id,)).fetchone()
            return _takeover_possible(row, server_now_ms(con))

    def read_files(self, inbox: Path) -> audit.Files:
        keys = [name.strip() for name in JOB_COLUMNS.split(",")]
        with psycopg.connect(self.target, autocommit=True) as con:
            jobs = [dict(zip(keys, row, strict=True)) for row in con.execute(PG_JOBS)]
            redrives = [
                dict(zip(("seq", "id", "token", "at_ms", "note"), row, strict=True))
                for row in con.execute(PG_REDRIVES)
            ]
        return _inbox_files(jobs, redrives, inbox)


Store = FileQueue | DatabaseQueue
