"""Delivery end to end: the real courier runner against the real receiver, beside run_once. See
docs/benchmarks.md, ``bench.delivery``."""

from __future__ import annotations

import contextlib
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import worker
from bench.measure import fleet as start_fleet
from bench.measure import fleet_totals
from bench.rows import fill
from courier.clock import clock_ms
from courier.delivery import HttpSend
from courier.inbox import Inbox
from courier.receiver import Receiver
from courier.runner import run_courier
from courier.stop_rules import StopRules
from tests.stores.sqlite import SQLiteStore

__all__ = ["BUILDS_ON", "LAYERS", "LEASE_MS", "breakdown", "courier", "fleet", "serve", "serving"]

LEASE_MS = 1000  # courier run's --lease-ms default
TIMEOUT_MS = LEASE_MS * 3 // 4  # and its --timeout-ms default
READY_TIMEOUT_S = 60.0
RESULT_GRACE_S = 30.0
JOBS_PER_SECOND_CEILING = 3_000  # prefill: more than can be delivered in the window
LAYERS = ("run_once", "run_file", "HTTP", "receiver", "runner")
BUILDS_ON = {"run_file": "run_once", "HTTP": "run_once", "receiver": "HTTP", "runner": "receiver"}


@contextlib.contextmanager
def _queue_file(files: SQLiteStore, label: str, seconds: float) -> Iterator[Path]:
    """A fresh queue file with more due jobs than ``seconds`` can deliver; removed afterwards."""
    where = files.fresh(label)
    con = worker.open_queue(where)
    try:
        fill(con, int(JOBS_PER_SECOND_CEILING * seconds) + 1_000, clock_ms())
    finally:
        con.close()
    try:
        yield Path(where)
    finally:
        files.remove(where)


def _instant(_: dict[str, Any]) -> bool:
    return True


def _quiet(_: str) -> None:
    """The runner's log, discarded: printing each delivery is not what is measured."""


class _Answer200(BaseHTTPRequestHandler):
    """Reads the body and answers 200 with a small JSON body, keeping the connection
    as the receiver does; no inbox, no commit."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextlib.contextmanager
def _answer_200() -> Iterator[str]:
    """A server on 127.0.0.1 (an OS-assigned port) answering 200 at once; its URL."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Answer200)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/deliveries"
    finally:
        server.shutdown()
        thread.join()
        server.server_close()


@contextlib.contextmanager
def _receiving(inbox: Path) -> Iterator[str]:
    """The real receiver on ``inbox``, running; its URL."""
    with Receiver(inbox) as receiver:
        yield receiver.url


def serve(kind: str, inbox: str, ready: Any, stop: Any) -> None:
    """A server process: ``kind`` ``"HTTP"`` answers 200 at once, ``"receiver"`` is the
    real receiver on ``inbox``; its URL goes to ``ready``, and it serves until ``stop``."""
    with _answer_200() if kind == "HTTP" else _receiving(Path(inbox)) as url:
        ready.put(url)
        stop.wait(READY_TIMEOUT_S * 10)


@contextlib.contextmanager
def serving(kind: str, inbox: Path) -> Iterator[str]:
    """``serve`` in a spawned process for the duration; its URL."""
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Queue(), context.Event()
    child = context.Process(target=serve, args=(kind, str(inbox), ready, stop), daemon=True)
    child.start()
    try:
        yield ready.get(timeout=READY_TIMEOUT_S)
    finally:
        stop.set()
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
            child.join(timeout=10)


def _rounds(step: Callable[[], dict[str, Any] | None], seconds: float) -> dict[str, Any]:
    """Call ``step`` (one round, a ``run_once`` result) for ``seconds``; count them."""
    done = stale = 0
    start = time.perf_counter()
    while time.perf_counter() < start + seconds:
        result = step()
        if result is None:
            raise RuntimeError("nothing was claimable: the queue file ran dry")
        done += result["status"] == "done"
        stale += result["status"] != "done"
    spent = time.perf_counter() - start
    return {"deliveries": done, "stale": stale, "seconds": round(spent, 3), "per_s": done / spent}


