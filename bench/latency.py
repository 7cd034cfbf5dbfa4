"""Claim+finish latency against the number of rows in the queue file.

For each shape (``bench.rows``: ``pending`` and ``history``) and each size, a fresh file
is created by ``worker.open_queue``, filled with direct SQL in one transaction, closed,
and reopened with ``worker.open_queue`` (so whatever it does on open, creating indexes
included, happens as for any existing file). Every file is built first and stays open;
then the cycles run *interleaved*: a block of ``BLOCK`` cycles on each file in turn,
round after round, so that the disk's drift during the run (other work on the machine,
writeback) falls on every size alike instead of on whichever size ran last.

A cycle is one ``claim`` and one ``finish(..., "ok")`` a millisecond later (virtual
time), timed together with ``time.perf_counter``. Each file first runs ``warmup``
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

import os
import sqlite3
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import worker
from bench.measure import T0_MS, percentile
from bench.rows import DUE_ROWS, fill_shape, status_counts

__all__ = ["foreign_file", "index_names", "measure_latencies"]

OWNER = "latency"
LEASE_MS = 30_000


def index_names(con: sqlite3.Connection) -> list[str]:
    """The named indexes on ``jobs`` (SQLite's automatic ones left out), sorted."""
    rows = con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'jobs'"
        " AND name NOT LIKE 'sqlite_autoindex_%' ORDER BY name"
    ).fetchall()
    return [str(name) for (name,) in rows]


@dataclass
class _Subject:
    """One latency file: its shape and size, its open connection and its samples."""

    shape: str
    rows: int
    path: Path
    con: sqlite3.Connection
    build_s: float
    open_s: float
    counts: dict[str, int]
    done: int = 0  # cycles run so far (timed or not): the next due job and the clock
    full_ms: list[float] = field(default_factory=list)
    off_ms: list[float] = field(default_factory=list)

    def run(self, cycles: int, samples: list[float] | None) -> None:
        """Run ``cycles`` claim+finish cycles; append their times (ms) to ``samples``."""
        first_due = 1 if self.shape == "pending" else self.rows - DUE_ROWS + 1
        for _ in range(cycles):
            now = T0_MS + 2 * self.done
            expected = f"job-{first_due + self.done:08d}"
            start = time.perf_counter()
            ticket = worker.claim(self.con, OWNER, now, LEASE_MS)
            status = worker.finish(self.con, ticket, "ok", now + 1) if ticket else None
            elapsed = time.perf_counter() - start
            if ticket is None or ticket["id"] != expected or status != "done":
                raise RuntimeError(
                    f"{self.shape} {self.rows}: expected {expected} done,"
                    f" got {ticket!r} -> {status!r}"
                )
            self.done += 1
            if samples is not None:
                samples.append(elapsed * 1000)


def _summary(samples: list[float], prefix: str = "") -> dict[str, float]:
    return {
        f"{prefix}p50_ms": round(percentile(samples, 50), 3),
        f"{prefix}p99_ms": round(percentile(samples, 99), 3),
        f"{prefix}mean_ms": round(sum(samples) / len(samples), 3),
        f"{prefix}max_ms": round(max(samples), 3),
    }


def _remove(path: Path) -> None:
    for name in (path, Path(f"{path}-journal")):
        name.unlink(missing_ok=True)


def _check_size(shape: str, rows: int, needed: int) -> None:
    due = rows if shape == "pending" else DUE_ROWS
    if needed > due or rows < DUE_ROWS:
        raise ValueError(
            f"{shape} with {rows} rows has {due} due jobs: too few for {needed} cycles"
            f" (and at least {DUE_ROWS} rows are needed)"
        )


def _build(folder: Path, shape: str, rows: int) -> _Subject:
    """Create, fill, close and reopen the file of ``shape`` with ``rows`` rows."""
    path = folder / f"latency-{shape}-{rows}.sqlite"
    _remove(path)
    start = time.perf_counter()
    con = worker.open_queue(path)
    try:
        fill_shape(con, shape, rows, T0_MS)
    finally:
        con.close()
    build_s = time.perf_counter() - start
    start = time.perf_counter()
    con = worker.open_queue(path)
    open_s = time.perf_counter() - start
    return _Subject(shape, rows, path, con, build_s, open_s, status_counts(con, T0_MS))


