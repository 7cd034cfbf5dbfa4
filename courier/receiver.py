"""The downstream receiver: an HTTP service over one inbox (``courier.inbox``).

This is the far side of the story: couriers post deliveries here and the inbox
applies each one's effect at most once. What a delivery request must be is
``courier.delivery_request``'s; how the inbox decides is ``courier.inbox``'s. The
rules the server keeps:

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
   JSON. Requests the stdlib rejects before routing (an unparsable request line)
   are not counted, and get a JSON body too; a method the routes do not know
   (``TRACE``, ``FOO``) is routed like any other: a JSON 405.
4. The server binds ``127.0.0.1`` on an OS-assigned port by default and handles
   each connection on its own thread. A connection carries request after request
   (HTTP/1.1 keep-alive) while each request is well formed and read whole; after
   a refused request (any 4xx but ``409``) the answer says ``Connection: close``
   and the connection is closed, and an idle connection is closed after
   ``read_timeout_s``. ``Receiver.stop()`` ends the idle connections, joins every
   thread, closes the socket and the inbox's connection.
5. The one plug-in point is an ``Interference`` (``courier.interference``): asked
   for each well-formed delivery, it may refuse it, delay its answer or drop it.
   Without one (the default) every delivery is handled as above.
"""

from __future__ import annotations

import contextlib
import json
import socket
import sqlite3
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
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
    header_decimal,
    parse_delivery,
    sender_of,
)
from courier.inbox import Inbox
from courier.interference import Interference, Intervention

__all__ = ["Receiver"]

DRAIN_LIMIT_BYTES = 65536  # how much of a refused body is read before closing

Log = Callable[[str], None]


@dataclass(frozen=True)
class _Settings:
    """What every handler thread reads: the inbox, the plug-in and where to log."""

    inbox: Inbox
    read_timeout_s: float
    log: Log | None
    interference: Interference | None


class _Server(ThreadingHTTPServer):
    """The HTTP server plus the receiver's settings, read by each handler thread."""

    # server_close() joins handler threads only if they are not daemons (the stdlib
    # skips daemon threads), so a stopped receiver leaks none. Each handler is bounded:
    # socket reads by read_timeout_s, an interference by its own bound.
    daemon_threads = False
    block_on_close = True
    # The stdlib's backlog of 5 drops the connections beyond it when a batched courier
    # opens its --in-flight ones at once; each then waits a second for the SYN again.
    request_queue_size = 128

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
    # Buffered: an answer's head and body leave in one write, when the stdlib flushes
    # after each request (one send, not two, at every delivery).
    wbufsize = 64 * 1024

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

    # Every method goes through one router: the route says which method it accepts. The
    # stdlib looks for do_<METHOD> and answers one it does not find with its own HTML 501;
    # here every method has one (TRACE, FOO: a JSON 405 like PUT's).
    def __getattr__(self, name: str) -> Any:
        if name.startswith("do_"):
            return self._dispatch
        raise AttributeError(name)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        """The stdlib's own refusals before routing (a bad request line, headers too long,
        an unsupported version): the same JSON body as every other refusal, then close."""
        status = HTTPStatus(code)
        self.close_connection = True
        if self.request_version == "HTTP/0.9":  # the line did not parse: answer as HTTP/1.0
            self.request_version = "HTTP/1.0"
        body = {"error": "bad_request_line", "detail": message or status.phrase}
        self._reply(status, body, {"Connection": "close"})
        self._log(f"{int(status)} bad_request_line ({message or status.phrase})")

    def _handle(self, request: RequestLine) -> None:
        if request.path in SUMMARY_PATHS and request.method == "GET":
            unread = self.headers.get("Transfer-Encoding") or self.headers.get("Content-Length")
            closing = {"Connection": "close"} if unread not in (None, "0") else {}
            self._reply(HTTPStatus.OK, self._receiver.inbox.summary(), closing)
            return
        sender: str | None = None
        try:
            check_route(request)
            sender = sender_of(self.headers)
            delivery_id, qty = parse_delivery(self._body())
        except Problem as problem:
            self._receiver.inbox.record_request(request, problem.status, None, sender)
            self._drain_unread_body()
            self._reply_problem(problem, request)
            return
        interference = self._receiver.interference
        intervention = (
            None if interference is None else interference.before_apply(delivery_id, sender)
        )
        refusal = None if intervention is None else intervention.refusal()
        if refusal is not None:  # the interference's answer; the inbox stays as it was
            self._receiver.inbox.record_request(request, refusal.status, delivery_id, sender)
            self._reply_problem(refusal, request)
            return
        self._apply(request, delivery_id, qty, sender, intervention)

    def _body(self) -> bytes:
        """Read exactly the announced body of a delivery, or raise ``Problem``."""
        length = body_length(self.headers)
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
        length = header_decimal(self.headers.get("Content-Length", ""))
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
        intervention: Intervention | None,
    ) -> None:
        verdict = self._receiver.inbox.deliver(delivery_id, qty, sender, request)
        if verdict == "conflict":
            problem = Problem(
                HTTPStatus.CONFLICT, "conflict", f"{delivery_id!r} was delivered with another qty"
            )
            self._reply_problem(problem, request)
            return
        if intervention is not None and not intervention.after_commit(verdict):
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
            headers["Allow"] = allowed_method(request.path)
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
        *,
        read_timeout_s: float = 5.0,
        log: Log | None = None,
        inbox_busy_timeout_s: float = 5.0,
        interference: Interference | None = None,
    ) -> None:
        """Create the inbox and bind the socket; raises ``ValueError`` on a bad port
        or ``read_timeout_s``.

        ``interference`` is the plug-in point of rule 5 (``courier.interference``);
        it is called on the handler threads.
        """
        if type(port) is not int or not 0 <= port <= 65535:
            raise ValueError(f"'port' must be an int in 0..65535, got {port!r}")
        if not 0 < read_timeout_s <= 60:
            raise ValueError(f"'read_timeout_s' must be in (0, 60], got {read_timeout_s!r}")
        self.inbox = Inbox(inbox_path, busy_timeout_s=inbox_busy_timeout_s)
        settings = _Settings(self.inbox, read_timeout_s, log, interference)
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
