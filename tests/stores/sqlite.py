"""``worker.py`` on SQLite files: one queue per file in a folder."""

from __future__ import annotations

import sqlite3
import weakref
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from tests.stores import Store
from tests.support import JOB_COLUMNS, Rows, read_rows

__all__ = ["BUSY_TIMEOUT_S", "SQLiteStore", "pragmas"]

# open_queue's busy timeout (the contract's timeout=1): a write that waited this long for
# the file's lock and gave up is refused, having changed nothing.
BUSY_TIMEOUT_S = 1.0
_SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


@dataclass(frozen=True)
class SQLiteStore(Store):
    """Queue files in ``folder``, each made by ``open_queue``.

    Claims hold the file's one write lock from their first read to their commit, so
    every claim sees every row: the ``strict`` claim order.
    """

    folder: str

    name: ClassVar[str] = "sqlite"
    default_module: ClassVar[str] = "worker"
    connection_type: ClassVar[str] = "a sqlite3.Connection"
    claim_order: ClassVar[str] = "strict"
    dense_seq: ClassVar[bool] = True
    lock_wait_s: ClassVar[float | None] = BUSY_TIMEOUT_S
    # Not durable, never the queue's figure: what the statements cost apart from the syncs.
    unsynced: ClassVar[str] = "PRAGMA synchronous=OFF"

    def run_target(self) -> Any:
        return self.module().run_file

    def fresh(self, label: str = "queue") -> str:
        path = str(Path(self.folder) / f"{label}.sqlite")
        self.remove(path)
        self.connect(path).close()
        return path

    def remove(self, target: str) -> None:
        for name in (target, f"{target}-journal"):
            Path(name).unlink(missing_ok=True)

    def caller(self, target: str) -> sqlite3.Connection:
        return sqlite3.connect(target, isolation_level=None)

    def rows(self, con: Any) -> Rows:
        return read_rows(con)

    def in_transaction(self, con: Any) -> bool:
        return bool(con.in_transaction)

    def empty(self, con: Any) -> None:
        con.execute("BEGIN IMMEDIATE")
        for table in ("jobs", "redrives", "sqlite_sequence"):
            con.execute(f"DELETE FROM {table}")
        con.execute("COMMIT")

    def rewrite(self, con: Any, job_id: str, **columns: object) -> None:
        assert set(columns) <= set(JOB_COLUMNS), columns
        sets = ", ".join(f"{column} = ?" for column in columns)
        con.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*columns.values(), job_id))

    def assert_configured(self, con: Any) -> None:
        """open_queue's settings: autocommit, 1 s busy timeout, DELETE journal, FULL sync."""
        settings_now = (
            con.isolation_level,
            con.execute("PRAGMA busy_timeout").fetchone()[0],
            con.execute("PRAGMA journal_mode").fetchone()[0],
            con.execute("PRAGMA synchronous").fetchone()[0],
        )
        assert settings_now == (None, 1000, "delete", 2), f"connection settings: {settings_now}"

    def lock_not_granted(self, error_type: str, message: str) -> bool:
        return error_type == "OperationalError" and "locked" in message

    def abandon(self, con: Any) -> None:
        """Roll back what ``con`` had open, then close it: what a killed process's hot
        journal gives the next connection. (A close alone would wait for the dead
        branch's cursors to be collected before letting go of the lock.)"""
        if isinstance(con, _ScheduledConnection):
            # A statement a dead frame still holds keeps the closed connection's lock
            # until it is finalized: close every cursor first, so close() lets go at once.
            for cursor in list(con.cursors):
                cursor.close()
        if con.in_transaction:
            sqlite3.Connection.rollback(con)
        con.close()

    def holds_write_lock(self, con: Any) -> bool:
        return isinstance(con, _ScheduledConnection) and con.writing()

    def must_wait(self, sql: str, others: list[Any]) -> bool:
        """A ``BEGIN IMMEDIATE`` while another connection holds the write lock."""
        return _keyword(sql) in ("BEGIN IMMEDIATE", "BEGIN EXCLUSIVE") and any(
            isinstance(other, _ScheduledConnection) and other.writing() for other in others
        )

    def durability(self, con: Any) -> str:
        journal, sync = pragmas(con)
        return f"journal_mode={journal.lower()}, synchronous={sync}"

    def scheduled_connect(
        self, target: str, gate: Any, explicit: bool = False
    ) -> sqlite3.Connection:
        """open_queue's settings, but a busy timeout of 0: a statement refused the lock
        comes back at once, and the gate decides what SQLite's busy handler would have
        done (``_ScheduledConnection``). Every write of worker.py is already an explicit
        ``BEGIN IMMEDIATE`` ... ``COMMIT``: ``explicit`` changes nothing."""
        con = sqlite3.connect(
            target,
            timeout=0,
            isolation_level=None,
            check_same_thread=False,  # made here, used by the branch's thread
            factory=_ScheduledConnection,
        )
        sqlite3.Connection.execute(con, "PRAGMA journal_mode=DELETE").fetchall()
        sqlite3.Connection.execute(con, "PRAGMA synchronous=FULL")
        assert isinstance(con, _ScheduledConnection)
        con.cursors = weakref.WeakSet()
        con.gate = gate
        return con


