"""Claim+finish latency against the number of rows in the queue file.

For each shape (``bench.rows``: ``pending`` and ``history``) and each size, a fresh file
is created by ``worker.open_queue``, filled with direct SQL in one transaction, closed,
and reopened with ``worker.open_queue`` (so whatever it does on open, creating indexes
included, happens as for any existing file). Every file is built first and stays open;
then the cycles run *interleaved*: a block of ``BLOCK`` cycles on each file in turn,
round after round, so that the disk's drift during the run (other work on the machine,
writeback) falls on every size alike instead of on whichever size ran last.

A cycle is one ``claim`` and one ``finish(..., "ok")`` a millisecond later (virtual
time), timed together (``bench.ops.cycle_times``). Each file first runs ``warmup``
untimed cycles, then ``cycles`` timed ones under the contract's ``synchronous=FULL``,
and ``off_cycles`` more with ``PRAGMA synchronous=OFF`` set on the connection for the
block (not durable, not the queue's figure: the cost of the code and page writes
alone, which shows whether the *statements* stay flat when the disk is noisy). Every
ticket is checked: the claim must take the lowest-seq due job, the finish must answer
``done``. The files are removed afterwards.

``foreign_file`` does the same on a file created by someone else: the contract's two
tables and nothing more (no index), filled in the ``history`` shape, then opened by
``worker.open_queue``; it reports the indexes before and after the open and whether
the file got every index a fresh queue file has.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import worker
from bench.backends import Sqlite
from bench.measure import T0_MS, percentile
from bench.ops import Calls, cycle_times
from bench.rows import DUE_ROWS, fill_shape

__all__ = ["foreign_file", "measure_latencies"]

_INDEXES = """SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs'
  AND name NOT LIKE 'sqlite_autoindex_%' ORDER BY name"""


def _index_names(con: sqlite3.Connection) -> list[str]:
    """The named indexes on ``jobs`` (SQLite's automatic ones left out), sorted."""
    return [str(name) for (name,) in con.execute(_INDEXES)]


@dataclass
class _Subject:
    """One latency file: its shape and size, its open connection and its samples."""

    shape: str
    rows: int
    path: str
    con: sqlite3.Connection
    open_s: float
    done: int = 0  # cycles run so far (timed or not): the next due job and the clock
    full_ms: list[float] = field(default_factory=list)
    off_ms: list[float] = field(default_factory=list)

    def run(self, cycles: int, samples: list[float]) -> None:
        """Run ``cycles`` claim+finish cycles; append their times (ms) to ``samples``."""
        first_due = 1 if self.shape == "pending" else self.rows - DUE_ROWS + 1
        ids = iter(range(first_due + self.done, first_due + self.done + cycles))
        samples += cycle_times(
            Calls(worker, self.con),
            self.done,
            cycles,
            lambda taken: taken[0]["id"] == f"job-{next(ids):08d}",  # the lowest-seq due job
        )
        self.done += cycles

    def result(self) -> dict[str, Any]:
        """The subject's figures as JSON."""
        return {
            "shape": self.shape,
            "rows": self.rows,
            "cycles": len(self.full_ms),
            **_summary(self.full_ms),
            "off_cycles": len(self.off_ms),
            **(_summary(self.off_ms, "off_") if self.off_ms else {}),
        }


def _summary(samples: list[float], prefix: str = "") -> dict[str, float]:
    return {
        f"{prefix}p50_ms": round(percentile(samples, 50), 3),
        f"{prefix}p99_ms": round(percentile(samples, 99), 3),
    }


def _check_size(shape: str, rows: int, needed: int) -> None:
    due = rows if shape == "pending" else DUE_ROWS
    if needed > due or rows < DUE_ROWS:
        raise ValueError(
            f"{shape} with {rows} rows has {due} due jobs: too few for {needed} cycles"
            f" (and at least {DUE_ROWS} rows are needed)"
        )


def _build(path: str, shape: str, rows: int, con: sqlite3.Connection | None = None) -> _Subject:
    """Fill the file at ``path`` (a fresh queue file, or ``con``'s) with ``rows`` rows of
    ``shape``, close it, and time the ``open_queue`` that reopens it."""
    con = con or worker.open_queue(path)
    try:
        fill_shape(con, shape, rows, T0_MS)
    finally:
        con.close()
    start = time.perf_counter()
    con = worker.open_queue(path)
    return _Subject(shape, rows, path, con, time.perf_counter() - start)


def measure_latencies(
    folder: Path, sizes: Sequence[int], cycles: int, off_cycles: int, warmup: int, block: int = 20
) -> list[dict[str, Any]]:
    """Latency of claim+finish in both shapes at every size, measured interleaved: timed
    cycles on every file in turn, a block at a time, FULL then OFF blocks."""
    shapes = [(shape, rows) for rows in sizes for shape in ("pending", "history")]
    for shape, rows in shapes:
        _check_size(shape, rows, warmup + cycles + off_cycles)
    files = Sqlite(folder)
    subjects: list[_Subject] = []
    try:
        for shape, rows in shapes:
            subjects.append(_build(files.fresh(f"latency-{shape}-{rows}"), shape, rows))
        for subject in subjects:
            subject.run(warmup, [])
        while any(len(s.full_ms) < cycles or len(s.off_ms) < off_cycles for s in subjects):
            for subject in subjects:
                subject.run(min(block, cycles - len(subject.full_ms)), subject.full_ms)
                off = min(block // 2 or 1, off_cycles - len(subject.off_ms))
                subject.con.execute("PRAGMA synchronous=OFF")
                subject.run(max(off, 0), subject.off_ms)
                subject.con.execute("PRAGMA synchronous=FULL")
        return [subject.result() for subject in subjects]
    finally:
        for subject in subjects:
            subject.con.close()
            files.remove(subject.path)


def foreign_file(folder: Path, rows: int, cycles: int, warmup: int) -> dict[str, Any]:
    """A ``history``-shaped file with only the contract's two tables, opened by open_queue."""
    _check_size("history", rows, warmup + cycles)
    files = Sqlite(folder)
    with files.queue("fresh") as fresh:
        fresh_indexes = _index_names(fresh)
    path = files.fresh(f"foreign-{rows}")
    con = sqlite3.connect(path, isolation_level=None)
    for statement in worker.SCHEMA:  # the contract's two tables, no index
        con.execute(statement)
    before = _index_names(con)
    subject = _build(path, "history", rows, con)
    try:
        after = _index_names(subject.con)
        subject.run(warmup, [])
        subject.run(cycles, subject.full_ms)
    finally:
        subject.con.close()
        files.remove(path)
    return {
        "shape": "history",
        "rows": rows,
        "cycles": len(subject.full_ms),
        **_summary(subject.full_ms),
        "open_s": round(subject.open_s, 3),
        "indexes_before": before,
        "indexes_after": after,
        "gets_indexes": set(fresh_indexes) <= set(after),
    }
