"""What the conformance monitor costs and how fast it checks: ``python -m bench.conform``.

Three measurements (see docs/operations.md, the conformance monitor, for what they mean):

- **the feed's cost**: single calls and batches of 64 on two fresh queues, one without
  and one with the change feed, call by call in turn (``bench.measure.paired``: both
  meet the disk and the machine's load in the same second), in each of ``bench.ops``'
  phases; the median round of each phase's rate with the feed over its rate without, on
  a queue file and on PostgreSQL;
- **the checker's speed**: the feeds those runs wrote, checked whole by ``check_all``
  in this one process (one core), as changes and transactions per second of wall and
  of CPU time; every one must be explained (the calls use times of their own: the
  ``simulated`` time base);
- **``--follow``'s lag**: ``courier conform --follow --json`` in a child process while
  a fleet of courier processes delivers to the real receiver from a queue file with the
  feed, and the largest lag it reports (from the clock at a write to its check).

    python -m bench.conform --json docs/conform.json     # a few minutes
    python -m bench.conform --quick                      # the smoke test's sizes
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import subprocess
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench import delivery
from bench import postgres as pg_bench
from bench.measure import (
    add_record_options,
    fleet,
    fleet_totals,
    log,
    paired,
    record_or_render,
    refuse_unwritable,
)
from bench.ops import Calls, phases
from bench.rows import fill
from bench.server import postgres_server
from courier.clock import clock_ms
from courier.commands.conform import install_feed
from courier.conform.checker import Feed, rules_for
from courier.procs import courier_command, project_root
from tests.stores import Store
from tests.stores.sqlite import SQLiteStore

__all__ = ["Settings", "main", "run"]

FOLLOW_BOUND_S = 300.0  # --follow's own --max-seconds beyond the fleet's: a safety bound
DRAIN_S = 2.0  # after the fleet, before the follower is stopped


@dataclass(frozen=True)
class Settings:
    """The sizes of one run; ``QUICK`` has the smoke test's."""

    count: int = 2_000  # single calls per phase
    batches: int = 100  # batch calls per phase
    batch_size: int = 64
    rounds: int = 3
    max_seconds: float = 30.0  # bound of every timed loop
    couriers: int = 8
    follow_seconds: float = 20.0
    interval_s: float = 0.1  # --follow's --interval
    postgres: bool = True


QUICK = Settings(
    count=20,
    batches=2,
    rounds=1,
    max_seconds=10.0,
    couriers=2,
    follow_seconds=1.0,
    postgres=False,
)


@dataclass(frozen=True)
class Pair:
    """One phase on both queues, call by call in turn (``bench.measure.paired``): the
    jobs each handled and the seconds each took."""

    count: int
    without_s: float
    with_s: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "jobs": self.count,
            "without_per_s": round(self.count / self.without_s, 1) if self.without_s else 0.0,
            "with_per_s": round(self.count / self.with_s, 1) if self.with_s else 0.0,
            "ratio": round(self.without_s / self.with_s, 3) if self.with_s else 0.0,
        }


@contextlib.contextmanager
def _queue(store: Store, label: str, fed: bool) -> Iterator[tuple[str, Any]]:
    """A fresh queue (with the feed if ``fed``), its target and a connection."""
    target = store.fresh(label)
    try:
        if fed:
            install_feed(target)
        con = store.connect(target)
        try:
            yield target, con
        finally:
            con.close()
    finally:
        store.remove(target)


def _checked(target: str) -> dict[str, Any]:
    """The whole feed of ``target`` checked in this process: how long reading and
    checking took (wall and CPU seconds) and how much was checked."""
    wall, cpu = time.perf_counter(), time.process_time()
    feed = Feed(target, rules_for(target, simulated=True, skew_ms=0))
    try:
        checker, blocks = feed.start()
        read_wall, read_cpu = time.perf_counter() - wall, time.process_time() - cpu
        for block in blocks:
            checker.check(block)
    finally:
        feed.close()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return {
        "transactions": checker.transactions,
        "changes": checker.changes,
        "unexplained": len(checker.unexplained),
        "seconds": round(wall, 3),
        "cpu_seconds": round(cpu, 3),
        "read_seconds": round(read_wall, 3),
        "read_cpu_seconds": round(read_cpu, 3),
        "changes_per_s": round(checker.changes / wall, 1) if wall else 0.0,
        "changes_per_cpu_s": round(checker.changes / cpu, 1) if cpu else 0.0,
        "transactions_per_s": round(checker.transactions / wall, 1) if wall else 0.0,
    }


