"""Shared pieces of the performance benchmark: timing, percentiles, pragmas, the time base,
the children's messages, the generated sections of a page and the record options of a
bench's command line.

Every throughput figure of ``bench.perf`` is "operations over a fixed count, timed with
``time.perf_counter``", bounded in time as well: ``run_counted`` stops early when a
step is so slow that the count would take longer than ``max_seconds``, and the figure
is then computed from the operations really done.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import queue
import shutil
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "T0_MS",
    "Timed",
    "add_record_options",
    "collect",
    "log_to_stderr",
    "median_of_rounds",
    "percentile",
    "pragmas",
    "record_or_render",
    "run_counted",
    "run_meta",
    "synchronous_name",
    "write_between_markers",
]

# The virtual time base of every single-process measurement: worker.py never reads a
# clock, so a fixed "now" (plus a millisecond per step where the order matters) makes
# the runs independent of the wall clock. Couriers in separate processes use the real
# wall clock instead, their only shared time base.
T0_MS = 1_700_000_000_000

_SYNCHRONOUS = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}


@dataclass(frozen=True)
class Timed:
    """``count`` operations (or jobs) done in ``seconds`` of wall time."""

    count: int
    seconds: float

    @property
    def per_s(self) -> float:
        """Operations per second (0 when nothing was timed)."""
        return self.count / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self, **extra: Any) -> dict[str, Any]:
        """The figure as JSON: count, seconds, per_s and any ``extra`` fields."""
        return {**asdict(self), "per_s": round(self.per_s, 1), **extra}


def run_counted(step: Callable[[int], int], count: int, max_seconds: float) -> Timed:
    """Call ``step(i)`` for ``i`` in ``0 .. count-1``, timing the whole loop.

    ``step`` returns how many jobs it handled (1 for a single call, up to 64 for a
    batch). The loop stops early once ``max_seconds`` have passed, so every
    measurement is bounded in time; the result counts the jobs really handled.
    """
    jobs = 0
    start = time.perf_counter()
    deadline = start + max_seconds
    for i in range(count):
        jobs += step(i)
        if time.perf_counter() > deadline:
            break
    return Timed(jobs, time.perf_counter() - start)


def median_of_rounds(rounds: Sequence[Any]) -> Any:
    """Merge the same JSON tree from several rounds: each figure becomes its median round.

    A figure is a dict with ``count`` and ``per_s`` (``Timed.as_dict``); the round with
    the median ``per_s`` (the lower one for an even number of rounds) is kept whole,
    plus ``rounds_per_s``, every round's rate in run order. Anything else is taken
    from the first round (journal modes, versions: the same in every round).
    """
    first = rounds[0]
    if isinstance(first, dict) and "per_s" in first and "count" in first:
        ordered = sorted(rounds, key=lambda figure: float(figure["per_s"]))
        return {**ordered[(len(ordered) - 1) // 2], "rounds_per_s": [r["per_s"] for r in rounds]}
    if isinstance(first, dict):
        return {key: median_of_rounds([r[key] for r in rounds]) for key in first}
    return first


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, nearest-rank method."""
    if not values:
        raise ValueError("percentile of no values")
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def synchronous_name(value: object) -> str:
    """SQLite's ``PRAGMA synchronous`` number as its name (``2`` -> ``FULL``)."""
    if isinstance(value, int) and value in _SYNCHRONOUS:
        return _SYNCHRONOUS[value]
    return str(value)


def pragmas(con: sqlite3.Connection) -> tuple[str, str]:
    """``(journal_mode, synchronous)`` as ``con`` really uses them, read back from SQLite."""
    journal = con.execute("PRAGMA journal_mode").fetchone()[0]
    sync = con.execute("PRAGMA synchronous").fetchone()[0]
    return str(journal).upper(), synchronous_name(sync)


def collect(results: Any, kind: str, n: int, timeout: float) -> list[Any]:
    """Read ``n`` messages ``(kind, value)`` from the children's queue, waiting at most ``timeout``.

    Returns the values of the messages of ``kind`` in the order they came; fewer
    than ``n`` when the time ran out first. Messages of another kind are dropped.
    """
    got: list[Any] = []
    until = time.monotonic() + timeout
    while len(got) < n:
        try:
            what, value = results.get(timeout=max(0.01, until - time.monotonic()))
        except queue.Empty:
            break
        if what == kind:
            got.append(value)
    return got


def write_between_markers(doc: Path, begin: str, end: str, body: str) -> None:
    """Replace what stands between the lines ``begin`` and ``end`` of ``doc`` with ``body``.

    Raises:
        ValueError: ``doc`` lacks ``begin`` or, after it, ``end``.
    """
    text = doc.read_text(encoding="utf-8")
    head, found, rest = text.partition(begin)
    _, ended, tail = rest.partition(end)
    if not (found and ended):
        raise ValueError(f"{doc} has no {begin!r} ... {end!r} section")
    doc.write_text(f"{head}{begin}\n{body}{end}{tail}", encoding="utf-8")


def add_record_options(parser: argparse.ArgumentParser, doc_help: str) -> None:
    """Add the options of every recorded bench: ``--dir``, ``--json``, ``--doc``, ``--render``."""
    parser.add_argument(
        "--dir", type=Path, help="a folder on a real disk (default: a temporary one)"
    )
    parser.add_argument("--json", type=Path, help="write the record here")
    parser.add_argument("--doc", type=Path, help=doc_help)
    parser.add_argument("--render", type=Path, help="render a recorded JSON, measure nothing")


def record_or_render(
    args: argparse.Namespace,
    prefix: str,
    measure: Callable[[Path], dict[str, Any]],
    render: Callable[[dict[str, Any]], str],
    markers: tuple[str, str],
) -> dict[str, Any]:
    """Read the record of ``--render``, or measure one in ``--dir`` (or a temporary folder).

    ``measure(work)`` runs in the subfolder ``work``, removed afterwards (the temporary
    folder, named with ``prefix``, too); a measured record is written to ``--json``
    when given. The record is then rendered between ``markers`` of ``--doc`` when
    given, and printed. Returns the record.
    """
    if args.render is not None:
        record: dict[str, Any] = json.loads(args.render.read_text(encoding="utf-8"))
    else:
        folder = args.dir or Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
        if str(folder.resolve()).startswith("/dev/shm"):
            print("warning: tmpfs makes every fsync free; these figures say nothing of durability")
        try:
            record = measure(folder / "work")
        finally:
            shutil.rmtree(folder / "work", ignore_errors=True)
            if args.dir is None:
                shutil.rmtree(folder, ignore_errors=True)
        if args.json is not None:
            args.json.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    if args.doc is not None:
        write_between_markers(args.doc, *markers, render(record))
    print(render(record), end="")
    return record


def log_to_stderr(line: str) -> None:
    """Print one progress line on standard error (standard output carries the tables)."""
    print(line, file=sys.stderr)


def run_meta(quick: bool) -> dict[str, Any]:
    """What a record's ``meta`` starts with: the Python version, the CPUs, quick sizes or not."""
    return {"python": platform.python_version(), "cpus": os.cpu_count(), "quick": quick}
