"""The attempt log: why each delivery attempt ended as it did, kept beside the queue.

The contract's two tables say what a job's state is, not why it got there: a 404,
a 409 and a refused connection all end in ``dead``. The courier keeps one row per
attempt here, outside ``jobs`` and ``redrives`` (which stay exactly the
contract's), and ``dead``, ``show`` and the web page read it. The rules it keeps:

1. **Where.** For a queue file ``q.sqlite`` the log is the sidecar file
   ``q.sqlite.attempts`` (SQLite, WAL mode): a courier writing its attempt never
   takes the queue file's write lock, so the log adds nothing to the contention
   between claims. For a PostgreSQL queue it is the table ``courier_attempts`` in
   the queue's own schema (one queue per schema keeps one log per queue).
2. **What.** One row per attempt: ``seq``, the job ``id``, the ``token`` of the
   lease, the ``owner``, ``at_ms`` (on the courier's time base), the ``outcome``
   (``ok``, ``retry``, ``permanent``, or ``error`` when ``send`` raised something
   unexpected), the ``status`` that ``finish`` gave (``done``, ``pending``,
   ``dead``, ``stale``; ``leased`` after an error), and the cause: ``kind``
   (``answer``, ``timeout``, ``connection``, ``exception``), ``http_status`` and
   ``detail`` (the start of the answer's body, or the error's text, at most 200
   characters).
3. **Best effort.** The log is diagnostics, not state: its sidecar runs with
   ``synchronous=NORMAL`` and its PostgreSQL session with ``synchronous_commit=off``
   (a power cut may lose its last rows, never the queue's), a round's attempts are
   written in one transaction (``record_many``), and a courier that cannot write
   it logs a line and goes on delivering. A queue with no log yet reads as one
   with no attempts.
4. The log is created by the first courier that writes to it; readers never
   create it.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from courier import backend
from courier.backend import Target
from courier.delivery import Cause

__all__ = [
    "ATTEMPT_COLUMNS",
    "Attempt",
    "AttemptLog",
    "AttemptSink",
    "attempts_of",
    "last_attempts",
    "sidecar_path",
]

ATTEMPT_COLUMNS = (
    "seq",
    "id",
    "token",
    "owner",
    "at_ms",
    "outcome",
    "status",
    "kind",
    "http_status",
    "detail",
)
TABLE = "courier_attempts"
_COLUMNS_DDL = """id TEXT NOT NULL, token BIGINT, owner TEXT NOT NULL, at_ms BIGINT NOT NULL,
  outcome TEXT NOT NULL, status TEXT NOT NULL, kind TEXT, http_status INTEGER, detail TEXT"""
_SQLITE_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (seq INTEGER PRIMARY KEY AUTOINCREMENT, {_COLUMNS_DDL})",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_by_id ON {TABLE} (id, seq)",
)
_PG_SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, {_COLUMNS_DDL})""",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_by_id ON {TABLE} (id, seq)",
)
# The log's own session commits without waiting for the WAL flush, as the sidecar's
# synchronous=NORMAL does (rule 3); the queue's connection keeps the server's setting.
_PG_BEST_EFFORT = "SET synchronous_commit = off"
_INSERT = f"""INSERT INTO {TABLE}
  (id, token, owner, at_ms, outcome, status, kind, http_status, detail)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"""
_SELECT_OF = f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM {TABLE} WHERE id = ? ORDER BY seq"
_SELECT_LAST = f"""SELECT {", ".join(ATTEMPT_COLUMNS)} FROM {TABLE}
  WHERE seq IN (SELECT max(seq) FROM {TABLE} GROUP BY id)"""
_PG_HAS_TABLE = f"SELECT to_regclass(quote_ident(current_schema()) || '.{TABLE}') IS NOT NULL"


@dataclass(frozen=True)
class Attempt:
    """One attempt as the courier saw it: its ticket, when, the outcome and the cause.

    ``outcome`` is how the answer was classified (``ok``, ``retry``, ``permanent``)
    or ``error`` (``send`` raised something else; the job stays leased); ``status``
    is what ``finish`` made of it (``done``, ``pending``, ``dead``, ``stale``) or
    ``leased`` after an error.
    """

    id: str
    token: int | None
    owner: str
    at_ms: int
    outcome: str
    status: str
    cause: Cause | None


