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
3. Every write (``deliver``, ``record_request``) goes through ``Inbox._write``, on
   one kept connection, and writes that come together commit together (group
   commit): while one thread commits, the writes of other threads wait; the next
   committer takes every waiting write into one ``BEGIN IMMEDIATE`` transaction,
   in arrival order, so a delivery sees the ones before it (the same dedup by
   ``(id, qty)``), and one sync of the log commits them all. No write returns
   before the commit that holds it, and a write that failed alone is rolled back
   alone (if one fails, the group is applied again, each write in a savepoint of
   its own). Reads open a short-lived
   connection each and see one consistent snapshot.
4. While a *committer* runs (``start_committing``, the receiver's), one thread of
   its own makes every commit: a write may then also be *submitted*
   (``submit_delivery``, ``submit_request``), which returns at once; once the
   transaction that holds it has committed (or failed), the committer hands the
   group's submitted writes to ``on_settled`` in one call, on its own thread. A
   blocking write (``deliver``, ``record_request``) waits for the committer then.
5. The request log (``requests``) keeps every request the receiver routed, so the
   count survives restarts and is visible to other processes.
6. The inbox tables go only into a new or empty file, or an inbox: a queue file (or
   any file with other tables) is refused and left as it was.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from os import PathLike
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

from courier.clock import clock_ms
from courier.delivery_request import RequestLine

__all__ = ["GROUP_LIMIT", "INBOX_SCHEMA", "Inbox", "OnSettled", "Submitted", "Verdict"]

Verdict = Literal["applied", "duplicate", "conflict"]
T = TypeVar("T")

GROUP_LIMIT = 256  # writes at most in one group commit (the rest wait for the next)

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
# A first delivery inserts its row; an id already there changes nothing (rowcount 0).
_INSERT_INBOX = """INSERT INTO inbox (id, qty, sender, received_at_ms) VALUES (?, ?, ?, ?)
  ON CONFLICT (id) DO NOTHING"""
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
_SAVEPOINT = "SAVEPOINT one_write"
_RELEASE = "RELEASE one_write"
_ROLLBACK_TO = "ROLLBACK TO one_write"


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


def _apply_all(con: sqlite3.Connection, group: list[_Write[Any]]) -> None:
    """The writes of a group, in order, in the transaction begun on ``con``.

    Each write's own savepoint costs two statements more than its body: so the group
    is first applied without them, and only if a body raises (which no delivery's
    does unless the file fails) is the transaction rolled back and begun again, and
    the group applied again with a savepoint a write (``_apply_one``), so that the
    write that failed fails alone."""
    try:
        for write in group:
            write.result = write.body(con)
        return
    except Exception:
        if not con.in_transaction:
            raise
    con.execute("ROLLBACK")
    con.execute("BEGIN IMMEDIATE")
    for write in group:
        write.result = None
        _apply_one(con, write)


def _apply_one(con: sqlite3.Connection, write: _Write[Any]) -> None:
    """One write of a group, in a savepoint of its own: an error rolls back its
    changes alone, unless SQLite ended the whole transaction (then it is raised)."""
    con.execute(_SAVEPOINT)
    try:
        write.result = write.body(con)
    except Exception as error:
        if not con.in_transaction:
            raise
        con.execute(_ROLLBACK_TO)
        write.error = error
    con.execute(_RELEASE)


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


def _delivery(
    delivery_id: str, qty: int, sender: str | None, request: RequestLine
) -> Callable[[sqlite3.Connection], Verdict]:
    """The body of one delivery's write (``Inbox.deliver``): apply it at most once, and
    log its request with status 200 or 409."""

    def body(con: sqlite3.Connection) -> Verdict:
        now = clock_ms()
        verdict: Verdict
        if con.execute(_INSERT_INBOX, (delivery_id, qty, sender, now)).rowcount == 1:
            con.execute(_INSERT_EFFECT, (delivery_id, qty, now))
            verdict = "applied"
        else:
            (known,) = con.execute(_SELECT_INBOX_QTY, (delivery_id,)).fetchone()
            verdict = "duplicate" if known == qty else "conflict"
        status = HTTPStatus.CONFLICT if verdict == "conflict" else HTTPStatus.OK
        con.execute(
            _INSERT_REQUEST, (request.method, request.path, int(status), delivery_id, sender, now)
        )
        return verdict

    return body


def _request_row(
    request: RequestLine, status: int, delivery_id: str | None, sender: str | None
) -> Callable[[sqlite3.Connection], None]:
    """The body of one request's row in the log (``Inbox.record_request``)."""
    row = (request.method, request.path, status, delivery_id, sender, clock_ms())

    def body(con: sqlite3.Connection) -> None:
        con.execute(_INSERT_REQUEST, row)

    return body


@dataclass
class _Write(Generic[T]):
    """One write waiting for the commit that holds it: its body, then what came of it.

    Its thread is woken (``wake``) when it is ``done`` or when it is to ``lead``
    (commit the next group): each waiting thread is woken for itself alone, by a
    lock of its own (a plain lock costs less than an ``Event`` at every delivery).
    """

    body: Callable[[sqlite3.Connection], T]
    tag: Any = None  # a submitted write's (rule 4): what its submitter needs back
    lead: bool = False
    done: bool = False
    result: T | None = None
    error: BaseException | None = None
    _asleep: Any = field(default_factory=threading.Lock)
    _woken: bool = False

    def __post_init__(self) -> None:
        self._asleep.acquire()

    def sleep(self, timeout: float = -1) -> bool:
        """Wait until woken (at most ``timeout`` seconds; -1: no bound); True if woken."""
        return bool(self._asleep.acquire(timeout=timeout))

    def wake(self) -> None:
        """Wake its thread (once: a second call changes nothing)."""
        if not self._woken:
            self._woken = True
            self._asleep.release()

    def outcome(self) -> T:
        """The body's result once committed, or the error that kept it out."""
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]  # done: the body returned it


