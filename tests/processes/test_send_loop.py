"""``courier.send_loop``: deliveries in flight on one thread, against the real receiver
and small servers on 127.0.0.1, each delivery ending as ``HttpSend`` would have."""

from __future__ import annotations

import socket
import socketserver
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import worker
from courier.delivery import Cause, HttpSend, HttpSends, can_start
from courier.inbox import Verdict
from courier.interference import ReplyDelay
from courier.receiver import Receiver
from courier.send_loop import SendLoop
from tests.processes.counting_server import counting_server

WAIT_S = 20.0


class _Recorded:
    """A delivery that keeps when it began and how it ended; ``ended`` is set then.

    ``declined`` makes ``begin`` give ``None`` (nothing is to be sent)."""

    def __init__(self, order: list[str], job: str, declined: bool = False) -> None:
        self.order = order
        self.job = job
        self.declined = declined
        self.outcome: bool | BaseException | None = None
        self.cause: Cause | None = None
        self.thread: str | None = None
        self.ended = threading.Event()

    def begin(self) -> dict[str, Any] | None:
        self.order.append(self.job)
        return None if self.declined else {"id": self.job, "qty": 1}

    def end(self, outcome: bool | BaseException, cause: Cause) -> None:
        self.outcome, self.cause = outcome, cause
        self.thread = threading.current_thread().name
        self.ended.set()


def _deliver(loop: SendLoop, *jobs: str) -> list[_Recorded]:
    """Hand a delivery of each job to ``loop`` and wait until each has ended."""
    order: list[str] = []
    deliveries = [_Recorded(order, job) for job in jobs]
    for delivery in deliveries:
        loop.start(delivery)
    for delivery in deliveries:
        assert delivery.ended.wait(WAIT_S), f"{delivery.job} never ended"
    assert order == list(jobs)  # begun in the order handed over (rule 2)
    return deliveries


@contextmanager
def _loop(url: str, count: int, timeout_ms: int = 5000) -> Iterator[SendLoop]:
    loop = SendLoop(HttpSend(url, "c1", timeout_ms), count)
    try:
        yield loop
    finally:
        loop.close()


def test_deliveries_end_as_the_receiver_answered_them_each_applied_once(tmp_path: Path) -> None:
    with Receiver(tmp_path / "inbox.sqlite") as receiver, _loop(receiver.url, 4) as loop:
        jobs = [f"j{n}" for n in range(40)]
        ended = _deliver(loop, *jobs)
        summary = receiver.inbox.summary()
    assert [d.outcome for d in ended] == [True] * 40
    assert {d.cause.kind for d in ended if d.cause} == {"answer"}
    assert {d.thread for d in ended} == {"send-loop"}
    assert (summary["requests"], summary["effects"]) == (40, 40)


class _AllAtOnce:
    """An interference that answers no delivery until ``count`` have committed: only
    ``count`` deliveries in flight at once get their answers."""

    def __init__(self, count: int) -> None:
        self.barrier = threading.Barrier(count)

    def before_apply(self, delivery_id: str, sender: str | None) -> _AllAtOnce:
        return self

    def refusal(self) -> None:
        return None

    def after_commit(self, verdict: Verdict) -> bool:
        try:
            self.barrier.wait(WAIT_S)
        except threading.BrokenBarrierError:
            return False
        return True


@pytest.mark.parametrize("count", [1, 4])
def test_count_deliveries_are_in_flight_at_once(tmp_path: Path, count: int) -> None:
    interference = _AllAtOnce(count)
    with (
        Receiver(tmp_path / "inbox.sqlite", interference=interference) as receiver,
        _loop(receiver.url, count) as loop,
    ):
        ended = _deliver(loop, *(f"j{n}" for n in range(2 * count)))
    assert [d.outcome for d in ended] == [True] * (2 * count)
    assert not interference.barrier.broken


