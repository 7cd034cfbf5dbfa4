"""Deliveries in flight on one thread: the event loop behind ``HttpSends.start``.

A batched courier (``courier.batch_rounds``) hands each delivery over and goes on;
this loop's one thread writes each request, reads its answer and hands the result
back, with up to ``count`` deliveries in flight, each on a kept-alive connection of
its own. It replaces a thread a delivery in flight, each waiting for its answer:
those took turns at the interpreter's lock with the thread that claims and
finishes, and the turns cost the courier more than the deliveries (docs/dev,
2026-12-04). The rules it keeps:

1. Each delivery is what ``HttpSend`` makes of it: the same request
   (``HttpSend.request``, written whole before its answer is read), the same
   reading of the answer (``courier.wire.read_answer``), the same outcome and
   cause (``courier.delivery.answered`` and ``failed``), the same bound: the whole
   exchange, connecting included, within ``timeout_ms`` of its begin, else a
   ``Retryable`` timeout.
2. Deliveries begin in the order they were handed over, each as soon as one of
   the ``count`` connections is free: ``Delivery.begin`` is called then, on this
   thread, and may decline (nothing is sent). ``Delivery.end`` is called once for
   each begun delivery, on this thread, when it ended.
3. A connection is kept for the next delivery as ``HttpSend`` keeps its own: after
   an answer read whole that allows it, and while it has been idle for less than
   ``REUSE_IDLE_S``; it is closed after any failure, and when the receiver closes
   it or sends bytes while it is idle.
4. Plain ``http://`` only: ``HttpSends`` keeps its threads for ``https://``.
   A host name is looked up off the loop's thread (one lookup at a time, shared by
   every connection that waits for it), so a slow name server holds up only the
   deliveries that need a new connection, each within its own deadline; the other
   deliveries in flight go on. An IP address needs no lookup.
5. ``close()`` stops the thread and closes every connection: deliveries not begun
   are never begun, those in flight never end (their jobs wait for their leases,
   as when a courier stops at once).
"""

from __future__ import annotations

import contextlib
import errno
import os
import selectors
import socket
import sys
import threading
import time
import traceback
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from courier.delivery import REUSE_IDLE_S, Delivery, HttpSend, answered, failed
from courier.wire import READ_BYTES, read_answer

__all__ = ["SendLoop"]

_IDLE, _LOOKING_UP, _CONNECTING, _WRITING, _READING = range(5)
_Addresses = list[tuple[Any, ...]]  # what socket.getaddrinfo gives
_MAX_LATE_READS = 64  # an answer of MAX_BODY_BYTES comes in a few reads; this bounds the loop


@dataclass
class _Slot:
    """One connection and the delivery it carries, if any."""

    sock: socket.socket | None = None
    state: int = _IDLE
    delivery: Delivery | None = None
    request: bytes = b""
    written: int = 0
    answer: bytearray = field(default_factory=bytearray)
    deadline: float = 0.0
    idle_since: float = 0.0
    addresses: _Addresses = field(default_factory=list)  # left to try for this connect
    events: int = 0  # what the selector watches ``sock`` for; 0: not registered


class SendLoop:
    """Up to ``count`` deliveries of ``send`` (its URL, owner and timeout) in flight
    on one daemon thread, begun in the order ``start`` hands them over (see the
    module's rules). ``close()`` stops it.

    ``look_up`` is how a host name becomes addresses (``socket.getaddrinfo``'s
    signature; it runs on a thread of its own, rule 4)."""

    def __init__(self, send: HttpSend, count: int, look_up: Any = socket.getaddrinfo) -> None:
        if not send.url.startswith("http://"):
            raise ValueError(f"the event loop speaks http:// only, got {send.url!r}")
        if type(count) is not int or not 1 <= count <= 1000:
            raise ValueError(f"'count' must be an int in 1..1000, got {count!r}")
        self.send = send
        self._slots = [_Slot() for _ in range(count)]
        self._waiting: deque[Delivery] = deque()
        self._lock = threading.Lock()
        self._woken = False  # a byte is on its way to the loop: no need for another
        self._closing = False
        self._look_up = look_up
        self._lookup: threading.Thread | None = None  # the lookup in flight (loop's thread)
        self._looked_up: _Addresses | OSError | None = None  # its result, under _lock
        self._selector = selectors.DefaultSelector()
        self._wake_out, self._wake_in = socket.socketpair()
        self._wake_out.setblocking(False)
        self._wake_in.setblocking(False)
        self._selector.register(self._wake_out, selectors.EVENT_READ, None)
        self._thread = threading.Thread(target=self._run, name="send-loop", daemon=True)
        self._thread.start()

    def start(self, delivery: Delivery) -> None:
        """Hand ``delivery`` over; it begins once a connection is free (rule 2)."""
        with self._lock:
            if self._closing:
                return
            self._waiting.append(delivery)
            wake, self._woken = not self._woken, True
        if wake:
            self._wake()

    @property
    def running(self) -> bool:
        """True until the loop's thread has ended (``close``)."""
        return self._thread.is_alive()

    def close(self) -> None:
        """Stop the loop and close every connection (rule 5); waits for the thread."""
        with self._lock:
            self._closing = True
            self._waiting.clear()
        self._wake()
        self._thread.join(timeout=10)

    def _wake(self) -> None:
        # Full: the loop wakes anyway; closed: the loop has ended.
        with contextlib.suppress(OSError):
            self._wake_in.send(b"x")

    # The loop's own thread from here on.

    def _run(self) -> None:
        try:
            while not self._closing:
                self._take_lookup()
                self._begin_waiting()
                timeout = self._next_timeout()
                for key, mask in self._selector.select(timeout):
                    if key.data is None:
                        self._woke()
                    else:
                        self._ready(key.data, mask)
                self._expire(time.monotonic())
        finally:
            for slot in self._slots:
                self._drop(slot)
            self._selector.close()
            self._wake_out.close()
            self._wake_in.close()

    def _woke(self) -> None:
        try:
            while self._wake_out.recv(4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            self._woken = False

    def _next_timeout(self) -> float | None:
        deadlines = [slot.deadline for slot in self._slots if slot.delivery is not None]
        if not deadlines:
            return None
        return max(0.0, min(deadlines) - time.monotonic())

    def _begin_waiting(self) -> None:
        for slot in self._slots:
            if slot.delivery is not None:
                continue
            while True:
                with self._lock:
                    if not self._waiting:
                        return
                    delivery = self._waiting.popleft()
                event = _guarded(delivery.begin)
                if event is not None:
                    self._begin(slot, delivery, event)
                    break

    def _begin(self, slot: _Slot, delivery: Delivery, event: dict[str, Any]) -> None:
        now = time.monotonic()
        slot.delivery, slot.deadline = delivery, now + self.send.timeout_s
        slot.request, slot.written, slot.answer = self.send.request(event), 0, bytearray()
        if slot.sock is not None and (now - slot.idle_since >= REUSE_IDLE_S or _spoken(slot.sock)):
            self._drop(slot)
        try:
            if slot.sock is None:
                self._addresses_for(slot)
            else:
                slot.state = _WRITING
                self._write(slot)
        except OSError as error:
            self._fail(slot, error)

    def _addresses_for(self, slot: _Slot) -> None:
        """Connect at once to an IP address; for a host name, wait (``_LOOKING_UP``) for
        the lookup in flight, beginning one if there is none (rule 4)."""
        host, port = self.send.address
        try:
            slot.addresses = socket.getaddrinfo(
                host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST
            )
        except socket.gaierror:  # a name: looked up off this thread
            slot.state = _LOOKING_UP
            if self._lookup is None:
                self._lookup = threading.Thread(
                    target=self._looking_up, args=(host, port), name="send-loop-lookup", daemon=True
                )
                self._lookup.start()
            return
        self._connect(slot)

    def _looking_up(self, host: str, port: int) -> None:
        """The lookup's own thread: hand the addresses (or the error) to the loop."""
        result: _Addresses | OSError
        try:
            result = list(self._look_up(host, port, type=socket.SOCK_STREAM))
            if not result:
                raise OSError(f"no address for {host!r}")
        except OSError as error:
            result = error
        except Exception as error:  # a name that cannot be encoded, say: it fails alike
            result = OSError(f"cannot look {host!r} up: {type(error).__name__}: {error}")
        with self._lock:
            self._looked_up = result
            wake, self._woken = not self._woken, True
        if wake:
            self._wake()

    def _take_lookup(self) -> None:
        """The lookup's result, if it has come, to every connection that waits for it
        (a delivery that timed out meanwhile no longer waits: rule 1)."""
        with self._lock:
            result, self._looked_up = self._looked_up, None
        if result is None:
            return
        self._lookup = None
        for slot in self._slots:
            if slot.state != _LOOKING_UP:
                continue
            if isinstance(result, OSError):
                self._fail(slot, result)
                continue
            slot.addresses = list(result)
            try:
                self._connect(slot)
            except OSError as error:
                self._fail(slot, error)

    def _connect(self, slot: _Slot) -> None:
        """Connect to the next address left (rule 1: within the delivery's deadline)."""
        family, kind, proto, _, address = slot.addresses.pop(0)
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            code = sock.connect_ex(address)
            if code not in (0, errno.EINPROGRESS):
                raise OSError(code, os.strerror(code))
        except BaseException:
            sock.close()
            raise
        slot.sock, slot.state = sock, _CONNECTING
        self._watch(slot, selectors.EVENT_WRITE)

    def _ready(self, slot: _Slot, mask: int) -> None:
        try:
            if slot.state == _IDLE:  # the receiver closed it, or sent what nobody asked
                self._drop(slot)
            elif slot.state == _CONNECTING:
                self._connected(slot)
            elif slot.state == _WRITING:
                self._write(slot)
            elif mask & selectors.EVENT_READ:
                self._read(slot)
        except OSError as error:
            self._fail(slot, error)

    def _connected(self, slot: _Slot) -> None:
        assert slot.sock is not None
        code = slot.sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if code == 0:
            slot.state = _WRITING
            self._write(slot)
            return
        if not slot.addresses:
            raise OSError(code, os.strerror(code))
        self._drop(slot)
        self._connect(slot)

    def _write(self, slot: _Slot) -> None:
        assert slot.sock is not None
        with contextlib.suppress(BlockingIOError):
            slot.written += slot.sock.send(memoryview(slot.request)[slot.written :])
        events = selectors.EVENT_WRITE
        if slot.written == len(slot.request):
            slot.state, events = _READING, selectors.EVENT_READ
        self._watch(slot, events)

    def _read(self, slot: _Slot) -> None:
        assert slot.sock is not None
        try:
            chunk = slot.sock.recv(READ_BYTES)
        except BlockingIOError:
            return
        slot.answer += chunk
        try:
            read = read_answer(bytes(slot.answer), closed=not chunk)
        except Exception as error:  # an answer that cannot be read: HttpSend's failures
            self._fail(slot, error)
            return
        if read is None:
            return
        status, body, reusable = read
        delivery, slot.delivery = slot.delivery, None
        if reusable:
            slot.state, slot.idle_since = _IDLE, time.monotonic()
            self._watch(slot, selectors.EVENT_READ)
        else:
            self._drop(slot)
        assert delivery is not None
        outcome, cause = answered(status, body)
        _guarded(lambda: delivery.end(outcome, cause))

    def _expire(self, now: float) -> None:
        for slot in self._slots:
            if slot.delivery is None or now < slot.deadline:
                continue
            # As ``HttpSend`` past its deadline: what has come already is read (a
            # process stopped and continued finds its answers waiting), only a read
            # or a write that would wait is a timeout.
            delivery = slot.delivery
            for _ in range(_MAX_LATE_READS):
                if slot.delivery is not delivery or slot.state not in (_WRITING, _READING):
                    break
                if not self._catch_up(slot):
                    break
            if slot.delivery is delivery:
                self._fail(slot, TimeoutError("timed out"))

    def _catch_up(self, slot: _Slot) -> bool:
        """One more write or read on an expired slot without waiting; False if it
        would have to wait."""
        assert slot.sock is not None
        before = (slot.written, len(slot.answer))
        try:
            if slot.state == _WRITING:
                self._write(slot)
            else:
                self._read(slot)
        except OSError as error:
            self._fail(slot, error)
            return False
        return (slot.written, len(slot.answer)) != before

    def _fail(self, slot: _Slot, error: BaseException) -> None:
        delivery, slot.delivery = slot.delivery, None
        self._drop(slot)
        if delivery is not None:
            outcome, cause = failed(self.send.url, error)
            _guarded(lambda: delivery.end(outcome, cause))

    def _watch(self, slot: _Slot, events: int) -> None:
        """Have the selector watch the slot's connection for ``events`` (kept in the
        slot: a look into the selector's map cost a few lookups at each call)."""
        assert slot.sock is not None
        if slot.events == events:
            return
        if slot.events:
            self._selector.modify(slot.sock, events, slot)
        else:
            self._selector.register(slot.sock, events, slot)
        slot.events = events

    def _drop(self, slot: _Slot) -> None:
        """Close the slot's connection, if any."""
        sock, slot.sock, slot.state = slot.sock, None, _IDLE
        if sock is not None:
            if slot.events:
                self._selector.unregister(sock)
            slot.events = 0
            sock.close()


def _spoken(sock: socket.socket) -> bool:
    """True if an idle connection has something to read: the receiver closed it (or
    sent bytes nobody asked for), so it cannot carry another request."""
    try:
        sock.recv(1, socket.MSG_PEEK)  # b"" (closed) or a byte: either way, not reusable
    except BlockingIOError:
        return False
    except OSError:
        pass
    return True


def _guarded(call: Any) -> Any:
    """``call()``, whose exceptions (a ``Delivery`` must raise none) are printed, not
    let out to stop the loop."""
    try:
        return call()
    except Exception:
        traceback.print_exc(file=sys.stderr)
        return None
