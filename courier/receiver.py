"""The downstream receiver: an HTTP service that applies each delivery's effect once.

This is the far side of the story. The queue's fencing token cannot stop a courier
that was killed after sending from being replaced by one that sends again, so the
receiver deduplicates by ``(id, qty)`` in its own SQLite *inbox* file (never the
queue file). The rules it keeps:

1. ``POST /deliveries`` with the JSON object ``{"id": <identifier>, "qty": <1..1000>}``.
   The first delivery of an id inserts the inbox row and applies the *effect* (one row
   in ``effects``, whose ``qty`` adds to the delivered total) in one ``BEGIN IMMEDIATE``
   transaction with ``synchronous=FULL``, and only then answers ``200``. The inbox
   file is in WAL mode, so that commit is one sync of the log, and the receiver keeps
   one connection for its writes (its handler threads take turns on it).
2. The same id with the same qty is a duplicate: ``200`` with ``"duplicate": true`` and
   no second effect. The same id with another qty is ``409`` and changes nothing.
3. Bad input (any method but the route's own, ``HEAD`` and ``OPTIONS`` included)
   gets a specific 4xx with a JSON body ``{"error": <code>, "detail": <text>}``
   and changes neither the inbox nor the effects: ``404`` unknown path, ``405`` wrong
   method, ``411`` no ``Content-Length`` (or a chunked body), ``400`` malformed
   ``Content-Length``, short body, bad ``X-Courier`` header or a body that is not
   strict JSON, ``408`` body not received in time, ``413`` body over ``MAX_BODY_BYTES``,
   ``415`` a ``Content-Type`` other than JSON, ``422`` JSON of the wrong shape. If the
   inbox file itself fails (e.g. stays locked), the answer is ``503``: try again.
4. Every request is counted in the inbox file's ``requests`` table (so the count
   survives restarts and is visible to other processes), except reads of the inbox
   itself (``GET /`` and ``GET /inbox``), which return ``Inbox.summary()`` as JSON.
   Requests the stdlib rejects before routing (an unparsable request line) are not
   counted.
5. The server binds ``127.0.0.1`` on an OS-assigned port by default and handles each
   connection on its own thread. A connection carries request after request
   (HTTP/1.1 keep-alive) while each request is well formed and read whole; after a
   refused request (any 4xx but ``409``) the answer says ``Connection: close`` and
   the connection is closed, and an idle connection is closed after
   ``read_timeout_s``. ``Receiver.stop()`` ends the idle connections, joins every
   thread, closes the socket and the inbox's connection.

Chaos knobs (for drills and the soak in ``chaos/``; all off by default):
``reply_delay_ms`` sleeps after the inbox commit and before the answer, so a courier
with a short timeout sees a timeout for work that was in fact done. ``faults`` is
asked, for each well-formed delivery, for a ``Fault``: refuse it with a given 4xx/5xx
status without touching the inbox, or apply it and then answer late or drop the
connection without any answer. ``on_commit`` is called right after a delivery's
inbox transaction has committed and before the answer is written: the moment to
kill or pause the sender that is still waiting for it.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import sqlite3
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from os import PathLike
from pathlib import Path
from typing import Any, Literal, TypeVar

import worker
from courier.runner import clock_ms

__all__ = [
    "DELIVERIES_PATH",
    "MAX_BODY_BYTES",
    "CommitHook",
    "Fault",
    "FaultPlan",
    "Inbox",
    "Problem",
    "Receiver",
    "parse_delivery",
]

DELIVERIES_PATH = "/deliveries"
SUMMARY_PATHS = ("/", "/inbox")
MAX_BODY_BYTES = 4096
DRAIN_LIMIT_BYTES = 65536  # how much of a refused body is read before closing
MAX_DECIMAL_DIGITS = 12
MAX_REPLY_DELAY_MS = 10_000
SENDER_HEADER = "X-Courier"

_DELIVERY_KEYS = frozenset({"id", "qty"})

Verdict = Literal["applied", "duplicate", "conflict"]
Log = Callable[[str], None]
T = TypeVar("T")


@dataclass(frozen=True)
class Fault:
    """A fault the receiver injects into one well-formed delivery (chaos drills only).

    ``status``: answer this 4xx or 5xx status and change nothing (the request is
    logged). Otherwise the delivery is applied as usual, then the answer waits
    ``delay_ms`` (at most ``MAX_REPLY_DELAY_MS``), and with ``drop`` the connection
    is closed with no answer at all, as a crash after the commit would.
    """

    status: int | None = None
    delay_ms: int = 0
    drop: bool = False

    def __post_init__(self) -> None:
        if self.status is not None and not _is_error_status(self.status):
            raise ValueError(f"'status' must be a known 4xx or 5xx status, got {self.status!r}")
        if type(self.delay_ms) is not int or not 0 <= self.delay_ms <= MAX_REPLY_DELAY_MS:
            raise ValueError(
                f"'delay_ms' must be an int in 0..{MAX_REPLY_DELAY_MS}, got {self.delay_ms!r}"
            )


def _is_error_status(status: object) -> bool:
    """True for an exact int that names a 4xx or 5xx ``HTTPStatus``."""
    if type(status) is not int or not 400 <= status <= 599:
        return False
    try:
        HTTPStatus(status)
    except ValueError:
        return False
    return True


NO_FAULT = Fault()
FaultPlan = Callable[[str, str | None], Fault | None]
"""Asked once per well-formed delivery with ``(id, sender)``; ``None`` means no fault."""
CommitHook = Callable[[str, str | None, Verdict], None]
"""Called with ``(id, sender, verdict)`` after an applied or duplicate delivery committed."""

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
        ``busy_timeout_s`` like waiting for another process's lock."""
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


