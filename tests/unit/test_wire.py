"""``courier.wire.read_answer``: an answer read from the bytes gathered so far, as
``Connection.exchange`` reads it from a socket (the courier's event loop reads so)."""

from __future__ import annotations

import http.client

import pytest

from courier.wire import MAX_BODY_BYTES, MAX_HEAD_BYTES, read_answer

OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
CHUNKED = (
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    b"3;ext=1\r\nabc\r\n2\r\nde\r\n0\r\nTrailer: x\r\n\r\n"
)


def test_a_whole_answer_gives_its_status_body_and_a_reusable_connection() -> None:
    assert read_answer(OK, closed=False) == (200, b"{}", True)


@pytest.mark.parametrize("answer", [OK, CHUNKED])
def test_every_proper_prefix_of_an_answer_asks_for_more(answer: bytes) -> None:
    for end in range(len(answer)):
        assert read_answer(answer[:end], closed=False) is None, answer[:end]


def test_a_chunked_answer_is_joined_and_its_trailers_passed_over() -> None:
    assert read_answer(CHUNKED, closed=False) == (200, b"abcde", True)


@pytest.mark.parametrize(
    ("answer", "reusable"),
    [
        (b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\n{}", False),
        (b"HTTP/1.1 200 OK\r\nConnection: keep-alive, Close\r\nContent-Length: 0\r\n\r\n", False),
        (b"HTTP/1.0 200 OK\r\nContent-Length: 2\r\n\r\n{}", False),
        (OK + b"HTTP/1.1 200 OK\r\n", False),  # bytes nobody asked for follow it
        (b"HTTP/1.1 204 No Content\r\n\r\n", True),
    ],
)
def test_the_connection_is_kept_only_as_the_answer_allows(answer: bytes, reusable: bool) -> None:
    read = read_answer(answer, closed=False)
    assert read is not None and read[2] is reusable


def test_interim_answers_are_passed_over() -> None:
    answer = b"HTTP/1.1 100 Continue\r\n\r\n" + OK
    assert read_answer(answer, closed=False) == (200, b"{}", True)
    assert read_answer(b"HTTP/1.1 100 Continue\r\n\r\n", closed=False) is None


def test_a_body_framed_by_the_end_of_the_connection_waits_for_that_end() -> None:
    answer = b"HTTP/1.1 200 OK\r\n\r\nall of it"
    assert read_answer(answer, closed=False) is None
    assert read_answer(answer, closed=True) == (200, b"all of it", False)


def test_a_body_longer_than_the_limit_is_cut_and_its_connection_not_kept() -> None:
    # Given at once with its head, as a reader that gathers the bytes gives them.
    length = MAX_BODY_BYTES + 10
    answer = b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % length + b"x" * MAX_BODY_BYTES
    assert read_answer(answer, closed=False) == (200, b"x" * MAX_BODY_BYTES, False)


@pytest.mark.parametrize(
    ("answer", "error"),
    [
        (b"", http.client.RemoteDisconnected),
        (b"HTTP/1.1 200 OK\r\nContent-Le", http.client.IncompleteRead),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\n{}", http.client.IncompleteRead),
    ],
)
def test_an_answer_cut_by_the_end_of_the_connection_is_an_error(
    answer: bytes, error: type[Exception]
) -> None:
    with pytest.raises(error):
        read_answer(answer, closed=True)


@pytest.mark.parametrize(
    "answer",
    [
        b"SMTP 220 ready\r\n\r\n",
        b"HTTP/1.1 2x0 OK\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nno colon\r\n\r\n",
        b"HTTP/1.1 200 OK\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n{}",
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
        b"HTTP/1.1 200 OK\r\nX: " + b"a" * MAX_HEAD_BYTES,  # a head past the limit
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n" + b"1" * MAX_HEAD_BYTES * 2,
    ],
)
def test_an_answer_that_breaks_the_rules_is_an_error_whatever_may_follow(answer: bytes) -> None:
    with pytest.raises(http.client.HTTPException):
        read_answer(answer, closed=False)