def _set_synchronous(con: sqlite3.Connection, value: str) -> None:
    con.execute(f"PRAGMA synchronous={value}")


def _interleave(subjects: list[_Subject], cycles: int, off_cycles: int, block: int) -> None:
    """Timed cycles on every file in turn, a block at a time, FULL then OFF blocks."""
    while any(len(s.full_ms) < cycles or len(s.off_ms) < off_cycles for s in subjects):
        for subject in subjects:
            subject.run(min(block, cycles - len(subject.full_ms)), subject.full_ms)
            off = min(block // 2 or 1, off_cycles - len(subject.off_ms))
            if off > 0:
                _set_synchronous(subject.con, "OFF")
                try:
                    subject.run(off, subject.off_ms)
                finally:
                    _set_synchronous(subject.con, "FULL")


def measure_latencies(
    folder: Path,
    sizes: Sequence[int],
    cycles: int,
    off_cycles: int,
    warmup: int,
    block: int = 20,
) -> list[dict[str, Any]]:
    """Latency of claim+finish in both shapes at every size, measured interleaved."""
    for rows in sizes:
        for shape in ("pending", "history"):
            _check_size(shape, rows, warmup + cycles + off_cycles)
    subjects: list[_Subject] = []
    try:
        for rows in sizes:
            for shape in ("pending", "history"):
                subjects.append(_build(folder, shape, rows))
        for subject in subjects:
            subject.run(warmup, None)
        _interleave(subjects, cycles, off_cycles, block)
        return [_result(subject) for subject in subjects]
    finally:
        for subject in subjects:
            subject.con.close()
            _remove(subject.path)


def _result(subject: _Subject) -> dict[str, Any]:
    return {
        "shape": subject.shape,
        "rows": subject.rows,
        "cycles": len(subject.full_ms),
        **_summary(subject.full_ms),
        "off_cycles": len(subject.off_ms),
        **(_summary(subject.off_ms, "off_") if subject.off_ms else {}),
        "build_s": round(subject.build_s, 3),
        "open_s": round(subject.open_s, 4),
        "file_mb": round(os.path.getsize(subject.path) / 1e6, 1),
        "rows_by_kind": subject.counts,
    }


def foreign_file(folder: Path, rows: int, cycles: int, warmup: int) -> dict[str, Any]:
    """A ``history``-shaped file with only the contract's two tables, opened by open_queue."""
    _check_size("history", rows, warmup + cycles)
    fresh_path = folder / "fresh.sqlite"
    fresh = worker.open_queue(fresh_path)
    fresh_indexes = index_names(fresh)
    fresh.close()
    _remove(fresh_path)
    path = folder / f"foreign-{rows}.sqlite"
    _remove(path)
    con = sqlite3.connect(path, isolation_level=None)
    try:
        for statement in worker.SCHEMA:  # the contract's two tables, no index
            con.execute(statement)
        fill_shape(con, "history", rows, T0_MS)
        before = index_names(con)
    finally:
        con.close()
    try:
        start = time.perf_counter()
        con = worker.open_queue(path)
        open_s = time.perf_counter() - start
        subject = _Subject("history", rows, path, con, 0.0, open_s, status_counts(con, T0_MS))
        try:
            after = index_names(con)
            subject.run(warmup, None)
            subject.run(cycles, subject.full_ms)
        finally:
            con.close()
    finally:
        _remove(path)
    return {
        "shape": "history",
        "rows": rows,
        "cycles": len(subject.full_ms),
        **_summary(subject.full_ms),
        "open_s": round(open_s, 3),
        "indexes_before": before,
        "indexes_after": after,
        "fresh_file_indexes": fresh_indexes,
        "gets_indexes": set(fresh_indexes) <= set(after),
        "works": True,
    }
