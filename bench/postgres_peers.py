"""pgworker beside the PostgreSQL queues procrastinate and pgqueuer: the same work, one server.
See docs/benchmarks.md, ``bench.postgres_peers``."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.metadata
import logging
import multiprocessing
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pgworker
from bench import report
from bench.measure import (
    T0_MS,
    add_record_options,
    fleet,
    log,
    publish,
    record_or_render,
    refuse_unwritable,
)
from bench.ops import Calls, event, expect
from bench.server import Server, postgres_server
from courier import backend
from courier.batch_rounds import batch_rounds_for
from courier.runner import run_courier
from courier.stop_rules import StopRules

__all__ = ["CONTESTANTS", "main", "run"]

JOBS, PROCESSES = 8_000, (1, 4, 16)
QUICK_JOBS, QUICK_PROCESSES = 100, (1, 2)
ENQUEUE_CHUNK = 1_000
POLL_S, POLL_MIN_S = 0.02, 0.002
CELL_TIMEOUT_S = 120.0
COURIER_LEASE_MS, COURIER_TIMEOUT_MS = 30_000, 1_000  # the courier's: no lease runs out
COURIER_TTL_MS = 60_000  # enqueue's longest: a cell is over well before it
TASK = "noop"
# What the worker processes' server imports (a peer not installed is passed over).
PRELOAD = ("bench.postgres_peers", "asyncpg", "procrastinate", "pgqueuer", "pgqueuer.db")

Started = Callable[[], bool]


def _asyncpg_params(conninfo: str) -> dict[str, Any]:
    """asyncpg's keyword arguments for a libpq conninfo (it reads no key=value strings)."""
    from psycopg import conninfo as libpq

    given = libpq.conninfo_to_dict(conninfo)
    names = {"host": "host", "port": "port", "user": "user", "dbname": "database"}
    names["password"] = "password"
    return {ours: given[key] for key, ours in names.items() if key in given}


class Pgworker:
    """pgworker: ``claim`` + ``finish`` (``claim_many`` + ``finish_many`` of ``batch``),
    fenced by the tickets, every call of a cell at one virtual time, until a claim
    finds nothing."""

    # whose versions are recorded; the first must be installed
    distributions: tuple[str, ...] = ("psycopg",)
    count_done = "SELECT count(*) FROM jobs WHERE status = 'done'"  # acknowledged jobs

    def __init__(self, batch: int, takes: str) -> None:
        self.batch, self.takes = batch, takes  # takes: how it takes and acknowledges

    def install(self, conninfo: str) -> None:
        pgworker.open_queue(conninfo).close()

    def enqueue(self, conninfo: str, jobs: int) -> None:
        with contextlib.closing(pgworker.open_queue(conninfo)) as con:
            chunk = Calls(pgworker, con, min(jobs, ENQUEUE_CHUNK))
            for i in range(jobs // chunk.size):
                chunk.put(i)

    def work(self, conninfo: str, owner: str, started: Started) -> int:
        """A worker process's loop; the jobs it ran."""
        with contextlib.closing(pgworker.open_queue(conninfo)) as con:
            calls, done = Calls(pgworker, con, self.batch), 0
            while started() and (tickets := calls.claim(T0_MS + 1, owner)):
                calls.ack(tickets, T0_MS + 2)
                done += len(tickets)
        return done


class Courier(Pgworker):
    """``courier run --batch N``'s loop (``run_courier`` over ``batch_rounds_for`` the
    database: ``claim_many``, the deliveries, ``finish_many``, on the server's clock),
    with a send that returns ``True`` at once (the peers' no-op task), until the queue
    is drained."""

    count_done = Pgworker.count_done

    def enqueue(self, conninfo: str, jobs: int) -> None:
        """The jobs, enqueued on the server's clock (the courier's time base), with the
        longest ttl: jobs on the other contestants' virtual time would be past their
        deadline for it."""
        with contextlib.closing(pgworker.open_queue(conninfo)) as con:
            now_ms = backend.server_clock_ms(con)
            for start in range(0, jobs, ENQUEUE_CHUNK):
                events = [event(i) for i in range(start, min(jobs, start + ENQUEUE_CHUNK))]
                got = pgworker.enqueue_many(con, events, now_ms, COURIER_TTL_MS)
                expect("enqueue", got, [True] * len(events))

    def work(self, conninfo: str, owner: str, started: Started) -> int:
        ran: list[int] = []

        def noop(event: dict[str, Any]) -> bool:
            ran.append(1)
            return True

        rounds = batch_rounds_for(conninfo, self.batch, 1, COURIER_TIMEOUT_MS)
        rules = StopRules(max_runs=10**7, max_seconds=CELL_TIMEOUT_S, until_drained=True)
        try:
            if started():
                run_courier(
                    conninfo,
                    owner,
                    noop,
                    lease_ms=COURIER_LEASE_MS,
                    stop_rules=rules,
                    log=lambda line: None,
                    rounds=rounds,
                )
        finally:
            rounds.close()
        return len(ran)


class Procrastinate(Pgworker):
    """``App(connector=PsycopgConnector(conninfo=...))`` with the one no-op task."""

    distributions = ("procrastinate", "psycopg")
    count_done = "SELECT count(*) FROM procrastinate_jobs WHERE status = 'succeeded'"

    def _app(self, conninfo: str) -> tuple[Any, Any, list[int]]:
        """The app, the task, and a list that grows by one at each run of the task."""
        procrastinate = importlib.import_module("procrastinate")
        # It warns that an App made in ``__main__`` cannot be found by a worker started
        # from its CLI; here every worker process makes its own App.
        logging.getLogger("procrastinate.blueprints").setLevel(logging.ERROR)
        app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=conninfo))
        ran: list[int] = []

        async def noop() -> None:
            ran.append(1)

        return app, app.task(name=TASK)(noop), ran

    def install(self, conninfo: str) -> None:
        app, _, _ = self._app(conninfo)

        async def install() -> None:
            async with app.open_async():
                await app.schema_manager.apply_schema_async()

        asyncio.run(install())

    def enqueue(self, conninfo: str, jobs: int) -> None:
        app, task, _ = self._app(conninfo)

        async def enqueue() -> None:
            async with app.open_async():
                for start in range(0, jobs, ENQUEUE_CHUNK):
                    await task.batch_defer_async(
                        *({} for _ in range(start, min(jobs, start + ENQUEUE_CHUNK)))
                    )

        asyncio.run(enqueue())

    def work(self, conninfo: str, owner: str, started: Started) -> int:
        app, _, ran = self._app(conninfo)

        async def work() -> None:
            async with app.open_async():
                if await asyncio.get_running_loop().run_in_executor(None, started):
                    await app.run_worker_async(wait=False, name=owner)

        asyncio.run(work())
        return len(ran)