class AttemptSink(Protocol):
    """Where ``courier.runner.run_courier`` puts each round's attempts (``AttemptLog``
    is one)."""

    def record_many(self, attempts: list[Attempt]) -> None: ...


def sidecar_path(queue: Target) -> Path:
    """The attempt log's file beside the queue file ``queue``."""
    path = Path(queue)
    return path.with_name(path.name + ".attempts")


class AttemptLog:
    """The writer of one queue's attempt log (an ``AttemptSink``).

    Keeps its own connection: the sidecar file's, or a second connection to the
    PostgreSQL database (the courier's queue connection is never in a transaction
    of the log's). ``close`` it when done.
    """

    def __init__(self, queue: Target) -> None:
        self.queue = queue
        self._con: Any = None

    def _connection(self) -> Any:
        if self._con is not None:
            return self._con
        if backend.is_conninfo(self.queue):
            con = backend.connect_existing(self.queue)
            con.execute(_PG_BEST_EFFORT)
            for statement in _PG_SCHEMA:
                con.execute(statement)
        else:
            con = sqlite3.connect(sidecar_path(self.queue), timeout=1, isolation_level=None)
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=NORMAL")
            for statement in _SQLITE_SCHEMA:
                con.execute(statement)
        self._con = con
        return con

    def record(self, attempt: Attempt) -> None:
        """Append one attempt (its own transaction)."""
        self.record_many([attempt])

    def record_many(self, attempts: list[Attempt]) -> None:
        """Append ``attempts`` in one transaction (a batch's are one commit)."""
        rows = [_row(attempt) for attempt in attempts]
        if not rows:
            return
        con = self._connection()
        try:
            if len(rows) == 1:
                backend.qmark(con).execute(_INSERT, rows[0])
            elif backend.is_conninfo(self.queue):
                with con.transaction():
                    backend.qmark(con).executemany(_INSERT, rows)
            else:
                con.execute("BEGIN")
                try:
                    con.executemany(_INSERT, rows)
                    con.execute("COMMIT")
                except BaseException:
                    con.rollback()
                    raise
        except Exception:
            self.close()  # a lost connection is made again on the next record
            raise

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


def _row(attempt: Attempt) -> tuple[Any, ...]:
    cause = attempt.cause
    return (
        attempt.id,
        attempt.token,
        attempt.owner,
        attempt.at_ms,
        attempt.outcome,
        attempt.status,
        None if cause is None else cause.kind,
        None if cause is None else cause.http_status,
        None if cause is None else cause.detail,
    )


def _reader(queue: Target) -> Any | None:
    """A connection to the existing log of ``queue``, or ``None`` if it has none yet."""
    if backend.is_conninfo(queue):
        con = backend.connect_existing(queue)
        (exists,) = con.execute(_PG_HAS_TABLE).fetchone()
        if exists:
            return con
        con.close()
        return None
    path = sidecar_path(queue)
    if not path.is_file():
        return None
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1)
    try:
        con.execute(f"SELECT 1 FROM {TABLE} LIMIT 1")
    except sqlite3.Error:
        con.close()
        return None
    return con


def _read(queue: Target, statement: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    con = _reader(queue)
    if con is None:
        return []
    try:
        rows = backend.qmark(con).execute(statement, params).fetchall()
    finally:
        con.close()
    return [dict(zip(ATTEMPT_COLUMNS, row, strict=True)) for row in rows]


def attempts_of(queue: Target, job_id: str) -> list[dict[str, Any]]:
    """Every recorded attempt of ``job_id``, oldest first (``[]`` if none or no log)."""
    return _read(queue, _SELECT_OF, (job_id,))


def last_attempts(queue: Target) -> dict[str, dict[str, Any]]:
    """The latest recorded attempt of each job, by job id."""
    return {row["id"]: row for row in _read(queue, _SELECT_LAST, ())}