# --- Validating a delivery --------------------------------------------------------


class Problem(Exception):
    """A request the receiver rejects: an HTTP status, a short code and a detail."""

    def __init__(self, status: HTTPStatus, code: str, detail: str) -> None:
        super().__init__(f"{int(status)} {code}: {detail}")
        self.status = status
        self.code = code
        self.detail = detail


@dataclass(frozen=True)
class RequestLine:
    """The method and path of one request, as logged."""

    method: str
    path: str


def _decimal(text: str) -> int | None:
    """The value of a plain decimal header such as ``Content-Length``, else ``None``."""
    if text.isascii() and text.isdigit() and len(text) <= MAX_DECIMAL_DIGITS:
        return int(text)
    return None


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        raise Problem(HTTPStatus.BAD_REQUEST, "not_json", f"duplicate keys in {keys!r}")
    return dict(pairs)


def _no_constants(name: str) -> Any:
    raise Problem(HTTPStatus.BAD_REQUEST, "not_json", f"{name} is not JSON")


def _invalid(detail: str) -> Problem:
    return Problem(HTTPStatus.UNPROCESSABLE_ENTITY, "invalid_delivery", detail)


def parse_delivery(body: bytes) -> tuple[str, int]:
    """Return ``(id, qty)`` from a delivery body, or raise ``Problem``.

    The body must be UTF-8 strict JSON (no duplicate keys, no NaN/Infinity): else
    400 ``not_json``. It must be an object with exactly the keys ``id`` (a str of
    1-64 ASCII letters, digits, ``_`` or ``-``) and ``qty`` (an int 1-1000, not a
    bool, not a float): else 422 ``invalid_delivery``.
    """
    try:
        value = json.loads(
            body.decode("utf-8"), object_pairs_hook=_unique_keys, parse_constant=_no_constants
        )
    except (UnicodeDecodeError, ValueError) as error:
        raise Problem(HTTPStatus.BAD_REQUEST, "not_json", str(error)) from None
    if type(value) is not dict:
        raise _invalid(f"expected a JSON object, got {type(value).__name__}")
    if value.keys() != _DELIVERY_KEYS:
        raise _invalid(f"expected exactly the keys ['id', 'qty'], got {sorted(value)!r}")
    delivery_id, qty = value["id"], value["qty"]
    if not worker.is_identifier(delivery_id):
        raise _invalid(f"'id' must be 1-64 ASCII letters, digits, '_' or '-', got {delivery_id!r}")
    if type(qty) is not int or not 1 <= qty <= worker.MAX_QTY:
        raise _invalid(f"'qty' must be an integer in 1..{worker.MAX_QTY}, got {qty!r}")
    return delivery_id, qty


