"""Queue states where claim's cost could grow with the queue, each timed small and large, on
worker.py or pgworker.py. See docs/benchmarks.md, ``bench.slowpaths``."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from bench import report
from bench.measure import T0_MS, add_record_options, percentile, record_or_render, refuse_unwritable
from bench.ops import Calls, cycle_times
from bench.rows import fill
from bench.server import postgres_server
from tests.stores import Store
from tests.stores.sqlite import SQLiteStore

__all__ = ["CASES", "GOAL_BATCH", "GOAL_CYCLE", "POSTGRES_CASES", "SQLITE_CASES", "record"]

WAITING_HEAD = 100
BATCHES = 9  # the median of 9: one batch is a few ms, and one slow sync moves it
BATCH_SIZE = 64
BACKOFF_MS = 30_000
HISTORY_AGE_MS = 3_600_000
GOAL_CYCLE = 1.3
GOAL_BATCH = 1.5
SIZES = (1_000, 100_000)

# build(module, con, size, consumed): the state at ``size``, where ``consumed`` due jobs
# are what the timed work takes.
Build = Callable[[Any, Any, int, int], None]


def _waiting_retries(con: Any, count: int) -> None:
    fill(con, count, T0_MS, "wait-", attempts=1, reason="retry", since_ms=-BACKOFF_MS)


def _lease_all(module: Any, con: Any, count: int, owner: str, lease_ms: int) -> None:
    """Lease the ``count`` oldest due jobs to ``owner`` at ``T0_MS`` through the calls,
    1,000 a call, as the state arises."""
    for first in range(0, count, 1000):
        limit = min(1000, count - first)
        got = module.claim_many(con, owner, T0_MS, limit, lease_ms)
        if len(got) != limit:
            raise RuntimeError(f"expected {limit} jobs to lease, the queue had fewer")


def _due_retries(_: Any, con: Any, size: int, __: int = 0) -> None:
    fill(con, size, T0_MS, "due-retry-", attempts=1, reason="retry")


def _behind_waiting_retries(_: Any, con: Any, size: int, __: int) -> None:
    _waiting_retries(con, WAITING_HEAD)
    fill(con, size, T0_MS, "due-")


def _retries_behind_retries(module: Any, con: Any, size: int, _: int) -> None:
    _waiting_retries(con, WAITING_HEAD)
    _due_retries(module, con, size)


def _behind_ahead(head: int | None) -> Build:
    def build(_: Any, con: Any, size: int, __: int) -> None:
        fill(con, size if head is None else head, T0_MS, "ahead-", since_ms=-BACKOFF_MS)
        fill(con, size, T0_MS, "due-")

    return build


def _last_attempt_leases(module: Any, con: Any, size: int, consumed: int) -> None:
    fill(con, size + consumed, T0_MS, "due-", max_attempts=1)
    _lease_all(module, con, size, "holder", 60_000)


def _expired_leases(module: Any, con: Any, size: int, _: int) -> None:
    fill(con, size, T0_MS, "due-lost-")  # "due-": claimable again, and taken first
    _lease_all(module, con, size, "died", 1)
    fill(con, size, T0_MS, "due-")


def _history(status: str, attempts: int, reason: str | None) -> Build:
    def build(_: Any, con: Any, size: int, consumed: int) -> None:
        fill(
            con,
            size,
            T0_MS,
            f"{status}-",
            status=status,
            attempts=attempts,
            reason=reason,
            since_ms=HISTORY_AGE_MS,
        )
        fill(con, consumed, T0_MS, "due-")

    return build


# What grows in each state, rendered beside its figures.
GROWS_WITH = {
    "waiting-retries": "due jobs behind 100 waiting retries",
    "future-fresh": "due jobs behind 100 jobs enqueued 30 s ahead",
    "retries-behind-retries": "due retries behind 100 waiting retries",
    "ahead-and-due": "jobs enqueued 30 s ahead, and as many due jobs behind",
    "last-attempt-leases": "jobs leased on their last attempt",
    "expired-leases": "expired leases of a courier that died",
    "due-retries": "retried jobs due now",
    "done-history": "done jobs before the due backlog",
    "dead-history": "dead jobs (budget spent) before the due backlog",
}
# name: (its small and large size, how to build it, whether the claims take what grows,
# so that it is never fewer than they consume)
CASES: dict[str, tuple[tuple[int, int], Build, bool]] = {
    "waiting-retries": (SIZES, _behind_waiting_retries, True),
    "future-fresh": (SIZES, _behind_ahead(WAITING_HEAD), True),
    "retries-behind-retries": (SIZES, _retries_behind_retries, True),
    "ahead-and-due": (SIZES, _behind_ahead(None), True),
    "last-attempt-leases": ((0, 20_000), _last_attempt_leases, False),
    "expired-leases": (SIZES, _expired_leases, True),
    "due-retries": (SIZES, _due_retries, True),
    "done-history": (SIZES, _history("done", 1, None), False),
    "dead-history": (SIZES, _history("dead", 3, "exhausted"), False),
}
SQLITE_CASES = tuple(CASES)[:6]
POSTGRES_CASES = tuple(CASES)[5:]


def _due(taken: list[Any]) -> bool:
    return all(ticket["id"].startswith("due-") for ticket in taken)


def record(store: Store, cases: Sequence[str], cycles: int, scale: float = 1.0) -> dict[str, Any]:
    """p50 of claim+finish for each of ``cases`` at its small and its large size (times
    ``scale``), and the median batch, each in a fresh queue of ``store``; with the
    sizes, the goals and the backend."""
    results = []
    module = store.module()
    consumed = 2 * cycles + BATCHES * BATCH_SIZE  # due jobs the timed work takes
    for case in cases:
        sizes, build, claimed = CASES[case]
        for size in (int(size * scale) for size in sizes):
            size = max(size, consumed) if claimed else size
            with store.queue(f"slowpath-{case}-{size}") as con:
                build(module, con, size, consumed)
                store.settle(con)
                full = cycle_times(Calls(module, con), 0, cycles, _due)
                batches = cycle_times(Calls(module, con, BATCH_SIZE), cycles, BATCHES, _due)
                con.execute(store.unsynced)
                off = cycle_times(Calls(module, con), cycles + BATCHES, cycles, _due)
            results.append(
                {
                    "case": case,
                    "grows_with": GROWS_WITH[case],
                    "size": size,
                    "p50_ms": round(percentile(full, 50), 3),
                    "off_p50_ms": round(percentile(off, 50), 3),
                    "batch_p50_ms": round(percentile(batches, 50), 2),
                }
            )
    goals = {"cycle": GOAL_CYCLE, "batch": GOAL_BATCH}
    return {"backend": store.name, "cycles": cycles, "goals": goals, "results": results}


@contextlib.contextmanager
def _store(kind: str, folder: Path) -> Iterator[Store]:
    if kind == "sqlite":
        yield SQLiteStore(str(folder))
        return
    with postgres_server(folder) as server:
        yield server.store()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.slowpaths", description=__doc__.split("\n")[0]
    )
    add_record_options(parser, page=None)
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--case", action="append", choices=list(CASES), default=[])
    parser.add_argument("--cycles", type=int, default=100, help="timed cycles per queue")
    parser.add_argument("--scale", type=float, default=1.0, help="sizes times this")
    args = parser.parse_args(argv)
    refuse_unwritable(parser, args, page=None)
    cases = args.case or (SQLITE_CASES if args.backend == "sqlite" else POSTGRES_CASES)
    cycles, scale = (3, 0.01) if args.quick else (args.cycles, args.scale)

    def measured(work: Path) -> dict[str, Any]:
        with _store(args.backend, work) as store:
            return record(store, cases, cycles, scale)

    print(report.slow_states(record_or_render(args, argv, "bench.slowpaths", measured)), end="")


if __name__ == "__main__":
    main()
