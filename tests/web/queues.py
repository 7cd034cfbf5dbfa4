"""The web tests' queues and servers: real files filled by real couriers, a receiver that
answers as told, and ``courier web`` as a child process.

``mixed_queue`` makes a queue file with jobs in every state and dead jobs of several
causes, each cause got the way an operator's would be: a real courier delivering to
the real receiver (a 409 for a qty the receiver already holds), to a receiver that
answers 503 or a hostile body, to a port nobody listens on; and one job whose
courier was killed mid-delivery (its claimed row written, no outcome).
"""

from __future__ import annotations

import http.server
import os
import shutil
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import worker
from courier.attempts import AttemptLog
from courier.clock import clock_ms
from courier.delivery import HttpSend
from courier.procs import Children, courier_command
from courier.receiver import Receiver
from tests.processes.test_courier import drain

WAIT_S = 20.0
HOSTILE = "\x1b[2J\x1b[31mgone\x1b[0m \u202eenod\u202c"
SCREENSHOTS = os.environ.get("LEASE_QUEUE_SCREENSHOTS")  # a folder to keep them in


class Answering(http.server.ThreadingHTTPServer):
    """A receiver that answers every delivery with ``status`` and ``body``."""

    def __init__(self, status: int, body: str) -> None:
        self.status, self.body = status, body.encode("utf-8")
        super().__init__(("127.0.0.1", 0), _AnswerHandler)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/deliveries"


class _AnswerHandler(http.server.BaseHTTPRequestHandler):
    def do_POST(self) -> None:
        assert isinstance(self.server, Answering)
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.send_response(self.server.status)
        self.send_header("Content-Length", str(len(self.server.body)))
        self.end_headers()
        self.wfile.write(self.server.body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@contextmanager
def answering(status: int, body: str) -> Iterator[Answering]:
    server = Answering(status, body)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield server
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


def enqueue(queue: Path, *ids: str, qty: int = 1, max_attempts: int = 1) -> None:
    con = worker.open_queue(queue)
    try:
        for job_id in ids:
            assert worker.enqueue(con, {"id": job_id, "qty": qty}, clock_ms(), 60_000, max_attempts)
    finally:
        con.close()


def dead_queue(tmp_path: Path) -> Path:
    """Two dead jobs (d-1, d-2: permanent) and a pending one, through the queue's calls."""
    queue = tmp_path / "queue.sqlite"
    enqueue(queue, "d-1", "d-2")
    con = worker.open_queue(queue)
    try:
        for _ in range(2):
            ticket = worker.claim(con, "c1", clock_ms(), 30_000)
            assert ticket is not None
            assert worker.finish(con, ticket, "permanent", clock_ms()) == "dead"
    finally:
        con.close()
    enqueue(queue, "p-1")
    return queue


def mixed_queue(tmp_path: Path) -> Path:
    """Jobs of every state: done, pending, leased with no outcome, and dead ones whose
    last causes are a 409, a 503 (hostile body), a refused connection."""
    queue = tmp_path / "queue.sqlite"
    enqueue(queue, "fine", "d-1", "d-2")
    with Receiver(tmp_path / "inbox.sqlite") as receiver:
        for job_id in ("d-1", "d-2"):
            assert HttpSend(receiver.url, "seed")({"id": job_id, "qty": 7}) is True
        assert sorted(
            r["status"] for r in drain(queue, receiver.url, record_attempts=True).results
        ) == [
            "dead",
            "dead",
            "done",
        ]
    enqueue(queue, "x-1", "x-2", "x-3")
    with answering(503, HOSTILE) as hostile:
        drain(queue, hostile.url, record_attempts=True)
    enqueue(queue, "r-1")
    with answering(200, "") as gone:
        url = gone.url
    drain(queue, url, record_attempts=True)  # nobody listens there any more: refused
    enqueue(queue, "k-1", max_attempts=3)
    claim_without_outcome(queue, "k-1", "c7")  # c7 is killed mid-delivery: no outcome
    enqueue(queue, "p-1", "p-2", qty=2, max_attempts=3)
    con = worker.open_queue(queue)
    try:  # p-1 failed once and waits for its retry; p-2 is due
        ticket = worker.claim(con, "c1", clock_ms(), 30_000)
        assert ticket is not None and ticket["id"] == "p-1"
        assert worker.finish(con, ticket, "retry", clock_ms(), 20_000) == "pending"
    finally:
        con.close()
    return queue


def claim_without_outcome(queue: Path, job_id: str, owner: str) -> None:
    """``owner`` claims ``job_id`` (the lowest-seq claimable job), writes its claimed row
    as ``courier run`` does before a delivery, and is gone before any outcome."""
    con = worker.open_queue(queue)
    try:
        ticket = worker.claim(con, owner, clock_ms(), 30_000)
        assert ticket is not None and ticket["id"] == job_id
    finally:
        con.close()
    log = AttemptLog(queue)
    try:
        log.claimed(job_id, owner)
    finally:
        log.close()


def start_web(children: Children, tmp_path: Path, queue: str | Path, *flags: str) -> str:
    """``courier web QUEUE FLAGS`` as a child; its URL once it listens."""
    port_file = tmp_path / f"web{len(children.procs)}.port"
    argv = courier_command(
        "web", queue, "--port-file", port_file, "--max-seconds", str(WAIT_S * 6), *flags
    )
    proc = children.start(argv, tmp_path / f"web{len(children.procs)}.log")
    until = time.monotonic() + WAIT_S
    while time.monotonic() < until and proc.poll() is None:
        text = port_file.read_text() if port_file.exists() else ""
        if text.endswith("\n"):  # written whole (the file is created before it is written)
            return f"http://127.0.0.1:{int(text)}/"
        time.sleep(0.02)
    raise AssertionError(f"courier web did not start: {proc.poll()}")


def fetch(
    url: str,
    method: str = "GET",
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], str]:
    """One request (no proxy, no redirect followed): status, headers, body."""

    class NoRedirect(urllib.request.HTTPRedirectHandler):
        def redirect_request(self, *args: object, **kwargs: object) -> None:
            return None

    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), NoRedirect())
    request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
    try:
        with opener.open(request, timeout=30) as response:
            return int(response.status), dict(response.headers), response.read().decode()
    except urllib.error.HTTPError as error:
        return int(error.code), dict(error.headers), error.read().decode()


def post_form(url: str, fields: dict[str, str], headers: dict[str, str] | None = None) -> int:
    body = urllib.parse.urlencode(fields).encode()
    form = {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})}
    return fetch(url, "POST", body, form)[0]


def keep(tmp_path: Path, name: str) -> str:
    """Where a screenshot goes: ``tmp_path``, copied to ``LEASE_QUEUE_SCREENSHOTS`` if set."""
    return str(tmp_path / name)


def kept(path: str) -> None:
    if SCREENSHOTS:
        os.makedirs(SCREENSHOTS, exist_ok=True)
        shutil.copy(path, SCREENSHOTS)