class Pgqueuer(Pgworker):
    """``PgQueuer(AsyncpgDriver(asyncpg.connect(...)))`` with the one no-op entrypoint."""

    distributions = ("pgqueuer", "asyncpg")
    count_done = "SELECT count(*) FROM pgqueuer_log WHERE status = 'successful'"

    @contextlib.asynccontextmanager
    async def _queries(self, conninfo: str) -> Any:
        asyncpg, drivers, queries = (
            importlib.import_module(m) for m in ("asyncpg", "pgqueuer.db", "pgqueuer.queries")
        )
        connection = await asyncpg.connect(**_asyncpg_params(conninfo))
        try:
            yield queries.Queries(drivers.AsyncpgDriver(connection))
        finally:
            await connection.close()

    def install(self, conninfo: str) -> None:
        async def install() -> None:
            async with self._queries(conninfo) as queries:
                await queries.install()

        asyncio.run(install())

    def enqueue(self, conninfo: str, jobs: int) -> None:
        async def enqueue() -> None:
            async with self._queries(conninfo) as queries:
                for start in range(0, jobs, ENQUEUE_CHUNK):
                    size = min(jobs, start + ENQUEUE_CHUNK) - start
                    await queries.enqueue([TASK] * size, [None] * size, [0] * size)

        asyncio.run(enqueue())

    def work(self, conninfo: str, owner: str, started: Started) -> int:
        asyncpg, pgqueuer, drivers, types = (
            importlib.import_module(m)
            for m in ("asyncpg", "pgqueuer", "pgqueuer.db", "pgqueuer.types")
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


CONTESTANTS: dict[str, Pgworker] = {
    "pgworker": Pgworker(1, "`claim` + `finish`, fenced by the ticket"),
    "pgworker-64": Pgworker(64, "`claim_many` + `finish_many` of 64, fenced by the tickets"),
    "pgworker-10": Pgworker(10, "`claim_many` + `finish_many` of 10 (pgqueuer's batch), fenced"),
    "courier-10": Courier(
        10, "`courier run --batch 10`'s loop (`claim_many`, a no-op send, `finish_many`), fenced"
    ),
    "procrastinate": Procrastinate(
        1, "`run_worker(wait=False)`, defaults: one job per fetch, finish by job id"
    ),
    "pgqueuer": Pgqueuer(
        10, "`QueueManager.run(mode=drain)`, defaults: 10 per dequeue, buffered logging by job id"
    ),
}


def versions(contestant: Pgworker) -> dict[str, str] | None:
    """The installed version of each distribution, or ``None`` if the first is missing."""
    found: dict[str, str] = {}
    for name in contestant.distributions:
        try:
            found[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            if not found:
                return None
    return found


def _process(name: str, conninfo: str, owner: str, go: Any, reports: Any) -> None:
    """One worker process: the contestant's loop after the start signal; its report."""
    report: dict[str, Any] = {"owner": owner, "ran": 0}
    waited: list[bool] = []

    def started() -> bool:  # reports ready and waits for the signal, once
        if not waited:
            reports.put(("ready", owner))
            waited.append(go.wait(CELL_TIMEOUT_S))
            report.update({} if waited[0] else {"error": "no start signal"})
        return waited[0]

    try:
        report["ran"] = CONTESTANTS[name].work(conninfo, owner, started)
    except BaseException as error:  # reported to the parent, which judges the cell
        report["error"] = f"{type(error).__name__}: {error}"
    reports.put(("result", report))


def _poll(probe: Any, sql: str, jobs: int, alive: Callable[[], bool]) -> tuple[float, int]:
    """Count the acknowledged jobs from the start signal until all ``jobs`` are, no
    worker process is left to do the rest, or ``CELL_TIMEOUT_S`` has passed: the
    seconds and the count. It polls every ``POLL_S``, down to ``POLL_MIN_S`` as the end
    nears at the rate seen so far (so a short cell's end is seen within a few ms)."""
    began = time.perf_counter()
    while time.perf_counter() - began < CELL_TIMEOUT_S:
        gone = not alive()
        (done,) = probe.execute(sql).fetchone()
        elapsed = time.perf_counter() - began
        if done >= jobs or gone:
            break
        left = (jobs - done) * elapsed / done if done else 2 * POLL_S
        time.sleep(min(POLL_S, max(POLL_MIN_S, left / 2)))
    return time.perf_counter() - began, int(done)


def run_cell(name: str, server: Server, jobs: int, processes: int) -> dict[str, Any]:
    """``jobs`` no-op jobs taken by ``processes`` worker processes of contestant ``name``."""
    import psycopg

    contestant = CONTESTANTS[name]
    conninfo = server.database(f"{name.replace('-', '')}_{processes}")
    contestant.install(conninfo)
    contestant.enqueue(conninfo, jobs)
    # Worker processes fork from one server process that imported every library once
    # (16 interpreters each importing a peer took 12-16 s of the 2 cores a cell).
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload(list(PRELOAD))
    with psycopg.connect(conninfo, autocommit=True) as probe:
        probe.execute("VACUUM ANALYZE")
        durability = server.durability()
        watch = lambda alive: _poll(probe, contestant.count_done, jobs, alive)  # noqa: E731
        _, reports, polled = fleet(
            _process, lambda owner: (name, conninfo, owner), processes, 30.0, context, watch
        )
    seconds, done = polled or (0.0, 0)
    ran = [int(report["ran"]) for report in reports]
    errors = [str(report["error"]) for report in reports if "error" in report]
    if len(reports) < processes:
        errors.append(f"{processes - len(reports)} of {processes} processes did not report")
    if done != jobs:
        errors.append(f"{done} of {jobs} jobs acknowledged after {seconds:.3g} s")
    elif sum(ran) != jobs:
        errors.append(f"the processes ran {sum(ran)} jobs for {jobs} acknowledged")
    return {
        "processes": processes,
        "jobs": jobs,
        "durability": durability,
        "seconds": round(seconds, 3),
        "done": done,
        "ran_per_process": ran,
        "jobs_per_s": None if errors else round(jobs / seconds, 1),
        "errors": errors,
    }


def run(folder: Path, names: list[str], quick: bool) -> dict[str, Any]:
    """Every cell of the contestants ``names``, on one server in ``folder``; the record."""
    jobs, processes = (QUICK_JOBS, QUICK_PROCESSES) if quick else (JOBS, PROCESSES)
    meta = {"jobs": jobs, "processes": list(processes), "poll_s": POLL_S, "poll_min_s": POLL_MIN_S}
    entries: list[dict[str, Any]] = []
    with postgres_server(folder) as server:
        meta |= {"server": server.name, "postgres": server.version()}
        meta["durability"] = server.durability()
        for name in names:
            found = versions(CONTESTANTS[name])
            entries.append({"name": name, "takes": CONTESTANTS[name].takes, "versions": found})
            entries[-1] |= {"cells": []} if found else {}
            if found is None:
                log(f"{name}: not installed (pip install -e '.[peers]')")
        # K by K, every contestant in turn: what is compared runs minutes apart at most,
        # under much the same load from other work.
        for k in processes:
            for entry in (entry for entry in entries if "cells" in entry):
                entry["cells"].append(run_cell(entry["name"], server, jobs, k))
                log(f"{entry['name']} K={k}: {entry['cells'][-1]['jobs_per_s']} jobs/s")
    return {"meta": meta, "contestants": entries}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.postgres_peers", description=__doc__)
    add_record_options(parser)
    parser.add_argument(
        "--only", choices=sorted(CONTESTANTS), action="append", help="this contestant alone"
    )
    args = parser.parse_args(argv)
    refuse_unwritable(parser, args, "--doc", report.PEERS_MARKS)
    names = args.only or list(CONTESTANTS)
    measure = lambda work: run(work, names, args.quick)  # noqa: E731
    record = record_or_render(args, argv, "bench.postgres_peers", measure)
    return publish(args.doc, report.peers(record), report.PEERS_MARKS)


if __name__ == "__main__":
    raise SystemExit(main())
