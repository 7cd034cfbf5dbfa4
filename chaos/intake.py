"""The soak's producer: the planned enqueue calls, fed at a bounded pace and backlog.

At most ``jobs_per_s`` calls per second (after a first batch), so that the run lasts
about as long, and sees about as much chaos, on a fast machine as on a slow one, as
long as the couriers keep up; and at most ``BACKLOG_PER_COURIER`` unfinished jobs
per courier, so that a slow machine measures delivery, not deadlines (the contract
caps a ttl at 60 s). The last ``RESERVE_SHARE`` of the calls wait for ``release()``:
the driver releases them once the first round of chaos has been played, so that
deliveries are still flowing when each kind of chaos happens, however short the run.
Every answer is checked against the plan (``new``, ``retry`` or ``conflict``).
The queue is a ``chaos.store`` one (a SQLite file or a PostgreSQL database), and
each enqueue's ``now_ms`` is that queue's clock.
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import worker
from chaos.schedule import IntakeOp
from chaos.store import Store

__all__ = ["Intake"]

INTAKE_BATCH = 50
BACKLOG_PER_COURIER = 40
RESERVE_SHARE = 0.1  # held back until the first round of chaos has been played


class Intake:
    """Feeds ``ops`` into the queue ``store`` for ``couriers`` couriers."""

    def __init__(self, store: Store, ops: list[IntakeOp], couriers: int, jobs_per_s: float) -> None:
        self.store = store
        self.ops = ops
        self.backlog = couriers * BACKLOG_PER_COURIER
        self.jobs_per_s = jobs_per_s
        self._started = time.monotonic()
        self.accepted: dict[str, int] = {}  # id -> qty of every job the queue took
        self.outcomes: Counter[str] = Counter()
        self.surprises: list[str] = []
        self.busy = 0
        self._next = 0
        self._limit = len(ops) - int(len(ops) * RESERVE_SHARE)
        self._con = store.connect()

    @property
    def done(self) -> bool:
        return self._next >= len(self.ops)

    def release(self) -> None:
        """Let the reserved calls in."""
        self._limit = len(self.ops)

    def feed(self) -> int | None:
        """Enqueue up to ``INTAKE_BATCH`` calls, as far as the pace and the backlog allow.

        Returns the number of unfinished jobs, the new ones included, or ``None`` if
        the file was busy (nothing is lost: the same call is tried again next time).
        """
        try:
            counts = self.store.status_counts(self._con)
            unfinished = counts["pending"] + counts["leased"]
            paced = int((time.monotonic() - self._started) * self.jobs_per_s) + INTAKE_BATCH
            room = min(self.backlog - unfinished, INTAKE_BATCH, paced - self._next)
            for _ in range(max(0, room)):
                if self._next >= self._limit:
                    break
                unfinished += self._enqueue(self.ops[self._next])
                self._next += 1
        except Exception as error:
            if not self.store.is_busy(error):
                raise
            self.busy += 1
            return None
        return unfinished

    def _enqueue(self, op: IntakeOp) -> bool:
        """Make one planned enqueue call and check its answer; ``True`` for a new job."""
        event = {"id": op.job_id, "qty": op.qty}
        try:
            now_ms = self.store.now_ms(self._con)
            added = self.store.module.enqueue(self._con, event, now_ms, op.ttl_ms, op.max_attempts)
            got = "new" if added else "retry"
        except worker.Conflict:
            got = "conflict"
        self.outcomes[got] += 1
        if got != op.expect:
            self.surprises.append(f"{op.job_id} qty {op.qty}: expected {op.expect}, got {got}")
        if got == "new":
            self.accepted[op.job_id] = op.qty
        return got == "new"

    def status_counts(self) -> dict[str, int] | None:
        """Jobs per status, or ``None`` if the file stayed busy."""
        try:
            return self.store.status_counts(self._con)
        except Exception as error:
            if not self.store.is_busy(error):
                raise
            return None

    def dead_jobs(self) -> list[dict[str, Any]]:
        """The dead jobs, or none if the file stayed busy."""
        try:
            return self.store.dead_jobs(self._con)
        except Exception as error:
            if not self.store.is_busy(error):
                raise
            return []

    def close(self) -> None:
        self._con.close()
