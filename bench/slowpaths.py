"""Queue states where claim's cost could grow with the file, each timed small and large.

None is one of the issue's latency shapes (``bench.rows``); each is a state a real queue
reaches, and each pairs a small case with a large one so that any growth shows:

- ``waiting-retries``: ``WAITING_HEAD`` (100) jobs waiting for a retry (claimed, then
  finished ``retry`` with a 30 s backoff) hold the lowest seqs, and a backlog of fresh
  due jobs follows them (an outage made the oldest jobs retry later while new work piled
  up). Retried and fresh pending rows live in separate indexes, and each queue's first
  due row is found among its 64 oldest: flat.
- ``future-fresh``: 100 fresh jobs enqueued by a producer whose clock runs 30 s ahead
  hold the lowest seqs, and the due backlog follows. None of the 64 oldest fresh rows is
  due, so ``_SELECT_CLAIMABLE`` takes ``min(+seq)`` over *every* due fresh row through
  the ``available_at`` index: a claim costs in proportion to the due backlog. The
  contract's clocks share one time base, so this needs a producer with a skewed clock
  (or ``now_ms`` values from the future); it is the known remaining growth.
- ``last-attempt-leases``: many jobs are leased on their last attempt
  (``max_attempts=1``, so every leased job), and a backlog of due jobs waits.
  ``_QUARANTINE_EXHAUSTED_LEASED`` searches expired leases by time only: flat.

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
from bench.rows import DUE_SINCE_MS, fill_pending

__all__ = ["CASES", "measure_slowpaths"]

WAITING_HEAD = 100
LEASE_MS = 60_000
BACKOFF_MS = 30_000
# (case, size of what grows, small and large)
CASES: tuple[tuple[str, str, tuple[int, int]], ...] = (
    ("waiting-retries", "due jobs behind 100 waiting retries", (1_000, 100_000)),
    ("future-fresh", "due jobs behind 100 jobs enqueued 30 s ahead", (1_000, 100_000)),
    ("last-attempt-leases", "jobs leased on their last attempt", (0, 20_000)),
)


def _build(con: sqlite3.Connection, case: str, size: int, cycles: int) -> None:
    """Fill ``con`` with the state of ``case`` at ``size``."""
    if case == "waiting-retries":
        fill_pending(con, WAITING_HEAD, T0_MS, prefix="wait-", ttl_ms=DUE_SINCE_MS + 120_000)
        tickets = worker.claim_many(con, "holder", T0_MS, WAITING_HEAD, LEASE_MS)
        retries = [{"ticket": t, "outcome": "retry", "delay_ms": BACKOFF_MS} for t in tickets]
        if worker.finish_many(con, retries, T0_MS) != ["pending"] * WAITING_HEAD:
            raise RuntimeError("the waiting retries were not all put back as pending")
        fill_pending(con, size, T0_MS, prefix="due-")
        return
    if case == "future-fresh":
        events = [{"id": f"ahead-{i}", "qty": 1} for i in range(WAITING_HEAD)]
        worker.enqueue_many(con, events, T0_MS + BACKOFF_MS, 60_000)
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
            if case != "last-attempt-leases":
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
