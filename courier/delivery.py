"""One delivery over HTTP: the ``send`` couriers use, and the cause of its answer.

Rules this module keeps:

1. ``HttpSend`` maps the receiver's answer onto the worker's outcomes: any 2xx is
   ``True``; a timeout, a refused or broken connection, an answer that cannot be
   read, 408, 429 or 5xx raises ``worker.Retryable`` (the effect may or may not
   have happened: the receiver deduplicates the re-send); any other status (4xx,
   an unexpected 3xx) raises ``worker.Permanent``. Each request has
   ``X-Courier: <owner>``, no proxy and no redirects, and the whole of it
   (connecting, writing, reading the answer) is bounded by its timeout
   (``courier.wire``, which speaks HTTP/1.1 on the connection).
2. Every answer has a ``Cause``: the HTTP status and the first ``EXCERPT_CHARS``
   of the body, a timeout, or a connection error. ``HttpSend.last_cause`` holds
   the last one, and the exception it raises carries it (``cause_of``); any other
   exception's cause is its class and message.
3. One connection is kept from one delivery to the next (HTTP/1.1 keep-alive) and
   dropped after any failure, an answer not read whole, or ``REUSE_IDLE_S`` idle: a
   new TCP connection per delivery costs more than the request itself.
4. Deliveries in flight at once each need their own ``HttpSend`` (its connection and
   its ``last_cause`` are one): ``HttpSends`` is ``count`` of them behind one
   ``send``, each call on a free one, with ``last_cause`` kept per calling thread.
5. A send whose ``starts`` is true also takes deliveries without a thread waiting
   for each: ``start(delivery)`` hands over a ``Delivery`` and returns at once; the
   send calls its ``begin`` when a connection is free (which gives the event, or
   declines), and its ``end`` with what a call would have returned or raised, and
   the cause. ``HttpSends`` does so for ``http://`` URLs, on an event loop of its
   ``count`` connections (``courier.send_loop``); a wrapper of a send (the runner's,
   the soak's) forwards ``starts`` and ``start`` if it can keep its own promises
   that way, and the batched courier (``courier.batch_rounds``) hands its
   deliveries over so when the send it was given can take them.
"""

from __future__ import annotations

import http.client
import json
import queue
import select
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

import worker
from courier.wire import MAX_BODY_BYTES, Connection

if TYPE_CHECKING:  # courier.send_loop uses this module's answers and causes
    from courier.send_loop import SendLoop

__all__ = [
    "DEFAULT_TIMEOUT_MS",
    "EXCERPT_CHARS",
    "RETRYABLE_4XX",
    "Cause",
    "Delivery",
    "HttpSend",
    "HttpSends",
    "Send",
    "answered",
    "can_start",
    "cause_of",
    "classify_status",
    "describe_cause",
    "failed",
    "outcome_of",
    "with_cause",
]

DEFAULT_TIMEOUT_MS = 5000
MAX_RESPONSE_BYTES = MAX_BODY_BYTES
EXCERPT_CHARS = 200
REUSE_IDLE_S = 1.0  # well under the receiver's idle timeout (its read_timeout_s, 5 s)
RETRYABLE_4XX = frozenset({408, 429})

Send = Callable[[dict[str, Any]], bool]
"""A courier's ``send``, as the queue's ``run_once`` calls it (``HttpSend`` is one)."""


@dataclass(frozen=True)
class Cause:
    """Why one delivery ended as it did.

    ``kind``: ``answer`` (the receiver answered ``http_status``; ``detail`` is the
    start of its body), ``timeout``, ``connection`` (refused, reset, no route) or
    ``exception`` (``detail`` is the class and message).
    """

    kind: str
    detail: str
    http_status: int | None = None


class Delivery(Protocol):
    """One delivery handed to a send's ``start`` (rule 5)."""

    def begin(self) -> dict[str, Any] | None:
        """The event to send now that a connection is free, or ``None``: nothing is
        sent (and ``end`` is not called). Called once, on the send's own thread; it
        must not block or raise."""
        ...

    def end(self, outcome: bool | BaseException, cause: Cause) -> None:
        """The delivery ended: ``outcome`` is what the call would have returned or
        raised, ``cause`` its answer's cause. Called once for each begun delivery,
        on the send's own thread; it must not block or raise."""
        ...