def test_a_delivery_that_declines_is_not_sent_and_does_not_end(tmp_path: Path) -> None:
    with Receiver(tmp_path / "inbox.sqlite") as receiver, _loop(receiver.url, 1) as loop:
        order: list[str] = []
        declined, sent = _Recorded(order, "no", declined=True), _Recorded(order, "yes")
        loop.start(declined)
        loop.start(sent)
        assert sent.ended.wait(WAIT_S)
        summary = receiver.inbox.summary()
    assert order == ["no", "yes"]
    assert not declined.ended.is_set() and sent.outcome is True
    assert (summary["requests"], summary["effects"]) == (1, 1)


@pytest.mark.parametrize(
    ("first", "expected"), [(7, worker.Permanent), (1, True)], ids=["conflict", "duplicate"]
)
def test_a_refusal_ends_as_the_call_would_have_raised(
    tmp_path: Path, first: int, expected: type[BaseException] | bool
) -> None:
    with Receiver(tmp_path / "inbox.sqlite") as receiver:
        HttpSend(receiver.url, "seed")({"id": "a", "qty": first})
        with _loop(receiver.url, 2) as loop:
            [ended] = _deliver(loop, "a")  # qty 1: a conflict with 7, a duplicate of 1
    assert ended.cause is not None and ended.cause.kind == "answer"
    if expected is True:
        assert ended.outcome is True and ended.cause.http_status == 200
    else:
        assert isinstance(ended.outcome, worker.Permanent)
        assert ended.cause.http_status == 409


def test_a_late_answer_is_a_retryable_timeout_and_a_refused_connection_is_told_apart(
    tmp_path: Path,
) -> None:
    with Receiver(tmp_path / "slow.sqlite", interference=ReplyDelay(1000)) as slow:
        with _loop(slow.url, 2, timeout_ms=200) as loop:
            late = _deliver(loop, "a", "b")
        assert slow.inbox.summary()["effects"] == 2  # done all the same
    with Receiver(tmp_path / "gone.sqlite") as gone:
        url = gone.url
    with _loop(url, 2, timeout_ms=2000) as loop:
        [refused] = _deliver(loop, "a")
    for ended in late:
        assert isinstance(ended.outcome, worker.Retryable)
        assert ended.cause is not None and ended.cause.kind == "timeout"
    assert isinstance(refused.outcome, worker.Retryable)
    assert refused.cause is not None and refused.cause.kind == "connection"


@pytest.mark.parametrize("closing", [False, True])
def test_a_connection_is_kept_while_the_server_keeps_it(closing: bool) -> None:
    with counting_server(closing) as server, _loop(server.url, 1) as loop:
        for n in range(3):  # one after another: each may reuse the last one's connection
            [ended] = _deliver(loop, f"j{n}")
            assert ended.outcome is True
    assert server.connections == (3 if closing else 1)


class _AnswerServer(socketserver.ThreadingTCPServer):
    """A server on 127.0.0.1 (an OS-assigned port) whose handler reads one request
    whole, then ``answer``s it; it counts the connections, and keeps each open
    without reading until ``done``."""

    daemon_threads = True

    def __init__(self, answer: Any) -> None:
        super().__init__(("127.0.0.1", 0), _OneRequest)
        self.answer = answer
        self.connections = 0
        self.done = threading.Event()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/d"


class _OneRequest(socketserver.BaseRequestHandler):
    server: _AnswerServer

    def handle(self) -> None:
        self.server.connections += 1
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self.request.recv(65536)
            if not chunk:
                return
            data += chunk
        self.server.answer(self.request)
        self.server.done.wait(WAIT_S)


@contextmanager
def _answer_server(answer: Any) -> Iterator[_AnswerServer]:
    server = _AnswerServer(answer)
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    serving.start()
    try:
        yield server
    finally:
        server.done.set()
        server.shutdown()
        serving.join(timeout=10)
        server.server_close()


def _http_1_0(sock: socket.socket) -> None:
    """Answers in HTTP/1.0: a connection not to be used again."""
    sock.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}")


