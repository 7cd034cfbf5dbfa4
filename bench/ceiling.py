"""Each single call beside the contract's ceiling for it, one transaction after the other.

A call's ceiling is the same row writes with the same indexes, alone in their
transaction: what any implementation of the contract must write for that call, with
worker.py's partial indexes to keep up, and nothing else (no validation, no reads, no
quarantine, no search). The writes are this module's own SQL against the contract's
schema (docs/spec/CONTRACT.md), on a file made by ``worker.open_queue``, so with the
same indexes as the calls' file:

- ``enqueue``: insert the new pending job;
- ``claim``: lease the oldest due job (by its seq, known beforehand), attempt and token 1;
- ``finish``: settle that lease ``done``;
- ``cycle``: the lease and its settlement, two transactions;
- ``redrive``: the audit row and the job made pending again, one transaction.

Each step times one ceiling transaction (or two, for a cycle) on its file and the
worker.py call (or calls) on another, in turn (the order flips every step), so both
meet the disk in the same second; ``ceiling seconds / call seconds`` is the call's share
of its ceiling. Both files see the same jobs at the same virtual times and end with the
same rows (``rows_of``; a test checks it), so no figure counts a step that did less.
The enqueue ceiling timed beside itself on a second pair of files gives the share two
equal sides get: how finely the method resolves on this disk at this load.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import worker
from bench.measure import T0_MS
from bench.ops import CYCLE_T0_MS, LEASE_MS, OWNER, TTL_MS, SingleCalls, event, run_phases
from bench.rows import fill

__all__ = ["CALLS", "Ceiling", "Paired", "measure", "rows_of"]

CALLS = ("enqueue", "claim", "finish", "cycle", "redrive")
_TX_PER_STEP = {"enqueue": 1, "claim": 1, "finish": 1, "cycle": 2, "redrive": 1}
_MAX_ATTEMPTS = 3  # enqueue's default budget
REDRIVE_T0_MS = CYCLE_T0_MS + 1_000_000  # after every cycle's millisecond
NOTE = "bench"

_INSERT = """INSERT INTO jobs (id, qty, status, attempts, max_attempts, token,
  available_at, deadline, owner, lease_until, reason)
  VALUES (?, ?, 'pending', 0, ?, 0, ?, ?, NULL, NULL, NULL)"""
_LEASE = """UPDATE jobs SET status = 'leased', attempts = ?, token = ?, owner = ?,
  lease_until = ?, reason = NULL WHERE seq = ?"""
_SETTLE_DONE = """UPDATE jobs SET status = 'done', reason = NULL, available_at = ?,
  owner = NULL, lease_until = NULL WHERE seq = ?"""
_AUDIT = "INSERT INTO redrives (id, token, at_ms, note) VALUES (?, ?, ?, ?)"
_REQUEUE = """UPDATE jobs SET status = 'pending', attempts = 0, available_at = ?,
  deadline = ?, owner = NULL, lease_until = NULL, reason = NULL WHERE seq = ?"""


def fill_dead(con: sqlite3.Connection, n: int, now_ms: int, prefix: str = "dead-") -> None:
    """``n`` jobs that spent their budget of 3: each can be redriven."""
    fill(con, n, now_ms, prefix, status="dead", attempts=3, reason="exhausted", ttl_ms=2000)


_ROWS_FROM = "SELECT seq, id, token, deadline FROM jobs WHERE seq > ? ORDER BY seq"
_LAST_SEQ = "SELECT coalesce(max(seq), 0) FROM jobs"


@dataclass(frozen=True)
class Paired:
    """``count`` steps of ``tx`` transactions each, ceiling and call side by side."""

    count: int
    tx: int
    ceiling_seconds: float
    call_seconds: float

    @property
    def share(self) -> float:
        """The call's transactions per second as a share of its ceiling's."""
        return self.ceiling_seconds / self.call_seconds if self.call_seconds > 0 else 0.0

    def as_dict(self) -> dict[str, Any]:
        """The figure as JSON, with microseconds per transaction of each side."""
        transactions = max(1, self.count * self.tx)
        return {
            "count": self.count,
            "tx_per_step": self.tx,
            "ceiling_us_per_tx": round(1e6 * self.ceiling_seconds / transactions, 1),
            "call_us_per_tx": round(1e6 * self.call_seconds / transactions, 1),
            "share": round(self.share, 3),
        }


class Ceiling:
    """The ceiling's writes as ``bench.ops.Steps``, plus ``redrive``: the rows the
    calls write, each call's writes alone in one transaction."""

    def __init__(self, con: sqlite3.Connection) -> None:
        self.con = con
        self.rows: list[tuple[int, str, int, int]] = []  # (seq, id, token, deadline)

    def _transaction(self, *writes: tuple[str, tuple[Any, ...]]) -> None:
        self.con.execute("BEGIN IMMEDIATE")
        try:
            for sql, parameters in writes:
                changed = self.con.execute(sql, parameters).rowcount
                if changed != 1:
                    raise RuntimeError(f"expected one row written, got {changed}: {sql}")
            self.con.execute("COMMIT")
        except BaseException:
            self.con.execute("ROLLBACK")
            raise

    def _lease(self, seq: int, now_ms: int, deadline: int) -> None:
        # every job leased here is fresh: its first attempt, token 1
        self._transaction((_LEASE, (1, 1, OWNER, min(now_ms + LEASE_MS, deadline), seq)))

    def _settle(self, seq: int, now_ms: int) -> None:
        self._transaction((_SETTLE_DONE, (now_ms, seq)))

    def _fill(self, fill: Callable[..., None], count: int, now_ms: int, prefix: str) -> None:
        """``fill`` the file with ``count`` jobs (``bench.rows``); keep their rows."""
        (before,) = self.con.execute(_LAST_SEQ).fetchone()
        fill(self.con, count, now_ms, prefix=prefix)
        self.rows = self.con.execute(_ROWS_FROM, (before,)).fetchall()

    def enqueue(self, i: int) -> int:
        job = event(i)
        values = (job["id"], job["qty"], _MAX_ATTEMPTS, T0_MS, T0_MS + TTL_MS)
        self._transaction((_INSERT, values))
        return 1

    def claim(self, i: int) -> int:
        self._lease(i + 1, T0_MS + 1, T0_MS + TTL_MS)  # a fresh file: job i has seq i + 1
        return 1

    def finish(self, i: int) -> int:
        self._settle(i + 1, T0_MS + 2)
        return 1

    def fill_for_cycle(self, count: int) -> None:
        self._fill(fill, count, CYCLE_T0_MS, "cycle-")

    def cycle(self, i: int) -> int:
        now = CYCLE_T0_MS + 2 * i
        seq, _, _, deadline = self.rows[i]
        self._lease(seq, now, deadline)
        self._settle(seq, now + 1)
        return 1

    def fill_for_redrive(self, count: int) -> None:
        self._fill(fill_dead, count, REDRIVE_T0_MS, "dead-")

    def redrive(self, i: int) -> int:
        seq, job_id, token, _ = self.rows[i]
        now = REDRIVE_T0_MS + i
        audit = (job_id, token, now, NOTE)
        self._transaction((_AUDIT, audit), (_REQUEUE, (now, now + TTL_MS, seq)))
        return 1


