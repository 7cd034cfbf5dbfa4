"""Queue states where claim's cost could grow with the file, each timed small and large.

None is one of the latency shapes (``bench.rows``); each is a state a real queue
reaches, and each pairs a small case with a large one so that any growth shows:

- ``waiting-retries``: ``WAITING_HEAD`` (100) jobs waiting for a retry (claimed, then
  finished ``retry`` with a 30 s backoff) hold the lowest seqs, and a backlog of fresh
  due jobs follows them (an outage made the oldest jobs retry later while new work piled
  up). Retried and fresh pending rows have indexes of their own.
- ``future-fresh``: 100 fresh jobs enqueued by a producer whose clock runs 30 s ahead
  (or scheduled with a ``now_ms`` from the future) hold the lowest seqs, and the due
  backlog follows: claim must search past a waiting head.
- ``retries-behind-retries``: the same in the retried queue. 100 retries waiting 30 s
  hold the lowest seqs, and a backlog of retries due now follows (older jobs given
  longer backoffs than younger ones).
- ``ahead-and-due``: as many jobs enqueued 30 s ahead as there are due jobs behind
  them, both growing.
- ``last-attempt-leases``: many jobs are leased on their last attempt
  (``max_attempts=1``, so every leased job), and a backlog of due jobs waits: the
  quarantine of spent budgets must not read the live leases.
- ``expired-leases``: a courier died holding many leases (claimed in batches, leases of
  1 ms), and a backlog of fresh due jobs follows. The expired leases hold the lowest
  seqs, so the claims take them first.

Each state is built through worker.py's public calls, or with direct SQL on the
contract's schema (``bench.rows``). Each case is timed as ``bench.latency`` times a
cycle: claim then finish ``ok``, p50 over ``cycles`` cycles under ``synchronous=FULL``
and, for the statements' own cost, with ``synchronous=OFF`` (not durable; analysis
only). Between the two, ``BATCHES`` batches of ``BATCH_SIZE`` (``claim_many`` then
``finish_many``, under FULL) show what the state costs a batch: the median batch, in ms.

Run alone, it prints each case's small and large size side by side, with the ratio
large/small of the claim+finish p50 (with and without syncs) and of the batch (one
run, one folder)::

    python -m bench.slowpaths                          # every case, as make bench runs it
    python -m bench.slowpaths --case expired-leases    # one case (repeat --case for more)
    python -m bench.slowpaths --cycles 30 --scale 0.1  # shorter, smaller
"""

from __future__ import annotations

import argparse
import sqlite3
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import worker
from bench.measure import T0_MS, percentile
from bench.rows import DUE_SINCE_MS, fill_pending

__all__ = ["CASES", "measure_slowpaths"]

WAITING_HEAD = 100
BATCHES = 9  # the median of 9: one batch is a few ms, and one slow sync moves it
BATCH_SIZE = 64
LEASE_MS = 60_000
BACKOFF_MS = 30_000
# (case, size of what grows, small and large)
CASES: tuple[tuple[str, str, tuple[int, int]], ...] = (
    ("waiting-retries", "due jobs behind 100 waiting retries", (1_000, 100_000)),
    ("future-fresh", "due jobs behind 100 jobs enqueued 30 s ahead", (1_000, 100_000)),
    ("retries-behind-retries", "due retries behind 100 waiting retries", (1_000, 100_000)),
    ("ahead-and-due", "jobs enqueued 30 s ahead, and as many due jobs behind", (1_000, 100_000)),
    ("last-attempt-leases", "jobs leased on their last attempt", (0, 20_000)),
    ("expired-leases", "expired leases of a courier that died", (1_000, 100_000)),
)


def _build(con: sqlite3.Connection, case: str, size: int, consumed: int) -> None:
    """Fill ``con`` with the state of ``case`` at ``size`` (and ``consumed`` more due
    jobs in ``last-attempt-leases``, whose size counts leases)."""
    if case in ("waiting-retries", "retries-behind-retries"):
        fill_pending(con, WAITING_HEAD, T0_MS, prefix="wait-", ttl_ms=DUE_SINCE_MS + 120_000)
        _retry_all(con, WAITING_HEAD, BACKOFF_MS)
        fill_pending(con, size, T0_MS, prefix="due-")
        if case == "retries-behind-retries":
            _retry_all(con, size, 0)
        return
    if case in ("future-fresh", "ahead-and-due"):
        _enqueue_ahead(con, WAITING_HEAD if case == "future-fresh" else size)
        fill_pending(con, size, T0_MS, prefix="due-")
        return
    if case == "expired-leases":
        fill_pending(con, size, T0_MS, prefix="due-lost-")  # "due-": claimable again
        _lease_all(con, size, "died", lease_ms=1)
        fill_pending(con, size, T0_MS, prefix="due-")
        return
    fill_pending(con, size + consumed, T0_MS, prefix="due-")
    with con:
        con.execute("BEGIN IMMEDIATE")
        con.execute("UPDATE jobs SET max_attempts = 1")
    _lease_all(con, size, "holder", LEASE_MS)


