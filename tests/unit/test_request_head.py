"""``courier.request_head``: what a request head is, and the status of one that is not."""

from __future__ import annotations

from http import HTTPStatus

import pytest

from courier.request_head import MAX_HEAD_BYTES, MAX_HEADERS, BadHead, head_end, parse_head


def test_a_head_gives_its_request_line_and_fields_without_case() -> None:
    head = parse_head(
        b"POST /deliveries HTTP/1.1\r\nHost: x\r\ncontent-type:  application/json \r\n"
        b"X-Courier: c1\r\nX-Courier: c2"
    )
    assert (head.method, head.target, head.version) == ("POST", "/deliveries", "HTTP/1.1")
    assert head.get("Content-Type") == "application/json"
    assert head.get_all("x-courier") == ["c1", "c2"]
    assert head.get("Content-Length") is None and head.get_all("Content-Length") is None
    assert head.keep_alive()


@pytest.mark.parametrize(
    ("version", "connection", "kept"),
    [
        ("HTTP/1.1", None, True),
        ("HTTP/1.1", "close", False),
        ("HTTP/1.1", "keep-alive, Close", False),
        ("HTTP/1.0", None, False),
        ("HTTP/1.0", "Keep-Alive", True),
    ],
)
def test_a_connection_is_kept_as_the_version_and_the_connection_header_say(
    version: str, connection: str | None, kept: bool
) -> None:
    extra = b"" if connection is None else b"\r\nConnection: " + connection.encode()
    assert parse_head(b"GET / " + version.encode() + extra).keep_alive() is kept


@pytest.mark.parametrize(
    ("head", "status"),
    [
        (b"GET / HTTP/1.1 extra", HTTPStatus.BAD_REQUEST),
        (b"GET /", HTTPStatus.BAD_REQUEST),
        (b"", HTTPStatus.BAD_REQUEST),
        (b"GET / HTTP/0.9", HTTPStatus.BAD_REQUEST),
        (b"GET / FTP/1.1", HTTPStatus.BAD_REQUEST),
        (b"GET / HTTP/2.0", HTTPStatus.HTTP_VERSION_NOT_SUPPORTED),
        (b"GET / HTTP/1.1\r\nno colon here", HTTPStatus.BAD_REQUEST),
        (b"GET / HTTP/1.1\r\nBad Name: x", HTTPStatus.BAD_REQUEST),
        (b"GET / HTTP/1.1\r\n: empty name", HTTPStatus.BAD_REQUEST),
        (
            b"GET / HTTP/1.1" + b"\r\nX: y" * (MAX_HEADERS + 1),
            HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE,
        ),
    ],
)
def test_a_head_that_breaks_the_rules_names_its_status(head: bytes, status: HTTPStatus) -> None:
    with pytest.raises(BadHead) as raised:
        parse_head(head)
    assert raised.value.status == status


def test_the_end_of_a_head_is_found_past_empty_lines_before_it() -> None:
    assert head_end(b"\r\n\r\nGET / HTTP/1.1\r\n\r\nrest") == (4, 18)
    assert head_end(b"GET / HTTP/1.1\r\nHost: x\r\n") == (0, -1)


def test_a_head_too_long_is_refused_before_it_ends() -> None:
    with pytest.raises(BadHead) as line:
        head_end(b"GET /" + b"a" * MAX_HEAD_BYTES)
    assert line.value.status == HTTPStatus.REQUEST_URI_TOO_LONG
    with pytest.raises(BadHead) as fields:
        head_end(b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD_BYTES)
    assert fields.value.status == HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE
