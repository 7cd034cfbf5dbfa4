"""(d) The receiver over real HTTP: deliveries, duplicates, conflicts and bad input.

Requests are written by hand with ``http.client`` so that every header (or its
absence) is exactly what the case says. Each bad input must get its specific 4xx
and a JSON error, and leave the inbox and the effects exactly as they were (only
the request counter moves).
"""

from __future__ import annotations

import http.client
import json
import socket
import sqlite3
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from courier.delivery_request import MAX_BODY_BYTES
from courier.inbox import Inbox
from courier.interference import ReplyDelay
from courier.receiver import Receiver

AUTO = "auto"  # Content-Length computed from the body
GOOD = b'{"id": "a", "qty": 1}'
JSON = (("Content-Type", "application/json"),)


@dataclass(frozen=True)
class Case:
    """One request and the answer it must get."""

    name: str
    status: int
    error: str
    body: bytes = GOOD
    method: str = "POST"
    path: str = "/deliveries"
    headers: tuple[tuple[str, str], ...] = JSON
    length: str | None = AUTO


def delivery(value: object) -> bytes:
    return json.dumps(value).encode()


BAD_INPUTS = [
    # Not JSON at all, or not strict JSON.
    Case("not-json", 400, "not_json", body=b"hello"),
    Case("empty-body", 400, "not_json", body=b""),
    Case("not-utf8", 400, "not_json", body=b'{"id": "\xff", "qty": 1}'),
    Case("nan", 400, "not_json", body=b'{"id": "a", "qty": NaN}'),
    Case("duplicate-keys", 400, "not_json", body=b'{"id": "a", "id": "b", "qty": 1}'),
    # JSON of the wrong shape.
    Case("array", 422, "invalid_delivery", body=b"[1, 2]"),
    Case("string", 422, "invalid_delivery", body=b'"a"'),
    Case("missing-qty", 422, "invalid_delivery", body=delivery({"id": "a"})),
    Case("missing-id", 422, "invalid_delivery", body=delivery({"qty": 1})),
    Case("extra-key", 422, "invalid_delivery", body=delivery({"id": "a", "qty": 1, "x": 0})),
    Case("qty-bool", 422, "invalid_delivery", body=delivery({"id": "a", "qty": True})),
    Case("qty-float", 422, "invalid_delivery", body=delivery({"id": "a", "qty": 1.0})),
    Case("qty-string", 422, "invalid_delivery", body=delivery({"id": "a", "qty": "1"})),
    Case("qty-null", 422, "invalid_delivery", body=delivery({"id": "a", "qty": None})),
    Case("qty-zero", 422, "invalid_delivery", body=delivery({"id": "a", "qty": 0})),
    Case("qty-negative", 422, "invalid_delivery", body=delivery({"id": "a", "qty": -1})),
    Case("qty-1001", 422, "invalid_delivery", body=delivery({"id": "a", "qty": 1001})),
    Case("qty-huge", 422, "invalid_delivery", body=delivery({"id": "a", "qty": 10**30})),
    Case("id-empty", 422, "invalid_delivery", body=delivery({"id": "", "qty": 1})),
    Case("id-65", 422, "invalid_delivery", body=delivery({"id": "a" * 65, "qty": 1})),
    Case("id-space", 422, "invalid_delivery", body=delivery({"id": "a b", "qty": 1})),
    Case("id-newline", 422, "invalid_delivery", body=delivery({"id": "a\n", "qty": 1})),
    Case("id-non-ascii", 422, "invalid_delivery", body=delivery({"id": "\u0661", "qty": 1})),
    Case("id-int", 422, "invalid_delivery", body=delivery({"id": 5, "qty": 1})),
    Case("id-null", 422, "invalid_delivery", body=delivery({"id": None, "qty": 1})),
    # Framing: length, encoding, media type, sender.
    Case("too-large", 413, "too_large", body=GOOD + b" " * MAX_BODY_BYTES),
    Case("no-length", 411, "length_required", length=None),
    Case(
        "chunked",
        411,
        "length_required",
        length=None,
        headers=(*JSON, ("Transfer-Encoding", "chunked")),
    ),
    Case("length-not-a-number", 400, "bad_content_length", length="abc"),
    Case("length-negative", 400, "bad_content_length", length="-1"),
    Case("length-plus", 400, "bad_content_length", length="+21"),
    Case("length-huge", 400, "bad_content_length", length="9" * 5000),
    Case(
        "length-twice",
        400,
        "bad_content_length",
        headers=(*JSON, ("Content-Length", str(len(GOOD)))),
    ),
    Case("text-plain", 415, "unsupported_media_type", headers=(("Content-Type", "text/plain"),)),
    Case("no-content-type", 415, "unsupported_media_type", headers=()),
    Case("bad-sender", 400, "bad_sender", headers=(*JSON, ("X-Courier", "not a name"))),
    # Routes and methods.
    Case("get-deliveries", 405, "method_not_allowed", method="GET", body=b"", length=None),
    Case("put-deliveries", 405, "method_not_allowed", method="PUT"),
    Case("delete-inbox", 405, "method_not_allowed", method="DELETE", path="/inbox", length=None),
    Case("post-summary", 405, "method_not_allowed", path="/"),
    Case("unknown-path", 404, "not_found", path="/nope"),
    Case("trailing-slash", 404, "not_found", path="/deliveries/"),
    Case("query-string", 404, "not_found", path="/deliveries?id=a"),
    Case("get-unknown", 404, "not_found", method="GET", path="/nope", body=b"", length=None),
    Case("options-deliveries", 405, "method_not_allowed", method="OPTIONS", body=b"", length=None),
]


