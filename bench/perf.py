"""The performance benchmark: worker.py against the disk's limit and against its peers.

    python -m bench.perf                                   # the full run (about 6 minutes)
    python -m bench.perf --quick                           # a smoke run (seconds)
    python -m bench.perf --json docs/performance.json --chart docs/performance.png \
        --page docs/performance.md                         # what make bench runs
    python -m bench.perf --render docs/performance.json --page docs/performance.md

One run, one folder on one disk (``--dir``; by default a temporary folder under
/tmp, removed afterwards), one process at a time except in the couriers section.
It prints the user page (``bench.report``: docs/performance.md, every number from the
run), and the JSON of every figure (to ``--json`` if given, else after the page);
``--render`` does the same from a recorded JSON, without a run. Everything goes
through worker.py's public calls and the contract's schema. The sections, in the
order they run:

1. ``limit``: bare ``BEGIN IMMEDIATE; UPDATE one row; COMMIT`` under DELETE+FULL (the
   contract's settings; *the limit*), and for context under WAL+FULL and WAL+NORMAL;
   and "write 4 KiB + fsync" with no SQLite (``bench.limits``).
2. ``worker``: enqueue, claim, finish and claim+finish through worker.py, single calls
   and batches of ``--batch-size`` (``bench.ops``), each checked call by call.
3. ``peers``: persist-queue, litequeue and huey doing the same work in their default
   modes, with the journal mode and synchronous setting read back from their own
   connections (``bench.peers``).
4. ``latency``: claim+finish p50/p99 with ``--rows`` rows, in two shapes, and a file
   created by someone else with only the contract's two tables (``bench.latency``).
5. ``ceiling``: each single call (enqueue, claim, finish, claim+finish, redrive)
   beside the same row writes with the same indexes alone in their transaction,
   step by step (``bench.ceiling``), with the contract's sync and without it.
6. ``slowpaths``: queue states where claim's cost could grow (``bench.slowpaths``).
7. ``couriers``: one courier's round built up layer by layer (run_once, reopening
   the file, HTTP, the receiver's commit, the runner), then 1, 4 and 8 courier
   processes of the real runner against the real receiver (``bench.delivery``).
8. ``syncs``: fsync/fdatasync calls per call, counted with strace (``bench.syncs``).

Sections 1-3 run ``--rounds`` times (5 by default), one after the other (limit,
worker, peers; limit, worker, peers; ...), and each figure is its median round (every
round's rate is kept in the JSON as ``rounds_per_s``). Throughput is "operations over
a fixed count", timed with ``time.perf_counter``, each loop also bounded in time
(``Settings.max_seconds``). Ratios compare figures of the same run. Never run it on
tmpfs (/dev/shm): fsync there is free and every figure would be a lie.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import hashlib
import json
import os
import platform
import shlex
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import worker
from bench import (
    ceiling,
    chart,
    delivery,
    latency,
    limits,
    ops,
    peers,
    report,
    slowpaths,
    syncs,
)
from bench.backends import Sqlite
from bench.measure import median_of_rounds

__all__ = ["SECTIONS", "Settings", "main", "run"]

SECTIONS = (
    "limit",
    "worker",
    "peers",
    "latency",
    "ceiling",
    "slowpaths",
    "couriers",
    "syncs",
)
DEFAULT_ROWS = (1_000, 10_000, 100_000, 1_000_000)
QUICK_ROWS = (1_000, 2_000)
# DELETE+FULL is the limit; the others are context: what WAL would change, and what a
# transaction costs with no sync at all (DELETE+OFF, never durable).
BARE_MODES = (("DELETE", "FULL"), ("WAL", "FULL"), ("WAL", "NORMAL"), ("DELETE", "OFF"))


@dataclass(frozen=True)
class Settings:
    """The sizes of one run; ``quick()`` gives the smoke-test sizes."""

    count: int = 2_000  # single calls per phase; also each peer's
    batches: int = 100  # batch calls per phase
    batch_size: int = 64
    rows: tuple[int, ...] = DEFAULT_ROWS
    cycles: int = 300  # timed claim+finish cycles per latency point (synchronous=FULL)
    off_cycles: int = 150  # and with synchronous=OFF (analysis only); all <= 500 due jobs
    warmup: int = 20
    couriers: tuple[int, ...] = (1, 4, 8)
    courier_seconds: float = 5.0  # each fleet of courier processes
    layer_seconds: float = 1.5  # each layer of one courier's round, in each of 3 rounds
    ceiling_steps: int = 2_000  # steps of each call beside its ceiling
    slowpath_cycles: int = 100
    slowpath_scale: float = 1.0
    sync_calls: int = 50
    max_seconds: float = 30.0  # bound of every timed loop
    rounds: int = 5  # limit, worker and peers run this many times, interleaved; medians

    @staticmethod
    def quick() -> Settings:
        """Tiny sizes: every section runs, in a few seconds."""
        return Settings(
            count=100,
            batches=5,
            rows=QUICK_ROWS,
            cycles=30,
            off_cycles=10,
            warmup=5,
            couriers=(1, 2),
            courier_seconds=0.5,
            layer_seconds=0.1,
            ceiling_steps=30,
            slowpath_cycles=10,
            slowpath_scale=0.02,
            sync_calls=4,
            max_seconds=10.0,
            rounds=1,
        )


def _log(message: str, started: float) -> None:
    print(f"[{time.monotonic() - started:6.1f} s] {message}", file=sys.stderr, flush=True)


def loadavg() -> str:
    """The 1, 5 and 15 minute load averages, or ``?`` where /proc is missing."""
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


def worker_identity() -> dict[str, str]:
    """Which worker.py was measured: its sha256, the git commit, and whether it differs."""
    source = Path(worker.__file__)
    identity = {"worker_sha256": hashlib.sha256(source.read_bytes()).hexdigest()[:16]}
    git = shutil.which("git")
    if git is None:
        return identity
    root = str(source.parent)
    head = subprocess.run(
        [git, "-C", root, "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    )
    changed = subprocess.run(
        [git, "-C", root, "diff", "--quiet", "HEAD", "--", source.name], capture_output=True
    )
    if head.returncode == 0:
        identity["git_head"] = head.stdout.strip()
        identity["worker_changed_since_head"] = "yes" if changed.returncode == 1 else "no"
    return identity


def disk_of(folder: Path) -> dict[str, str]:
    """The device, mount point and filesystem type holding ``folder`` (from /proc/mounts)."""
    best = {"device": "?", "mount": "", "fstype": "?"}
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return best
    target = str(folder.resolve())
    for line in mounts:
        device, mount, fstype, *_ = line.split()
        inside = target == mount or target.startswith(mount.rstrip("/") + "/")
        if inside and len(mount) >= len(best["mount"]):
            best = {"device": device, "mount": mount, "fstype": fstype}
    return best


# --- the sections ------------------------------------------------------------------


def section_limit(folder: Path, settings: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    """The bare transaction rate in each mode, and raw write+fsync."""
    bare: dict[str, Any] = {}
    for journal, sync in BARE_MODES:
        count = settings.count if journal == "DELETE" else settings.count * 2
        timed, (got_journal, got_sync) = limits.bare_transactions(
            folder, count, settings.max_seconds, journal, sync
        )
        bare[f"{journal}+{sync}"] = timed.as_dict(journal_mode=got_journal, synchronous=got_sync)
        log(f"limit: bare {journal}+{sync}: {timed.per_s:,.0f} tx/s")
    fsync = limits.raw_fsync(folder, settings.count, settings.max_seconds)
    log(f"limit: write+fsync: {fsync.per_s:,.0f}/s")
    return {"bare": bare, "fsync": fsync.as_dict()}


def section_worker(folder: Path, settings: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    """worker.py's single calls, then its batch calls."""
    single = ops.worker_single(folder / "single.sqlite", settings.count, settings.max_seconds)
    out: dict[str, Any] = {"single": {k: v.as_dict() for k, v in single.items()}}
    log("worker single: " + ", ".join(f"{k} {v.per_s:,.0f}/s" for k, v in single.items()))
    unsynced = ops.worker_single(
        folder / "single-off.sqlite", settings.count, settings.max_seconds, without_sync=True
    )
    out["single_without_sync"] = {k: v.as_dict() for k, v in unsynced.items()}
    if not ops.batch_available():
        out["batch"] = {"skipped": "worker.py has no batch calls"}
        return out
    batch = ops.worker_batch(
        folder / "batch.sqlite", settings.batches, settings.batch_size, settings.max_seconds
    )
    out["batch"] = {"size": settings.batch_size, **{k: v.as_dict() for k, v in batch.items()}}
    log("worker batch: " + ", ".join(f"{k} {v.per_s:,.0f} jobs/s" for k, v in batch.items()))
    return out