def _excerpt(body: bytes) -> str:
    """The start of a response body as one line of text."""
    text = body[: EXCERPT_CHARS * 4].decode("utf-8", errors="replace")
    return " ".join(text.split())[:EXCERPT_CHARS]


def with_cause(error: BaseException, cause: Cause) -> BaseException:
    """``error`` with ``cause`` attached (read back by ``cause_of``)."""
    error.courier_cause = cause  # type: ignore[attr-defined]
    return error


def cause_of(error: BaseException) -> Cause:
    """The ``Cause`` attached to ``error``, else its class and message."""
    cause = getattr(error, "courier_cause", None)
    if isinstance(cause, Cause):
        return cause
    return Cause("exception", f"{type(error).__name__}: {error}"[:EXCERPT_CHARS])


def classify_status(status: int) -> bool:
    """Return ``True`` for a 2xx status, else raise the worker's classification.

    Raises:
        worker.Retryable: 408, 429 or 5xx: trying again later may succeed.
        worker.Permanent: any other status: the receiver refused this delivery.
    """
    if 200 <= status <= 299:
        return True
    if status in RETRYABLE_4XX or 500 <= status <= 599:
        raise worker.Retryable(f"receiver answered {status}")
    raise worker.Permanent(f"receiver answered {status}")


_EVENT_ORDER = ("id", "qty")


def _body(event: dict[str, Any]) -> bytes:
    """``event`` as JSON, ``json.dumps``'s very bytes: a queue's event (an identifier
    ``id``, an int ``qty``, in that order) needs no escaping and is written at once,
    about a fifth of ``json.dumps``'s time at each delivery; anything else is dumped."""
    if tuple(event) == _EVENT_ORDER:
        job_id, qty = event["id"], event["qty"]
        if worker.is_identifier(job_id) and type(qty) is int:
            return b'{"id": "%s", "qty": %d}' % (job_id.encode("ascii"), qty)
    return json.dumps(event).encode("utf-8")


