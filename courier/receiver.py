"""The downstream receiver: an HTTP service over one inbox (``courier.inbox``).

This is the far side of the story: couriers post deliveries here and the inbox
applies each one's effect at most once. What a delivery request must be is
``courier.delivery_request``'s; how the inbox decides is ``courier.inbox``'s; how a
request head is read is ``courier.request_head``'s. The rules the server keeps:

1. ``POST /deliveries`` with a delivery is applied in the inbox and answered
   ``200`` only once its transaction committed: ``{"id", "qty", "duplicate"}``,
   ``duplicate`` true when the inbox had it already (no second effect). The same
   id with another qty is ``409`` and changes nothing.
2. A request the delivery rules refuse gets that ``Problem``'s 4xx with a JSON
   body ``{"error": <code>, "detail": <text>}`` and changes neither the inbox nor
   the effects; a body not received within ``read_timeout_s`` is ``408``, one
   shorter than announced ``400 short_body``. If the inbox file itself fails
   (e.g. stays locked), the answer is ``503``: try again.
3. Every request is counted in the inbox's request log, except reads of the inbox
   itself (``GET /`` and ``GET /inbox``), which return ``Inbox.summary()`` as
   JSON. Requests whose head cannot be read (``courier.request_head``: a bad
   request line, a malformed header, a head too long) are not counted, and get a
   JSON body ``{"error": "bad_request_line", ...}`` too; a method the routes do not
   know (``TRACE``, ``FOO``) is routed like any other: a JSON 405.
4. The server binds ``127.0.0.1`` on an OS-assigned port by default. One thread
   runs an event loop that reads every connection and writes every answer; the
   inbox's committer thread (``Inbox.start_committing``) commits the writes that
   wait, together, and hands them back to the loop, which answers each. A
   connection carries request after request (HTTP/1.1 keep-alive), one at a time,
   while each request is well formed and read whole; after a refused request (any
   4xx but ``409``) the answer says ``Connection: close``, what the client still
   sends is read and dropped (up to ``DRAIN_LIMIT_BYTES``, so that its answer is
   not lost to a reset) and the connection is closed; an idle connection, or one
   whose request stalls, is closed after ``read_timeout_s``. ``Receiver.stop()``
   stops accepting, closes the idle connections (and those mid-way through a
   request's bytes), answers the requests already read, then joins every thread,
   closes the socket and the inbox's connection.
5. The one plug-in point is an ``Interference`` (``courier.interference``): asked
   for each well-formed delivery, it may refuse it, delay its answer or drop it.
   Its ``before_apply`` and ``refusal`` run on the event loop, its
   ``after_commit`` on a thread of its own for each delivery. Without one (the
   default) every delivery is handled as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import sqlite3
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formatdate
from http import HTTPStatus
from os import PathLike
from typing import Any

from courier.delivery_request import (
    DELIVERIES_PATH,
    SUMMARY_PATHS,
    Problem,
    RequestLine,
    allowed_method,
    body_length,
    check_route,
    parse_delivery,
    sender_of,
)
from courier.inbox import Inbox, Submitted, Verdict
from courier.interference import Interference, Intervention
from courier.request_head import BadHead, Head, head_end, parse_head

__all__ = ["DRAIN_LIMIT_BYTES", "Receiver"]

DRAIN_LIMIT_BYTES = 65536  # how much a refused client may still send before the close
SERVER = f"courier-receiver/1 Python/{sys.version.split()[0]}"
BACKLOG = 128  # a batched courier opens its --in-flight connections at once
STOP_WAIT_S = 30.0  # beyond it, stop() closes the connections whose answers are not out
READ_BYTES = 65536  # read at once from a connection
PAUSE_BYTES = 256 * 1024  # unread bytes a connection may hold while its request is handled

Log = Callable[[str], None]

# A connection's phases: reading a head, reading a body, handled (its answer awaited),
# draining (refused: read and drop until the client closes), closed.
_HEAD, _BODY, _HANDLED, _DRAINING, _CLOSED = range(5)
_CONTINUE = ("HTTP/1.1", "100-continue")  # a client that waits for "100 Continue"


@dataclass(frozen=True)
class _Settings:
    """What every connection reads: the inbox, the plug-in and where to log."""

    inbox: Inbox
    read_timeout_s: float
    log: Log | None
    interference: Interference | None


class _Dates:
    """The ``Date`` header's value, made once a second."""

    def __init__(self) -> None:
        self._second = -1
        self._value = ""

    def now(self) -> str:
        second = int(time.time())
        if second != self._second:
            self._second, self._value = second, formatdate(second, usegmt=True)
        return self._value


