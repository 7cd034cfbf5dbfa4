"""The receiver's inbox: a SQLite file that applies each delivery's effect at most once.

The queue's fencing token cannot stop a courier that was killed after sending from
being replaced by one that sends again, so the receiver deduplicates by ``(id,
qty)`` in this file of its own (never the queue file). The rules it keeps:

1. The first delivery of an id inserts the inbox row and applies the *effect* (one
   row in ``effects``, whose ``qty`` adds to the delivered total) in one ``BEGIN
   IMMEDIATE`` transaction with ``synchronous=FULL``, together with its row in the
   request log. The file is in WAL mode, so that commit is one sync of the log.
2. The same id with the same qty is a ``duplicate`` (no second effect); the same id
   with another qty is a ``conflict`` and changes nothing but the request log.
3. Every write (``deliver``, ``record_request``) goes through ``Inbox._write``: one
   kept connection, whose writes take turns, one transaction each. Reads open a
   short-lived connection each and see one consistent snapshot.
4. The request log (``requests``) keeps every request the receiver routed, so the
   count survives restarts and is visible to other processes.
5. The inbox tables go only into a new or empty file, or an inbox: a queue file (or
   any file with other tables) is refused and left as it was.
"""

from __future__ import annotations

import os
import sqlite3
import threading
from collections.abc import Callable
from http import HTTPStatus
from os import PathLike
from pathlib import Path
from typing import Any, Literal, TypeVar

from courier.clock import clock_ms
from courier.delivery_request import RequestLine

__all__ = ["INBOX_SCHEMA", "Inbox", "Verdict"]

Verdict = Literal["applied", "duplicate", "conflict"]
T = TypeVar("T")

# --- SQL: every statement is named once --------------------------------------

INBOX_SCHEMA = (
    """CREATE TABLE IF NOT EXISTS inbox (id TEXT PRIMARY KEY, qty INTEGER NOT NULL,
  sender TEXT, received_at_ms INTEGER NOT NULL)""",
    # No UNIQUE on effects.id on purpose: a deduplication bug must show up as a
    # second effect row, not be hidden by a constraint.
    """CREATE TABLE IF NOT EXISTS effects (seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL, qty INTEGER NOT NULL, at_ms INTEGER NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS requests (seq INTEGER PRIMARY KEY AUTOINCREMENT,
  method TEXT NOT NULL, path TEXT NOT NULL, status INTEGER NOT NULL,
  delivery_id TEXT, sender TEXT, at_ms INTEGER NOT NULL)""",
)
_COUNT_INBOX_TABLES = """SELECT count(*) FROM sqlite_master
  WHERE type = 'table' AND name IN ('inbox', 'effects', 'requests')"""
_TABLES = "SELECT name FROM sqlite_master WHERE type = 'table'"
_SELECT_INBOX_QTY = "SELECT qty FROM inbox WHERE id = ?"
_INSERT_INBOX = "INSERT INTO inbox (id, qty, sender, received_at_ms) VALUES (?, ?, ?, ?)"
_INSERT_EFFECT = "INSERT INTO effects (id, qty, at_ms) VALUES (?, ?, ?)"
_INSERT_REQUEST = """INSERT INTO requests (method, path, status, delivery_id, sender, at_ms)
  VALUES (?, ?, ?, ?, ?, ?)"""
_SUMMARY_COUNTS = """SELECT (SELECT count(*) FROM requests),
  (SELECT count(*) FROM effects), (SELECT count(*) FROM inbox),
  (SELECT coalesce(sum(qty), 0) FROM effects)"""
_SUMMARY_ROWS = """SELECT i.id, i.qty, i.sender, i.received_at_ms,
  (SELECT count(*) FROM requests r WHERE r.delivery_id = i.id),
  (SELECT count(*) FROM effects e WHERE e.id = i.id)
  FROM inbox i ORDER BY i.received_at_ms, i.id"""
_SELECT_REQUESTS = """SELECT seq, method, path, status, delivery_id, sender, at_ms
  FROM requests ORDER BY seq"""
_SELECT_EFFECTS = "SELECT id, qty FROM effects ORDER BY seq"


# --- The inbox file -------------------------------------------------------------


