"""Throughput of worker.py's calls, single and batched, on one queue file under the contract.

Each phase runs on the connection ``worker.open_queue`` returns (``DELETE`` journal,
``synchronous=FULL``) and checks every result, so a figure never comes from a call
that did not do its work:

- ``enqueue``: new jobs, one call each (``True`` expected);
- ``claim``: those jobs, one lease each (a ticket expected);
- ``finish``: those tickets, ``ok`` (``done`` expected);
- ``cycle``: ``claim`` then ``finish`` of one job, on rows filled beforehand.

With ``without_sync`` the same single calls run with ``synchronous=OFF``: not a mode
of the queue (the contract fixes FULL), only the cost of a call apart from its syncs.

The batch phases do the same with ``enqueue_many``, ``claim_many`` and ``finish_many``
(docs/batches.md), ``size`` jobs per call; their figures are jobs per second. Time is
virtual (``T0_MS``): each phase uses its own fixed "now", so leases and deadlines
never run out mid-phase.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import worker
from bench.measure import T0_MS, Timed, run_counted
from bench.rows import fill_pending

__all__ = ["OWNER", "PHASES", "batch_available", "worker_batch", "worker_single"]

OWNER = "bench"
TTL_MS = 60_000
LEASE_MS = 60_000
PHASES = ("enqueue", "claim", "finish", "cycle")


def batch_available() -> bool:
    """True if this worker.py has the batch calls of docs/batches.md."""
    return all(hasattr(worker, name) for name in ("enqueue_many", "claim_many", "finish_many"))


def _event(i: int) -> dict[str, Any]:
    return {"id": f"job-{i:08d}", "qty": 1 + i % 1000}


def _expect(what: str, got: object, expected: object) -> None:
    if got != expected:
        raise RuntimeError(f"{what}: expected {expected!r}, got {got!r}")


def worker_single(
    path: Path, count: int, max_seconds: float, without_sync: bool = False
) -> dict[str, Timed]:
    """Time ``count`` single enqueue, claim, finish calls and claim+finish cycles.

    ``without_sync`` sets ``PRAGMA synchronous=OFF`` on the connection after
    ``open_queue``: not durable, never the queue's figure, only the analysis of where
    a call's time goes (its cost without the syncs).
    """
    con = worker.open_queue(path)
    if without_sync:
        con.execute("PRAGMA synchronous=OFF")
    tickets: list[dict[str, Any]] = []
    try:

        def enqueue(i: int) -> int:
            _expect("enqueue", worker.enqueue(con, _event(i), T0_MS, TTL_MS), True)
            return 1

        def claim(_: int) -> int:
            ticket = worker.claim(con, OWNER, T0_MS + 1, LEASE_MS)
            if ticket is None:
                raise RuntimeError("claim found no job")
            tickets.append(ticket)
            return 1

        def finish(i: int) -> int:
            _expect("finish", worker.finish(con, tickets[i], "ok", T0_MS + 2), "done")
            return 1

        figures = {"enqueue": run_counted(enqueue, count, max_seconds)}
        figures["claim"] = run_counted(claim, figures["enqueue"].count, max_seconds)
        figures["finish"] = run_counted(finish, len(tickets), max_seconds)
        fill_pending(con, count, T0_MS + 10, prefix="cycle-")
        figures["cycle"] = run_counted(_single_cycle(con), count, max_seconds)
        return figures
    finally:
        con.close()


def _single_cycle(con: sqlite3.Connection) -> Callable[[int], int]:
    """One claim and one finish per step, each at its own millisecond."""

    def cycle(i: int) -> int:
        now = T0_MS + 10 + 2 * i
        ticket = worker.claim(con, OWNER, now, LEASE_MS)
        if ticket is None:
            raise RuntimeError("claim found no job")
        _expect("finish", worker.finish(con, ticket, "ok", now + 1), "done")
        return 1

    return cycle


def worker_batch(path: Path, batches: int, size: int, max_seconds: float) -> dict[str, Timed]:
    """Time ``batches`` calls of each batch operation with ``size`` jobs per call."""
    con = worker.open_queue(path)
    tickets: list[dict[str, Any]] = []
    try:

        def enqueue_many(b: int) -> int:
            events = [_event(b * size + k) for k in range(size)]
            _expect("enqueue_many", worker.enqueue_many(con, events, T0_MS, TTL_MS), [True] * size)
            return size

        def claim_many(_: int) -> int:
            got = worker.claim_many(con, OWNER, T0_MS + 1, size, LEASE_MS)
            _expect("claim_many tickets", len(got), size)
            tickets.extend(got)
            return size

        def finish_many(b: int) -> int:
            chunk = tickets[b * size : (b + 1) * size]
            results = [{"ticket": t, "outcome": "ok", "delay_ms": 0} for t in chunk]
            _expect("finish_many", worker.finish_many(con, results, T0_MS + 2), ["done"] * size)
            return size

        figures = {"enqueue": run_counted(enqueue_many, batches, max_seconds)}
        figures["claim"] = run_counted(claim_many, figures["enqueue"].count // size, max_seconds)
        figures["finish"] = run_counted(finish_many, len(tickets) // size, max_seconds)
        fill_pending(con, batches * size, T0_MS + 10, prefix="cycle-")
        figures["cycle"] = run_counted(_batch_cycle(con, size), batches, max_seconds)
        return figures
    finally:
        con.close()


def _batch_cycle(con: sqlite3.Connection, size: int) -> Callable[[int], int]:
    """One claim_many and one finish_many of ``size`` jobs per step."""

    def cycle(i: int) -> int:
        now = T0_MS + 10 + 2 * i
        tickets = worker.claim_many(con, OWNER, now, size, LEASE_MS)
        _expect("claim_many tickets", len(tickets), size)
        results = [{"ticket": t, "outcome": "ok", "delay_ms": 0} for t in tickets]
        _expect("finish_many", worker.finish_many(con, results, now + 1), ["done"] * size)
        return size

    return cycle
