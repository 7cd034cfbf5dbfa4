"""Each single call beside the limit, one transaction after the other.

The rounds of ``bench.perf`` time the limit and a call in separate loops, seconds
apart. On a shared disk the load changes between two loops, and a call's ratio to
the limit then moves by 0.2 or more from round to round. Here the two are
interleaved: each step runs ``tx`` limit transactions (``bench.limits``) and then one
step of the case (``tx`` write transactions too), each part timed on its own. Both
meet the disk in the same second, and ``limit seconds / case seconds`` is the case's
transaction rate as a share of the limit.

Every call is measured in three layers, each one step further from the bare
transaction, so that the gap to the limit splits into its causes:

- ``contract``: worker.py's write statement for the call (``_INSERT_JOB``, ``_LEASE``,
  ``_SETTLE``) alone in its transaction, on a file holding only the contract's two
  tables: what any implementation of the contract must write for that call;
- ``indexed``: the same statements on a file made by ``worker.open_queue``, so with
  its partial indexes: what the indexes add;
- ``worker``: the worker.py call itself (validation, the reads, claim's quarantine
  and search): what the code adds.

The calls are ``bench.ops.PHASES``: enqueue a new job, claim the oldest due job,
finish a live lease ``ok``, and a cycle of claim then finish (two transactions). Each
statement's row count and each call's result is checked, so no figure counts a step
that did no work.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import worker
from bench import limits
from bench.measure import T0_MS
from bench.ops import (
    CYCLE_T0_MS,
    LEASE_MS,
    OWNER,
    TTL_MS,
    SingleCalls,
    Steps,
    event,
    run_phases,
)
from bench.rows import CONTRACT_SCHEMA, fill_pending

__all__ = ["LAYERS", "Paired", "WriteStatements", "measure", "paired_steps"]

LAYERS = ("contract", "indexed", "worker")
_TX_PER_STEP = {"enqueue": 1, "claim": 1, "finish": 1, "cycle": 2}
_MAX_ATTEMPTS = 3


@dataclass(frozen=True)
class Paired:
    """``count`` steps of ``tx`` transactions each, beside as many limit transactions."""

    count: int
    tx: int
    limit_seconds: float
    case_seconds: float

    @property
    def ratio(self) -> float:
        """The case's transactions per second as a share of the limit's, side by side."""
        return self.limit_seconds / self.case_seconds if self.case_seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The figure as JSON, with microseconds per transaction of each side."""
        transactions = self.count * self.tx
        return {
            "count": self.count,
            "tx_per_step": self.tx,
            "limit_us_per_tx": round(1e6 * self.limit_seconds / transactions, 1),
            "case_us_per_tx": round(1e6 * self.case_seconds / transactions, 1),
            "ratio": round(self.ratio, 3),
        }


def paired_steps(
    limit: Callable[[], None], step: Callable[[int], int], tx: int, count: int, max_seconds: float
) -> Paired:
    """Run ``count`` steps, each ``tx`` calls of ``limit`` then ``step(i)``, both timed.

    Stops early once ``max_seconds`` have passed; the figure counts the steps done.
    """
    clock = time.perf_counter
    limit_seconds = case_seconds = 0.0
    done = 0
    deadline = clock() + max_seconds
    for i in range(count):
        started = clock()
        for _ in range(tx):
            limit()
        between = clock()
        step(i)
        ended = clock()
        limit_seconds += between - started
        case_seconds += ended - between
        done += 1
        if ended > deadline:
            break
    return Paired(done, tx, limit_seconds, case_seconds)


class WriteStatements:
    """worker.py's write statements alone, as ``bench.ops.Steps``: the same rows the
    calls would write (a new pending job; a lease of seq ``i + 1`` with attempt and
    token 1; that job settled ``done``), each statement in its own transaction, with
    none of the calls' reads, validation or quarantine."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.cycle_rows: list[tuple[int, int]] = []  # (seq, deadline) of each cycle's job

    def _write(self, sql: str, parameters: tuple[Any, ...]) -> None:
        self.con.execute("BEGIN IMMEDIATE")
        try:
            changed = self.con.execute(sql, parameters).rowcount
            if changed != 1:
                raise RuntimeError(f"expected one row written, got {changed}: {sql}")
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise

    def _lease(self, seq: int, now_ms: int, deadline: int) -> None:
        lease_until = min(now_ms + LEASE_MS, deadline)
        self._write(worker._LEASE, (1, 1, OWNER, lease_until, seq))

    def _settle(self, seq: int, now_ms: int) -> None:
        self._write(worker._SETTLE, ("done", None, now_ms, seq))

    def enqueue(self, i: int) -> int:
        job = event(i)
        values = (job["id"], job["qty"], _MAX_ATTEMPTS, T0_MS, T0_MS + TTL_MS)
        self._write(worker._INSERT_JOB, values)
        return 1

    def claim(self, i: int) -> int:
        self._lease(i + 1, T0_MS + 1, T0_MS + TTL_MS)  # a fresh file: job i has seq i + 1
        return 1

    def finish(self, i: int) -> int:
        self._settle(i + 1, T0_MS + 2)
        return 1

    def fill_for_cycle(self, count: int) -> None:
        (before,) = self.con.execute("SELECT coalesce(max(seq), 0) FROM jobs").fetchone()
        fill_pending(self.con, count, CYCLE_T0_MS, prefix="cycle-")
        query = "SELECT seq, deadline FROM jobs WHERE seq > ? ORDER BY seq"
        self.cycle_rows = self.con.execute(query, (before,)).fetchall()

    def cycle(self, i: int) -> int:
        now = CYCLE_T0_MS + 2 * i
        seq, deadline = self.cycle_rows[i]
        self._lease(seq, now, deadline)
        self._settle(seq, now + 1)
        return 1


def _layer(name: str, folder: Path) -> tuple[sqlite3.Connection, Steps]:
    if name == "contract":
        con = limits.connection_in(folder / "contract.sqlite", CONTRACT_SCHEMA)
        return con, WriteStatements(con)
    con = worker.open_queue(folder / f"{name}.sqlite")
    return con, (WriteStatements(con) if name == "indexed" else SingleCalls(con))


def measure(folder: Path, count: int, max_seconds: float) -> dict[str, dict[str, Any]]:
    """Every layer's phases beside the limit: ``{layer: {phase: Paired.as_dict()}}``."""
    bare = limits.bare_connection(folder / "paired-limit.sqlite")
    out: dict[str, dict[str, Any]] = {}
    try:

        def limit() -> None:
            limits.bare_transaction(bare)

        def timer(phase: str, step: Callable[[int], int], n: int) -> Paired:
            return paired_steps(limit, step, _TX_PER_STEP[phase], n, max_seconds)

        for name in LAYERS:
            con, steps = _layer(name, folder)
            try:
                figures = run_phases(steps, count, timer)
            finally:
                con.close()
            out[name] = {phase: figure.as_dict() for phase, figure in figures.items()}
    finally:
        bare.close()
    return out
