"""Queue states where claim's cost could grow with the queue, each timed small and large,
on worker.py or pgworker.py.

None is one of the latency shapes (``bench.rows``); each is a state a real queue
reaches, and each pairs a small case with a large one so that any growth shows:

- ``waiting-retries``: ``WAITING_HEAD`` (100) jobs waiting for a retry (retried with a
  30 s backoff) hold the lowest seqs, and a backlog of fresh due jobs follows them (an
  outage made the oldest jobs retry later while new work piled up). Retried and fresh
  pending rows have indexes of their own.
- ``future-fresh``: 100 fresh jobs enqueued by a producer whose clock runs 30 s ahead
  (or scheduled with a ``now_ms`` from the future) hold the lowest seqs, and the due
  backlog follows: claim must search past a waiting head.
- ``retries-behind-retries``: the same in the retried queue. 100 retries waiting 30 s
  hold the lowest seqs, and a backlog of retries due now follows (older jobs given
  longer backoffs than younger ones).
- ``ahead-and-due``: as many jobs enqueued 30 s ahead as there are due jobs behind
  them, both growing.
- ``last-attempt-leases``: many jobs are leased on their last attempt
  (``max_attempts=1``), and a backlog of due jobs waits: the quarantine of spent
  budgets must not read the live leases.
- ``expired-leases``: a courier died holding many leases (claimed, leases of 1 ms),
  and a backlog of fresh due jobs follows. The expired leases hold the lowest seqs,
  so the claims take them first.
- ``due-retries``: every job was retried once and is due again now.
- ``done-history`` and ``dead-history``: a history of done (or dead, budget spent)
  jobs, and a due backlog behind it.

``make bench`` runs the first six on SQLite (``SQLITE_CASES``); ``make
bench-postgres`` runs the last four (``POSTGRES_CASES``, issue 26's states) on
PostgreSQL, each at 1,000 and 100,000. Each state is built in a fresh queue (a
file, or a database): leases through ``claim_many`` (1,000 a call), as a crash
leaves them, and every other row with direct SQL on the contract's schema
(``bench.rows.fill``: rows the calls could have produced; 100,000 through the calls
would take minutes); then PostgreSQL's statistics are brought up to date
(``ANALYZE``, as autovacuum does). Each case is timed as ``bench.latency`` times a
cycle: claim then finish ``ok``, p50 over ``cycles`` cycles under the backend's
durable settings and, for the statements' own cost, without waiting for the disk
(``synchronous=OFF``, ``synchronous_commit=off``: not durable; analysis only). Between the two,
``BATCHES`` batches of ``BATCH_SIZE`` (``claim_many`` then ``finish_many``, durable)
show what the state costs a batch: the median batch, in ms. Every claimed job is
checked to be one of the due jobs the state holds.

The goals (issue 26): the large size's p50 of claim+finish within ``GOAL_CYCLE``
(1.3x) of the small size's, and the median batch within ``GOAL_BATCH`` (1.5x). Run
alone, it prints each case's two sizes side by side with both ratios, their goals and
whether each is met (one run, one folder)::

    python -m bench.slowpaths                                   # SQLite, as make bench runs it
    python -m bench.slowpaths --backend postgres                # as make bench-postgres runs it
    python -m bench.slowpaths --backend postgres --case expired-leases --cycles 30
    python -m bench.slowpaths --cycles 30 --scale 0.1           # shorter, smaller
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.backends import Queues, Sqlite, postgres_server
from bench.measure import T0_MS, percentile
from bench.rows import fill

__all__ = [
    "CASES",
    "GOAL_BATCH",
    "GOAL_CYCLE",
    "POSTGRES_CASES",
    "SQLITE_CASES",
    "Case",
    "measure",
    "ratios",
    "side_by_side",
]

WAITING_HEAD = 100
BATCHES = 9  # the median of 9: one batch is a few ms, and one slow sync moves it
BATCH_SIZE = 64
LEASE_MS = 60_000
BACKOFF_MS = 30_000
HISTORY_AGE_MS = 3_600_000
GOAL_CYCLE = 1.3
GOAL_BATCH = 1.5

Build = Callable[[Any, Any, int, int], None]


@dataclass(frozen=True)
class Case:
    """A state, the sizes of what grows in it, and how to build it: ``build(module, con,
    size, consumed)``, where ``consumed`` due jobs are what the timed work takes."""

    name: str
    grows_with: str
    sizes: tuple[int, int]
    build: Build
    claimed: bool = True  # the claims take what grows: never fewer than they consume


def _waiting_retries(con: Any, count: int) -> None:
    fill(con, count, T0_MS, "wait-", attempts=1, reason="retry", since_ms=-BACKOFF_MS)


def _due_retries(_: Any, con: Any, size: int, __: int = 0) -> None:
    fill(con, size, T0_MS, "due-retry-", attempts=1, reason="retry")


def _behind_waiting_retries(_: Any, con: Any, size: int, __: int) -> None:
    _waiting_retries(con, WAITING_HEAD)
    fill(con, size, T0_MS, "due-")


def _retries_behind_retries(module: Any, con: Any, size: int, consumed: int) -> None:
    _waiting_retries(con, WAITING_HEAD)
    _due_retries(module, con, size)


def _behind_ahead(head: int | None) -> Build:
    def build(_: Any, con: Any, size: int, __: int) -> None:
        fill(con, size if head is None else head, T0_MS, "ahead-", since_ms=-BACKOFF_MS)
        fill(con, size, T0_MS, "due-")

    return build


def _lease_all(module: Any, con: Any, count: int, owner: str, lease_ms: int) -> list[Any]:
    """Lease the ``count`` oldest due jobs to ``owner`` at ``T0_MS`` through the calls,
    in batches, as the state arises; the tickets."""
    tickets: list[Any] = []
    while len(tickets) < count:
        limit = min(module.MAX_BATCH, count - len(tickets))
        batch = module.claim_many(con, owner, T0_MS, limit, lease_ms)
        if len(batch) != limit:
            raise RuntimeError(f"expected {limit} jobs to lease, the queue had fewer")
        tickets += batch
    return tickets


def _last_attempt_leases(module: Any, con: Any, size: int, consumed: int) -> None:
    fill(con, size + consumed, T0_MS, "due-", max_attempts=1)
    _lease_all(module, con, size, "holder", LEASE_MS)


def _expired_leases(module: Any, con: Any, size: int, _: int) -> None:
    fill(con, size, T0_MS, "due-lost-")  # "due-": claimable again, and taken first
    _lease_all(module, con, size, "died", 1)
    fill(con, size, T0_MS, "due-")


def _history(status: str, attempts: int, reason: str | None) -> Build:
    def build(_: Any, con: Any, size: int, consumed: int) -> None:
        old = HISTORY_AGE_MS
        fill(
            con,
            size,
            T0_MS,
            f"{status}-",
            status=status,
            attempts=attempts,
            reason=reason,
            since_ms=old,
        )
        fill(con, consumed, T0_MS, "due-")

    return build


CASES: dict[str, Case] = {
    case.name: case
    for case in (
        Case(
            "waiting-retries",
            "due jobs behind 100 waiting retries",
            (1_000, 100_000),
            _behind_waiting_retries,
        ),
        Case(
            "future-fresh",
            "due jobs behind 100 jobs enqueued 30 s ahead",
            (1_000, 100_000),
            _behind_ahead(WAITING_HEAD),
        ),
        Case(
            "retries-behind-retries",
            "due retries behind 100 waiting retries",
            (1_000, 100_000),
            _retries_behind_retries,
        ),
        Case(
            "ahead-and-due",
            "jobs enqueued 30 s ahead, and as many due jobs behind",
            (1_000, 100_000),
            _behind_ahead(None),
        ),
        Case(
            "last-attempt-leases",
            "jobs leased on their last attempt",
            (0, 20_000),
            _last_attempt_leases,
            claimed=False,
        ),
        Case(
            "expired-leases",
            "expired leases of a courier that died",
            (1_000, 100_000),
            _expired_leases,
        ),
        Case("due-retries", "retried jobs due now", (1_000, 100_000), _due_retries),
        Case(
            "done-history",
            "done jobs before the due backlog",
            (1_000, 100_000),
            _history("done", 1, None),
            claimed=False,
        ),
        Case(
            "dead-history",
            "dead jobs (budget spent) before the due backlog",
            (1_000, 100_000),
            _history("dead", 3, "exhausted"),
            claimed=False,
        ),
    )
}
SQLITE_CASES = tuple(CASES)[:6]
POSTGRES_CASES = ("expired-leases", "due-retries", "done-history", "dead-history")


def _cycles(module: Any, con: Any, first: int, cycles: int) -> list[float]:
    """Time ``cycles`` claim+finish cycles (ms), each checked."""
    samples = []
    for i in range(first, first + cycles):
        now = T0_MS + 1 + 2 * i
        start = time.perf_counter()
        ticket = module.claim(con, "slowpath", now, LEASE_MS)
        status = module.finish(con, ticket, "ok", now + 1) if ticket else None
        samples.append((time.perf_counter() - start) * 1000)
        if ticket is None or not ticket["id"].startswith("due-") or status != "done":
            raise RuntimeError(f"cycle {i}: a due job expected, got {ticket!r} -> {status!r}")
    return samples


def _batches(module: Any, con: Any, first: int) -> list[float]:
    """Time ``BATCHES`` claim_many+finish_many batches of ``BATCH_SIZE`` (ms), each checked."""
    samples = []
    for i in range(first, first + BATCHES):
        now = T0_MS + 1 + 2 * i
        start = time.perf_counter()
        tickets = module.claim_many(con, "slowpath", now, BATCH_SIZE, LEASE_MS)
        results = [{"ticket": t, "outcome": "ok", "delay_ms": 0} for t in tickets]
        statuses = module.finish_many(con, results, now + 1)
        samples.append((time.perf_counter() - start) * 1000)
        due = [t["id"].startswith("due-") for t in tickets]
        if due != [True] * BATCH_SIZE or statuses != ["done"] * BATCH_SIZE:
            raise RuntimeError(f"batch {i}: {BATCH_SIZE} due jobs expected, got {tickets!r}")
    return samples


def measure(
    queues: Queues, cases: Sequence[str], cycles: int, scale: float = 1.0
) -> list[dict[str, Any]]:
    """p50 of claim+finish for each of ``cases`` at its small and its large size (times
    ``scale``), and the median batch, each in a fresh queue of ``queues``."""
    results = []
    consumed = 2 * cycles + BATCHES * BATCH_SIZE  # due jobs the timed work takes
    for case in (CASES[name] for name in cases):
        for size in (int(size * scale) for size in case.sizes):
            size = max(size, consumed) if case.claimed else size
            with queues.queue(f"slowpath-{case.name}-{size}") as con:
                case.build(queues.module, con, size, consumed)
                queues.settle(con)
                full = _cycles(queues.module, con, 0, cycles)
                batches = _batches(queues.module, con, cycles)
                con.execute(queues.unsynced)
                off = _cycles(queues.module, con, cycles + BATCHES, cycles)
            results.append(
                {
                    "case": case.name,
                    "grows_with": case.grows_with,
                    "size": size,
                    "cycles": cycles,
                    "p50_ms": round(percentile(full, 50), 3),
                    "off_p50_ms": round(percentile(off, 50), 3),
                    "batch_size": BATCH_SIZE,
                    "batch_p50_ms": round(percentile(batches, 50), 2),
                }
            )
    return results


def ratios(results: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each case's small and large size (in ``results``' order) and the ratios large/small
    of the claim+finish p50 (durable and not) and of the batch, each beside its goal."""
    by_case: dict[str, list[dict[str, Any]]] = {}
    for entry in results:
        by_case.setdefault(entry["case"], []).append(entry)
    out = []
    for case, (small, *_, large) in by_case.items():
        ratio = {key: large[key] / small[key] for key in ("p50_ms", "off_p50_ms", "batch_p50_ms")}
        out.append(
            {
                "case": case,
                "small": small,
                "large": large,
                "cycle": ratio["p50_ms"],
                "off": ratio["off_p50_ms"],
                "batch": ratio["batch_p50_ms"],
                "cycle_met": ratio["p50_ms"] <= GOAL_CYCLE,
                "batch_met": ratio["batch_p50_ms"] <= GOAL_BATCH,
            }
        )
    return out


