"""Delivery end to end: the real courier runner against the real receiver, beside run_once.

Two measurements, each on a fresh queue file filled with due jobs (direct SQL, more
than can be delivered in the time), on the host's wall clock (the couriers' time base):

1. ``breakdown``: one courier's round built up one layer at a time, the courier in
   this process, each layer for ``seconds`` in each of three rounds (the median round
   of each); what a layer costs is its time a delivery less that of the layer it
   builds on (``BUILDS_ON``):

   - ``run_once``: ``worker.run_once`` on one connection, a send that returns ``True``
     at once (the queue alone: a claim and a finish);
   - ``run_file``: ``worker.run_file``, which opens the file for each round (what
     the runner would pay if it did not keep its connection);
   - ``HTTP``: ``run_once`` with ``courier.runner.HttpSend`` to a server of this
     module that answers 200 at once (the request, no commit behind it);
   - ``receiver``: the same to the real receiver (``courier.receiver``), which commits
     each delivery to its inbox before answering;
   - ``runner``: ``courier.runner.run_courier`` itself against the real receiver (its
     loop, backoff and log, here discarded).

2. ``fleet``: N courier processes (``spawn``, ``bench.couriers.process_reports``),
   each ``run_courier`` with ``HttpSend`` against one real receiver, on one queue
   file, for ``seconds`` after a common start: deliveries per second of all of them,
   each courier's deliveries as a share of the mean, lock timeouts (the runner's busy
   rounds, each a ``database is locked`` after the 1 s busy timeout) and stale
   finishes (a lease that ran out before its finish).

Every server (the receiver, the one that answers 200) runs in a process of its own,
as ``courier receive`` does, so it never waits for a courier's interpreter lock.

Every courier uses ``courier run``'s defaults: a lease of 1,000 ms and an HTTP timeout
of 3/4 of it.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import random
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import worker
from bench.couriers import fleet_window, process_reports
from bench.rows import fill
from courier.receiver import Inbox, Receiver
from courier.runner import HttpSend, Limits, clock_ms, run_courier

__all__ = ["BUILDS_ON", "LAYERS", "LEASE_MS", "breakdown", "courier", "fleet", "serve"]

LEASE_MS = 1000  # courier run's --lease-ms default
TIMEOUT_MS = LEASE_MS * 3 // 4  # and its --timeout-ms default
READY_TIMEOUT_S = 60.0
JOBS_PER_SECOND_CEILING = 3_000  # prefill: more than can be delivered in the window
LAYERS = ("run_once", "run_file", "HTTP", "receiver", "runner")
BUILDS_ON = {"run_file": "run_once", "HTTP": "run_once", "receiver": "HTTP", "runner": "receiver"}

Send = Callable[[dict[str, Any]], bool]


def _queue_file(path: Path, seconds: float) -> Path:
    """A fresh queue file at ``path`` with more due jobs than ``seconds`` can deliver."""
    con = worker.open_queue(path)
    try:
        fill(con, int(JOBS_PER_SECOND_CEILING * seconds) + 1_000, clock_ms())
    finally:
        con.close()
    return path


def _remove(path: Path) -> None:
    for name in (path, Path(f"{path}-journal")):
        name.unlink(missing_ok=True)


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


def serve(kind: str, inbox: str, ready: Any, stop: Any) -> None:
    """A server process: ``kind`` ``"HTTP"`` answers 200 at once, ``"receiver"`` is the
    real receiver on ``inbox``; its URL goes to ``ready``, and it serves until ``stop``."""
    with _answer_200() if kind == "HTTP" else _receiving(Path(inbox)) as url:
        ready.put(url)
        stop.wait(READY_TIMEOUT_S * 10)


@contextlib.contextmanager
def _receiving(inbox: Path) -> Iterator[str]:
    """The real receiver on ``inbox``, running; its URL."""
    with Receiver(inbox) as receiver:
        yield receiver.url


@contextlib.contextmanager
def _serving(kind: str, inbox: Path) -> Iterator[str]:
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
    stop = start + seconds
    while time.perf_counter() < stop:
        result = step()
        if result is None:
            raise RuntimeError("nothing was claimable: the queue file ran dry")
        if result["status"] == "done":
            done += 1
        else:
            stale += 1
    spent = time.perf_counter() - start
    return {"deliveries": done, "stale": stale, "seconds": round(spent, 3), "per_s": done / spent}


def _layer(name: str, path: Path, folder: Path, seconds: float) -> dict[str, Any]:
    owner = "bench"
    if name == "run_once":
        con = worker.open_queue(path)
        try:
            return _rounds(
                lambda: worker.run_once(con, owner, clock_ms, _instant, 0.5, LEASE_MS), seconds
            )
        finally:
            con.close()
    if name == "run_file":
        return _rounds(
            lambda: worker.run_file(path, owner, clock_ms, _instant, 0.5, LEASE_MS), seconds
        )
    inbox = folder / f"inbox-{name}.sqlite"
    with _serving("HTTP" if name == "HTTP" else "receiver", inbox) as url:
        send = HttpSend(url, owner, TIMEOUT_MS)
        try:
            if name in ("HTTP", "receiver"):
                con = worker.open_queue(path)
                try:
                    return _rounds(
                        lambda: worker.run_once(con, owner, clock_ms, send, 0.5, LEASE_MS),
                        seconds,
                    )
                finally:
                    con.close()
            limits = Limits(max_runs=10**7, max_seconds=seconds)
            start = time.perf_counter()
            report = run_courier(path, owner, send, lease_ms=LEASE_MS, limits=limits, log=_quiet)
            spent = time.perf_counter() - start
        finally:
            send.close()
    done = sum(1 for result in report.results if result["status"] == "done")
    return {
        "deliveries": done,
        "stale": len(report.results) - done,
        "busy": report.busy,
        "idle": report.idle,
        "seconds": round(spent, 3),
        "per_s": done / spent,
    }


def breakdown(folder: Path, seconds: float, rounds: int = 3) -> dict[str, dict[str, Any]]:
    """Each layer of one courier's round (``LAYERS``), ``seconds`` each in each of
    ``rounds`` rounds (every layer once a round, in turn, so that a burst of load from
    elsewhere hits them alike): the median round of each, and every round's rate."""
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in LAYERS}
    for number in range(rounds):
        for name in LAYERS:
            path = _queue_file(folder / f"layer-{name}-{number}.sqlite", seconds)
            try:
                runs[name].append(_layer(name, path, folder, seconds))
            finally:
                _remove(path)
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
    limits = Limits(max_runs=10**7, max_seconds=seconds)
    start = time.monotonic()
    with send:
        report = run_courier(
            Path(path), owner, send, lease_ms=LEASE_MS, limits=limits, log=_quiet, rng=random.random
        )
    done = sum(1 for result in report.results if result["status"] == "done")
    results.put(
        (
            "result",
            {
                "owner": owner,
                "deliveries": done,
                "stale": len(report.results) - done,
                "busy": report.busy,
                "idle": report.idle,
                "seconds": time.monotonic() - start,
                "stop_reason": report.stop_reason,
            },
        )
    )