Submitted = _Write[Any]
"""A submitted write, as ``on_settled`` gets it: ``tag`` as given, and ``outcome()``."""

OnSettled = Callable[[list[Submitted]], None]


class Inbox:
    """The receiver's SQLite inbox file: inbox rows, effects and the request log.

    Reads open a short-lived connection each; writes (``deliver``,
    ``record_request``) share one kept connection, opened at the first write and
    closed by ``close()`` (or ``with``). One ``Inbox`` may be used from many threads
    (writes that come together commit together, rule 3) and the file may be read
    and written by other processes. ``commits`` counts the transactions this
    ``Inbox`` committed for its writes, ``writes`` the writes they held.
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
        self._lock = threading.Lock()  # guards the two below, and each write's flags
        self._waiting: list[_Write[Any]] = []  # in arrival order
        self._committing = False  # a thread commits (or is woken to): the others wait
        self._committer: threading.Thread | None = None  # rule 4, while it runs
        self._on_settled: OnSettled | None = None
        self._work = threading.Condition(self._lock)  # the committer waits on it
        self._stopping = False
        self.commits = 0
        self.writes = 0
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
        """Run ``body`` in a ``BEGIN IMMEDIATE`` transaction on the kept connection,
        together with the other threads' writes that wait at the same time (rule 3),
        and return its result once that transaction committed.

        A body that raises is rolled back alone (its savepoint) and its error is
        raised here; an error of the transaction itself (a busy file, a failed
        commit) is raised to every write it held, none of which was applied.
        Waiting for the other threads' commit counts against ``busy_timeout_s``
        like waiting for another process's lock. This is the inbox's one write path:
        a change to how writes are committed is made here alone.
        """
        write: _Write[T] = _Write(body)
        with self._lock:
            self._waiting.append(write)
            by_committer = self._committer is not None
            if by_committer:  # rule 4: the committer commits it
                self._work.notify()
            else:
                write.lead = not self._committing
                self._committing = True
        if by_committer:
            write.sleep()  # the committer's group is bounded by the busy timeout
            return write.outcome()
        if not write.lead:
            self._wait(write)
        if not write.done:  # this thread commits, for everyone waiting
            try:
                while not write.done:
                    self._commit_group()
            finally:
                self._hand_over()
        return write.outcome()

    def _wait(self, write: _Write[Any]) -> None:
        """Wait until ``write`` is done or its thread is to lead, giving up with a busy
        error after ``busy_timeout_s`` unless it was taken into a group by then (that
        group's commit is bounded by SQLite's own busy timeout)."""
        if write.sleep(self.busy_timeout_s):
            return
        with self._lock:
            if write in self._waiting and not write.lead:
                self._waiting.remove(write)
                raise sqlite3.OperationalError(
                    "database is locked (by this receiver's other writes)"
                )
        write.sleep()

    def _hand_over(self) -> None:
        """The committing thread is done: the oldest waiting write's thread commits next."""
        with self._lock:
            if not self._waiting:
                self._committing = False
                return
            following = self._waiting[0]
            following.lead = True
        following.wake()

    def _commit_group(self) -> None:
        """Commit the waiting writes (at most ``GROUP_LIMIT``) in one transaction."""
        group: list[_Write[Any]] = []
        try:
            con = self._writer()
            con.execute("BEGIN IMMEDIATE")
            group = self._take()  # once the lock is held: the latest comers too
            _apply_all(con, group)
            con.execute("COMMIT")
        except BaseException as error:
            group = group or self._take()  # those waiting would meet the same failure
            self._abandon(error)
            for write in group:
                write.error, write.result = error, None
            self._settle(group)
            if not isinstance(error, Exception):
                raise
            return
        self.commits += 1
        self.writes += len(group)
        self._settle(group)

    def _take(self) -> list[_Write[Any]]:
        """The waiting writes, oldest first, at most ``GROUP_LIMIT`` of them."""
        with self._lock:
            group = self._waiting[:GROUP_LIMIT]
            del self._waiting[:GROUP_LIMIT]
        return group

    def _abandon(self, error: BaseException) -> None:
        """After a failed transaction: roll back what is left of it, and drop the
        connection if SQLite failed (it may be unusable; the next write opens another)."""
        con = self._kept
        if con is not None and self._kept_by == os.getpid() and con.in_transaction:
            with contextlib.suppress(sqlite3.Error):
                con.rollback()
        if isinstance(error, sqlite3.Error):
            self._drop_writer()

    def _settle(self, group: list[_Write[Any]]) -> None:
        """The writes of ``group`` are decided: wake their threads, and hand the
        submitted ones to ``on_settled`` (rule 4)."""
        submitted = []
        for write in group:
            write.done = True
            if write.tag is None:
                write.wake()
            else:
                submitted.append(write)
        if submitted and self._on_settled is not None:
            self._on_settled(submitted)

    def start_committing(self, on_settled: OnSettled) -> None:
        """Start the committer (rule 4): from now on a thread of its own makes every
        commit, and ``on_settled`` gets each group's submitted writes once decided
        (on that thread; it must not raise or wait). ``stop_committing`` ends it."""
        with self._lock:
            if self._committer is not None or self._committing:
                raise RuntimeError("the inbox commits already")
            self._on_settled, self._stopping = on_settled, False
            self._committer = threading.Thread(
                target=self._commit_while_running, name=f"inbox-committer-{self.path.name}"
            )
        self._committer.start()

    def stop_committing(self) -> None:
        """Let the committer commit what waits, then end it and join it (writes from
        then on commit as in rule 3). Nothing if it does not run."""
        with self._lock:
            committer, self._stopping = self._committer, True
            self._work.notify()
        if committer is not None:
            committer.join()

    def _commit_while_running(self) -> None:
        try:
            while True:
                with self._lock:
                    while not self._waiting and not self._stopping:
                        self._work.wait()
                    if not self._waiting:  # stopping, nothing left: writes lead again
                        return
                    self._committing = True
                try:
                    self._commit_group()
                finally:
                    with self._lock:
                        self._committing = False
        finally:
            with self._lock:
                self._committer = None
                self._on_settled = None
                abandoned, self._waiting = self._waiting, []
            for write in abandoned:  # only if the committer itself failed: none is left waiting
                write.error = RuntimeError("the inbox's committer ended")
            self._settle(abandoned)

    def submit(self, body: Callable[[sqlite3.Connection], Any], tag: Any) -> None:
        """Queue ``body`` for the committer's next group (rule 4) and return at once;
        ``tag`` (not ``None``) comes back to ``on_settled`` with it.

        Raises:
            RuntimeError: no committer runs.
        """
        write: _Write[Any] = _Write(body, tag)
        with self._lock:
            if self._committer is None:
                raise RuntimeError("no committer runs: start_committing first")
            self._waiting.append(write)
            self._work.notify()

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
        """Close the kept write connection, if any (the next write opens another),
        once a commit under way has ended (waiting at most ``busy_timeout_s`` for it)."""
        until = time.monotonic() + self.busy_timeout_s + 1
        while True:
            with self._lock:
                if not self._committing or time.monotonic() >= until:
                    self._drop_writer()
                    return
            time.sleep(0.005)

    def waiting_writes(self) -> int:
        """How many writes wait to be taken into a commit (for tests and benches)."""
        with self._lock:
            return len(self._waiting)

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

        return self._write(_delivery(delivery_id, qty, sender, request))

    def submit_delivery(
        self, delivery_id: str, qty: int, sender: str | None, request: RequestLine, tag: Any
    ) -> None:
        """``deliver``, submitted to the committer (rule 4): its ``outcome()`` is the
        verdict."""
        self.submit(_delivery(delivery_id, qty, sender, request), tag)

    def submit_request(
        self,
        request: RequestLine,
        status: int,
        delivery_id: str | None,
        sender: str | None,
        tag: Any,
    ) -> None:
        """``record_request``, submitted to the committer (rule 4)."""
        self.submit(_request_row(request, status, delivery_id, sender), tag)

    def record_request(
        self, request: RequestLine, status: int, delivery_id: str | None, sender: str | None
    ) -> None:
        """Log one request that applied no effect (rejected input, wrong route)."""
        self._write(_request_row(request, status, delivery_id, sender))

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