class Calls(SingleCalls):
    """worker.py's single calls as ``bench.ops.Steps``, plus ``redrive`` of dead jobs."""

    def fill_for_redrive(self, count: int) -> None:
        fill_dead(self.con, count, REDRIVE_T0_MS, prefix="dead-")

    def redrive(self, i: int) -> int:
        job_id = f"dead-{i + 1:08d}"
        if worker.redrive(self.con, job_id, REDRIVE_T0_MS + i, TTL_MS, NOTE) is not True:
            raise RuntimeError(f"redrive of {job_id} did not return True")
        return 1


def paired_steps(
    first: Callable[[int], int], second: Callable[[int], int], count: int, max_seconds: float
) -> tuple[int, float, float]:
    """Run ``count`` steps, each ``first(i)`` and ``second(i)`` in turn (the order flips
    every step), each timed; ``(steps, first's seconds, second's seconds)``.

    Stops early once ``max_seconds`` have passed; the figure counts the steps done.
    """
    clock = time.perf_counter
    spent = [0.0, 0.0]
    done = 0
    deadline = clock() + max_seconds
    for i in range(count):
        order = ((0, first), (1, second)) if i % 2 == 0 else ((1, second), (0, first))
        for side, step in order:
            started = clock()
            step(i)
            spent[side] += clock() - started
        done += 1
        if clock() > deadline:
            break
    return done, spent[0], spent[1]