def _settler(store: Store, cons: list[Any]) -> Any:
    """What runs between two phases: PostgreSQL's vacuum and statistics (``settle``)."""
    settle = getattr(store, "settle", None)
    return (lambda: [settle(con) for con in cons]) if settle is not None else (lambda: None)


def _round(store: Store, s: Settings) -> tuple[dict[str, Any], dict[str, Any]]:
    """One round of the feed's cost on ``store``: each shape of call on a queue without
    and a queue with the feed, call by call in turn; the figures, and the checks of the
    fed queues."""
    figures: dict[str, Any] = {}
    checks: dict[str, Any] = {}
    for shape, size, count in (("single", 1, s.count), ("batch", s.batch_size, s.batches)):
        with (
            _queue(store, f"{shape}-without", False) as (_, bare),
            _queue(store, f"{shape}-with", True) as (target, fed),
        ):
            queues = [Calls(store.module(), con, size) for con in (bare, fed)]

            def timer(_: str, steps: Any, n: int, size: int = size) -> Pair:
                done, without_s, with_s = paired(steps, n, s.max_seconds)
                return Pair(done * size, without_s, with_s)

            timed = phases(queues, count, timer, _settler(store, [bare, fed]))
            figures[shape] = {phase: pair.as_dict() for phase, pair in timed.items()}
            checks[shape] = _checked(target)
    return figures, checks


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def feed_cost(store: Store, s: Settings) -> dict[str, Any]:
    """The feed's cost on ``store`` over ``s.rounds`` rounds (each phase's ratio the
    median round's), and the checker's speed on the feeds of the last round."""
    rounds: list[dict[str, Any]] = []
    checks: dict[str, Any] = {}
    for number in range(1, s.rounds + 1):
        log(f"{store.name}: round {number}/{s.rounds}")
        figures, checks = _round(store, s)
        rounds.append(figures)
    ratios = {
        shape: {
            phase: _median([r[shape][phase]["ratio"] for r in rounds]) for phase in rounds[0][shape]
        }
        for shape in rounds[0]
    }
    return {"rounds": rounds, "ratio_with_over_without": ratios, "checker": checks}


