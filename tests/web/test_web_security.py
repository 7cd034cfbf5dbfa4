"""The web page's rules against other sites and odd requests, over real HTTP.

A page on another site may make the operator's browser post to the page (with
``Origin: null`` from a sandboxed frame or a data: URL, or with its own origin); a
link may carry any text; a client may send any method. None of it changes the
queue or makes the page say what the queue does not, and every answer carries the
page's security headers. The receiver answers odd methods in JSON, as its docs say.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from courier import queueview
from courier.cli import main
from courier.procs import Children
from courier.receiver import Receiver
from courier.web import SECURITY_HEADERS
from tests.web.queues import dead_queue, fetch, post_form, start_web

METHODS = ["TRACE", "PATCH", "PUT", "DELETE", "OPTIONS", "FOO"]


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[Path]:
    yield dead_queue(tmp_path)


def audit_rows(queue: Path) -> list[dict[str, object]]:
    return queueview.read_queue(queue)["redrives"]


def page_token(url: str) -> str:
    """The token the page puts in its forms (what a page on another site cannot read)."""
    for path in ("job?id=d-1", ""):
        found = re.search(r"name='token' value='([^']+)'", fetch(url + path)[2])
        if found is not None:
            return found.group(1)
    raise AssertionError("no form with the page's token")


def test_a_post_from_another_origin_is_refused_null_included(
    tmp_path: Path, queue: Path, children: Children
) -> None:
    url = start_web(children, tmp_path, queue, "--allow-redrive")
    fields = {"id": "d-1", "note": "forged", "token": page_token(url)}
    for origin in ("null", "http://evil.example", "http://127.0.0.1:1", "https://127.0.0.1"):
        assert post_form(url + "redrive", fields, {"Origin": origin}) == 403, origin
        assert post_form(url + "redrive-all", fields, {"Origin": origin}) == 403, origin
    assert audit_rows(queue) == []
    own = url.removesuffix("/")
    assert post_form(url + "redrive", fields, {"Origin": own}) == 303
    assert [row["id"] for row in audit_rows(queue)] == ["d-1"]


def test_without_the_pages_token_or_the_flag_nothing_changes(
    tmp_path: Path, queue: Path, children: Children
) -> None:
    writable = start_web(children, tmp_path, queue, "--allow-redrive")
    read_only = start_web(children, tmp_path, queue)
    fields = {"id": "d-1", "note": "forged"}
    assert post_form(writable + "redrive", fields) == 403
    assert post_form(writable + "redrive", {**fields, "token": "guessed"}) == 403
    assert post_form(writable + "redrive-all", {"note": "n", "token": "guessed"}) == 403
    assert "method='post'" not in fetch(read_only + "job?id=d-1")[2]
    assert "method='post'" not in fetch(read_only)[2]
    assert fetch(read_only + "redrive-all?reason=permanent")[0] == 403
    assert post_form(read_only + "redrive", fields) == 403
    assert audit_rows(queue) == []


@pytest.mark.parametrize(
    "query",
    ["done=redriven+everything%3A+all+good", "redriven=99", "redriven=1-x", "redriven=-1"],
)
def test_a_link_cannot_put_words_in_the_pages_mouth(
    tmp_path: Path, queue: Path, children: Children, query: str
) -> None:
    url = start_web(children, tmp_path, queue, "--allow-redrive")
    status, _, body = fetch(f"{url}?{query}")
    assert status == 200
    assert "id='message'" not in body and "all good" not in body


@pytest.mark.parametrize("method", METHODS)
def test_a_method_the_page_does_not_know_is_a_405_with_its_headers(
    tmp_path: Path, queue: Path, children: Children, method: str
) -> None:
    url = start_web(children, tmp_path, queue)
    for path in ("", "redrive", "status.json", "nowhere"):
        status, headers, body = fetch(url + path, method)
        assert status == 405 and headers.get("Allow") == "GET, HEAD, POST", (method, path)
        for name, value in SECURITY_HEADERS.items():
            assert headers.get(name) == value, (method, path, name)
        assert "<html" not in body.lower(), "http.server's own HTML page"


def test_a_bad_request_line_is_answered_with_the_pages_headers(
    tmp_path: Path, queue: Path, children: Children
) -> None:
    url = start_web(children, tmp_path, queue)
    port = int(url.rstrip("/").rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1 extra\r\nHost: 127.0.0.1\r\n\r\n")
        answer = sock.makefile("rb").read()
    head, _, _ = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.0 400"), answer
    assert b"Content-Security-Policy: default-src 'none'" in head


@pytest.mark.parametrize("method", ["TRACE", "PATCH", "FOO"])
def test_the_receiver_answers_any_method_in_json(tmp_path: Path, method: str) -> None:
    with Receiver(tmp_path / "inbox.sqlite") as receiver:
        status, headers, body = fetch(receiver.url, method)
        assert status == 405 and headers.get("Content-Type") == "application/json"
        assert headers.get("Allow") == "POST"
        assert json.loads(body)["error"] == "method_not_allowed"
        with socket.create_connection(("127.0.0.1", receiver.port), timeout=10) as sock:
            sock.sendall(b"GET / HTTP/1.1 extra\r\n\r\n")
            answer = sock.makefile("rb").read()
        assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"] == "bad_request_line"


def test_a_bind_beyond_loopback_must_be_asked_for(
    queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["web", str(queue), "--host", "0.0.0.0", "--max-seconds", "1"]) == 2
    assert "--allow-remote" in capsys.readouterr().err