class HttpSend:
    """``send`` for ``run_file``: POST one delivery as JSON to the receiver.

    Each call makes one request with ``X-Courier: <owner>``, no proxy and no
    redirects, bounded by ``timeout_ms``; see ``classify_status`` for the answer.
    Connection errors and timeouts raise ``worker.Retryable``: a timeout does not
    mean the work was not done, only that the answer was lost.

    The connection is kept for the next call (HTTP/1.1 keep-alive), as long as the
    server keeps it open, the last answer was read whole and it has been idle for
    less than ``REUSE_IDLE_S``; any failure closes it, so a retry starts afresh.
    ``close()`` (or ``with``) closes it at the end; one ``HttpSend`` serves one
    thread at a time (calls from several threads take turns).
    """

    last_cause: Cause | None = None
    """The cause of the last call's answer (a 2xx included), for the attempt log."""

    def __init__(self, url: str, owner: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"'url' must be an http:// or https:// URL, got {url!r}")
        if not worker.is_identifier(owner):
            raise ValueError(
                f"'owner' must be 1-64 ASCII letters, digits, '_' or '-', got {owner!r}"
            )
        if type(timeout_ms) is not int or not 1 <= timeout_ms <= 60_000:
            raise ValueError(f"'timeout_ms' must be an int in 1..60000, got {timeout_ms!r}")
        try:
            parts = urllib.parse.urlsplit(url)
        except ValueError as error:  # an unclosed IPv6 bracket, say
            raise ValueError(f"'url' is not a URL ({error}), got {url!r}") from None
        if not parts.hostname:
            raise ValueError(f"'url' must name a host, got {url!r}")
        if parts.username is not None or parts.password is not None:
            # Not echoed: the password would go into the log.
            raise ValueError(
                "'url' carries a user name or password, which the courier does not send"
                " (no Authorization header): give the receiver's URL without them"
            )
        try:
            parts.hostname.encode("idna")  # what a lookup of the name will do first
        except UnicodeError:
            raise ValueError(f"'url' names a host that cannot be looked up, got {url!r}") from None
        try:
            port = parts.port
        except ValueError:
            raise ValueError(f"'url' has a malformed port, got {url!r}") from None
        if port == 0:
            raise ValueError(f"'url' has port 0, which no receiver listens on, got {url!r}")
        self.url = url
        self.owner = owner
        self.timeout_s = timeout_ms / 1000
        self._secure = parts.scheme == "https"
        self._host = parts.hostname
        self._port = port or (443 if self._secure else 80)
        target = urllib.parse.urlunsplit(("", "", parts.path or "/", parts.query, ""))
        host = f"[{self._host}]" if ":" in self._host else self._host
        if port is not None and port != (443 if self._secure else 80):
            host = f"{host}:{port}"
        head = f"POST {target} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        self._head = f"{head}X-Courier: {owner}\r\nContent-Length: ".encode("ascii")
        self._connection: Connection | None = None
        self._last_used = 0.0
        self._turn = threading.Lock()

    @property
    def address(self) -> tuple[str, int]:
        """The receiver's host and port, as the URL names them."""
        return self._host, self._port

    def request(self, event: dict[str, Any]) -> bytes:
        """The whole request that delivers ``event``, as it is written."""
        body = _body(event)
        return b"%s%d\r\n\r\n%s" % (self._head, len(body), body)

    def __call__(self, event: dict[str, Any]) -> bool:
        request = self.request(event)
        with self._turn:
            self.last_cause = None
            try:
                status, answer = self._exchange(request)
            except (OSError, http.client.HTTPException) as error:
                failure, self.last_cause = failed(self.url, error)
                raise failure from error
        outcome, self.last_cause = answered(status, answer)
        if isinstance(outcome, BaseException):
            raise outcome
        return outcome

    def _exchange(self, request: bytes) -> tuple[int, bytes]:
        """One request on the kept connection (a new one if it cannot be reused), the
        whole of it by the timeout."""
        deadline = time.monotonic() + self.timeout_s
        connection = self._reusable()
        if connection is None:
            connection = Connection.open(self._host, self._port, self._secure, deadline)
        self._connection = None  # kept again only once the answer was read whole
        try:
            status, answer = connection.exchange(request, deadline)
        except BaseException:
            connection.close()
            raise
        if connection.reusable:
            self._connection, self._last_used = connection, time.monotonic()
        else:
            connection.close()
        return status, answer

    def _reusable(self) -> Connection | None:
        """The kept connection, if it may carry one more request; else it is closed."""
        connection, self._connection = self._connection, None
        if connection is None:
            return None
        fresh = time.monotonic() - self._last_used < REUSE_IDLE_S
        if fresh and not _readable(connection.sock):
            return connection
        connection.close()
        return None

    def close(self) -> None:
        """Close the kept connection, if any (the next call opens a new one)."""
        with self._turn:
            connection, self._connection = self._connection, None
        if connection is not None:
            connection.close()

    def __enter__(self) -> HttpSend:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class HttpSends:
    """``count`` ``HttpSend`` behind one ``send`` that several threads may call at once.

    Each call takes a free ``HttpSend`` (waiting for one if all are busy), so up to
    ``count`` deliveries are in flight, each on a kept-alive connection of its own.
    ``last_cause`` is the cause of the last call made by the calling thread (rule 4).
    ``close()`` (or ``with``) closes every connection.
    """

    def __init__(
        self, url: str, owner: str, timeout_ms: int = DEFAULT_TIMEOUT_MS, count: int = 1
    ) -> None:
        if type(count) is not int or not 1 <= count <= 1000:
            raise ValueError(f"'count' must be an int in 1..1000, got {count!r}")
        self.sends = [HttpSend(url, owner, timeout_ms) for _ in range(count)]
        self._free: queue.SimpleQueue[HttpSend] = queue.SimpleQueue()
        for send in self.sends:
            self._free.put(send)
        self._causes = threading.local()
        self._loop: SendLoop | None = None
        self._loop_made = threading.Lock()

    @property
    def starts(self) -> bool:
        """True if deliveries may be handed over with ``start`` (an ``http://`` URL)."""
        return self.sends[0].url.startswith("http://")

    def start(self, delivery: Delivery) -> None:
        """Hand ``delivery`` to the event loop of these ``count`` deliveries in flight
        (``courier.send_loop``, made at the first call), and return at once.

        Raises:
            ValueError: the URL is ``https://`` (``starts`` is False).
        """
        if not self.starts:
            raise ValueError("deliveries over https:// are made by threads: call the send")
        from courier.send_loop import SendLoop  # it imports this module

        with self._loop_made:
            if self._loop is None:
                self._loop = SendLoop(self.sends[0], len(self.sends))
            loop = self._loop
        loop.start(delivery)

    @property
    def last_cause(self) -> Cause | None:
        """The cause of the calling thread's last call (``None`` before its first)."""
        cause: Cause | None = getattr(self._causes, "cause", None)
        return cause

    def __call__(self, event: dict[str, Any]) -> bool:
        send = self._free.get()
        try:
            return send(event)
        finally:
            self._causes.cause = send.last_cause
            self._free.put(send)

    def close(self) -> None:
        """Close every kept connection, and stop the event loop if it was made
        (``SendLoop.close``: deliveries not begun are never begun)."""
        with self._loop_made:
            loop, self._loop = self._loop, None
        if loop is not None:
            loop.close()
        for send in self.sends:
            send.close()

    def __enter__(self) -> HttpSends:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _readable(sock: socket.socket) -> bool:
    """True if an idle socket has something to read: the server closed it (or sent
    bytes nobody asked for), so it cannot carry another request."""
    try:
        ready, _, _ = select.select([sock], [], [], 0)
    except (OSError, ValueError):
        return True
    return bool(ready)