@dataclass
class _Pending:
    """A request handed to the committer or a thread: the connection that answers it
    and what its answer needs."""

    connection: _Connection
    request: RequestLine
    delivery_id: str | None = None
    qty: int = 0
    sender: str | None = None
    intervention: Intervention | None = None
    problem: Problem | None = None  # a refusal being logged: its answer once committed


class _Loop:
    """The event loop's side of the receiver: its connections, the threads it started
    (reads of the summary, interferences' ``after_commit``), the answers that come
    back from the committer."""

    def __init__(self, settings: _Settings, loop: asyncio.AbstractEventLoop) -> None:
        self.settings = settings
        self.loop = loop
        self.connections: set[_Connection] = set()
        self.threads: set[threading.Thread] = set()
        self.threads_lock = threading.Lock()
        self.dates = _Dates()
        self.stopping = False

    def log(self, line: str) -> None:
        if self.settings.log is not None:
            self.settings.log(line)

    def settled(self, writes: list[Submitted]) -> None:
        """The committer's ``on_settled`` (its thread): answer them on the loop."""
        self.post(self.answer_all, writes)

    def post(self, callback: Callable[..., None], *args: Any) -> None:
        """Have the loop call ``callback(*args)`` (from any thread). Once the loop has
        ended (``stop`` gave up waiting), there is no one left to answer: nothing."""
        with contextlib.suppress(RuntimeError):  # "Event loop is closed"
            self.loop.call_soon_threadsafe(callback, *args)

    def answer_all(self, writes: list[Submitted]) -> None:
        for write in writes:
            pending: _Pending = write.tag
            try:
                outcome = write.outcome()
            except sqlite3.Error as error:
                pending.connection.unavailable(pending.request, error)
                continue
            except Exception as error:  # what http.server did: log, close
                pending.connection.failed(error)
                continue
            pending.connection.committed(pending, outcome)

    def in_thread(self, name: str, target: Callable[[], None]) -> None:
        """Run ``target`` on a thread of its own, joined by ``stop``."""

        def run() -> None:
            try:
                target()
            finally:
                with self.threads_lock:
                    self.threads.discard(thread)

        thread = threading.Thread(target=run, name=name)
        with self.threads_lock:
            self.threads.add(thread)
        thread.start()

    def sweep(self) -> None:
        """Close the connections that waited for bytes longer than the read timeout."""
        now = time.monotonic()
        for connection in list(self.connections):
            connection.check_timeout(now)
        if not self.stopping:
            self.loop.call_later(min(0.1, self.settings.read_timeout_s / 4), self.sweep)

    def begin_stop(self) -> None:
        """Close every connection not waiting for its answer (rule 4)."""
        self.stopping = True
        for connection in list(self.connections):
            if connection.phase != _HANDLED:
                connection.close()