def _run_courier(path: Path, owner: str, send: HttpSend, seconds: float) -> dict[str, Any]:
    """``run_courier`` with ``courier run``'s defaults for ``seconds``: what it delivered."""
    rules = StopRules(max_runs=10**7, max_seconds=seconds)
    start = time.monotonic()
    report = run_courier(path, owner, send, lease_ms=LEASE_MS, stop_rules=rules, log=_quiet)
    spent = time.monotonic() - start
    done = sum(1 for result in report.results if result["status"] == "done")
    return {
        "deliveries": done,
        "stale": len(report.results) - done,
        "lock_timeouts": report.busy,
        "idle": report.idle,
        "seconds": round(spent, 3),
        "per_s": done / spent,
        "stop_reason": report.stop_reason,
    }


def _layer(name: str, path: Path, folder: Path, seconds: float) -> dict[str, Any]:
    owner = "bench"
    if name == "run_file":
        return _rounds(
            lambda: worker.run_file(path, owner, clock_ms, _instant, 0.5, LEASE_MS), seconds
        )
    with contextlib.ExitStack() as stack:
        send: Callable[[dict[str, Any]], bool] = _instant
        if name != "run_once":
            kind = "HTTP" if name == "HTTP" else "receiver"
            url = stack.enter_context(serving(kind, folder / f"inbox-{name}.sqlite"))
            send = stack.enter_context(HttpSend(url, owner, TIMEOUT_MS))
        if name == "runner":
            assert isinstance(send, HttpSend)
            return _run_courier(path, owner, send, seconds)
        con = stack.enter_context(contextlib.closing(worker.open_queue(path)))
        return _rounds(lambda: worker.run_once(con, owner, clock_ms, send, 0.5, LEASE_MS), seconds)


def breakdown(folder: Path, seconds: float, rounds: int = 3) -> dict[str, dict[str, Any]]:
    """Each layer of one courier's round (``LAYERS``), ``seconds`` each in each of
    ``rounds`` rounds (every layer once a round, in turn, so that a burst of load from
    elsewhere hits them alike): the median round of each, and every round's rate."""
    files = SQLiteStore(str(folder))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in LAYERS}
    for number in range(rounds):
        for name in LAYERS:
            with _queue_file(files, f"layer-{name}-{number}", seconds) as path:
                runs[name].append(_layer(name, path, folder, seconds))
    out: dict[str, dict[str, Any]] = {}
    for name, figures in runs.items():
        median = sorted(figures, key=lambda figure: float(figure["per_s"]))[(rounds - 1) // 2]
        every = [round(float(figure["per_s"]), 1) for figure in figures]
        out[name] = {**median, "per_s": round(median["per_s"], 1), "rounds_per_s": every}
    return out


# --- N courier processes -------------------------------------------------------------


def courier(path: str, url: str, owner: str, seconds: float, go: Any, results: Any) -> None:
    """One courier process: ``run_courier`` for ``seconds`` after ``go`` is set."""
    send = HttpSend(url, owner, TIMEOUT_MS)
    results.put(("ready", owner))
    if not go.wait(READY_TIMEOUT_S):
        results.put(("result", {"owner": owner, "error": "no start"}))
        return
    with send:
        results.put(("result", {"owner": owner, **_run_courier(Path(path), owner, send, seconds)}))


def fleet(folder: Path, processes: int, seconds: float) -> dict[str, Any]:
    """``processes`` couriers against one receiver for ``seconds``: the totals and shares,
    and the effects the receiver's inbox holds."""
    inbox = folder / f"inbox-fleet-{processes}.sqlite"
    queue_file = _queue_file(SQLiteStore(str(folder)), f"fleet-{processes}", seconds)
    with queue_file as path, serving("receiver", inbox) as url:
        _, reports, _ = start_fleet(
            courier,
            lambda owner: (str(path), url, owner, seconds),
            processes,
            seconds + RESULT_GRACE_S,
        )
    totals = fleet_totals(processes, seconds, reports, "deliveries", "lock_timeouts", "stale")
    return {**totals, "effects": Inbox(inbox, create=False).summary().get("effects")}
