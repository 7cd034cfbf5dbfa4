"""One HTTP/1.1 client connection: a request written in one send, its answer read back.

``courier.delivery.HttpSend`` makes each delivery on such a connection. It is the
part of HTTP a delivery needs and no more: ``http.client`` parses every answer's
headers with the ``email`` package and writes a request's head and body in two
sends, which cost a courier more than the rest of a delivery together. The rules
this module keeps:

1. A request goes out whole in one ``sendall``, on a socket with ``TCP_NODELAY``
   (TLS for ``https``, with the default context: certificates and host names
   checked).
2. An answer is a status line ``HTTP/1.x NNN ...``, header lines (at most
   ``MAX_HEAD_BYTES`` in all), then a body framed by ``Content-Length``, by the
   chunked transfer coding, or by the end of the connection; interim answers
   (100, 102, 103) are passed over. At most ``MAX_BODY_BYTES`` of a body are
   kept: a longer answer is cut there and its connection is not used again.
3. One deadline bounds the whole exchange (connecting, writing and every read
   together): ``TimeoutError`` once it has passed and the answer has not all come,
   however the bytes trickle in (what came by then is still read: a courier that
   was stopped past its deadline reads the answer that waits for it).
4. A connection carries another request only after an answer of HTTP/1.1 that did
   not say ``Connection: close``, was read whole, and was followed by nothing.
5. An answer that cannot be read is ``http.client.HTTPException`` (the stdlib's
   own classes: ``RemoteDisconnected`` for a connection closed before any answer,
   ``IncompleteRead``, ``BadStatusLine``); a broken connection is ``OSError``.
"""

from __future__ import annotations

import http.client
import socket
import ssl
import time
from collections.abc import Callable

__all__ = ["MAX_BODY_BYTES", "MAX_HEAD_BYTES", "READ_BYTES", "Connection", "read_answer"]

MAX_HEAD_BYTES = 65536
MAX_BODY_BYTES = 65536
READ_BYTES = 65536
_INTERIM = frozenset({100, 102, 103})
_NO_BODY = frozenset({204, 304})


class _Short(Exception):
    """The bytes given to ``read_answer`` end before the answer does."""


def read_answer(data: bytes, closed: bool) -> tuple[int, bytes, bool] | None:
    """The answer held in ``data``, all the bytes a connection has read since its
    request (``closed``: and then it ended), as ``Connection.exchange`` reads it:
    its status, its body and whether the connection may carry another request;
    ``None`` while more bytes are needed. For a reader that does not wait (the
    courier's event loop, ``courier.send_loop``); it raises what ``exchange`` raises
    for an answer that cannot be read (rule 5)."""
    given = [data] if data else []

    def read() -> bytes:
        if given:
            return given.pop()
        if closed:
            return b""
        raise _Short

    try:
        return _Answer(read).whole()
    except _Short:
        return None


