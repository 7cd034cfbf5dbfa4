"""PostgreSQL beside SQLite on the same disk: single calls, batches of 64, courier processes,
one courier in batches end to end, and the queue states where a claim could slow down. See
docs/benchmarks.md, ``bench.postgres``."""

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
from bench import delivery, report, slowpaths
from bench.ceilings import raw_fsync
from bench.measure import (
    add_record_options,
    fleet,
    fleet_totals,
    log,
    publish,
    record_or_render,
    refuse_unwritable,
)
from bench.ops import Calls, timed_phases
from bench.rows import fill
from bench.server import Server, postgres_server
from courier.clock import clock_ms
from courier.transient import is_busy
from tests.stores import Store
from tests.stores.sqlite import SQLiteStore

__all__ = ["courier", "main", "run", "wal_flushes"]

CALLS, BATCH, BATCHES, PROCESSES, SECONDS = 1000, 64, 40, (1, 2, 4, 8, 16), 3.0
QUICK_CALLS, QUICK_BATCHES, QUICK_PROCESSES, QUICK_SECONDS = 30, 3, (1, 2), 0.5
SLOW_CYCLES, QUICK_SLOW_CYCLES, QUICK_SLOW_SCALE = 100, 3, 0.01
BATCH_SECONDS, BATCH_ROUNDS, QUICK_BATCH_SECONDS = 3.0, 3, 0.3  # bench.delivery.side_by_side
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


def _calls(store: Store, calls: int, batches: int) -> dict[str, Any]:
    """Single calls and batches of ``BATCH`` on fresh queues of ``store``: calls (or
    jobs) per second of each phase, and the durability they committed with."""
    row: dict[str, Any] = {"backend": store.name}
    for suffix, size, count in (("", 1, calls), ("_many", BATCH, batches)):
        with store.queue(f"calls{suffix}") as con:
            row["durability"] = store.durability(con)
            queue = Calls(store.module(), con, size)
            timed = timed_phases(queue, count, MAX_SECONDS, lambda: store.settle(con))
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


def courier(kind: str, where: str, owner: str, seconds: float, go: Any, results: Any) -> None:
    """One courier process on the queue at ``where`` of a store of ``kind`` (``sqlite`` or
    ``postgres``): claim+finish cycles for ``seconds`` after ``go`` is set."""
    module: Any = worker if kind == "sqlite" else pgworker
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


def _couriers(
    store: Store, processes: int, seconds: float, server: Server | None = None
) -> dict[str, Any]:
    """``processes`` couriers on one fresh queue of ``store`` for ``seconds``: the totals,
    the durability the queue commits with, and on a PostgreSQL ``server`` its WAL flushes
    while they ran (each commit waits for one)."""
    where = store.fresh(f"couriers-{processes}")
    try:
        con = store.connect(where)
        fill(con, int(JOBS_PER_SECOND_CEILING * seconds) + 1_000, clock_ms())
        store.settle(con)
        durability = store.durability(con)
        con.close()

        def watch(_: Any) -> tuple[int | None, int | None]:
            if server is None:
                return None, None
            before = wal_flushes(server.con)
            time.sleep(seconds + 1.1)  # backends report their I/O statistics once a second
            return before, wal_flushes(server.con)

        args = (store.name, where)
        _, reports, (before, after) = fleet(
            courier, lambda owner: (*args, owner, seconds), processes, seconds + 30, watch=watch
        )
    finally:
        store.remove(where)
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
    sqlite = SQLiteStore(str(folder))
    with postgres_server(folder) as server:
        meta["postgres"], meta["server"] = server.version(), server.name
        postgres = server.store()
        record: dict[str, Any] = {"meta": meta, "calls": [], "couriers": []}
        for store in (sqlite, postgres):
            record["calls"].append(_calls(store, calls, batches))
            log(f"{store.name}: {record['calls'][-1]}")
        for n in processes:
            row = {
                "sqlite": _couriers(sqlite, n, seconds),
                "postgres": _couriers(postgres, n, seconds, server),
            }
            record["couriers"].append(row)
            log(f"{n} couriers: {row['sqlite']['per_s']}/s, {row['postgres']['per_s']}/s")
        batch_seconds = QUICK_BATCH_SECONDS if quick else BATCH_SECONDS
        rounds = 1 if quick else BATCH_ROUNDS
        record["batches"] = delivery.side_by_side(postgres, folder, batch_seconds, rounds)
        log(f"one courier in batches: {record['batches']['batched']['per_s']}/s")
        cycles = QUICK_SLOW_CYCLES if quick else SLOW_CYCLES
        scale = QUICK_SLOW_SCALE if quick else 1.0
        record["slowpaths"] = slowpaths.record(postgres, slowpaths.POSTGRES_CASES, cycles, scale)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.postgres", description=__doc__)
    add_record_options(parser)
    args = parser.parse_args(argv)
    refuse_unwritable(parser, args, "--doc", report.POSTGRES_MARKS)
    record = record_or_render(args, argv, "bench.postgres", lambda work: run(work, args.quick))
    return publish(args.doc, report.postgres(record), report.POSTGRES_MARKS)


if __name__ == "__main__":
    raise SystemExit(main())