def _verdict(ratio: float, goal: float, met: bool) -> str:
    return f"{ratio:.2f}x (goal {goal:g}x: {'met' if met else '**not met**'})"


def side_by_side(results: Sequence[dict[str, Any]]) -> list[str]:
    """Each case's small and large size on one line, with the ratios large/small beside
    their goals (the p50 with no sync is the statements' own cost, which a busy disk
    does not blur)."""
    lines = [
        "| case | sizes | claim+finish p50 ms | ratio | with no sync | ratio"
        f" | batch of {BATCH_SIZE} ms | ratio |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in ratios(results):
        small, large = row["small"], row["large"]
        lines.append(
            f"| `{row['case']}` | {small['size']:,} / {large['size']:,}"
            f" | {small['p50_ms']:.2f} / {large['p50_ms']:.2f}"
            f" | {_verdict(row['cycle'], GOAL_CYCLE, row['cycle_met'])}"
            f" | {small['off_p50_ms']:.3f} / {large['off_p50_ms']:.3f} | {row['off']:.2f}x"
            f" | {small['batch_p50_ms']:.1f} / {large['batch_p50_ms']:.1f}"
            f" | {_verdict(row['batch'], GOAL_BATCH, row['batch_met'])} |"
        )
    return lines


@contextlib.contextmanager
def _queues(backend: str, folder: Path) -> Iterator[Queues]:
    if backend == "sqlite":
        yield Sqlite(folder)
        return
    with postgres_server(folder) as databases:
        yield databases


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m bench.slowpaths", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--backend", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--case", action="append", choices=list(CASES), default=[])
    parser.add_argument("--cycles", type=int, default=100, help="timed cycles per queue")
    parser.add_argument("--scale", type=float, default=1.0, help="sizes times this")
    parser.add_argument("--dir", type=Path, default=None, help="folder for the queues (not tmpfs)")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    cases = args.case or (SQLITE_CASES if args.backend == "sqlite" else POSTGRES_CASES)
    before = os.getloadavg()[0]
    with contextlib.ExitStack() as stack:
        folder = stack.enter_context(tempfile.TemporaryDirectory(dir=args.dir or "/var/tmp"))
        queues = stack.enter_context(_queues(args.backend, Path(folder)))
        results = measure(queues, cases, args.cycles, args.scale)
    print("\n".join(side_by_side(results)))
    if args.json is not None:
        load = {"load_average_before": round(before, 2)}
        load["load_average_after"] = round(os.getloadavg()[0], 2)
        record = {"backend": args.backend, **load, "results": results}
        args.json.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