def _left(deadline: float) -> float:
    """Seconds until ``deadline`` (monotonic); ``TimeoutError`` if it has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError("timed out")
    return left


class _Answer:
    """The bytes of one answer as they come in, and the parts read from them."""

    def __init__(self, read: Callable[[], bytes]) -> None:
        self.read = read  # the next bytes; b"" once the connection ended
        self.buffer = bytearray()
        self.closed = False  # the peer ended the connection

    def _more(self) -> bool:
        """Read what has come; False at the end."""
        if self.closed:
            return False
        chunk = self.read()
        self.buffer += chunk
        self.closed = not chunk
        return bool(chunk)

    def whole(self) -> tuple[int, bytes, bool]:
        """The status and body (at most ``MAX_BODY_BYTES``) of the next answer that is
        not an interim one, and whether the connection may carry another request
        (rule 4)."""
        for _ in range(len(_INTERIM) + 8):  # a few interim answers at most
            version, status, headers = self.head()
            if status not in _INTERIM:
                break
        else:
            raise http.client.HTTPException("interim answers without end")
        body, whole = self.body(status, headers)
        tokens = {t.strip().lower() for v in headers.get(b"connection", []) for t in v.split(b",")}
        reusable = whole and version == b"HTTP/1.1" and b"close" not in tokens and not self.buffer
        return status, body, reusable

    def head(self) -> tuple[bytes, int, dict[bytes, list[bytes]]]:
        """The version, status and headers (names in lower case) of the next answer."""
        while True:  # each pass reads at least a byte, or ends
            end = self.buffer.find(b"\r\n\r\n", 0, MAX_HEAD_BYTES + 4)
            if end >= 0:
                break
            if len(self.buffer) > MAX_HEAD_BYTES:
                raise http.client.LineTooLong("the answer's head")
            if not self._more():
                if not self.buffer:
                    raise http.client.RemoteDisconnected("closed without an answer")
                raise http.client.IncompleteRead(bytes(self.buffer))
        lines = bytes(self.buffer[:end]).split(b"\r\n")
        del self.buffer[: end + 4]
        version, _, rest = lines[0].partition(b" ")
        code = rest[:3]
        if not version.startswith(b"HTTP/1.") or not (code.isdigit() and len(code) == 3):
            raise http.client.BadStatusLine(lines[0].decode("latin-1"))
        headers: dict[bytes, list[bytes]] = {}
        for line in lines[1:]:
            name, colon, value = line.partition(b":")
            if not colon or not name or name != name.strip():
                raise http.client.HTTPException(f"malformed header line {line[:100]!r}")
            headers.setdefault(name.lower(), []).append(value.strip())
        return version, int(code), headers

    def _exactly(self, count: int) -> bytes:
        """The next ``count`` bytes; ``IncompleteRead`` if the connection ends first."""
        while len(self.buffer) < count:  # each pass reads at least a byte, or raises
            if not self._more():
                raise http.client.IncompleteRead(bytes(self.buffer), count - len(self.buffer))
        taken = bytes(self.buffer[:count])
        del self.buffer[:count]
        return taken

    def _line(self) -> bytes:
        """The next line, without its CRLF (at most ``MAX_HEAD_BYTES``)."""
        while True:  # each pass reads at least a byte, or ends
            end = self.buffer.find(b"\r\n", 0, MAX_HEAD_BYTES + 2)
            if end >= 0:
                line = bytes(self.buffer[:end])
                del self.buffer[: end + 2]
                return line
            if len(self.buffer) > MAX_HEAD_BYTES:
                raise http.client.LineTooLong("a chunk's size line")
            if not self._more():
                raise http.client.IncompleteRead(bytes(self.buffer))

    def body(self, status: int, headers: dict[bytes, list[bytes]]) -> tuple[bytes, bool]:
        """The body (at most ``MAX_BODY_BYTES``) and whether it was read whole."""
        if status in _NO_BODY:
            return b"", True
        codings = b",".join(headers.get(b"transfer-encoding", [])).lower()
        if codings:
            if codings.rsplit(b",", 1)[-1].strip() == b"chunked":
                return self._chunked()
            return self._until_closed()
        lengths = {value for value in headers.get(b"content-length", [])}
        if not lengths:
            return self._until_closed()
        if len(lengths) != 1 or not next(iter(lengths)).isdigit():
            raise http.client.HTTPException(f"malformed Content-Length {sorted(lengths)!r}")
        length = int(next(iter(lengths)))
        if length > MAX_BODY_BYTES:
            return self._exactly(MAX_BODY_BYTES), False
        return self._exactly(length), True

    def _chunked(self) -> tuple[bytes, bool]:
        kept = bytearray()
        while len(kept) <= MAX_BODY_BYTES:  # each chunk adds to it, or ends the body
            size_text = self._line().split(b";", 1)[0].strip()
            try:
                size = int(size_text, 16)
            except ValueError:
                raise http.client.HTTPException(f"malformed chunk size {size_text!r}") from None
            if size == 0:
                while self._line():  # trailers, up to the empty line
                    pass
                return bytes(kept), True
            kept += self._exactly(size)
            if self._exactly(2) != b"\r\n":
                raise http.client.HTTPException("a chunk not followed by CRLF")
        return bytes(kept[:MAX_BODY_BYTES]), False

    def _until_closed(self) -> tuple[bytes, bool]:
        """A body that ends with the connection (which is never used again)."""
        while len(self.buffer) <= MAX_BODY_BYTES and self._more():  # a byte a pass at least
            pass
        return bytes(self.buffer[:MAX_BODY_BYTES]), False


class Connection:
    """One HTTP/1.1 connection to a server (see the module's rules).

    ``reusable`` says whether it may carry another request (rule 4). ``close`` it
    when done.
    """

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.reusable = False

    @classmethod
    def open(cls, host: str, port: int, secure: bool, deadline: float) -> Connection:
        """A new connection to ``host``:``port`` (TLS if ``secure``), made by ``deadline``."""
        sock = socket.create_connection((host, port), _left(deadline))
        try:
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            if secure:
                sock.settimeout(_left(deadline))
                sock = ssl.create_default_context().wrap_socket(sock, server_hostname=host)
        except BaseException:
            sock.close()
            raise
        return cls(sock)

    def exchange(self, request: bytes, deadline: float) -> tuple[int, bytes]:
        """Write ``request`` whole and read its answer by ``deadline``: the status and
        at most ``MAX_BODY_BYTES`` of the body."""
        self.reusable = False
        self.sock.settimeout(_left(deadline))
        self.sock.sendall(request)
        sock = self.sock

        def read() -> bytes:
            # Past the deadline, a read that would wait is a timeout (a 0 s timeout
            # makes the socket non-blocking: BlockingIOError).
            sock.settimeout(max(0.0, deadline - time.monotonic()))
            try:
                return sock.recv(READ_BYTES)
            except BlockingIOError:
                raise TimeoutError("timed out") from None

        status, body, self.reusable = _Answer(read).whole()
        return status, body

    def close(self) -> None:
        self.reusable = False
        self.sock.close()
