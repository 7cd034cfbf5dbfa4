"""A world between two steps: ``Snapshot`` (both tables, the tickets held, the clock),
its rows by column name (``JobView``, ``AuditView``), and ``EMPTY``, where the search
starts."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any, NamedTuple

from model.queue import Rows
from model.rules import MAX_TIME_MS

Result = tuple[Any, ...]
"""``("returned", value)`` or ``("raised", exception type name)``, as the lockstep compares."""


class JobView(NamedTuple):
    """One row of the ``jobs`` table, by column name."""

    seq: int
    id: str
    qty: int
    status: str
    attempts: int
    max_attempts: int
    token: int
    available_at: int
    deadline: int
    owner: str | None
    lease_until: int | None
    reason: str | None


class AuditView(NamedTuple):
    """One row of the ``redrives`` table, by column name."""

    seq: int
    id: str
    token: int
    at_ms: int
    note: str


@dataclass(frozen=True)
class Snapshot:
    """A world between two steps: both tables, the tickets held (in the order they were
    issued), the clock."""

    now: int
    rows: Rows
    tickets: tuple[dict[str, Any], ...]

    @cached_property
    def jobs(self) -> dict[str, JobView]:
        """The jobs by id."""
        return {values[1]: JobView(*values) for values in self.rows["jobs"]}

    @cached_property
    def audit(self) -> list[AuditView]:
        """The audit rows, in seq order."""
        return [AuditView(*values) for values in self.rows["redrives"]]

    def is_live(self, ticket: dict[str, Any]) -> bool:
        """Would ``finish`` accept ``ticket`` now? Judged from the rows alone, as the
        lockstep judges it: the job is leased to exactly this ticket, before its
        ``lease_until`` and its deadline."""
        job = self.jobs.get(ticket["id"])
        return (
            job is not None
            and job.status == "leased"
            and job.qty == ticket["qty"]
            and job.owner == ticket["owner"]
            and job.token == ticket["token"]
            and job.attempts == ticket["attempt"]
            and job.lease_until == ticket["lease_until"]
            and self.now < ticket["lease_until"]
            and self.now < job.deadline
        )

    def clock_target(self, boundary: str, offset: int) -> int:
        """Where ``advance_clock_to(boundary, offset)`` moves the clock: the earliest
        ``boundary + offset`` of the rows after now; with none, the clock stays."""
        ahead = [
            value + offset
            for job in self.jobs.values()
            if (value := getattr(job, boundary)) is not None
            and self.now < value + offset <= MAX_TIME_MS
        ]
        return min(ahead, default=self.now)

    def delay_for(self, aim: int | str, ticket: dict[str, Any]) -> int:
        """A number, or the delay that lands on (``to_deadline``) or one ms before
        (``before_deadline``) the deadline of the ticket's job (the lockstep's rule)."""
        if isinstance(aim, int):
            return aim
        job = self.jobs.get(ticket["id"])
        deadline = job.deadline if job is not None else self.now
        delay = deadline - self.now - (1 if aim == "before_deadline" else 0)
        return min(max(delay, 0), 60000)


EMPTY = Snapshot(now=0, rows={"jobs": [], "redrives": []}, tickets=())
"""The world the search starts from: an empty queue at time 0, no ticket held."""