def fleet(folder: Path, processes: int, seconds: float) -> dict[str, Any]:
    """``processes`` couriers against one receiver for ``seconds``: the totals and shares."""
    path = _queue_file(folder / f"fleet-{processes}.sqlite", seconds)
    try:
        inbox_path = folder / f"inbox-fleet-{processes}.sqlite"
        with _serving("receiver", inbox_path) as url:
            reports = process_reports(
                courier, lambda owner: (str(path), url, owner, seconds), processes, seconds
            )
        inbox = Inbox(inbox_path, create=False).summary()
    finally:
        _remove(path)
    return _totals(processes, seconds, reports, inbox)


def _totals(
    processes: int, seconds: float, reports: list[dict[str, Any]], inbox: dict[str, Any]
) -> dict[str, Any]:
    done = [int(report.get("deliveries", 0)) for report in reports]
    common, window = fleet_window(processes, seconds, reports)
    mean = sum(done) / len(done) if done else 0.0
    shares = [round(count / mean, 2) for count in done] if mean else [0.0]
    summed = {key: sum(int(report.get(key, 0)) for report in reports) for key in ("busy", "stale")}
    return {
        **common,
        "deliveries": sum(done),
        "per_s": round(sum(done) / window, 1) if window > 0 else 0.0,
        "per_courier": done,
        "smallest_share": min(shares),
        "largest_share": max(shares),
        "lock_timeouts": summed["busy"],
        "stale": summed["stale"],
        "effects": inbox.get("effects"),
        "errors": [report["error"] for report in reports if "error" in report],
    }