def _connect(path: Path, busy_timeout_s: float, *, writes: bool) -> sqlite3.Connection:
    """A connection to the inbox file with ``synchronous=FULL``; one that ``writes``
    puts the file in WAL mode (a read must leave a file it refuses as it was) and
    may be used by one thread after another."""
    con = sqlite3.connect(
        path, timeout=busy_timeout_s, isolation_level=None, check_same_thread=not writes
    )
    try:
        if writes:
            con.execute("PRAGMA journal_mode=WAL")
        con.execute("PRAGMA synchronous=FULL")
    except BaseException:
        con.close()
        raise
    return con


def _create_tables(con: sqlite3.Connection) -> None:
    for sql in INBOX_SCHEMA:
        con.execute(sql)


def _in_transaction(
    con: sqlite3.Connection, begin: str, body: Callable[[sqlite3.Connection], T]
) -> T:
    """``body`` in one transaction on ``con``: committed, or rolled back on any error."""
    con.execute(begin)
    try:
        result = body(con)
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.rollback()
        raise
    return result


class Inbox:
    """The receiver's SQLite inbox file: inbox rows, effects and the request log.

    Reads open a short-lived connection each; writes (``deliver``,
    ``record_request``) share one kept connection, opened at the first write and
    closed by ``close()`` (or ``with``). One ``Inbox`` may be used from many threads
    (writes take turns) and the file may be read and written by other processes.
    """

    def __init__(
        self, path: str | PathLike[str], create: bool = True, busy_timeout_s: float = 5.0
    ) -> None:
        """Create the inbox tables in ``path`` if they are missing (rows are kept).

        With ``create=False`` nothing is created: a missing file raises
        ``FileNotFoundError`` and a file without the inbox tables ``ValueError``.
        ``busy_timeout_s`` is how long a call waits for another writer's lock before
        ``sqlite3.OperationalError`` (which the HTTP handler answers with 503).
        """
        self.path = Path(path)
        self.busy_timeout_s = busy_timeout_s
        self._kept: sqlite3.Connection | None = None
        self._kept_by = 0  # the process that opened it: a forked child opens its own
        self._turn = threading.Lock()
        if create:
            self._refuse_other_files()
            self._transaction("BEGIN IMMEDIATE", _create_tables, writes=True)
            return
        if not self.path.is_file():
            raise FileNotFoundError(f"no inbox file at {str(self.path)!r}")
        tables = self._read(lambda con: con.execute(_COUNT_INBOX_TABLES).fetchone()[0])
        if tables != len(INBOX_SCHEMA):
            raise ValueError(f"{str(self.path)!r} is not an inbox file")

    def _refuse_other_files(self) -> None:
        """Refuse to add the inbox tables to a file that holds other tables (a queue file).

        A new or empty file, or an existing inbox, is fine; anything else is
        ``ValueError`` naming the file, and is left as it was.
        """
        if self.path.is_dir():
            raise IsADirectoryError(f"{str(self.path)!r} is a directory, not an inbox file")
        if not self.path.exists() or self.path.stat().st_size == 0:
            return
        try:
            names = {name for (name,) in self._read(lambda con: con.execute(_TABLES).fetchall())}
        except sqlite3.DatabaseError as error:
            raise ValueError(f"{str(self.path)!r} is not an inbox file ({error})") from None
        others = sorted(names - {"inbox", "effects", "requests", "sqlite_sequence"})
        if others:
            what = " (a queue file: the inbox must be a file of its own)" if "jobs" in names else ""
            raise ValueError(
                f"{str(self.path)!r} is not an inbox file: it holds the tables "
                f"{', '.join(others)}{what}"
            )

    def _write(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in one ``BEGIN IMMEDIATE`` transaction on the kept connection;
        roll back on any error. Waiting for another thread's write counts against
        ``busy_timeout_s`` like waiting for another process's lock.

        This is the inbox's one write path (rule 3): a change to how writes are
        committed, such as several deliveries in one commit, is made here alone.
        """
        if not self._turn.acquire(timeout=self.busy_timeout_s):
            raise sqlite3.OperationalError("database is locked (by this receiver's other writes)")
        try:
            con = self._writer()
            try:
                return _in_transaction(con, "BEGIN IMMEDIATE", body)
            except sqlite3.Error:
                self._drop_writer()  # it may be unusable; the next write opens another
                raise
        finally:
            self._turn.release()

    def _writer(self) -> sqlite3.Connection:
        if self._kept is None or self._kept_by != os.getpid():
            self._kept = _connect(self.path, self.busy_timeout_s, writes=True)
            self._kept_by = os.getpid()
        return self._kept

    def _drop_writer(self) -> None:
        con, self._kept = self._kept, None
        if con is not None and self._kept_by == os.getpid():
            con.close()

    def close(self) -> None:
        """Close the kept write connection, if any (the next write opens another)."""
        with self._turn:
            self._drop_writer()

    def __enter__(self) -> Inbox:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _read(self, body: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``body`` in one read transaction: a consistent snapshot."""
        return self._transaction("BEGIN", body, writes=False)

    def _transaction(
        self, begin: str, body: Callable[[sqlite3.Connection], T], *, writes: bool
    ) -> T:
        """Run ``body`` in one transaction on a connection of its own."""
        con = _connect(self.path, self.busy_timeout_s, writes=writes)
        try:
            return _in_transaction(con, begin, body)
        finally:
            con.close()

    def deliver(
        self, delivery_id: str, qty: int, sender: str | None, request: RequestLine
    ) -> Verdict:
        """Apply a delivery at most once and log its request, in one transaction.

        Returns ``"applied"`` when this call inserted the inbox row and the effect,
        ``"duplicate"`` when the id was already in the inbox with the same qty (no
        effect), and ``"conflict"`` when it was there with another qty (no change
        but the request log). The request row gets status 200 or 409 accordingly.
        """

        def body(con: sqlite3.Connection) -> Verdict:
            now = clock_ms()
            row = con.execute(_SELECT_INBOX_QTY, (delivery_id,)).fetchone()
            verdict: Verdict
            if row is None:
                con.execute(_INSERT_INBOX, (delivery_id, qty, sender, now))
                con.execute(_INSERT_EFFECT, (delivery_id, qty, now))
                verdict = "applied"
            else:
                verdict = "duplicate" if row[0] == qty else "conflict"
            status = HTTPStatus.CONFLICT if verdict == "conflict" else HTTPStatus.OK
            con.execute(
                _INSERT_REQUEST,
                (request.method, request.path, int(status), delivery_id, sender, now),
            )
            return verdict

        return self._write(body)

    def record_request(
        self, request: RequestLine, status: int, delivery_id: str | None, sender: str | None
    ) -> None:
        """Log one request that applied no effect (rejected input, wrong route)."""
        row = (request.method, request.path, status, delivery_id, sender, clock_ms())
        self._write(lambda con: con.execute(_INSERT_REQUEST, row))

    def summary(self) -> dict[str, Any]:
        """The inbox totals and rows, read in one consistent snapshot.

        Keys: ``requests`` (HTTP requests logged), ``effects`` (effect rows),
        ``inbox_rows``, ``total_qty`` (sum of the effects' qty) and ``rows``: one dict
        per inbox row with ``id``, ``qty``, ``sender`` (the courier whose delivery
        applied the effect), ``received_at_ms``, ``requests`` (requests naming that
        id) and ``effects``.
        """

        def body(con: sqlite3.Connection) -> tuple[tuple[Any, ...], list[tuple[Any, ...]]]:
            return con.execute(_SUMMARY_COUNTS).fetchone(), con.execute(_SUMMARY_ROWS).fetchall()

        (requests, effects, inbox_rows, total_qty), rows = self._read(body)
        keys = ("id", "qty", "sender", "received_at_ms", "requests", "effects")
        return {
            "requests": requests,
            "effects": effects,
            "inbox_rows": inbox_rows,
            "total_qty": total_qty,
            "rows": [dict(zip(keys, row, strict=True)) for row in rows],
        }

    def effects(self) -> list[tuple[str, int]]:
        """Every effect row as ``(id, qty)``, in the order they were applied."""
        rows = self._read(lambda con: con.execute(_SELECT_EFFECTS).fetchall())
        return [(str(delivery_id), int(qty)) for delivery_id, qty in rows]

    def requests(self) -> list[dict[str, Any]]:
        """The request log in arrival order, one dict per request."""
        keys = ("seq", "method", "path", "status", "delivery_id", "sender", "at_ms")
        rows = self._read(lambda con: con.execute(_SELECT_REQUESTS).fetchall())
        return [dict(zip(keys, row, strict=True)) for row in rows]
