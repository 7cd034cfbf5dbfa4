"""The receiver's own HTTP/1.1 reading, over real sockets on 127.0.0.1.

The receiver reads its requests by hand on one event loop (``courier.request_head``,
``courier.receiver`` rule 4): these are the cases ``http.server`` used to handle for
it. A head it cannot read is answered in JSON and not counted; requests written in
one go on one connection are answered one after another, in order; a client that
waits for ``100 Continue`` gets it; HTTP/1.0 closes unless kept alive; a refused
request's body is read and dropped before the close; many connections at once are
committed together and each answered.
"""

from __future__ import annotations

import http.client
import json
import socket
import sqlite3
import threading
import time
from pathlib import Path

import pytest

from courier.inbox import Inbox
from courier.receiver import Receiver
from courier.request_head import MAX_HEAD_BYTES

GOOD = b'{"id": "a", "qty": 1}'


def post_bytes(body: bytes = GOOD, extra: bytes = b"", version: bytes = b"HTTP/1.1") -> bytes:
    return (
        b"POST /deliveries " + version + b"\r\nHost: x\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n" % len(body) + extra + b"\r\n" + body
    )


def read_all(sock: socket.socket) -> bytes:
    """Everything the receiver sends until it closes the connection."""
    chunks = []
    while chunk := sock.recv(65536):
        chunks.append(chunk)
    return b"".join(chunks)


def answers_in(data: bytes) -> list[tuple[int, dict[str, str], bytes]]:
    """The answers in ``data`` (each framed by its Content-Length), in order."""
    found = []
    while data:
        head, _, rest = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = dict(line.split(": ", 1) for line in lines[1:])
        length = int(headers.get("Content-Length", "0"))
        found.append((int(lines[0].split()[1]), headers, rest[:length]))
        data = rest[length:]
    return found


@pytest.mark.parametrize(
    ("raw", "status"),
    [
        (b"GET / HTTP/2.0\r\n\r\n", 505),
        (b"POST /deliveries HTTP/1.1\r\nno colon\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\n" + b"X: y\r\n" * 101 + b"\r\n", 431),
        (b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD_BYTES + b"\r\n\r\n", 431),
    ],
    ids=["http-2", "no-colon", "101-headers", "head-too-long"],
)
def test_a_head_that_cannot_be_read_is_answered_in_json_and_not_counted(
    receiver: Receiver, raw: bytes, status: int
) -> None:
    with socket.create_connection((receiver.host, receiver.port), timeout=10) as sock:
        sock.sendall(raw)
        ((got, headers, body),) = answers_in(read_all(sock))
    assert (got, headers["Connection"]) == (status, "close")
    assert json.loads(body)["error"] == "bad_request_line"
    assert receiver.inbox.summary()["requests"] == 0


def test_requests_written_in_one_go_are_answered_in_order(receiver: Receiver) -> None:
    bodies = [b'{"id": "a", "qty": 1}', b'{"id": "a", "qty": 2}', b'{"id": "b", "qty": 3}']
    with socket.create_connection((receiver.host, receiver.port), timeout=10) as sock:
        sock.sendall(b"".join(post_bytes(body) for body in bodies[:-1]))
        sock.sendall(post_bytes(bodies[-1], b"Connection: close\r\n"))
        answers = answers_in(read_all(sock))
    assert [status for status, _, _ in answers] == [200, 409, 200]
    assert [json.loads(body).get("id") for _, _, body in answers] == ["a", None, "b"]
    assert receiver.inbox.summary()["effects"] == 2


def test_a_client_that_expects_100_continue_gets_it_before_sending_its_body(
    receiver: Receiver,
) -> None:
    with socket.create_connection((receiver.host, receiver.port), timeout=10) as sock:
        request = post_bytes(GOOD, b"Expect: 100-continue\r\n")
        sock.sendall(request[: -len(GOOD)])
        interim = sock.recv(65536)
        assert interim == b"HTTP/1.1 100 Continue\r\n\r\n"
        sock.sendall(GOOD)
        status = sock.recv(65536).split(b" ", 2)[1]
    assert status == b"200"


