"""One HTTP/1.1 request head, read by hand: the request line and the header fields.

The receiver (``courier.receiver``) reads its requests with this instead of
``http.server``, whose ``email``-package header parsing and thread per connection
cost more than the rest of a delivery together. The rules it keeps:

1. A head is the bytes before the first empty line (``CRLF CRLF``); empty lines
   before a request line are passed over. A head longer than ``MAX_HEAD_BYTES`` is
   ``431`` (``414`` while its request line has not ended).
2. The request line is exactly ``METHOD TARGET HTTP/1.x`` (three words, ISO-8859-1):
   another count of words or another version is ``400``; ``HTTP/2`` and later are
   ``505``, as ``http.server`` answers them.
3. Each header line is ``name: value`` with a name free of blanks (else ``400``), at
   most ``MAX_HEADERS`` of them (else ``431``); names compare without case, values
   lose the blanks around them, and a repeated name keeps every value in order.
4. A connection is kept after the answer unless the request says ``Connection:
   close``, or is HTTP/1.0 without ``Connection: keep-alive``.

``BadHead`` carries the status and the reason for a head that breaks these rules;
what makes a request a delivery is ``courier.delivery_request``'s business.
"""

from __future__ import annotations

from dataclasses import dataclass
from http import HTTPStatus

__all__ = ["MAX_HEADERS", "MAX_HEAD_BYTES", "BadHead", "Head", "head_end", "parse_head"]

MAX_HEAD_BYTES = 65536
MAX_HEADERS = 100
_VERSIONS = ("HTTP/1.0", "HTTP/1.1")


class BadHead(Exception):
    """A request head that breaks the rules: its ``status`` and ``reason``."""

    def __init__(self, status: HTTPStatus, reason: str) -> None:
        super().__init__(f"{int(status)} {reason}")
        self.status = status
        self.reason = reason


@dataclass(frozen=True)
class Head:
    """A parsed request head: ``fields`` maps each lower-case name to its values."""

    method: str
    target: str
    version: str
    fields: dict[str, list[str]]

    def get(self, name: str, default: str | None = None) -> str | None:
        """The first value of ``name`` (any case), else ``default``."""
        values = self.fields.get(name.lower())
        return values[0] if values else default

    def get_all(self, name: str, failobj: list[str] | None = None) -> list[str] | None:
        """Every value of ``name`` (any case) in order, else ``failobj``."""
        values = self.fields.get(name.lower())
        return list(values) if values else failobj

    def keep_alive(self) -> bool:
        """Whether the connection may carry another request after this one (rule 4)."""
        tokens = {
            token.strip().lower()
            for value in self.fields.get("connection", ())
            for token in value.split(",")
        }
        if "close" in tokens:
            return False
        return self.version == "HTTP/1.1" or "keep-alive" in tokens


def head_end(buffer: bytes | bytearray) -> tuple[int, int]:
    """Where the head in ``buffer`` starts and ends (the index of its ``CRLF CRLF``),
    past any empty lines before it; ``end`` is -1 while the head is incomplete.

    Raises:
        BadHead: the head (or its request line) is already too long (rule 1).
    """
    start = 0
    while buffer.startswith(b"\r\n", start):
        start += 2
    end = buffer.find(b"\r\n\r\n", start)
    if end < 0:
        if buffer.find(b"\n", start) < 0 and len(buffer) - start > MAX_HEAD_BYTES:
            raise BadHead(HTTPStatus.REQUEST_URI_TOO_LONG, "Request line too long")
        if len(buffer) - start > MAX_HEAD_BYTES:
            raise BadHead(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Head too long")
    elif end - start > MAX_HEAD_BYTES:
        raise BadHead(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Head too long")
    return start, end


def parse_head(head: bytes) -> Head:
    """The request line and header fields of ``head`` (without its final ``CRLF CRLF``).

    Raises:
        BadHead: the head breaks rule 2 or 3.
    """
    lines = head.decode("iso-8859-1").split("\r\n")
    request_line = lines[0]
    words = request_line.split()
    if len(words) != 3:
        raise BadHead(HTTPStatus.BAD_REQUEST, f"Bad request syntax ({request_line!r})")
    method, target, version = words
    if version not in _VERSIONS:
        major = version[5:].partition(".")[0]
        if version.startswith("HTTP/") and major.isdigit() and int(major) >= 2:
            raise BadHead(
                HTTPStatus.HTTP_VERSION_NOT_SUPPORTED, f"Invalid HTTP version ({version!r})"
            )
        raise BadHead(HTTPStatus.BAD_REQUEST, f"Bad request version ({version!r})")
    if len(lines) - 1 > MAX_HEADERS:
        raise BadHead(HTTPStatus.REQUEST_HEADER_FIELDS_TOO_LARGE, "Too many headers")
    fields: dict[str, list[str]] = {}
    for line in lines[1:]:
        name, colon, value = line.partition(":")
        if not colon or not name or name != name.strip() or " " in name or "\t" in name:
            raise BadHead(HTTPStatus.BAD_REQUEST, f"Bad header line ({line[:100]!r})")
        fields.setdefault(name.lower(), []).append(value.strip(" \t"))
    return Head(method, target, version, fields)