def section_peers(folder: Path, settings: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    """Every peer, measured or marked not installed."""
    out: dict[str, Any] = {}
    for name in peers.PEERS:
        out[name] = peers.measure_peer(name, folder / name, settings.count, settings.max_seconds)
        figure = out[name]
        if figure["installed"]:
            log(
                f"peer {name} ({figure['journal_mode']}+{figure['synchronous']}): "
                f"enqueue {figure['enqueue']['per_s']:,.0f}/s, "
                f"take+ack {figure['cycle']['per_s']:,.0f}/s"
            )
        else:
            log(f"peer {name}: not installed")
    return out


def section_latency(
    folder: Path, settings: Settings, log: Callable[[str], None]
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Latency at every size in both shapes; then the foreign file at the largest size."""
    results = latency.measure_latencies(
        folder, settings.rows, settings.cycles, settings.off_cycles, settings.warmup
    )
    for entry in results:
        log(
            f"latency {entry['shape']} {entry['rows']:,} rows: p50 {entry['p50_ms']} ms, "
            f"p99 {entry['p99_ms']} ms; synchronous=OFF p50 {entry.get('off_p50_ms')} ms"
        )
    section = {
        "cycles": settings.cycles,
        "off_cycles": settings.off_cycles,
        "warmup": settings.warmup,
        "rows": list(settings.rows),
        "results": results,
    }
    foreign = latency.foreign_file(folder, max(settings.rows), settings.cycles, settings.warmup)
    log(f"foreign file, {foreign['rows']:,} rows: open_queue {foreign['open_s']} s")
    return section, foreign


def section_slowpaths(
    folder: Path, settings: Settings, log: Callable[[str], None]
) -> list[dict[str, Any]]:
    """The states where claim could grow with the file (``bench.slowpaths``)."""
    results = slowpaths.measure(
        Sqlite(folder), slowpaths.SQLITE_CASES, settings.slowpath_cycles, settings.slowpath_scale
    )
    for entry in results:
        log(
            f"slow path {entry['case']} at {entry['size']:,}: p50 {entry['p50_ms']} ms,"
            f" synchronous=OFF {entry['off_p50_ms']} ms"
        )
    return results


def section_ceiling(folder: Path, settings: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    """Each single call beside its ceiling (``bench.ceiling``), synced and not."""
    out = {
        "synced": ceiling.measure(folder, settings.ceiling_steps, settings.max_seconds),
        "without_sync": ceiling.measure(
            folder, settings.ceiling_steps, settings.max_seconds, without_sync=True
        ),
    }
    shares = ", ".join(f"{k} {out['synced'][k]['share']:.2f}" for k in ceiling.CALLS)
    log(f"ceiling: share of each call's ceiling: {shares}")
    return out


def section_couriers(
    folder: Path, settings: Settings, log: Callable[[str], None]
) -> dict[str, Any]:
    """One courier's round layer by layer, then N courier processes, for each N."""
    layers = delivery.breakdown(folder, settings.layer_seconds)
    log("couriers: " + ", ".join(f"{k} {v['per_s']:,.0f}/s" for k, v in layers.items()))
    results = []
    for n in settings.couriers:
        entry = delivery.fleet(folder, n, settings.courier_seconds)
        results.append(entry)
        log(
            f"couriers {n}: {entry['per_s']:,.0f} deliveries/s, smallest share "
            f"{entry['smallest_share']}, {entry['lock_timeouts']} lock timeouts"
        )
    return {
        "seconds": settings.courier_seconds,
        "layer_seconds": settings.layer_seconds,
        "lease_ms": delivery.LEASE_MS,
        "layers": layers,
        "results": results,
    }


def section_syncs(folder: Path, settings: Settings, log: Callable[[str], None]) -> dict[str, Any]:
    """Syncs per call of every system, with strace."""
    out = syncs.syncs_table(folder, settings.sync_calls, settings.batch_size)
    log("syncs: " + (out.get("skipped") or f"{len(out['rows'])} scenarios traced"))
    return out


# --- the run -------------------------------------------------------------------------


@contextlib.contextmanager
def work_folder(parent: Path | None) -> Iterator[Path]:
    """A fresh folder inside ``parent`` (default: the system temp dir), removed afterwards."""
    if parent is not None:
        parent.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="lease-queue-perf-", dir=parent))
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _rounds(
    folder: Path, settings: Settings, sections: Sequence[str], log: Callable[[str], None]
) -> dict[str, Any]:
    """The throughput sections, ``settings.rounds`` times in turn; each figure's median.

    Interleaving the rounds (limit, worker, peers; limit, worker, peers; ...) means a
    burst of load from elsewhere on the machine hits every system alike, and the
    median of each figure discards one such burst.
    """
    rounds: list[dict[str, Any]] = []
    chosen = [
        (name, section)
        for name, section in (
            ("limit", section_limit),
            ("worker", section_worker),
            ("peers", section_peers),
        )
        if name in sections
    ]
    for number in range(1, settings.rounds + 1):
        here = folder / f"round-{number}"
        here.mkdir()

        def tagged(message: str, number: int = number) -> None:
            log(f"round {number}/{settings.rounds}: {message}")

        rounds.append({name: section(here, settings, tagged) for name, section in chosen})
        shutil.rmtree(here, ignore_errors=True)
    return dict(median_of_rounds(rounds)) if rounds and chosen else {}


