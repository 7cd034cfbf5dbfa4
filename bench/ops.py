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
from typing import Any, Protocol, TypeVar

import worker
from bench.measure import T0_MS, Timed, run_counted
from bench.rows import fill

__all__ = [
    "CYCLE_T0_MS",
    "LEASE_MS",
    "OWNER",
    "PHASES",
    "TTL_MS",
    "SingleCalls",
    "Steps",
    "batch_available",
    "event",
    "run_phases",
    "worker_batch",
    "worker_single",
]

OWNER = "bench"
TTL_MS = 60_000
LEASE_MS = 60_000
CYCLE_T0_MS = T0_MS + 10  # the cycles' "now": after the phases before them
PHASES = ("enqueue", "claim", "finish", "cycle")


def batch_available() -> bool:
    """True if this worker.py has the batch calls of docs/batches.md."""
    return all(hasattr(worker, name) for name in ("enqueue_many", "claim_many", "finish_many"))


def event(i: int) -> dict[str, Any]:
    """The ``i``-th new job of a phase: id ``job-%08d`` and a qty of 1-1000."""
    return {"id": f"job-{i:08d}", "qty": 1 + i % 1000}


def _expect(what: str, got: object, expected: object) -> None:
    if got != expected:
        raise RuntimeError(f"{what}: expected {expected!r}, got {got!r}")


class Phase(Protocol):
    """What ``run_phases`` reads of a phase's figure: the jobs it really handled."""

    @property
    def count(self) -> int: ...


class Steps(Protocol):
    """One step of each phase, ``step(i) -> jobs``, on one queue file, result checked."""

    def enqueue(self, i: int) -> int: ...
    def claim(self, i: int) -> int: ...
    def finish(self, i: int) -> int: ...
    def fill_for_cycle(self, count: int) -> None: ...
    def cycle(self, i: int) -> int: ...


FigureT = TypeVar("FigureT", bound=Phase)


def run_phases(
    steps: Steps, count: int, timer: Callable[[str, Callable[[int], int], int], FigureT]
) -> dict[str, FigureT]:
    """Time the phases in ``PHASES`` order, ``timer(phase, step, n)`` each.

    Each phase runs as many steps as the one before it really did (a loop bounded in
    time may stop early): a claim per enqueued job, a finish per ticket; then
    ``fill_for_cycle`` adds ``count`` due jobs, untimed, for the cycles.
    """
    figures = {"enqueue": timer("enqueue", steps.enqueue, count)}
    figures["claim"] = timer("claim", steps.claim, figures["enqueue"].count)
    figures["finish"] = timer("finish", steps.finish, figures["claim"].count)
    steps.fill_for_cycle(count)
    figures["cycle"] = timer("cycle", steps.cycle, count)
    return figures


class SingleCalls:
    """worker.py's single calls as ``Steps``: enqueue the ``i``-th new job, claim the
    oldest, finish the ``i``-th ticket ``ok``; a cycle is a claim and a finish, each
    at its own millisecond."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.tickets: list[dict[str, Any]] = []

    def enqueue(self, i: int) -> int:
        _expect("enqueue", worker.enqueue(self.con, event(i), T0_MS, TTL_MS), True)
        return 1

    def claim(self, _: int) -> int:
        ticket = worker.claim(self.con, OWNER, T0_MS + 1, LEASE_MS)
        if ticket is None:
            raise RuntimeError("claim found no job")
        self.tickets.append(ticket)
        return 1

    def finish(self, i: int) -> int:
        _expect("finish", worker.finish(self.con, self.tickets[i], "ok", T0_MS + 2), "done")
        return 1

    def fill_for_cycle(self, count: int) -> None:
        fill(self.con, count, CYCLE_T0_MS, prefix="cycle-")

    def cycle(self, i: int) -> int:
        now = CYCLE_T0_MS + 2 * i
        ticket = worker.claim(self.con, OWNER, now, LEASE_MS)
        if ticket is None:
            raise RuntimeError("claim found no job")
        _expect("finish", worker.finish(self.con, ticket, "ok", now + 1), "done")
        return 1


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
    try:
        return run_phases(
            SingleCalls(con), count, lambda _, step, n: run_counted(step, n, max_seconds)
        )
    finally:
        con.close()


def worker_batch(path: Path, batches: int, size: int, max_seconds: float) -> dict[str, Timed]:
    """Time ``batches`` calls of each batch operation with ``size`` jobs per call."""
    con = worker.open_queue(path)
    tickets: list[dict[str, Any]] = []
    try:

        def enqueue_many(b: int) -> int:
            events = [event(b * size + k) for k in range(size)]
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
        fill(con, batches * size, CYCLE_T0_MS, prefix="cycle-")
        figures["cycle"] = run_counted(_batch_cycle(con, size), batches, max_seconds)
        return figures
    finally:
        con.close()


def _batch_cycle(con: sqlite3.Connection, size: int) -> Callable[[int], int]:
    """One claim_many and one finish_many of ``size`` jobs per step."""

    def cycle(i: int) -> int:
        now = CYCLE_T0_MS + 2 * i
        tickets = worker.claim_many(con, OWNER, now, size, LEASE_MS)
        _expect("claim_many tickets", len(tickets), size)
        results = [{"ticket": t, "outcome": "ok", "delay_ms": 0} for t in tickets]
        _expect("finish_many", worker.finish_many(con, results, now + 1), ["done"] * size)
        return size

    return cycle