def _following(target: str, s: Settings, run_fleet: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``courier conform --follow --json`` on ``target`` (which has the feed) while
    ``run_fleet()`` runs its couriers; the fleet's totals, what the follower checked and
    its lag."""
    bound_s = s.follow_seconds + FOLLOW_BOUND_S
    command = courier_command("conform", target, "--follow", "--json")
    command += ["--interval", str(s.interval_s), "--max-seconds", str(bound_s)]
    with subprocess.Popen(
        command, cwd=project_root(), stdout=subprocess.PIPE, text=True
    ) as follower:
        try:
            assert follower.stdout is not None
            first = follower.stdout.readline()  # it has read the feed once: it follows
            couriers = run_fleet()
            time.sleep(DRAIN_S)  # what committed last is read and checked
            follower.send_signal(signal.SIGTERM)  # it stops, printing its summary
            out, _ = follower.communicate(timeout=bound_s)
        finally:
            if follower.poll() is None:
                follower.kill()
                follower.wait()
    lines = [first, *out.splitlines()]
    events = [json.loads(line) for line in lines if line.startswith("{")]
    ended: dict[str, Any] = next((e for e in events[::-1] if e.get("event") == "summary"), {})
    progress = [e for e in events if e.get("event") == "progress"]
    return {
        "couriers": couriers,
        "interval_s": s.interval_s,
        "transactions": ended.get("transactions"),
        "changes": ended.get("changes"),
        "unexplained": ended.get("unexplained"),
        "lag_ms_max": ended.get("lag_ms_max"),
        "lag_ms_max_by_window": [e["lag_ms"]["max_since"] for e in progress],
        "exit_status": follower.returncode,
    }


def _filled(store: Store, label: str, s: Settings) -> str:
    """A fresh queue of ``store`` with more due jobs than the fleet can take, then the feed."""
    target = store.fresh(label)
    con = store.connect(target)
    try:
        fill(con, int(delivery.JOBS_PER_SECOND_CEILING * s.follow_seconds) + 1_000, clock_ms())
        getattr(store, "settle", lambda _: None)(con)
    finally:
        con.close()
    install_feed(target)
    return target


def follow_lag(folder: Path, s: Settings) -> dict[str, Any]:
    """``courier conform --follow`` beside ``s.couriers`` courier processes delivering to
    the real receiver from one queue file with the feed."""
    files = SQLiteStore(str(folder))
    path = _filled(files, "follow", s)

    def run_fleet() -> dict[str, Any]:
        with delivery.serving("receiver", folder / "inbox-follow.sqlite") as served:
            _, reports, _ = fleet(
                delivery.courier,
                lambda owner: (path, served.url, owner, s.follow_seconds),
                s.couriers,
                s.follow_seconds + delivery.RESULT_GRACE_S,
            )
        return fleet_totals(s.couriers, s.follow_seconds, reports, "deliveries", "stale")

    try:
        return _following(path, s, run_fleet)
    finally:
        files.remove(path)


def follow_lag_postgres(store: Store, s: Settings) -> dict[str, Any]:
    """``courier conform --follow`` beside ``s.couriers`` processes of ``bench.postgres``'
    claim+finish couriers (no HTTP) on one PostgreSQL queue with the feed."""
    target = _filled(store, "follow", s)

    def run_fleet() -> dict[str, Any]:
        _, reports, _ = fleet(
            pg_bench.courier,
            lambda owner: ("postgres", target, owner, s.follow_seconds),
            s.couriers,
            s.follow_seconds + delivery.RESULT_GRACE_S,
        )
        return fleet_totals(s.couriers, s.follow_seconds, reports, "cycles", "stale")

    try:
        return _following(target, s, run_fleet)
    finally:
        store.remove(target)


def run(folder: Path, s: Settings, follow_only: bool = False) -> dict[str, Any]:
    """Every measurement in ``folder`` (only ``--follow``'s with ``follow_only``); the record."""
    record: dict[str, Any] = {"meta": {"settings": asdict(s)}}
    if not follow_only:
        record["sqlite"] = feed_cost(SQLiteStore(str(folder)), s)
    if s.postgres:
        with postgres_server(folder) as server:
            record["meta"]["postgres"] = server.version()
            if not follow_only:
                record["postgres"] = feed_cost(server.store(), s)
            log(f"--follow on PostgreSQL beside {s.couriers} couriers for {s.follow_seconds} s")
            record["follow_postgres"] = follow_lag_postgres(server.store(), s)
    log(f"--follow beside {s.couriers} couriers for {s.follow_seconds} s")
    record["follow"] = follow_lag(folder, s)
    return record


def summary(record: dict[str, Any]) -> list[str]:
    """The figures the issue asks for, in a few lines."""
    lines = []
    for backend in ("sqlite", "postgres"):
        if "ratio_with_over_without" not in record.get(backend, {}):
            continue
        ratios = record[backend]["ratio_with_over_without"]
        for shape, by_phase in ratios.items():
            shown = ", ".join(f"{phase} {ratio:.2f}" for phase, ratio in by_phase.items())
            lines.append(f"{backend} {shape}: with/without the feed {shown}")
        for shape, check in record[backend]["checker"].items():
            lines.append(
                f"{backend} {shape} feed checked: {check['changes']} changes in "
                f"{check['seconds']} s = {check['changes_per_s']:.0f} changes/s "
                f"({check['changes_per_cpu_s']:.0f} per CPU s), "
                f"{check['unexplained']} unexplained"
            )
    for key in ("follow", "follow_postgres"):
        if key not in record:
            continue
        follow = record[key]
        lines.append(
            f"{key}: --follow beside {follow['couriers']['processes']} couriers "
            f"({follow['couriers']['per_s']} per s): {follow['transactions']} transactions, "
            f"{follow['unexplained']} unexplained, lag at most {follow['lag_ms_max']} ms"
        )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.conform", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    add_record_options(parser, page=None)
    parser.add_argument("--no-postgres", action="store_true", help="the queue file only")
    parser.add_argument("--follow-only", action="store_true", help="only --follow's lag")
    args = parser.parse_args(argv)
    refuse_unwritable(parser, args, page=None)
    settings = QUICK if args.quick else Settings()
    if args.no_postgres:
        settings = Settings(**{**asdict(settings), "postgres": False})
    record = record_or_render(
        args, argv, "bench.conform", lambda work: run(work, settings, args.follow_only)
    )
    for line in summary(record):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
