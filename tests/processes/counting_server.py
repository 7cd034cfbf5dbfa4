"""A small HTTP server on 127.0.0.1 that answers every POST 200 and counts the
connections it was given: what a test of keep-alive needs to see."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


@dataclass
class Counted:
    """The server's URL, and how many connections it has been given so far."""

    url: str
    connections: int = 0


class _Counting(BaseHTTPRequestHandler):
    """Answers 200 to every POST on HTTP/1.1 (``Connection: close`` if the server is
    ``closing``); counts each connection in the server's ``counted``."""

    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        super().setup()
        self.server.counted.connections += 1  # type: ignore[attr-defined]

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.send_header("Content-Length", "2")
        if self.server.closing:  # type: ignore[attr-defined]
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(b"{}")

    def log_message(self, format: str, *args: object) -> None:
        return


@contextmanager
def counting_server(closing: bool) -> Iterator[Counted]:
    """The server, on an OS-assigned port, until the block ends; ``closing``: each
    answer says ``Connection: close``."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Counting)
    counted = Counted(f"http://127.0.0.1:{server.server_address[1]}/d")
    server.counted, server.closing = counted, closing  # type: ignore[attr-defined]
    server.daemon_threads = True
    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    serving.start()
    try:
        yield counted
    finally:
        server.shutdown()
        serving.join(timeout=10)
        server.server_close()
