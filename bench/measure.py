"""Shared pieces of the performance benchmark: timing, percentiles, pragmas, the time base.

Every throughput figure of ``bench.perf`` is "operations over a fixed count, timed with
``time.perf_counter``", bounded in time as well: ``run_counted`` stops early when a
step is so slow that the count would take longer than ``max_seconds``, and the figure
is then computed from the operations really done.
"""

from __future__ import annotations

import math
import sqlite3
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

__all__ = [
    "T0_MS",
    "Timed",
    "median_of_rounds",
    "percentile",
    "pragmas",
    "run_counted",
    "synchronous_name",
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