def rows_of(con: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of both tables, in seq order: what the two files must agree on."""
    return {
        "jobs": con.execute("SELECT * FROM jobs ORDER BY seq").fetchall(),
        "redrives": con.execute("SELECT * FROM redrives ORDER BY seq").fetchall(),
    }


def measure(
    folder: Path, count: int, max_seconds: float, without_sync: bool = False
) -> dict[str, Any]:
    """Every call beside its ceiling: ``{call: Paired.as_dict()}``, and whether the two
    files ended with the same rows (``same_rows``).

    ``without_sync`` runs both files with ``synchronous=OFF`` (not durable, never the
    queue's figure): what the code costs apart from the syncs.
    """
    suffix = "-off" if without_sync else ""
    ceiling_con = worker.open_queue(folder / f"ceiling{suffix}.sqlite")
    calls_con = worker.open_queue(folder / f"calls{suffix}.sqlite")
    try:
        if without_sync:
            for con in (ceiling_con, calls_con):
                con.execute("PRAGMA synchronous=OFF")
        ceiling, calls = Ceiling(ceiling_con), Calls(calls_con)

        def timer(phase: str, step: Callable[[int], int], n: int) -> Paired:
            done, ceiling_s, call_s = paired_steps(getattr(ceiling, phase), step, n, max_seconds)
            return Paired(done, _TX_PER_STEP[phase], ceiling_s, call_s)

        figures = run_phases(_Both(ceiling, calls), count, timer)
        ceiling.fill_for_redrive(count)
        calls.fill_for_redrive(count)
        figures["redrive"] = timer("redrive", calls.redrive, count)
        same = rows_of(ceiling_con) == rows_of(calls_con)
    finally:
        ceiling_con.close()
        calls_con.close()
    noise = _beside_itself(folder, suffix, count, max_seconds, without_sync)
    return {
        "same_rows": same,
        **{name: figures[name].as_dict() for name in CALLS},
        "ceiling_beside_itself": noise.as_dict(),
    }


def _beside_itself(
    folder: Path, suffix: str, count: int, max_seconds: float, without_sync: bool
) -> Paired:
    """The enqueue ceiling on one file beside the same on another: the share two equal
    sides get, the resolution of the method on this disk at this load."""
    cons = [worker.open_queue(folder / f"twin-{k}{suffix}.sqlite") for k in (1, 2)]
    try:
        if without_sync:
            for con in cons:
                con.execute("PRAGMA synchronous=OFF")
        first, second = (Ceiling(con) for con in cons)
        done, first_s, second_s = paired_steps(first.enqueue, second.enqueue, count, max_seconds)
        return Paired(done, 1, first_s, second_s)
    finally:
        for con in cons:
            con.close()


class _Both(Calls):
    """``run_phases``' steps: the calls, timed beside the ceiling's step of the same
    name; ``fill_for_cycle`` fills both files alike."""

    def __init__(self, ceiling: Ceiling, calls: Calls) -> None:
        super().__init__(calls.con)
        self.tickets = calls.tickets
        self.ceiling = ceiling

    def fill_for_cycle(self, count: int) -> None:
        self.ceiling.fill_for_cycle(count)
        super().fill_for_cycle(count)