class _Connection(asyncio.BufferedProtocol):
    """One client connection: reads its requests one at a time, answers each (rule 4).

    A buffered protocol: the loop reads into ``READ_BYTES`` of this connection's own,
    where a plain ``Protocol`` would get a new bytes object of asyncio's 256 KiB read
    size for every read (a map and an unmap of memory at each delivery)."""

    def __init__(self, side: _Loop) -> None:
        self.side = side
        self.settings = side.settings
        self.transport: asyncio.Transport | None = None
        self.peer: Any = None
        self.buffer = bytearray()
        self.incoming = memoryview(bytearray(READ_BYTES))
        self.phase = _HEAD
        self.last_read = time.monotonic()
        self.eof = False
        self.paused = False
        self.drained = 0
        # The request being read or handled.
        self.head: Head | None = None
        self.request = RequestLine("", "")
        self.sender: str | None = None
        self.length = 0
        self.continued = False

    # --- asyncio's calls ------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.peer = transport.get_extra_info("peername")
        sock = transport.get_extra_info("socket")
        if sock is not None:  # an answer's bytes leave at once, not 40 ms later
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.side.connections.add(self)
        if self.side.stopping:
            self.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.phase = _CLOSED
        self.side.connections.discard(self)

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.incoming

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self.incoming[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        self.last_read = time.monotonic()
        if self.phase == _DRAINING:
            self.drained += len(data)
            if self.drained > DRAIN_LIMIT_BYTES:
                self.close()
            return
        if self.phase == _CLOSED:
            return
        self.buffer += data
        if self.phase == _HANDLED:
            if len(self.buffer) > PAUSE_BYTES and not self.paused and self.transport is not None:
                self.paused = True
                self.transport.pause_reading()
            return
        self.advance()

    def eof_received(self) -> bool:
        self.eof = True
        if self.phase == _BODY:  # the client ended its half before the whole body
            got = len(self.buffer)
            detail = f"got {got} of {self.length} bytes"
            self.refuse(Problem(HTTPStatus.BAD_REQUEST, "short_body", detail))
            return True  # keep our half open for the answer
        if self.phase == _HANDLED:
            return True
        self.close()
        return False

    # --- reading requests -------------------------------------------------------------

    def advance(self) -> None:
        """Read what the buffer holds: a head, then its body, then handle the request."""
        if self.phase == _HEAD:
            try:
                start, end = head_end(self.buffer)
                if end < 0:
                    if start:
                        del self.buffer[:start]
                    return
                head = parse_head(bytes(self.buffer[start:end]))
            except BadHead as bad:
                self.bad_head(bad)
                return
            del self.buffer[: end + 4]
            self.head_read(head)
        if self.phase == _BODY and len(self.buffer) >= self.length:
            body = bytes(self.buffer[: self.length])
            del self.buffer[: self.length]
            self.body_read(body)
        elif self.phase == _BODY and not self.continued:
            self.continued = True
            asked = self.head
            expect = (asked.get("Expect") if asked is not None else None) or ""
            if asked is not None and (asked.version, expect.lower()) == _CONTINUE:
                self.write(b"HTTP/1.1 100 Continue\r\n\r\n")

    def head_read(self, head: Head) -> None:
        self.head = head
        self.request = request = RequestLine(head.method, head.target)
        self.sender = None
        self.continued = False
        if request.path in SUMMARY_PATHS and request.method == "GET":
            unread = head.get("Transfer-Encoding") or head.get("Content-Length")
            self.phase = _HANDLED
            self.side.in_thread("receiver-summary", lambda: self.read_summary(unread))
            return
        try:
            check_route(request)
            self.sender = sender_of(head)
            self.length = body_length(head)
        except Problem as problem:
            self.refuse(problem)
            return
        self.phase = _BODY

    def body_read(self, body: bytes) -> None:
        try:
            delivery_id, qty = parse_delivery(body)
        except Problem as problem:
            self.refuse(problem)
            return
        self.phase = _HANDLED
        pending = _Pending(self, self.request, delivery_id, qty, self.sender)
        interference = self.settings.interference
        if interference is not None:
            pending.intervention = interference.before_apply(delivery_id, self.sender)
            refusal = None if pending.intervention is None else pending.intervention.refusal()
            if refusal is not None:  # the interference's answer; the inbox stays as it was
                pending.problem = refusal
                self.settings.inbox.submit_request(
                    self.request, refusal.status, delivery_id, self.sender, pending
                )
                return
        self.settings.inbox.submit_delivery(delivery_id, qty, self.sender, self.request, pending)

    def refuse(self, problem: Problem) -> None:
        """A request refused (rule 2): logged in the request log, then answered (and
        the connection closed once the client stops sending, ``drain``)."""
        self.phase = _HANDLED
        pending = _Pending(self, self.request, sender=self.sender, problem=problem)
        self.settings.inbox.submit_request(self.request, problem.status, None, self.sender, pending)

    def bad_head(self, bad: BadHead) -> None:
        """A head that cannot be read: answered, not counted, and the connection closed."""
        self.phase = _HANDLED
        self.head = None
        body = {"error": "bad_request_line", "detail": bad.reason}
        self.reply(bad.status, body, {"Connection": "close"}, head_request=False)
        self.side.log(f"{int(bad.status)} bad_request_line ({bad.reason})")

    def read_summary(self, unread: str | None) -> None:
        """On a thread: read the inbox's summary, then answer it on the loop."""
        try:
            summary = self.settings.inbox.summary()
        except sqlite3.Error as error:
            self.side.post(self.unavailable, self.request, error)
            return
        closing = {"Connection": "close"} if unread not in (None, "0") else {}
        self.side.post(self.reply, HTTPStatus.OK, summary, closing)

    # --- answering ---------------------------------------------------------------------

    def committed(self, pending: _Pending, outcome: Any) -> None:
        """A write of this connection's request committed: answer it."""
        if pending.problem is not None:
            self.reply_problem(pending.problem, pending.request)
            return
        verdict: Verdict = outcome
        assert pending.delivery_id is not None
        if verdict == "conflict":
            problem = Problem(
                HTTPStatus.CONFLICT,
                "conflict",
                f"{pending.delivery_id!r} was delivered with another qty",
            )
            self.reply_problem(problem, pending.request)
            return
        intervention = pending.intervention
        if intervention is None:
            self.delivered(pending, verdict, answer=True)
            return

        def after_commit() -> None:
            answer = intervention.after_commit(verdict)
            self.side.post(self.delivered, pending, verdict, answer)

        self.side.in_thread("receiver-interference", after_commit)

    def delivered(self, pending: _Pending, verdict: Verdict, answer: bool) -> None:
        request, delivery_id = pending.request, pending.delivery_id
        if not answer:  # no answer at all, as a crash after the commit would leave it
            self.side.log(f"{request.method} {request.path} dropped {verdict} {delivery_id}")
            self.close()
            return
        if self.phase == _CLOSED:
            self.went_away()
        else:
            qty, duplicate = pending.qty, "true" if verdict == "duplicate" else "false"
            body = b'{"id": "%s", "qty": %d, "duplicate": %s}' % (
                str(delivery_id).encode("ascii"),
                qty,
                duplicate.encode("ascii"),
            )
            self.write_answer(HTTPStatus.OK, body, {}, head_request=False)
        sender = pending.sender
        who = "an unnamed sender (no X-Courier header)" if sender is None else sender
        self.side.log(f"{request.method} {request.path} 200 {verdict} {delivery_id} from {who}")

    def unavailable(self, request: RequestLine, error: BaseException) -> None:
        """The inbox failed (rule 2): ``503``, to be tried again."""
        problem = Problem(HTTPStatus.SERVICE_UNAVAILABLE, "unavailable", f"inbox: {error}")
        self.reply_problem(problem, request)

    def failed(self, error: BaseException) -> None:
        """Anything else went wrong with this request: logged as the stdlib's server
        logs it, and the connection closed without an answer."""
        traceback.print_exception(error, file=sys.stderr)
        self.close()

    def reply_problem(self, problem: Problem, request: RequestLine) -> None:
        headers: dict[str, str] = {}
        if problem.status == HTTPStatus.METHOD_NOT_ALLOWED:
            headers["Allow"] = allowed_method(request.path)
        if problem.status != HTTPStatus.CONFLICT:
            headers["Connection"] = "close"  # what is left of a refused request is unknown
        self.reply(problem.status, {"error": problem.code, "detail": problem.detail}, headers)
        self.side.log(f"{request.method} {request.path} {int(problem.status)} {problem.code}")

    def reply(
        self,
        status: HTTPStatus,
        payload: dict[str, Any],
        headers: dict[str, str] | None = None,
        head_request: bool | None = None,
    ) -> None:
        if self.phase == _CLOSED:
            self.went_away()
            return
        if head_request is None:
            head_request = self.request.method == "HEAD"
        body = json.dumps(payload).encode("utf-8")
        self.write_answer(status, body, headers or {}, head_request=head_request)

    def write_answer(
        self, status: HTTPStatus, body: bytes, headers: dict[str, str], *, head_request: bool
    ) -> None:
        """Write one answer whole, then read the next request or close (rule 4)."""
        lines = [
            f"HTTP/1.1 {int(status)} {status.phrase}\r\nServer: {SERVER}\r\n"
            f"Date: {self.side.dates.now()}\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
        ]
        lines.extend(f"{name}: {value}\r\n" for name, value in headers.items())
        lines.append("\r\n")
        answer = "".join(lines).encode("latin-1")
        self.write(answer if head_request else answer + body)
        closing = headers.get("Connection") == "close"
        keep = not closing and self.head is not None and self.head.keep_alive()
        if closing and not self.eof:
            self.drain()  # the client may still be sending what was refused
        elif not keep or self.eof or self.side.stopping:
            self.close()
        else:
            self.next_request()

    def next_request(self) -> None:
        self.phase, self.head = _HEAD, None
        self.last_read = time.monotonic()
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        if self.buffer:
            self.advance()

    def drain(self) -> None:
        """Read and drop what the client still sends (up to the limit), then close:
        closing a socket with unread input makes the kernel reset the connection,
        which can destroy the answer before the client reads it."""
        self.phase = _DRAINING
        self.drained = len(self.buffer)
        self.buffer.clear()
        self.last_read = time.monotonic()
        if self.paused and self.transport is not None:
            self.paused = False
            self.transport.resume_reading()
        if self.transport is not None and self.transport.can_write_eof():
            self.transport.write_eof()

    def write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def went_away(self) -> None:
        self.side.log(f"client {self.peer} went away before its answer")

    def check_timeout(self, now: float) -> None:
        """Past the read timeout without a byte: ``408`` mid-body, else closed."""
        if self.phase == _HANDLED or now - self.last_read < self.settings.read_timeout_s:
            return
        if self.phase == _BODY:
            problem = Problem(
                HTTPStatus.REQUEST_TIMEOUT, "request_timeout", "body not received in time"
            )
            self.refuse(problem)
            return
        self.close()

    def close(self) -> None:
        if self.phase != _CLOSED:
            self.phase = _CLOSED
            self.side.connections.discard(self)
            if self.transport is not None:
                self.transport.close()


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
        *,
        read_timeout_s: float = 5.0,
        log: Log | None = None,
        inbox_busy_timeout_s: float = 5.0,
        interference: Interference | None = None,
    ) -> None:
        """Create the inbox and bind the socket; raises ``ValueError`` on a bad port
        or ``read_timeout_s``.

        ``interference`` is the plug-in point of rule 5 (``courier.interference``).
        """
        if type(port) is not int or not 0 <= port <= 65535:
            raise ValueError(f"'port' must be an int in 0..65535, got {port!r}")
        if not 0 < read_timeout_s <= 60:
            raise ValueError(f"'read_timeout_s' must be in (0, 60], got {read_timeout_s!r}")
        self.inbox = Inbox(inbox_path, busy_timeout_s=inbox_busy_timeout_s)
        self._settings = _Settings(self.inbox, read_timeout_s, log, interference)
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            self._socket.bind((host, port))
            self._socket.listen(BACKLOG)
        except BaseException:
            self._socket.close()
            raise
        self._address = self._socket.getsockname()
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._side: _Loop | None = None
        self._server: asyncio.AbstractServer | None = None

    @property
    def host(self) -> str:
        return str(self._address[0])

    @property
    def port(self) -> int:
        return int(self._address[1])

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
        loop = asyncio.new_event_loop()
        side = _Loop(self._settings, loop)
        self._loop, self._side = loop, side
        self.inbox.start_committing(side.settled)
        ready = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, args=(loop, side, ready), name=f"receiver-{self.port}"
        )
        self._thread.start()
        ready.wait()
        return self

    def _serve(self, loop: asyncio.AbstractEventLoop, side: _Loop, ready: threading.Event) -> None:
        asyncio.set_event_loop(loop)
        try:
            server = loop.run_until_complete(
                loop.create_server(lambda: _Connection(side), sock=self._socket, backlog=BACKLOG)
            )
            self._server = server
            side.sweep()
            ready.set()
            loop.run_forever()
        finally:
            ready.set()
            with contextlib.suppress(Exception):
                loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def serve_until(self, stop: threading.Event, max_seconds: float | None = None) -> None:
        """Serve on the calling thread's behalf until ``stop`` is set or time runs out."""
        self.start()
        try:
            stop.wait(max_seconds)
        finally:
            self.stop()

    def stop(self) -> None:
        """Stop serving (rule 4): answer what was read, join every thread, close the
        socket and the inbox's connection."""
        loop, side, thread = self._loop, self._side, self._thread
        if loop is not None and side is not None and thread is not None:
            done = threading.Event()

            def begin() -> None:
                if self._server is not None:
                    self._server.close()
                side.begin_stop()
                self._when_quiet(loop, side, done, time.monotonic() + STOP_WAIT_S)

            loop.call_soon_threadsafe(begin)
            done.wait(STOP_WAIT_S + 5)
            loop.call_soon_threadsafe(loop.stop)
            thread.join()
            self.inbox.stop_committing()
            while side.threads:
                with side.threads_lock:
                    threads = list(side.threads)
                for each in threads:
                    each.join()
            self._thread = self._loop = self._side = None
        self._socket.close()
        self.inbox.close()

    def _when_quiet(
        self, loop: asyncio.AbstractEventLoop, side: _Loop, done: threading.Event, until: float
    ) -> None:
        """Set ``done`` once every connection is closed (each after its answer), or at
        ``until`` (closing those left)."""
        if side.connections and time.monotonic() < until:
            loop.call_later(0.01, self._when_quiet, loop, side, done, until)
            return
        for connection in list(side.connections):
            connection.close()
        done.set()

    def __enter__(self) -> Receiver:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