def _lease_all(
    con: sqlite3.Connection, count: int, owner: str, lease_ms: int
) -> list[dict[str, Any]]:
    """Lease the ``count`` oldest due jobs to ``owner`` at ``T0_MS``, in batches; the tickets."""
    tickets: list[dict[str, Any]] = []
    for first in range(0, count, worker.MAX_BATCH):
        limit = min(worker.MAX_BATCH, count - first)
        batch = worker.claim_many(con, owner, T0_MS, limit, lease_ms)
        if len(batch) != limit:
            raise RuntimeError(f"expected {limit} jobs to lease, the queue had fewer")
        tickets += batch
    return tickets


def _enqueue_ahead(con: sqlite3.Connection, count: int) -> None:
    """Enqueue ``count`` fresh jobs with a clock 30 s ahead: pending, not yet due."""
    for first in range(0, count, worker.MAX_BATCH):
        events = [
            {"id": f"ahead-{first + i}", "qty": 1}
            for i in range(min(worker.MAX_BATCH, count - first))
        ]
        worker.enqueue_many(con, events, T0_MS + BACKOFF_MS, 60_000)


def _retry_all(con: sqlite3.Connection, count: int, delay_ms: int) -> None:
    """Claim the ``count`` oldest due jobs, then finish each ``retry`` after ``delay_ms``
    (all claimed first: a retry due at once would be claimed again)."""
    tickets = _lease_all(con, count, "holder", LEASE_MS)
    for first in range(0, count, worker.MAX_BATCH):
        batch = tickets[first : first + worker.MAX_BATCH]
        retries = [{"ticket": t, "outcome": "retry", "delay_ms": delay_ms} for t in batch]
        if worker.finish_many(con, retries, T0_MS) != ["pending"] * len(batch):
            raise RuntimeError("the retried jobs were not all put back as pending")


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


def _batches(con: sqlite3.Connection, first: int) -> list[float]:
    """Time ``BATCHES`` claim_many+finish_many batches of ``BATCH_SIZE`` (ms), each checked."""
    samples = []
    for i in range(first, first + BATCHES):
        now = T0_MS + 1 + 2 * i
        start = time.perf_counter()
        tickets = worker.claim_many(con, "slowpath", now, BATCH_SIZE, LEASE_MS)
        results = [{"ticket": t, "outcome": "ok", "delay_ms": 0} for t in tickets]
        statuses = worker.finish_many(con, results, now + 1)
        samples.append((time.perf_counter() - start) * 1000)
        due = [t["id"].startswith("due-") for t in tickets]
        if due != [True] * BATCH_SIZE or statuses != ["done"] * BATCH_SIZE:
            raise RuntimeError(f"batch {i}: {BATCH_SIZE} due jobs expected, got {tickets!r}")
    return samples


def measure_slowpaths(
    folder: Path, cycles: int, scale: float = 1.0, cases: Sequence[str] = ()
) -> list[dict[str, Any]]:
    """p50 of claim+finish for each case (of ``cases``; all when empty) at its small and
    its large size (times ``scale``), and the median batch."""
    results = []
    consumed = 2 * cycles + BATCHES * BATCH_SIZE  # due jobs the timed work takes
    for case, what, sizes in CASES:
        if cases and case not in cases:
            continue
        for size in (int(size * scale) for size in sizes):
            if case != "last-attempt-leases":
                size = max(size, consumed)
            path = folder / f"slowpath-{case}-{size}.sqlite"
            con = worker.open_queue(path)
            try:
                _build(con, case, size, consumed)
                full = _cycles(con, 0, cycles)
                batches = _batches(con, cycles)
                con.execute("PRAGMA synchronous=OFF")
                off = _cycles(con, cycles + BATCHES, cycles)
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
                    "batch_size": BATCH_SIZE,
                    "batch_p50_ms": round(percentile(batches, 50), 2),
                }
            )
    return results


def side_by_side(results: Sequence[dict[str, Any]]) -> list[str]:
    """Each case's small and large size on one line, with the ratios large/small (the
    p50 with no sync is the statements' own cost, which a busy disk does not blur)."""
    lines = [
        "| case | sizes | claim+finish p50 ms | ratio | with no sync | ratio"
        " | batch of 64 ms | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for case, _, _ in CASES:
        sizes = [entry for entry in results if entry["case"] == case]
        if not sizes:
            continue
        small, large = sizes[0], sizes[-1]
        lines.append(
            f"| `{case}` | {small['size']:,} / {large['size']:,}"
            f" | {small['p50_ms']:.2f} / {large['p50_ms']:.2f}"
            f" | {large['p50_ms'] / small['p50_ms']:.2f}x"
            f" | {small['off_p50_ms']:.3f} / {large['off_p50_ms']:.3f}"
            f" | {large['off_p50_ms'] / small['off_p50_ms']:.2f}x"
            f" | {small['batch_p50_ms']:.1f} / {large['batch_p50_ms']:.1f}"
            f" | {large['batch_p50_ms'] / small['batch_p50_ms']:.2f}x |"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    names = [case for case, _, _ in CASES]
    parser.add_argument("--case", action="append", choices=names, default=[])
    parser.add_argument("--cycles", type=int, default=100, help="timed cycles per file")
    parser.add_argument("--scale", type=float, default=1.0, help="sizes times this")
    parser.add_argument("--dir", type=Path, default=None, help="folder for the files (not tmpfs)")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="slowpaths-", dir=args.dir) as folder:
        results = measure_slowpaths(Path(folder), args.cycles, args.scale, args.case)
    print("\n".join(side_by_side(results)))


if __name__ == "__main__":
    main()