def send_raw(receiver: Receiver, case: Case) -> tuple[int, dict[str, str], dict[str, Any]]:
    """Send ``case`` exactly as written; return the status, headers and JSON answer."""
    conn = http.client.HTTPConnection(receiver.host, receiver.port, timeout=10)
    try:
        conn.putrequest(case.method, case.path, skip_accept_encoding=True)
        for name, value in case.headers:
            conn.putheader(name, value)
        if case.length is not None:
            conn.putheader(
                "Content-Length", str(len(case.body)) if case.length == AUTO else case.length
            )
        conn.endheaders()
        if case.body:
            conn.send(case.body)
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), json.loads(response.read())
    finally:
        conn.close()


def post(receiver: Receiver, body: bytes) -> tuple[int, dict[str, Any]]:
    status, _, answer = send_raw(receiver, Case("post", 0, "", body=body))
    return status, answer


def unchanged_part(summary: dict[str, Any]) -> dict[str, Any]:
    """Everything in the inbox summary except the request counters."""
    return {
        "effects": summary["effects"],
        "inbox_rows": summary["inbox_rows"],
        "total_qty": summary["total_qty"],
        "rows": [{k: v for k, v in row.items() if k != "requests"} for row in summary["rows"]],
    }


@pytest.fixture
def seeded(receiver: Receiver) -> Receiver:
    """A receiver whose inbox already holds delivery ``a`` (qty 1)."""
    assert post(receiver, GOOD) == (200, {"id": "a", "qty": 1, "duplicate": False})
    return receiver


@pytest.mark.parametrize("case", BAD_INPUTS, ids=[case.name for case in BAD_INPUTS])
def test_bad_input_gets_its_4xx_and_changes_nothing(seeded: Receiver, case: Case) -> None:
    before = seeded.inbox.summary()
    status, headers, answer = send_raw(seeded, case)
    assert (status, answer["error"]) == (case.status, case.error), answer
    assert answer["detail"]
    if status == 405:
        assert headers["Allow"] == ("POST" if case.path == "/deliveries" else "GET")
    after = seeded.inbox.summary()
    assert unchanged_part(after) == unchanged_part(before)
    assert after["requests"] == before["requests"] + 1
    assert seeded.inbox.requests()[-1]["status"] == case.status


def test_first_delivery_applies_once_and_duplicates_are_acknowledged(receiver: Receiver) -> None:
    body = delivery({"id": "order-7", "qty": 4})
    assert post(receiver, body) == (200, {"id": "order-7", "qty": 4, "duplicate": False})
    assert post(receiver, body) == (200, {"id": "order-7", "qty": 4, "duplicate": True})
    summary = receiver.inbox.summary()
    assert (summary["requests"], summary["effects"], summary["inbox_rows"]) == (2, 1, 1)
    assert summary["total_qty"] == 4
    (row,) = summary["rows"]
    assert (row["id"], row["qty"], row["requests"], row["effects"]) == ("order-7", 4, 2, 1)


def test_same_id_with_another_qty_is_a_conflict_and_changes_nothing(seeded: Receiver) -> None:
    before = seeded.inbox.summary()
    status, answer = post(seeded, delivery({"id": "a", "qty": 2}))
    assert (status, answer["error"]) == (409, "conflict")
    assert unchanged_part(seeded.inbox.summary()) == unchanged_part(before)


