"""The backends the lockstep machine drives, behind one small adapter (``Backend``).

``SQLITE`` is ``worker.py`` on a SQLite file; ``POSTGRES`` is ``pgworker.py`` on the
database of its ``conninfo`` (set by ``tests/contract/test_lockstep.py``), emptied for
every example. Each says how to reach a fresh queue, read its rows, see an open
transaction, check the connection's settings, run a round on its own connection and
hold another caller's connection.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable
from functools import partial
from typing import Any

import psycopg
from psycopg.pq import TransactionStatus

import pgworker
import worker
from tests.support import JOB_COLUMNS, Rows, read_rows

__all__ = ["POSTGRES", "SQLITE", "Backend", "PostgresBackend", "assert_configured"]


class Backend:
    """How the lockstep reaches one backend: ``worker.py`` on a SQLite file."""

    name = "worker"
    label = "worker.py"  # how the failure messages name this side
    module: Any = worker
    connection_type = "a sqlite3.Connection"

    def fresh_target(self, folder: str) -> str:
        """Where a fresh, empty queue is (a file path, created by ``open_queue``)."""
        return os.path.join(folder, "queue.sqlite")

    def rows(self, con: Any) -> Rows:
        return read_rows(con)

    def in_transaction(self, con: Any) -> bool:
        return bool(con.in_transaction)

    def assert_configured(self, con: Any) -> None:
        assert_configured(con)

    def run_file(self, target: str) -> Callable[..., Any]:
        return partial(worker.run_file, target)

    def caller(self, target: str) -> Any:
        """Another connection, as a caller of the queue would hold it (no statement yet)."""
        return sqlite3.connect(target, isolation_level=None)


class PostgresBackend(Backend):
    """``pgworker.py`` on the database of ``conninfo`` (emptied for every example)."""

    name = "pgworker"
    label = "pgworker.py"
    module = pgworker
    connection_type = "a psycopg.Connection"
    conninfo = ""  # set by the test that runs the machine (a fresh database's)

    def fresh_target(self, folder: str) -> str:
        with psycopg.connect(self.conninfo, autocommit=True) as con:
            con.execute("TRUNCATE jobs, redrives RESTART IDENTITY")
        return self.conninfo

    def rows(self, con: Any) -> Rows:
        jobs = con.execute(f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs ORDER BY seq").fetchall()
        audit = con.execute("SELECT id, token, at_ms, note FROM redrives ORDER BY seq").fetchall()
        return {"jobs": jobs, "redrives": [(n, *row) for n, row in enumerate(audit, 1)]}

    def in_transaction(self, con: Any) -> bool:
        return bool(con.info.transaction_status != TransactionStatus.IDLE)

    def assert_configured(self, con: Any) -> None:
        isolation = con.execute("SHOW default_transaction_isolation").fetchone()[0]
        assert (con.autocommit, isolation) == (True, "read committed"), (con.autocommit, isolation)

    def run_file(self, target: str) -> Callable[..., Any]:
        return partial(pgworker.run_database, target)

    def caller(self, target: str) -> Any:
        return psycopg.connect(target, autocommit=True)


SQLITE = Backend()
POSTGRES = PostgresBackend()


def assert_configured(con: sqlite3.Connection) -> None:
    """open_queue's settings: autocommit, 1 s busy timeout, DELETE journal, FULL sync."""
    settings_now = (
        con.isolation_level,
        con.execute("PRAGMA busy_timeout").fetchone()[0],
        con.execute("PRAGMA journal_mode").fetchone()[0],
        con.execute("PRAGMA synchronous").fetchone()[0],
    )
    assert settings_now == (None, 1000, "delete", 2), f"connection settings: {settings_now}"
