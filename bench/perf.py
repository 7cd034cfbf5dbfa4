"""The performance benchmark: worker.py against the disk's limit and against its peers. See
docs/benchmarks.md, ``bench.perf``."""

from __future__ import annotations

import argparse
import dataclasses
import os
import platform
import shutil
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import worker
from bench import ceilings, delivery, peers, report, slowpaths
from bench.measure import (
    add_record_options,
    log,
    median_of_rounds,
    publish,
    record_or_render,
    refuse_unwritable,
)
from bench.ops import Calls, timed_phases
from tests.stores.sqlite import SQLiteStore

__all__ = ["Settings", "main", "run"]

# DELETE+FULL is the limit; the others are context: what WAL would change, and what a
# transaction costs with no sync at all (DELETE+OFF, never durable).
BARE_MODES = (("DELETE", "FULL"), ("WAL", "FULL"), ("WAL", "NORMAL"), ("DELETE", "OFF"))


@dataclass(frozen=True)
class Settings:
    """The sizes of one run; ``QUICK`` has the smoke-test sizes."""

    count: int = 2_000  # single calls per phase; also each peer's
    batches: int = 100  # batch calls per phase
    batch_size: int = 64
    couriers: tuple[int, ...] = (1, 4, 8)
    courier_seconds: float = 5.0  # each fleet of courier processes
    layer_seconds: float = 1.5  # each layer of one courier's round, in each round
    batch_seconds: float = 3.0  # each side of the batched courier's, in each round
    ceiling_steps: int = 2_000  # steps of each call beside its ceiling
    slowpath_cycles: int = 100
    slowpath_scale: float = 1.0
    max_seconds: float = 30.0  # bound of every timed loop
    rounds: int = 5  # limit, worker and peers run this many times, interleaved; medians
    layer_rounds: int = 3  # of one courier's round: the median of these


QUICK = Settings(
    count=30,
    batches=3,
    couriers=(1, 2),
    courier_seconds=0.5,
    layer_seconds=0.1,
    batch_seconds=0.3,
    ceiling_steps=10,
    slowpath_cycles=3,
    slowpath_scale=0.02,
    max_seconds=10.0,
    rounds=1,
    layer_rounds=1,
)


def disk_of(folder: Path) -> str:
    """The device, filesystem type and mount point holding ``folder`` (/proc/mounts)."""
    best = ("?", "", "?")
    target = str(folder.resolve())
    with open("/proc/mounts", encoding="utf-8") as mounts:
        for device, mount, fstype, *_ in (line.split() for line in mounts):
            inside = target == mount or target.startswith(mount.rstrip("/") + "/")
            if inside and len(mount) >= len(best[1]):
                best = (device, mount, fstype)
    if best[2] in ("tmpfs", "ramfs"):
        log(f"WARNING: {folder} is on {best[2]}: fsync is free there, figures are no limit")
    return f"{best[0]} ({best[2]}, mounted on {best[1]})"


def _round(folder: Path, s: Settings) -> dict[str, Any]:
    """One round of the throughput sections: the limit, worker.py, the peers."""
    bare = {
        f"{journal}+{sync}": ceilings.bare_transactions(
            folder, s.count * (1 if journal == "DELETE" else 2), s.max_seconds, journal, sync
        )
        for journal, sync in BARE_MODES
    }
    figures: dict[str, Any] = {}
    for name, size, count in (("single", 1, s.count), ("batch", s.batch_size, s.batches)):
        with SQLiteStore(str(folder)).queue(name) as con:
            timed = timed_phases(Calls(worker, con, size), count, s.max_seconds)
        figures[name] = {phase: figure.as_dict() for phase, figure in timed.items()}
    return {
        "limit": {
            "bare": bare,
            "fsync": ceilings.raw_fsync(folder, s.count, s.max_seconds).as_dict(),
        },
        "worker": {
            "single": figures["single"],
            "batch": {"size": s.batch_size, **figures["batch"]},
        },
        "peers": {
            name: peers.measure_peer(name, folder / name, s.count, s.max_seconds)
            for name in peers.PEERS
        },
    }


def run(folder: Path, s: Settings) -> dict[str, Any]:
    """Every section in ``folder``; the record."""
    started = time.monotonic()

    def step(name: str) -> None:
        log(f"[{time.monotonic() - started:6.1f} s] {name}")

    meta: dict[str, Any] = {"disk": disk_of(folder), "sqlite": sqlite3.sqlite_version}
    meta["machine"] = f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}"
    rounds = []
    for number in range(1, s.rounds + 1):
        step(f"round {number}/{s.rounds}: limit, worker, peers")
        (folder / f"round-{number}").mkdir()
        rounds.append(_round(folder / f"round-{number}", s))
        shutil.rmtree(folder / f"round-{number}", ignore_errors=True)
    record: dict[str, Any] = {"meta": meta, **median_of_rounds(rounds)}
    step("ceilings")
    record["ceiling"] = {
        "synced": ceilings.ceilings(folder, s.ceiling_steps, s.max_seconds),
        "without_sync": ceilings.ceilings(folder, s.ceiling_steps, s.max_seconds, True),
    }
    step("slow states")
    cases = slowpaths.SQLITE_CASES
    record["slowpaths"] = slowpaths.record(
        SQLiteStore(str(folder)), cases, s.slowpath_cycles, s.slowpath_scale
    )
    step("couriers")
    record["couriers"] = {
        "seconds": s.courier_seconds,
        "layer_seconds": s.layer_seconds,
        "layer_rounds": s.layer_rounds,
        "layers": delivery.breakdown(folder, s.layer_seconds, s.layer_rounds),
        "results": [delivery.fleet(folder, n, s.courier_seconds) for n in s.couriers],
    }
    step("one courier in batches")
    record["couriers"]["batches"] = delivery.side_by_side(
        SQLiteStore(str(folder)), folder, s.batch_seconds, s.layer_rounds
    )
    meta["settings"] = dataclasses.asdict(s)
    meta["duration_s"] = round(time.monotonic() - started, 1)
    return record


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (or ``--render`` a recorded one); write and print the page."""
    parser = argparse.ArgumentParser(prog="python -m bench.perf", description=__doc__)
    add_record_options(parser, "--page")
    args = parser.parse_args(argv)
    refuse_unwritable(parser, args, "--page")
    settings = QUICK if args.quick else Settings()
    record = record_or_render(args, argv, "bench.perf", lambda work: run(work, settings))
    return publish(args.page, report.performance(record))


if __name__ == "__main__":
    raise SystemExit(main())