def run(
    folder: Path, settings: Settings, sections: Sequence[str], command: str = ""
) -> dict[str, Any]:
    """Run ``sections`` in ``folder``; return every figure as JSON."""
    started = time.monotonic()
    loads: list[float] = []

    def log(message: str) -> None:
        _log(message, started)
        with contextlib.suppress(ValueError):  # "?" where there is no /proc
            loads.append(float(loadavg().split()[0]))

    disk = disk_of(folder)
    if disk["fstype"] in ("tmpfs", "ramfs"):
        log(f"WARNING: {folder} is on {disk['fstype']}: fsync is free there, figures are no limit")
    results: dict[str, Any] = {
        "meta": {
            "command": command,
            "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
            "folder": str(folder),
            "disk": f"{disk['device']} ({disk['fstype']}, mounted on {disk['mount']})",
            "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version,
            "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
            "loadavg_start": loadavg(),
            **worker_identity(),
            "settings": {k: v for k, v in vars(settings).items()},
        }
    }
    results.update(_rounds(folder, settings, sections, log))
    if "latency" in sections:
        results["latency"], results["foreign_file"] = section_latency(folder, settings, log)
    if "ceiling" in sections:
        results["ceiling"] = section_ceiling(folder, settings, log)
    if "slowpaths" in sections:
        results["slowpaths"] = section_slowpaths(folder, settings, log)
    if "couriers" in sections:
        results["couriers"] = section_couriers(folder, settings, log)
    if "syncs" in sections:
        results["syncs"] = section_syncs(folder, settings, log)
    results["meta"]["loadavg_end"] = loadavg()
    if loads:
        results["meta"]["loadavg_1min_during"] = {
            "min": min(loads),
            "max": max(loads),
            "samples": len(loads),
        }
    results["meta"]["duration_s"] = round(time.monotonic() - started, 1)
    return results