def test_a_connection_the_answer_did_not_keep_is_never_used_again() -> None:
    with _answer_server(_http_1_0) as server, _loop(server.url, 1, timeout_ms=2000) as loop:
        ended = [_deliver(loop, f"j{n}")[0] for n in range(2)]  # one after the other
    assert [d.outcome for d in ended] == [True, True]  # not a timeout on the open one
    assert server.connections == 2


def _kept_then_ended(sock: socket.socket) -> None:
    """Answers as HTTP/1.1 that keeps the connection (no ``Connection: close``), then
    ends its side at once: the answer is corked and goes out with the end of the
    connection in one segment, so the courier reads an answer that allows reuse from a
    connection that has already ended."""
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_CORK, 1)
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
    sock.shutdown(socket.SHUT_WR)  # the corked answer goes out with the FIN


@pytest.mark.skipif(not hasattr(socket, "TCP_CORK"), reason="TCP_CORK is Linux's")
def test_a_connection_ended_with_its_answer_is_not_used_for_the_delivery_waiting() -> None:
    """Rule 3 within one pass of the loop: the second delivery waits while the first
    one's answer is read, and begins at once; the connection, ended by the receiver
    right behind that answer, is not used for it (it would read no answer)."""
    with _answer_server(_kept_then_ended) as server, _loop(server.url, 1, 2000) as loop:
        ended = _deliver(loop, "j0", "j1")  # both handed over at once, one connection
    assert [d.outcome for d in ended] == [True, True]
    assert server.connections == 2


def test_a_new_connection_is_opened_once_the_receiver_closed_the_idle_one(
    tmp_path: Path,
) -> None:
    with (
        Receiver(tmp_path / "inbox.sqlite", read_timeout_s=0.1) as receiver,
        _loop(receiver.url, 1) as loop,
    ):
        [first] = _deliver(loop, "a")
        time.sleep(0.4)  # the receiver closes the connection after 0.1 s idle
        [second] = _deliver(loop, "b")
        summary = receiver.inbox.summary()
    assert (first.outcome, second.outcome) == (True, True)
    assert (summary["requests"], summary["effects"]) == (2, 2)


def test_close_never_begins_what_waits_and_ends_its_thread(tmp_path: Path) -> None:
    with Receiver(tmp_path / "slow.sqlite", interference=ReplyDelay(500)) as slow:
        loop = SendLoop(HttpSend(slow.url, "c1", 5000), 1)
        order: list[str] = []
        deliveries = [_Recorded(order, f"j{n}") for n in range(3)]
        for delivery in deliveries:
            loop.start(delivery)
        deadline = time.monotonic() + WAIT_S
        while not order and time.monotonic() < deadline:
            time.sleep(0.01)
        loop.close()
        loop.start(_Recorded(order, "after"))  # handed over once closed: dropped
        time.sleep(0.6)  # past the answer the first delivery would have had
    assert order == ["j0"]
    assert not any(d.ended.is_set() for d in deliveries)
    assert not loop.running


def test_sends_start_only_over_plain_http(tmp_path: Path) -> None:
    with HttpSends("https://127.0.0.1:9/d", "c1", count=2) as secure:
        assert not can_start(secure)
        with pytest.raises(ValueError, match="threads"):
            secure.start(_Recorded([], "a"))
    with Receiver(tmp_path / "inbox.sqlite") as receiver:
        sends = HttpSends(receiver.url, "c1", count=2)
        try:
            assert can_start(sends)
            order: list[str] = []
            delivery = _Recorded(order, "a")
            sends.start(delivery)
            assert delivery.ended.wait(WAIT_S) and delivery.outcome is True
        finally:
            sends.close()
    with pytest.raises(ValueError, match="http://"):
        SendLoop(HttpSend("https://127.0.0.1:9/d", "c1"), 1)
    with pytest.raises(ValueError, match="count"):
        SendLoop(HttpSend("http://127.0.0.1:9/d", "c1"), 0)


