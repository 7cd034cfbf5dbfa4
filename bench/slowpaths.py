"""Queue states where claim's cost could grow with the file, each timed small and large.

None is one of the issue's latency shapes (``bench.rows``); each is a state a real queue
reaches, and each pairs a small case with a large one so that any growth shows:

- ``waiting-retries``: ``WAITING_HEAD`` (100) jobs waiting for a retry (claimed, then
  finished ``retry`` with a 30 s backoff) hold the lowest seqs, and a backlog of fresh
  due jobs follows them (an outage made the oldest jobs retry later while new work piled
  up). Retried and fresh pending rows live in separate indexes, and the fresh queue's
  first due row is among its 64 oldest: flat.
- ``future-fresh``: 100 fresh jobs enqueued by a producer whose clock runs 30 s ahead
  (or scheduled with a ``now_ms`` from the future) hold the lowest seqs, and the due
  backlog follows. None of the 64 oldest fresh rows is due, so ``worker._lowest_due``
  searches further, on windows that grow fourfold: it stops at the first due row
  (seq 101), long before reading the due backlog.
- ``retries-behind-retries``: the same in the retried queue. 100 retries waiting 30 s
  hold the lowest seqs, and a backlog of retries due now follows (older jobs given
  longer backoffs than younger ones).
- ``ahead-and-due``: the state that still grows. As many jobs enqueued 30 s ahead as
  there are due jobs behind them: ``_lowest_due`` reads about as many index entries as
  the smaller of the two runs (here both grow), so a claim costs in proportion to it.
- ``last-attempt-leases``: many jobs are leased on their last attempt
  (``max_attempts=1``, so every leased job), and a backlog of due jobs waits.
  ``_QUARANTINE_EXHAUSTED_LEASED`` searches expired leases by time only: flat.
- ``expired-leases``: a courier died holding many leases (claimed in batches, leases of
  1 ms), and a backlog of fresh due jobs follows. The expired leases hold the lowest
  seqs, so the claims take them first; every claim reads every expired lease twice
  (``_QUARANTINE_EXHAUSTED_LEASED`` and the oldest expired lease in
  ``_SELECT_CLAIMABLE``, both through ``jobs_leased_by_lease_until``): it grows.

``measure_deep_search`` times the search itself, ``worker._lowest_due``, on a grid of
waiting heads and due backlogs, beside the one-pass search it replaced
(``ONE_PASS_BY_TIME``: ``min(+seq)`` over every due row through the ``available_at``
index), and checks that both find the same row.

Each case is timed as ``bench.latency`` times a cycle: claim then finish ``ok``, p50
over ``cycles`` cycles under ``synchronous=FULL`` and, for the statements' own cost,
with ``synchronous=OFF`` (not durable; analysis only). Between the two, ``BATCHES``
batches of ``BATCH_SIZE`` (``claim_many`` then ``finish_many``, under FULL) show what
the state costs a batch: the median batch, in ms.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any

import worker
from bench.measure import T0_MS, percentile
from bench.rows import DUE_SINCE_MS, fill_pending

__all__ = ["CASES", "DEEP_GRID", "ONE_PASS_BY_TIME", "measure_deep_search", "measure_slowpaths"]

WAITING_HEAD = 100
BATCHES = 3
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
# (jobs enqueued 30 s ahead, due jobs behind them)
DEEP_GRID: tuple[tuple[int, int], ...] = (
    (100, 100_000),
    (1_000, 100_000),
    (10_000, 100_000),
    (30_000, 100_000),
    (100_000, 100_000),
    (100_000, 1_000),
)
# Before _lowest_due, claim searched every due fresh row by time once the 64 oldest
# were all waiting: cost in proportion to the due rows, whatever the head.
ONE_PASS_BY_TIME = """SELECT min(+seq) FROM jobs
  WHERE status = 'pending' AND attempts = 0 AND available_at <= :now"""


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


def measure_slowpaths(folder: Path, cycles: int, scale: float = 1.0) -> list[dict[str, Any]]:
    """p50 of claim+finish for each case at its small and its large size (times ``scale``),
    and the median batch."""
    results = []
    consumed = 2 * cycles + BATCHES * BATCH_SIZE  # due jobs the timed work takes
    for case, what, sizes in CASES:
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


def _best_ms(search: Callable[[], object], repeats: int) -> tuple[float, object]:
    """The fastest of ``repeats`` runs of ``search`` (ms) and what it found."""
    best, found = math.inf, None
    for _ in range(repeats):
        start = time.perf_counter()
        found = search()
        best = min(best, (time.perf_counter() - start) * 1000)
    return best, found


def _deep_search(con: sqlite3.Connection) -> object:
    start = worker._nothing_known()["fresh"]
    return worker._lowest_due(con, "fresh", T0_MS + 1, worker._CLAIM_HEAD_WINDOW, start)


def _one_pass(con: sqlite3.Connection) -> object:
    return con.execute(ONE_PASS_BY_TIME, {"now": T0_MS + 1}).fetchone()[0]


def measure_deep_search(folder: Path, scale: float = 1.0, repeats: int = 5) -> list[dict[str, Any]]:
    """``worker._lowest_due`` against ``ONE_PASS_BY_TIME`` on each state of ``DEEP_GRID``
    (sizes times ``scale``): the best of ``repeats`` runs of each, read-only."""
    results = []
    for ahead, due in DEEP_GRID:
        ahead, due = max(int(ahead * scale), 65), max(int(due * scale), 1)
        path = folder / f"deep-search-{ahead}-{due}.sqlite"
        con = worker.open_queue(path)
        try:
            _enqueue_ahead(con, ahead)
            fill_pending(con, due, T0_MS, prefix="due-")
            deep_ms, deep = _best_ms(partial(_deep_search, con), repeats)
            one_ms, one = _best_ms(partial(_one_pass, con), repeats)
        finally:
            con.close()
            for name in (path, Path(f"{path}-journal")):
                name.unlink(missing_ok=True)
        if deep != one or deep != ahead + 1:
            raise RuntimeError(f"ahead {ahead}, due {due}: found {deep} and {one}, not {ahead + 1}")
        results.append(
            {
                "ahead": ahead,
                "due": due,
                "lowest_due_ms": round(deep_ms, 3),
                "one_pass_ms": round(one_ms, 3),
            }
        )
    return results