def answered(status: int, body: bytes) -> tuple[bool | BaseException, Cause]:
    """What a send makes of an answer (rule 1): ``True``, or the exception it raises
    (with its cause attached), and the answer's cause."""
    cause = Cause("answer", _excerpt(body), status)
    try:
        return classify_status(status), cause
    except (worker.Retryable, worker.Permanent) as refusal:
        return with_cause(refusal, cause), cause


def failed(url: str, error: BaseException) -> tuple[BaseException, Cause]:
    """What a send makes of a request that got no answer (``error``, a timeout or a
    connection error): the ``worker.Retryable`` it raises, and its cause."""
    cause = _failure_cause(error)
    return with_cause(worker.Retryable(f"no answer from {url}: {cause.detail}"), cause), cause


def can_start(send: Any) -> bool:
    """True if ``send`` takes deliveries with ``start`` too (rule 5)."""
    return bool(getattr(send, "starts", False))


def _failure_cause(error: BaseException) -> Cause:
    """A request that got no answer: a timeout or a connection error, with the reason."""
    if isinstance(error, TimeoutError):
        return Cause("timeout", f"no answer within the timeout ({error})"[:EXCERPT_CHARS])
    return Cause("connection", f"{type(error).__name__}: {error}"[:EXCERPT_CHARS])


def describe_cause(cause: Cause) -> str:
    """A cause in one line: ``HTTP 409: {...}``, ``timeout: ...``, ``connection: ...``."""
    if cause.kind == "answer":
        return (
            f"HTTP {cause.http_status}: {cause.detail}"
            if cause.detail
            else f"HTTP {cause.http_status}"
        )
    return f"{cause.kind}: {cause.detail}"


def outcome_of(cause: Cause | None, status: str) -> str:
    """How an answer was classified (``ok``, ``retry``, ``permanent``), from its cause,
    else from the status ``finish`` gave (``done`` is ``ok``, anything else ``retry``)."""
    if cause is not None and cause.kind == "answer" and cause.http_status is not None:
        code = cause.http_status
        if 200 <= code <= 299:
            return "ok"
        return "retry" if code in RETRYABLE_4XX or 500 <= code <= 599 else "permanent"
    if cause is not None and cause.kind in ("timeout", "connection"):
        return "retry"
    return "ok" if status == "done" else "retry"