def test_summary_is_served_on_get_and_not_counted(seeded: Receiver) -> None:
    for path in ("/", "/inbox"):
        conn = http.client.HTTPConnection(seeded.host, seeded.port, timeout=10)
        try:
            conn.request("GET", path)
            response = conn.getresponse()
            assert response.status == 200
            assert json.loads(response.read()) == seeded.inbox.summary()
        finally:
            conn.close()
    assert seeded.inbox.summary()["requests"] == 1


def test_concurrent_duplicates_apply_one_effect(receiver: Receiver) -> None:
    body = delivery({"id": "rush", "qty": 9})
    answers: list[tuple[int, dict[str, Any]]] = []
    threads = [
        threading.Thread(target=lambda: answers.append(post(receiver, body))) for _ in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=20)
    assert [status for status, _ in answers] == [200] * 8
    assert sorted(answer["duplicate"] for _, answer in answers) == [False] + [True] * 7
    summary = receiver.inbox.summary()
    assert (summary["requests"], summary["effects"], summary["total_qty"]) == (8, 1, 9)


def test_deliveries_that_come_together_commit_together_and_are_answered_after_it(
    tmp_path: Path,
) -> None:
    """Group commit: while the inbox is locked, deliveries wait in arrival order and
    none is answered; once it is free, one transaction holds them all, each judged
    after the ones before it (a duplicate, a conflict), and then each is answered."""
    inbox = tmp_path / "inbox.sqlite"
    bodies = [("a", 1), ("b", 2), ("a", 1), ("a", 3), ("c", 1)]
    answers: dict[int, tuple[int, dict[str, Any]]] = {}
    with Receiver(inbox) as receiver:
        holder = sqlite3.connect(inbox, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # the first committer waits for the lock
        try:
            threads = []
            for n, (job_id, qty) in enumerate(bodies):
                body = delivery({"id": job_id, "qty": qty})
                thread = threading.Thread(
                    target=lambda n=n, b=body: answers.update({n: post(receiver, b)})
                )
                thread.start()
                threads.append(thread)
                for _ in range(1000):  # each waits before the next comes: a known order
                    if receiver.inbox.waiting_writes() == n + 1:
                        break
                    time.sleep(0.005)
            assert receiver.inbox.waiting_writes() == len(bodies)
            assert answers == {}, "none is answered before the commit that holds it"
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        for thread in threads:
            thread.join(timeout=20)
        assert (receiver.inbox.commits, receiver.inbox.writes) == (1, len(bodies))
        summary = receiver.inbox.summary()
    assert [answers[n][0] for n in range(len(bodies))] == [200, 200, 200, 409, 200]
    assert [answers[n][1].get("duplicate") for n in (0, 1, 2, 4)] == [False, False, True, False]
    assert (summary["requests"], summary["effects"], summary["total_qty"]) == (5, 3, 4)


def test_a_body_that_never_arrives_times_out_with_408(seeded: Receiver) -> None:
    with socket.create_connection((seeded.host, seeded.port), timeout=10) as sock:
        sock.sendall(
            b"POST /deliveries HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n" + GOOD
        )
        answer = sock.makefile("rb").read()
    assert answer.startswith(b"HTTP/1.1 408 ")
    assert seeded.inbox.summary()["effects"] == 1


def test_a_body_cut_short_is_400(seeded: Receiver) -> None:
    with socket.create_connection((seeded.host, seeded.port), timeout=10) as sock:
        sock.sendall(
            b"POST /deliveries HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n" + GOOD
        )
        sock.shutdown(socket.SHUT_WR)
        answer = sock.makefile("rb").read()
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert b'"short_body"' in answer
    assert seeded.inbox.summary()["effects"] == 1


def test_stop_joins_every_thread_and_closes_the_socket(tmp_path: Path) -> None:
    threads_before = threading.active_count()
    receiver = Receiver(tmp_path / "inbox.sqlite", interference=ReplyDelay(200)).start()
    answers: list[tuple[int, dict[str, Any]]] = []
    slow = threading.Thread(target=lambda: answers.append(post(receiver, GOOD)))
    slow.start()
    for _ in range(500):  # until the delivery is committed and its answer is delayed
        if receiver.inbox.summary()["effects"] == 1:
            break
        time.sleep(0.01)
    receiver.stop()  # waits for the in-flight delivery to be answered
    slow.join(timeout=10)
    assert [status for status, _ in answers] == [200]
    assert threading.active_count() == threads_before
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((receiver.host, receiver.port), timeout=2).close()
    assert receiver.inbox.summary()["effects"] == 1


def test_the_inbox_survives_a_restart_of_the_receiver(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox.sqlite"
    with Receiver(inbox) as first:
        assert post(first, GOOD)[0] == 200
    with Receiver(inbox) as second:
        assert post(second, GOOD) == (200, {"id": "a", "qty": 1, "duplicate": True})
        assert second.inbox.summary()["effects"] == 1


def test_a_locked_inbox_is_503_so_couriers_retry(tmp_path: Path) -> None:
    inbox = tmp_path / "inbox.sqlite"
    with Receiver(inbox, inbox_busy_timeout_s=0.2) as receiver:
        holder = sqlite3.connect(inbox, isolation_level=None)
        holder.execute("BEGIN IMMEDIATE")  # another writer keeps the inbox locked
        try:
            status, answer = post(receiver, GOOD)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        assert (status, answer["error"]) == (503, "unavailable")
        assert receiver.inbox.summary()["effects"] == 0
        assert post(receiver, GOOD)[0] == 200


def test_head_gets_the_json_answers_headers_and_no_body(seeded: Receiver) -> None:
    before = unchanged_part(seeded.inbox.summary())
    conn = http.client.HTTPConnection(seeded.host, seeded.port, timeout=10)
    try:
        conn.request("HEAD", "/deliveries")
        response = conn.getresponse()
        assert (response.status, response.getheader("Content-Type")) == (405, "application/json")
        assert response.getheader("Allow") == "POST" and response.read() == b""
    finally:
        conn.close()
    assert unchanged_part(seeded.inbox.summary()) == before


def test_a_delivery_without_a_sender_is_logged_as_unnamed(tmp_path: Path) -> None:
    lines: list[str] = []
    with Receiver(tmp_path / "inbox.sqlite", log=lines.append) as receiver:
        assert post(receiver, GOOD)[0] == 200
    assert lines == ["POST /deliveries 200 applied a from an unnamed sender (no X-Courier header)"]


def test_an_inbox_is_never_put_into_a_queue_file(tmp_path: Path) -> None:
    import worker

    queue = tmp_path / "queue.sqlite"
    worker.open_queue(queue).close()
    with pytest.raises(ValueError, match="a queue file"):
        Receiver(queue)
    con = sqlite3.connect(queue)
    try:
        names = {name for (name,) in con.execute("SELECT name FROM sqlite_master")}
    finally:
        con.close()
    assert "inbox" not in names and "effects" not in names


def test_one_connection_carries_request_after_request(receiver: Receiver) -> None:
    conn = http.client.HTTPConnection(receiver.host, receiver.port, timeout=10)
    try:
        answers = []
        for qty in (1, 1, 2, 1):  # applied, duplicate, conflict, duplicate
            conn.request("POST", "/deliveries", delivery({"id": "a", "qty": qty}), dict(JSON))
            response = conn.getresponse()
            answers.append((response.status, response.getheader("Connection")))
            response.read()
            assert conn.sock is not None  # http.client drops a socket the server closes
        conn.request("GET", "/inbox")
        response = conn.getresponse()
        assert (response.status, response.getheader("Connection")) == (200, None)
        assert json.loads(response.read())["requests"] == 4
    finally:
        conn.close()
    assert answers == [(200, None), (200, None), (409, None), (200, None)]
    assert receiver.inbox.summary()["effects"] == 1


def test_a_refused_request_closes_its_connection(receiver: Receiver) -> None:
    conn = http.client.HTTPConnection(receiver.host, receiver.port, timeout=10)
    try:
        conn.request("POST", "/deliveries", b"hello", dict(JSON))
        response = conn.getresponse()
        assert (response.status, response.getheader("Connection")) == (400, "close")
        response.read()
        assert conn.sock is None
    finally:
        conn.close()


def test_stop_ends_idle_keep_alive_connections_at_once(tmp_path: Path) -> None:
    threads_before = threading.active_count()
    receiver = Receiver(tmp_path / "inbox.sqlite", read_timeout_s=60).start()
    conn = http.client.HTTPConnection(receiver.host, receiver.port, timeout=10)
    try:
        conn.request("POST", "/deliveries", GOOD, dict(JSON))
        assert conn.getresponse().read()  # the connection stays open, idle
        stopping = threading.Thread(target=receiver.stop)
        stopping.start()
        stopping.join(timeout=20)  # far less than the 60 s idle timeout
        assert not stopping.is_alive()
    finally:
        conn.close()
    assert threading.active_count() == threads_before
    assert Inbox(tmp_path / "inbox.sqlite", create=False).summary()["effects"] == 1
