"""What the web page reads and writes: its filters, and each view's data in one place.

Every read goes through ``courier.queueview`` and ``courier.attempts`` on a
connection of its own; every redrive through ``courier.commands.redrive.redrive_one``
(one transaction and one audit row each, as ``courier redrive``). Nothing here knows
HTML: ``courier.web.views`` renders what these return.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

from courier import backend, bulk, queueview
from courier.attempts import (
    attempts_of,
    count_dead,
    dead_causes,
    dead_ids,
    history,
    last_attempts_of,
)
from courier.backend import Target
from courier.clock import clock_ms
from courier.commands.redrive import redrive_one
from model.explain import explain

__all__ = ["MAX_BULK", "PAGE_SIZE", "Filters", "WebPage"]

PAGE_SIZE = 50
MAX_BULK = 1000  # jobs one bulk redrive of the page touches at most (the CLI has no cap)
PREVIEW_SHOWN = 20
DEFAULT_TTL_MS = 60_000


@dataclass(frozen=True)
class Filters:
    """Which jobs a list shows (every filter given must match), and which page of them.

    ``cause`` is a dead job's cause as ``courier.attempts.dead_causes`` names it, so it
    goes with dead jobs only. ``after``/``before``: the page after (before) that seq.
    """

    status: str | None = None
    reason: str | None = None
    owner: str | None = None
    prefix: str | None = None
    cause: str | None = None
    after: int | None = None
    before: int | None = None

    @classmethod
    def parse(cls, query: Mapping[str, str]) -> Filters:
        """The filters of a query string (an empty value: no filter).

        Raises:
            ValueError: an unknown status or reason, an owner or prefix that is no
                identifier, a page that is no seq (the message names the field).
        """

        def given(name: str) -> str | None:
            return query.get(name, "").strip() or None

        status, reason = given("status"), given("reason")
        if status is not None and status not in queueview.STATUSES:
            raise ValueError(f"status must be one of {', '.join(queueview.STATUSES)}")
        if reason is not None and reason not in queueview.REASONS:
            raise ValueError(f"reason must be one of {', '.join(queueview.REASONS)}")
        owner, prefix, cause = given("owner"), given("prefix"), given("cause")
        if owner is not None:
            bulk.check_id("owner", owner)
        if prefix is not None:
            bulk.check_id("id prefix", prefix)
        if cause is not None and len(cause) > 200:
            raise ValueError("cause is at most 200 characters")
        pages = {}
        for name in ("after", "before"):
            value = given(name)
            pages[name] = None if value is None else bulk.check_int(name, value, 0, 2**62)
        return cls(status, reason, owner, prefix, cause, pages["after"], pages["before"])

    def query(self, **changes: Any) -> str:
        """The query string of these filters with ``changes`` (``None`` drops a key)."""
        values = {**asdict(self), **changes}
        return urllib.parse.urlencode({k: v for k, v in values.items() if v is not None})

    def first_page(self) -> Filters:
        return replace(self, after=None, before=None)

    def dead(self) -> Filters:
        """The same filters on dead jobs: what a bulk redrive of them touches."""
        return replace(self, status="dead", owner=None, after=None, before=None)


@dataclass
class WebPage:
    """The page's settings (the queue, what it may do, its token), and its reads."""

    queue: Target
    allow_redrive: bool
    allow_remote: bool
    token: str
    ttl_ms: int = DEFAULT_TTL_MS
    port: int = 0
    refresh_s: float = 5.0

    def _now(self, con: Any) -> int:
        return backend.server_clock_ms(con) if backend.is_conninfo(self.queue) else clock_ms()

    def now_ms(self) -> int:
        """The queue's time base now (the server's clock on PostgreSQL)."""
        if not backend.is_conninfo(self.queue):
            return clock_ms()
        con = backend.connect_existing(self.queue)
        try:
            return self._now(con)
        finally:
            con.close()

    def home(self, filters: Filters) -> dict[str, Any]:
        """The front page: the overview, the oldest due job, the dead jobs by cause, and a
        page of the jobs the filters match (with the last cause of each dead one)."""
        con = backend.connect_existing(self.queue)
        try:
            now = self._now(con)
            view = queueview.overview(con, now)
            with queueview.snapshot(con):
                oldest = queueview.oldest_due(con, now)
                matching = dict(status=filters.status, reason=filters.reason)
                matching |= dict(owner=filters.owner, prefix=filters.prefix)
                if filters.cause is None:
                    total = queueview.count_jobs(con, **matching)
                    jobs = queueview.find_jobs(
                        con, **matching, limit=PAGE_SIZE, after=filters.after, before=filters.before
                    )
                else:
                    total, jobs = self._by_cause(con, filters)
        finally:
            con.close()
        last = last_attempts_of(self.queue, [j["id"] for j in jobs if j["status"] == "dead"])
        for job in jobs:
            job["last_attempt"] = last.get(job["id"])
        causes = dead_causes(self.queue) if view["counts"]["dead"] else []
        return {**view, "oldest_due": oldest, "dead_causes": causes, "jobs": jobs, "total": total}

    def _by_cause(self, con: Any, filters: Filters) -> tuple[int, list[dict[str, Any]]]:
        """A page of the dead jobs of one cause (the cause lives in the attempt log)."""
        chosen = (filters.reason, filters.cause, filters.prefix)
        ids = dead_ids(self.queue, *chosen, PAGE_SIZE, filters.after, filters.before)
        rows = [queueview.job(con, job_id) for job_id in ids]
        return count_dead(self.queue, *chosen), [row for row in rows if row is not None]

    def job(self, job_id: str) -> dict[str, Any] | None:
        """One job: its row, the model's explanation, its attempts, its audit rows."""
        con = backend.connect_existing(self.queue)
        try:
            with queueview.snapshot(con):
                now = self._now(con)
                row = queueview.job(con, job_id)
                audit = queueview.redrives(con, job_id)
        finally:
            con.close()
        if row is None:
            return None
        return {
            "now_ms": now,
            "job": row,
            "explanation": explain(row, now),
            "attempts": history(attempts_of(self.queue, job_id)),
            "redrives": audit,
        }

    def matching_dead(self, filters: Filters) -> list[str]:
        """The ids of the dead jobs a bulk redrive of ``filters`` touches (at most
        ``MAX_BULK + 1``, to tell that there are more)."""
        chosen = filters.dead()
        return dead_ids(self.queue, chosen.reason, chosen.cause, chosen.prefix, MAX_BULK + 1)

    def count_matching_dead(self, filters: Filters) -> int:
        """How many dead jobs ``filters`` match in all (a bulk redrive takes ``MAX_BULK``)."""
        chosen = filters.dead()
        return count_dead(self.queue, chosen.reason, chosen.cause, chosen.prefix)

    def redrive(self, job_id: str, note: str) -> dict[str, Any]:
        """Redrive one dead job with ``note``; the audit row it wrote.

        Raises:
            ValueError: no such job, or it is not dead (nothing changed).
        """
        con = backend.open_existing(self.queue)
        try:
            return redrive_one(con, self.queue, job_id, self.ttl_ms, note)
        finally:
            con.close()

    def redrive_all(self, filters: Filters, note: str) -> list[dict[str, Any]]:
        """Redrive every dead job ``filters`` match (at most ``MAX_BULK``), each in its
        own transaction with its own audit row; a job no longer dead is passed over.
        The audit rows written, in order."""
        ids = self.matching_dead(filters)[:MAX_BULK]
        rows = []
        con = backend.open_existing(self.queue)
        try:
            for job_id in ids:
                try:
                    rows.append(redrive_one(con, self.queue, job_id, self.ttl_ms, note))
                except ValueError:
                    continue  # no longer dead: someone else redrove it meanwhile
        finally:
            con.close()
        return rows

    def audit_range(self, first: int, last: int) -> list[dict[str, Any]]:
        """The audit rows with seq ``first`` to ``last`` (what a banner reports)."""
        con = backend.connect_existing(self.queue)
        try:
            rows = [queueview.redrive_row(con, seq) for seq in range(first, last + 1)]
        finally:
            con.close()
        return [row for row in rows if row is not None]