class _ScheduledConnection(sqlite3.Connection):
    """A connection whose statements take turns at a gate (see ``scheduled_connect``).

    SQLite invokes its busy handler (waits) only for a connection that holds no lock yet,
    or one that commits; a transaction that has read asks for the write lock once, and a
    refusal comes back at once whatever the timeout (SQLite's deadlock rule). So a busy
    statement waits for a later turn unless this connection is in a deferred transaction
    that has already run a statement: then the refusal goes to the caller, as for real.
    """

    gate: Any = None
    cursors: weakref.WeakSet[sqlite3.Cursor]  # every cursor made, for abandon() to close
    deferred = False  # in a transaction begun by a plain BEGIN
    since_begin = 0  # statements run in it since
    wrote = False  # and whether one of them wrote

    def cursor(self, factory: Any = None) -> Any:
        made = super().cursor(factory or _ScheduledCursor)
        self.cursors.add(made)
        return made

    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        return self.cursor().execute(sql, parameters)

    def rollback(self) -> None:
        if self.gate is not None:
            self.gate.point("ROLLBACK")
        super().rollback()

    def commit(self) -> None:
        if self.gate is not None:
            self.gate.point("COMMIT")
        super().commit()

    def writing(self) -> bool:
        """Whether this connection holds the file's write lock: in a transaction begun
        IMMEDIATE, or a deferred one that has written."""
        return self.in_transaction and (not self.deferred or self.wrote)

    def refused_at_once(self, sql: str) -> bool:
        """Whether SQLite refuses ``sql`` the lock at once, whatever the busy timeout."""
        return (
            self.in_transaction
            and self.deferred
            and self.since_begin > 0
            and not _keyword(sql).startswith("COMMIT")
        )

    def ran(self, sql: str) -> None:
        keyword = _keyword(sql)
        if keyword.startswith("BEGIN"):
            self.deferred = keyword in ("BEGIN", "BEGIN DEFERRED", "BEGIN TRANSACTION")
            self.since_begin = 0
            self.wrote = False
        else:
            self.since_begin += 1
            self.wrote = self.wrote or keyword.split(" ")[0] in ("INSERT", "UPDATE", "DELETE")


class _ScheduledCursor(sqlite3.Cursor):
    def execute(self, sql: str, parameters: Any = (), /) -> Any:
        con = self.connection
        assert isinstance(con, _ScheduledConnection)
        if con.gate is None:
            return super().execute(sql, parameters)
        con.gate.point(sql)
        while True:
            try:
                result = super().execute(sql, parameters)
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or con.refused_at_once(sql):
                    raise
                con.gate.busy(sql, effect=_keyword(sql).startswith("COMMIT"))
                if con.gate.refused():
                    raise
                continue
            con.ran(sql)
            return result


def _keyword(sql: str) -> str:
    return " ".join(sql.split()[:2]).upper()


def pragmas(con: sqlite3.Connection) -> tuple[str, str]:
    """``(journal_mode, synchronous)`` as ``con`` really uses them, read back from SQLite."""
    journal = con.execute("PRAGMA journal_mode").fetchone()[0]
    sync = con.execute("PRAGMA synchronous").fetchone()[0]
    return str(journal).upper(), _SYNCHRONOUS.get(sync, str(sync))
