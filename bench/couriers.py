"""N courier processes on one queue file: total claim+finish cycles and lock timeouts.

The queue alone, at its most contended (``bench.postgres`` sets it beside PostgreSQL);
the real courier runner against the real receiver is ``bench.delivery``, which
starts its processes with ``process_reports`` too.

For each N, a fresh queue file is filled with due jobs (direct SQL, more than N
couriers can take in the window), then N processes are started with the ``spawn``
context. Each opens the file with ``worker.open_queue`` (its 1 s busy timeout
included), reports ready, waits for the common start signal, and for ``seconds`` runs
``claim`` then ``finish(..., "ok")`` on the real wall clock (the couriers' shared time
base). A ``sqlite3.OperationalError`` saying ``database is locked`` (the busy timeout
ran out) is caught and counted, and the call is tried again; a finish that comes back
``False`` (its lease ran out while it waited) is counted as stale. No delivery happens
between claim and finish: this measures the queue alone, at its most contended.
"""

from __future__ import annotations

import multiprocessing
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import worker
from bench.measure import collect
from bench.rows import fill
from courier.runner import clock_ms, is_busy

__all__ = ["fleet_window", "process_reports", "run_couriers"]

LEASE_MS = 30_000
READY_TIMEOUT_S = 60.0
RESULT_GRACE_S = 30.0
JOBS_PER_SECOND_CEILING = 5_000  # prefill: more than N couriers can take in the window


def _open(path: str, counts: dict[str, Any], until: float) -> sqlite3.Connection | None:
    """``worker.open_queue``, retried on lock timeouts (counted) until ``until``."""
    while time.monotonic() < until:
        try:
            return worker.open_queue(path)
        except sqlite3.OperationalError as error:
            if not is_busy(error):
                raise
            counts["locked"] += 1
    return None


def _finish(con: sqlite3.Connection, ticket: dict[str, Any], counts: dict[str, Any]) -> None:
    """Finish ``ticket`` ok, retrying lock timeouts, until it is done or stale."""
    while True:
        try:
            status = worker.finish(con, ticket, "ok", clock_ms())
        except sqlite3.OperationalError as error:
            if not is_busy(error):
                raise
            counts["locked"] += 1
            continue  # bounded: once the lease has run out, finish answers False
        counts["cycles" if status == "done" else "stale"] += 1
        return


def courier(path: str, owner: str, seconds: float, go: Any, results: Any) -> None:
    """One courier process: claim+finish cycles for ``seconds`` after ``go`` is set."""
    counts: dict[str, Any] = {"owner": owner, "cycles": 0, "locked": 0, "stale": 0, "idle": 0}
    con = _open(path, counts, time.monotonic() + READY_TIMEOUT_S)
    results.put(("ready", owner))
    if con is None or not go.wait(READY_TIMEOUT_S):
        results.put(("result", {**counts, "seconds": 0.0, "error": "no start"}))
        return
    start = time.monotonic()
    stop = start + seconds
    try:
        while time.monotonic() < stop:
            try:
                ticket = worker.claim(con, owner, clock_ms(), LEASE_MS)
            except sqlite3.OperationalError as error:
                if not is_busy(error):
                    raise
                counts["locked"] += 1
                continue
            if ticket is None:
                counts["idle"] += 1
                continue
            _finish(con, ticket, counts)
    finally:
        con.close()
    results.put(("result", {**counts, "seconds": time.monotonic() - start}))


def process_reports(
    target: Callable[..., None], args: Callable[[str], tuple[Any, ...]], n: int, seconds: float
) -> list[dict[str, Any]]:
    """Start ``n`` ``spawn`` processes running ``target(*args(owner), go, results)``
    (owners ``courier-0`` ...), let them start together once all are ready, and return
    the reports they put on ``results`` within ``seconds`` and a grace period; every
    child is joined (killed if it hangs)."""
    context = multiprocessing.get_context("spawn")
    go = context.Event()
    results = context.Queue()
    children = [
        context.Process(target=target, args=(*args(f"courier-{k}"), go, results), daemon=True)
        for k in range(n)
    ]
    try:
        for child in children:
            child.start()
        collect(results, "ready", n, READY_TIMEOUT_S)
        go.set()
        return collect(results, "result", n, seconds + RESULT_GRACE_S)
    finally:
        for child in children:
            child.join(timeout=5)
            if child.is_alive():
                child.kill()
                child.join()


def run_couriers(folder: Path, processes: int, seconds: float) -> dict[str, Any]:
    """Run ``processes`` couriers on one fresh file for ``seconds``; return the totals."""
    path = folder / f"couriers-{processes}.sqlite"
    con = worker.open_queue(path)
    try:
        fill(con, int(JOBS_PER_SECOND_CEILING * seconds) + 1_000, clock_ms())
    finally:
        con.close()
    try:
        reports = process_reports(
            courier, lambda owner: (str(path), owner, seconds), processes, seconds
        )
    finally:
        for name in (path, Path(f"{path}-journal")):
            name.unlink(missing_ok=True)
    return _totals(processes, seconds, reports)


def fleet_window(
    processes: int, seconds: float, reports: list[dict[str, Any]]
) -> tuple[dict[str, Any], float]:
    """What every fleet's totals start with (how many processes, how many reported, the
    longest window) and that window in seconds: the rates are over it."""
    window = max((float(report.get("seconds", 0.0)) for report in reports), default=seconds)
    return {"processes": processes, "reported": len(reports), "seconds": round(window, 3)}, window


def _totals(processes: int, seconds: float, reports: list[dict[str, Any]]) -> dict[str, Any]:
    cycles = [int(report["cycles"]) for report in reports]
    common, window = fleet_window(processes, seconds, reports)
    return {
        **common,
        "cycles": sum(cycles),
        "cycles_per_s": round(sum(cycles) / window, 1) if window > 0 else 0.0,
        "per_process_min": min(cycles, default=0),
        "per_process_max": max(cycles, default=0),
        "locked": sum(int(report["locked"]) for report in reports),
        "stale": sum(int(report["stale"]) for report in reports),
        "idle": sum(int(report["idle"]) for report in reports),
        "errors": [report["error"] for report in reports if "error" in report],
    }