def test_http_1_0_is_closed_after_its_answer_unless_kept_alive(receiver: Receiver) -> None:
    with socket.create_connection((receiver.host, receiver.port), timeout=10) as sock:
        sock.sendall(post_bytes(GOOD, version=b"HTTP/1.0"))
        ((status, _, _),) = answers_in(read_all(sock))  # ends: the receiver closed it
    assert status == 200
    with socket.create_connection((receiver.host, receiver.port), timeout=10) as sock:
        for _ in range(2):
            sock.sendall(post_bytes(GOOD, b"Connection: keep-alive\r\n", b"HTTP/1.0"))
            assert sock.recv(65536).startswith(b"HTTP/1.1 200 ")
    assert receiver.inbox.summary()["requests"] == 3


def test_a_refused_body_sent_after_the_answer_is_dropped_and_the_answer_kept(
    receiver: Receiver,
) -> None:
    """The answer to a refused request (here a PUT with a body) leaves before the body
    has all come; the rest is read and dropped, so no reset destroys the answer."""
    body = b"x" * 60_000
    with socket.create_connection((receiver.host, receiver.port), timeout=10) as sock:
        sock.sendall(
            b"PUT /deliveries HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: %d\r\n\r\n" % len(body)
        )
        sock.sendall(body)
        ((status, headers, answer),) = answers_in(read_all(sock))
    assert (status, headers["Connection"], headers["Allow"]) == (405, "close", "POST")
    assert json.loads(answer)["error"] == "method_not_allowed"
    assert receiver.inbox.summary()["requests"] == 1


def test_a_connection_whose_head_stalls_is_closed_after_the_read_timeout(
    receiver: Receiver,
) -> None:
    with socket.create_connection((receiver.host, receiver.port), timeout=10) as sock:
        sock.sendall(b"POST /deliveries HTTP/1.1\r\nHost: x\r\n")  # never ends
        assert read_all(sock) == b""  # closed (the fixture's read timeout is 0.5 s)
    assert receiver.inbox.summary()["requests"] == 0


def test_many_connections_at_once_are_committed_together_and_each_answered(
    tmp_path: Path,
) -> None:
    senders, each = 16, 40
    statuses: list[int] = []
    lock = threading.Lock()
    with Receiver(tmp_path / "inbox.sqlite") as receiver:

        def sender(number: int) -> None:
            conn = http.client.HTTPConnection(receiver.host, receiver.port, timeout=20)
            try:
                for n in range(each):
                    body = json.dumps({"id": f"s{number}-{n}", "qty": 1 + n % 3})
                    headers = {"Content-Type": "application/json", "X-Courier": f"c{number}"}
                    conn.request("POST", "/deliveries", body, headers)
                    response = conn.getresponse()
                    response.read()
                    with lock:
                        statuses.append(response.status)
            finally:
                conn.close()

        threads = [threading.Thread(target=sender, args=(n,)) for n in range(senders)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        commits, writes = receiver.inbox.commits, receiver.inbox.writes
    assert statuses == [200] * (senders * each)
    summary = Inbox(tmp_path / "inbox.sqlite", create=False).summary()
    assert (summary["requests"], summary["effects"]) == (senders * each, senders * each)
    assert writes == senders * each and commits < writes


def test_a_delivery_whose_client_left_is_still_committed_when_the_receiver_stops(
    tmp_path: Path,
) -> None:
    """The client goes away while its delivery waits for the inbox (held by another
    connection), and the receiver is stopped before the commit: the stop waits for it,
    the delivery is committed once, and no thread fails answering a client that left."""
    inbox = tmp_path / "inbox.sqlite"
    failures: list[BaseException | None] = []
    hook, threading.excepthook = threading.excepthook, lambda args: failures.append(args.exc_value)
    try:
        receiver = Receiver(inbox).start()
        holder = sqlite3.connect(inbox, isolation_level=None, check_same_thread=False)
        holder.execute("BEGIN IMMEDIATE")
        with socket.create_connection((receiver.host, receiver.port), timeout=10) as sock:
            sock.sendall(post_bytes(GOOD))
            deadline = time.monotonic() + 10
            while receiver.inbox.waiting_writes() < 1 and time.monotonic() < deadline:
                time.sleep(0.005)

        def release() -> None:
            holder.execute("ROLLBACK")
            holder.close()

        threading.Timer(0.5, release).start()
        receiver.stop()
    finally:
        threading.excepthook = hook
    assert failures == []
    summary = Inbox(inbox, create=False).summary()
    assert (summary["effects"], summary["requests"]) == (1, 1)
