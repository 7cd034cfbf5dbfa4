"""Two queue states where claim's cost grows with the file, found while building the benchmark.

Neither is one of the issue's latency shapes (``bench.rows``); both are states a real
queue reaches, and each pairs a small case with a large one so that the growth shows:

- ``waiting-head``: ``WAITING_HEAD`` (100) jobs waiting for a retry (not yet available)
  hold the lowest seqs, and a backlog of due jobs follows them (an outage made the
  oldest jobs retry later while new work piled up). ``_SELECT_CLAIMABLE`` looks at the
  64 oldest pending rows first; when none of them is due it takes
  ``min(+seq)`` over *every* due row through the ``available_at`` index, so a claim
  costs in proportion to the due backlog.
- ``last-attempt-leases``: many jobs are leased on their last attempt
  (``max_attempts=1``, so every leased job), and a backlog of due jobs waits.
  ``_QUARANTINE_EXHAUSTED`` reads its partial index of live rows with a spent budget
  in full (the ``OR`` on ``lease_until`` keeps it from a range search), so every claim
  costs in proportion to the leases in flight.

Each case is timed as ``bench.latency`` times a cycle: claim then finish ``ok``, p50
over ``cycles`` cycles under ``synchronous=FULL`` and, for the statements' own cost,
with ``synchronous=OFF`` (not durable; analysis only).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import worker
from bench.measure import T0_MS, percentile
from bench.rows import fill_pending

__all__ = ["CASES", "measure_slowpaths"]

WAITING_HEAD = 100
LEASE_MS = 60_000
# (case, size of what grows, small and large)
CASES: tuple[tuple[str, str, tuple[int, int]], ...] = (
    ("waiting-head", "due jobs behind the waiting head", (1_000, 100_000)),
    ("last-attempt-leases", "jobs leased on their last attempt", (0, 20_000)),
)


def _build(con: sqlite3.Connection, case: str, size: int, cycles: int) -> None:
    """Fill ``con`` with the state of ``case`` at ``size``."""
    if case == "waiting-head":
        fill_pending(con, WAITING_HEAD, T0_MS, prefix="wait-")
        with con:
            con.execute("BEGIN IMMEDIATE")
            con.execute("UPDATE jobs SET available_at = ?", (T0_MS + 30_000,))
        fill_pending(con, size, T0_MS, prefix="due-")
        return
    fill_pending(con, size + cycles, T0_MS, prefix="due-")
    with con:
        con.execute("BEGIN IMMEDIATE")
        con.execute("UPDATE jobs SET max_attempts = 1")
    for _ in range(0, size, worker.MAX_BATCH):
        worker.claim_many(con, "holder", T0_MS, min(worker.MAX_BATCH, size), LEASE_MS)


def _cycles(con: sqlite3.Connection, first: int, cycles: int) -> list[float]:
    """Time ``cycles`` claim+finish cycles (ms), each checked."""
    samples = []
    for i in range(first, first + cycles):
        now = T0_MS + 1 + 2 * i
        start = time.perf_counter()
        ticket = worker.claim(con, "slowpath", now, LEASE_MS)
        status = worker.finish(con, ticket, "ok", now + 1) if ticket else None
        samples.append((time.perf_counter() - start) * 1000)
        if ticket is None or not ticket["id"].startswith("due-") or status != "done":
            raise RuntimeError(f"cycle {i}: a due job expected, got {ticket!r} -> {status!r}")
    return samples


def measure_slowpaths(folder: Path, cycles: int, scale: float = 1.0) -> list[dict[str, Any]]:
    """p50 of claim+finish for each case at its small and its large size (times ``scale``)."""
    results = []
    for case, what, sizes in CASES:
        for size in (int(size * scale) for size in sizes):
            if case == "waiting-head":
                size = max(size, 2 * cycles)
            path = folder / f"slowpath-{case}-{size}.sqlite"
            con = worker.open_queue(path)
            try:
                _build(con, case, size, 2 * cycles)
                full = _cycles(con, 0, cycles)
                con.execute("PRAGMA synchronous=OFF")
                off = _cycles(con, cycles, cycles)
            finally:
                con.close()
                for name in (path, Path(f"{path}-journal")):
                    name.unlink(missing_ok=True)
            results.append(
                {
                    "case": case,
                    "grows_with": what,
                    "size": size,
                    "cycles": cycles,
                    "p50_ms": round(percentile(full, 50), 3),
                    "off_p50_ms": round(percentile(off, 50), 3),
                }
            )
    return results