class _HeldLookup:
    """``socket.getaddrinfo`` behind a gate: a name server as slow as the test wants
    (none can be made slow here for real). Counts its calls; ``fails`` makes each
    call fail as a name that does not exist."""

    def __init__(self, fails: type[Exception] | None = None) -> None:
        self.release = threading.Event()
        self.calls = 0
        self.fails = fails

    def __call__(self, host: str, port: int, **options: Any) -> Any:
        self.calls += 1
        self.release.wait(WAIT_S)
        if self.fails is socket.gaierror:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        if self.fails is not None:
            raise self.fails("label empty or too long")  # as the idna codec says
        return socket.getaddrinfo(host, port, **options)


def _by_name(url: str) -> str:
    return url.replace("127.0.0.1", "localhost")


def test_a_slow_name_lookup_holds_up_only_the_delivery_that_needs_a_new_connection() -> None:
    lookup = _HeldLookup()
    lookup.release.set()
    with counting_server(False) as server:
        loop = SendLoop(HttpSend(_by_name(server.url), "c1", 5000), 2, look_up=lookup)
        try:
            [first] = _deliver(loop, "a")  # slot 0's connection, kept
            lookup.release.clear()
            order: list[str] = []
            kept, new = _Recorded(order, "b"), _Recorded(order, "c")
            loop.start(kept)  # on slot 0's kept connection
            loop.start(new)  # slot 1 needs a connection, so a lookup, which waits
            assert kept.ended.wait(WAIT_S / 4), "a slow lookup held up the kept connection"
            assert not new.ended.is_set()
            lookup.release.set()
            assert new.ended.wait(WAIT_S)
        finally:
            loop.close()
    assert (first.outcome, kept.outcome, new.outcome) == (True, True, True)
    assert (lookup.calls, server.connections) == (2, 2)


def test_a_lookup_past_the_deadline_is_a_timeout_and_the_next_delivery_still_connects() -> None:
    lookup = _HeldLookup()
    with counting_server(False) as server:
        loop = SendLoop(HttpSend(_by_name(server.url), "c1", 300), 1, look_up=lookup)
        try:
            started = time.monotonic()
            [late] = _deliver(loop, "a")
            waited = time.monotonic() - started
            lookup.release.set()
            [after] = _deliver(loop, "b")
        finally:
            loop.close()
    assert isinstance(late.outcome, worker.Retryable)
    assert late.cause is not None and late.cause.kind == "timeout"
    assert waited < WAIT_S / 4  # at its deadline, not when the lookup ended
    assert after.outcome is True
    # The next delivery shares the lookup if it began before the loop took its result,
    # else it begins one of its own.
    assert lookup.calls in (1, 2) and server.connections == 1


@pytest.mark.parametrize("error", [socket.gaierror, UnicodeError])
def test_one_failed_lookup_ends_every_delivery_that_waited_for_it(
    error: type[Exception],
) -> None:
    lookup = _HeldLookup(fails=error)
    loop = SendLoop(HttpSend("http://queue-receiver.invalid:8080/d", "c1", 5000), 2, look_up=lookup)
    try:
        order: list[str] = []
        waiting = [_Recorded(order, "a"), _Recorded(order, "b")]
        for delivery in waiting:
            loop.start(delivery)
        deadline = time.monotonic() + WAIT_S
        while order != ["a", "b"] and time.monotonic() < deadline:
            time.sleep(0.01)
        lookup.release.set()  # both wait for the one lookup by now
        for delivery in waiting:
            assert delivery.ended.wait(WAIT_S)
        # The loop is not left waiting for a lookup that ended: the next delivery makes
        # one of its own and fails at once, not at its deadline.
        started = time.monotonic()
        [again] = _deliver(loop, "c")
        waited = time.monotonic() - started
    finally:
        loop.close()
    assert lookup.calls == 2
    for delivery in [*waiting, again]:
        assert isinstance(delivery.outcome, worker.Retryable)
        assert delivery.cause is not None and delivery.cause.kind == "connection"
        assert error.__name__ in delivery.cause.detail
    assert waited < 2.5  # well before the 5 s deadline