def _sizes(text: str) -> tuple[int, ...]:
    values = tuple(int(part.replace("_", "")) for part in text.split(",") if part.strip())
    if not values or min(values) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected positive integers separated by commas: {text!r}"
        )
    return values


def _sections(text: str) -> tuple[str, ...]:
    chosen = tuple(part.strip() for part in text.split(",") if part.strip())
    unknown = sorted(set(chosen) - set(SECTIONS))
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown sections {unknown}; known: {SECTIONS}")
    return chosen


def build_parser() -> argparse.ArgumentParser:
    """The command line of ``python -m bench.perf``."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.perf",
        description="worker.py against the disk's limit and against its peers.",
    )
    parser.add_argument("--dir", type=Path, help="disk folder to work in (default: under /tmp)")
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run")
    parser.add_argument("--json", help="write the JSON here ('-' for stdout)")
    parser.add_argument("--chart", type=Path, help="write the PNG chart here (needs matplotlib)")
    parser.add_argument("--page", type=Path, help="write the user page (markdown) here")
    parser.add_argument("--rows", type=_sizes, help="latency sizes, e.g. 1000,10000,100000")
    parser.add_argument("--sections", type=_sections, default=SECTIONS, help=",".join(SECTIONS))
    parser.add_argument("--couriers", type=_sizes, help="courier process counts, e.g. 1,4,8")
    parser.add_argument("--count", type=int, help="single calls per phase (default 2000)")
    parser.add_argument("--rounds", type=int, help="rounds of limit, worker, peers (default 5)")
    parser.add_argument(
        "--render", type=Path, help="no run: the page (and --page, --chart) of a recorded JSON"
    )
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    base = Settings.quick() if args.quick else Settings()
    changes: dict[str, Any] = {}
    if args.rows:
        changes["rows"] = args.rows
    if args.couriers:
        changes["couriers"] = args.couriers
    if args.count:
        changes["count"] = args.count
    if args.rounds:
        changes["rounds"] = args.rounds
    return Settings(**{**vars(base), **changes})


def _write_page_and_chart(results: dict[str, Any], args: argparse.Namespace) -> None:
    page = report.render(results)
    print(page)
    if args.page is not None:
        args.page.parent.mkdir(parents=True, exist_ok=True)
        args.page.write_text(page, encoding="utf-8")
        print(f"page: {args.page}")
    if args.chart is not None:
        drawn = chart.draw(results, args.chart)
        print(f"chart: {args.chart}" if drawn else "chart: skipped (matplotlib not installed)")


def _write_outputs(results: dict[str, Any], args: argparse.Namespace) -> None:
    _write_page_and_chart(results, args)
    text = json.dumps(results, indent=1)
    if args.json in (None, "-"):
        print(text)
    else:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(text + "\n")
        print(f"json: {args.json}")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark (or ``--render`` a recorded one) and print the page."""
    args = build_parser().parse_args(argv)
    if args.render is not None:
        _write_page_and_chart(json.loads(args.render.read_text()), args)
        return 0
    words = list(sys.argv[1:] if argv is None else argv)
    command = shlex.join(["python", "-m", "bench.perf", *words])
    with work_folder(args.dir) as folder:
        results = run(folder, _settings(args), args.sections, command)
    _write_outputs(results, args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