# --- HTTP -------------------------------------------------------------------------


@dataclass(frozen=True)
class _Settings:
    """What every handler thread reads: the inbox, the knobs and where to log."""

    inbox: Inbox
    reply_delay_ms: int
    read_timeout_s: float
    log: Log | None
    faults: FaultPlan | None
    on_commit: CommitHook | None


class _Server(ThreadingHTTPServer):
    """The HTTP server plus the receiver's settings, read by each handler thread."""

    # server_close() joins handler threads only if they are not daemons (the stdlib
    # skips daemon threads), so a stopped receiver leaks none. Each handler is bounded:
    # socket reads by read_timeout_s, the reply delay by MAX_REPLY_DELAY_MS.
    daemon_threads = False
    block_on_close = True

    def __init__(self, address: tuple[str, int], settings: _Settings) -> None:
        self.settings = settings
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        """Serve one connection, known to ``end_connections`` while it is open."""
        with self._open_lock:
            self._open.add(request)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._open_lock:
                self._open.discard(request)

    def end_connections(self) -> None:
        """Make every open connection's next read see the end (call after ``shutdown``):
        an idle keep-alive connection ends at once, one mid-request after its answer."""
        with self._open_lock:
            sockets = list(self._open)
        for sock in sockets:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RD)

    def handle_error(self, request: Any, client_address: Any) -> None:
        """A client that went away mid-answer (killed, timed out) is normal: one log line."""
        error = sys.exc_info()[1]
        if isinstance(error, ConnectionError):
            if self.settings.log is not None:
                self.settings.log(f"client {client_address} went away before its answer: {error!r}")
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    """Routes the requests of one connection; every answer is JSON."""

    server_version = "courier-receiver/1"
    protocol_version = "HTTP/1.1"  # keep-alive: one connection, request after request
    disable_nagle_algorithm = True  # headers and body leave at once, not 40 ms apart

    @property
    def _receiver(self) -> _Settings:
        assert isinstance(self.server, _Server)
        return self.server.settings

    def setup(self) -> None:
        super().setup()
        # A client that announces more body than it sends must not pin a thread.
        self.connection.settimeout(self._receiver.read_timeout_s)

    def log_message(self, format: str, *args: Any) -> None:
        """Silence the stdlib's stderr access log; ``_dispatch`` logs instead."""

    def _dispatch(self) -> None:
        """Handle one request; an inbox failure (e.g. busy) is a 503, to be retried."""
        request = RequestLine(self.command, self.path)
        self._body_read = False
        try:
            self._handle(request)
        except sqlite3.Error as error:
            problem = Problem(HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", f"inbox: {error}")
            self._reply_problem(problem, request)

    # Every method goes through one router: the route says which method it accepts.
    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = do_HEAD = do_OPTIONS = _dispatch

    def _handle(self, request: RequestLine) -> None:
        if request.path in SUMMARY_PATHS and request.method == "GET":
            unread = self.headers.get("Transfer-Encoding") or self.headers.get("Content-Length")
            closing = {"Connection": "close"} if unread not in (None, "0") else {}
            self._reply(HTTPStatus.OK, self._receiver.inbox.summary(), closing)
            return
        sender: str | None = None
        try:
            self._route(request)
            sender = self._sender()
            delivery_id, qty = parse_delivery(self._body())
        except Problem as problem:
            self._receiver.inbox.record_request(request, problem.status, None, sender)
            self._drain_unread_body()
            self._reply_problem(problem, request)
            return
        fault = self._fault_for(delivery_id, sender)
        if fault.status is not None:
            self._refuse(request, fault.status, delivery_id, sender)
            return
        self._apply(request, delivery_id, qty, sender, fault)

    def _fault_for(self, delivery_id: str, sender: str | None) -> Fault:
        plan = self._receiver.faults
        fault = None if plan is None else plan(delivery_id, sender)
        return NO_FAULT if fault is None else fault

    def _refuse(
        self, request: RequestLine, status: int, delivery_id: str, sender: str | None
    ) -> None:
        """Answer an injected error status; the inbox and the effects stay as they were."""
        self._receiver.inbox.record_request(request, status, delivery_id, sender)
        problem = Problem(HTTPStatus(status), "injected_fault", f"chaos: refused {delivery_id!r}")
        self._reply_problem(problem, request)

    def _route(self, request: RequestLine) -> None:
        if request.path not in (DELIVERIES_PATH, *SUMMARY_PATHS):
            raise Problem(HTTPStatus.NOT_FOUND, "not_found", f"no route {request.path!r}")
        allowed = "POST" if request.path == DELIVERIES_PATH else "GET"
        if request.method != allowed:
            raise Problem(
                HTTPStatus.METHOD_NOT_ALLOWED,
                "method_not_allowed",
                f"{request.path} accepts {allowed}, not {request.method}",
            )

    def _sender(self) -> str | None:
        sender = self.headers.get(SENDER_HEADER)
        if sender is not None and not worker.is_identifier(sender):
            raise Problem(HTTPStatus.BAD_REQUEST, "bad_sender", f"{SENDER_HEADER}: {sender!r}")
        return sender

    def _body(self) -> bytes:
        """Read exactly ``Content-Length`` bytes of a JSON body, or raise ``Problem``."""
        if self.headers.get("Transfer-Encoding") is not None:
            raise Problem(HTTPStatus.LENGTH_REQUIRED, "length_required", "send Content-Length")
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            raise Problem(HTTPStatus.LENGTH_REQUIRED, "length_required", "no Content-Length")
        length = _decimal(lengths[0]) if len(lengths) == 1 else None
        if length is None:
            raise Problem(HTTPStatus.BAD_REQUEST, "bad_content_length", f"got {lengths!r}")
        if length > MAX_BODY_BYTES:
            raise Problem(
                HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                "too_large",
                f"{length} bytes; at most {MAX_BODY_BYTES}",
            )
        media_type = (self.headers.get("Content-Type") or "").split(";")[0].strip().lower()
        if media_type != "application/json":
            raise Problem(
                HTTPStatus.UNSUPPORTED_MEDIA_TYPE,
                "unsupported_media_type",
                f"Content-Type must be application/json, got {media_type!r}",
            )
        self._body_read = True
        try:
            body = self.rfile.read(length)
        except TimeoutError:
            raise Problem(
                HTTPStatus.REQUEST_TIMEOUT, "request_timeout", "body not received in time"
            ) from None
        if len(body) != length:
            raise Problem(
                HTTPStatus.BAD_REQUEST, "short_body", f"got {len(body)} of {length} bytes"
            )
        return body

    def _drain_unread_body(self) -> None:
        """Read and drop a body we refused unread (up to ``DRAIN_LIMIT_BYTES``).

        Closing a socket with unread input makes the kernel reset the connection,
        which can destroy our error answer before the client reads it.
        """
        length = _decimal(self.headers.get("Content-Length", ""))
        if self._body_read or length is None:
            return
        self._body_read = True
        remaining = min(length, DRAIN_LIMIT_BYTES)
        with contextlib.suppress(OSError):
            while remaining > 0:
                chunk = self.rfile.read1(min(remaining, 65536))
                if not chunk:
                    return
                remaining -= len(chunk)

    def _apply(
        self,
        request: RequestLine,
        delivery_id: str,
        qty: int,
        sender: str | None,
        fault: Fault = NO_FAULT,
    ) -> None:
        verdict = self._receiver.inbox.deliver(delivery_id, qty, sender, request)
        if verdict == "conflict":
            problem = Problem(
                HTTPStatus.CONFLICT, "conflict", f"{delivery_id!r} was delivered with another qty"
            )
            self._reply_problem(problem, request)
            return
        if self._receiver.on_commit is not None:
            self._receiver.on_commit(delivery_id, sender, verdict)
        delay_ms = max(self._receiver.reply_delay_ms, fault.delay_ms)
        if delay_ms:
            time.sleep(delay_ms / 1000)
        if fault.drop:
            self.close_connection = True  # no answer at all: the client sees a reset
            self._log(f"{request.method} {request.path} dropped {verdict} {delivery_id}")
            return
        answer = {"id": delivery_id, "qty": qty, "duplicate": verdict == "duplicate"}
        self._reply(HTTPStatus.OK, answer)
        who = "an unnamed sender (no X-Courier header)" if sender is None else sender
        self._log(f"{request.method} {request.path} 200 {verdict} {delivery_id} from {who}")

    def _reply_problem(self, problem: Problem, request: RequestLine) -> None:
        headers: dict[str, str] = {}
        if problem.status == HTTPStatus.METHOD_NOT_ALLOWED:
            headers["Allow"] = "POST" if request.path == DELIVERIES_PATH else "GET"
        if problem.status != HTTPStatus.CONFLICT:
            headers["Connection"] = "close"  # what is left of a refused request is unknown
        self._reply(problem.status, {"error": problem.code, "detail": problem.detail}, headers)
        self._log(f"{request.method} {request.path} {int(problem.status)} {problem.code}")

    def _reply(
        self, status: HTTPStatus, payload: dict[str, Any], headers: dict[str, str] | None = None
    ) -> None:
        body = json.dumps(payload).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        if self.command != "HEAD":  # a HEAD answer has the headers of a GET's, no body
            self.wfile.write(body)

    def _log(self, line: str) -> None:
        if self._receiver.log is not None:
            self._receiver.log(line)


class Receiver:
    """A running receiver: the HTTP server on a background thread, over one inbox.

    Use it as a context manager (``with Receiver(path) as receiver:``) or call
    ``start()`` and ``stop()``. ``port`` is the bound port (OS-assigned for port 0)
    and ``url`` the delivery URL to give couriers.
    """

    def __init__(
        self,
        inbox_path: str | PathLike[str],
        host: str = "127.0.0.1",
        port: int = 0,
        reply_delay_ms: int = 0,
        read_timeout_s: float = 5.0,
        log: Log | None = None,
        inbox_busy_timeout_s: float = 5.0,
        faults: FaultPlan | None = None,
        on_commit: CommitHook | None = None,
    ) -> None:
        """Create the inbox and bind the socket; raises ``ValueError`` on bad knobs.

        ``faults`` and ``on_commit`` are the chaos knobs described in the module
        docstring; both are called on the handler threads, so they must be
        thread-safe and quick (a ``Fault``'s delay is the receiver's to sleep).
        """
        if type(port) is not int or not 0 <= port <= 65535:
            raise ValueError(f"'port' must be an int in 0..65535, got {port!r}")
        if type(reply_delay_ms) is not int or not 0 <= reply_delay_ms <= MAX_REPLY_DELAY_MS:
            raise ValueError(
                f"'reply_delay_ms' must be an int in 0..{MAX_REPLY_DELAY_MS}, "
                f"got {reply_delay_ms!r}"
            )
        if not 0 < read_timeout_s <= 60:
            raise ValueError(f"'read_timeout_s' must be in (0, 60], got {read_timeout_s!r}")
        self.inbox = Inbox(inbox_path, busy_timeout_s=inbox_busy_timeout_s)
        settings = _Settings(self.inbox, reply_delay_ms, read_timeout_s, log, faults, on_commit)
        self._server = _Server((host, port), settings)
        self._thread: threading.Thread | None = None

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def url(self) -> str:
        """The URL couriers post deliveries to."""
        return self.base_url + DELIVERIES_PATH

    def start(self) -> Receiver:
        """Serve on a background thread; returns ``self``."""
        if self._thread is not None:
            raise RuntimeError("the receiver is already started")
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"receiver-{self.port}",
        )
        self._thread.start()
        return self

    def serve_until(self, stop: threading.Event, max_seconds: float | None = None) -> None:
        """Serve on the calling thread's behalf until ``stop`` is set or time runs out."""
        self.start()
        try:
            stop.wait(max_seconds)
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop serving, join the serving and handler threads, close the socket."""
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._server.end_connections()
        self._server.server_close()
        self.inbox.close()

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
