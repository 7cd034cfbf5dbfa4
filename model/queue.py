"""The queue in memory: ``worker.py``'s operations, run on the lifecycle machine.

``QueueModel`` has the same operations as ``worker.py`` with the same arguments
(minus ``con``), results and exceptions, so a test can run both side by side
and compare every result and every ``rows()``. The rules it keeps:

1. Every argument is checked against ``model.rules.ARGUMENT_RULES`` before
   anything changes; a malformed one raises ``ValueError``. Inputs are never
   mutated and every returned dict is fresh.
2. Every write is all or nothing (``_write_transaction``), like one
   ``BEGIN IMMEDIATE`` transaction: an error before the commit point, fault
   hooks included, restores every job (its lifecycle state too) and the audit
   log, then propagates unchanged; an error from ``after-commit`` keeps the
   new state.
3. A job's fields change only in the lifecycle's effects (``model.job``); this
   module only decides which triggers to try, in which order, on which jobs.
4. Fault hooks fire only on the path that made the change they name:
   ``after-claim``, ``after-finish``, ``after-audit``, ``after-redrive``, then
   ``after-commit``. ``claim`` -> ``None`` and ``finish`` -> ``False`` call none.
5. Row numbers are what SQLite's AUTOINCREMENT gives committed inserts: 1, 2,
   3, ... A rolled-back insert uses no number (its ``sqlite_sequence`` update
   rolls back too), so ``seq`` is always the row's position plus one.
6. A batch (``enqueue_many``, ``claim_many``, ``finish_many``; see
   ``docs/batches.md``) is the single calls one after another at the same
   ``now_ms``, inside one write: the whole batch is checked first, each item
   is then applied by the very code the single call uses, and the hooks fire
   once for the whole batch, only if something changed.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator
from typing import Any, NamedTuple

from model.job import Call, Job, JobRow, fire_first, new_machine
from model.lifecycle import (
    CLAIM_ORDERS,
    CLAIM_TRIGGERS,
    FINISH_TRIGGERS,
    QUARANTINE_TRIGGERS,
    REDRIVE_TRIGGERS,
)
from model.rules import check_arguments
from worker import BadAck, Conflict, Permanent, Retryable

Fault = Callable[[str], object]
Clock = Callable[[], int]
Send = Callable[[dict[str, Any]], object]

RETRY_BASE_MS = 100
RETRY_CAP_MS = 1000

Rows = dict[str, list[tuple[Any, ...]]]
"""``rows()``: ``{"jobs": [...], "redrives": [...]}``, plain tuples in column order, by seq."""

RedriveRow = tuple[int, str, int, int, str]


class Redrive(NamedTuple):
    """One row of the ``redrives`` audit table: who was re-queued, from which token, when, why."""

    seq: int
    id: str
    token: int
    at_ms: int
    note: str

    def row(self) -> RedriveRow:
        """The audit row as a plain tuple, in column order: seq, id, token, at_ms, note."""
        return (self.seq, self.id, self.token, self.at_ms, self.note)


# A deliberate copy of worker.py's _Hooks (pgworker.py runs worker.py's): the model
# restates the hook rule on its own (rule 4 above) rather than importing the code it checks.
class _Hooks:
    """The fault hooks of one write: only a path that made a change arms ``after-commit``."""

    def __init__(self, fault: Fault | None) -> None:
        self._fault = fault
        self.armed = False

    def reached(self, point: str) -> None:
        """Call ``fault(point)`` for a change just made (before the commit point)."""
        self.armed = True
        if self._fault is not None:
            self._fault(point)

    def committed(self) -> None:
        """Call ``fault('after-commit')`` if this write made a change."""
        if self.armed and self._fault is not None:
            self._fault("after-commit")


def retry_delay(attempt: int, base_ms: int, cap_ms: int, jitter: float) -> int:
    """Return ``floor(min(cap_ms, base_ms * 2**(attempt-1)) * jitter)``.

    ``attempt`` is 1-16, ``base_ms`` 1-60000, ``cap_ms`` base_ms-60000 (exact
    ints); ``jitter`` is the caller's random ratio, an exact int or float,
    finite, 0-1. The cap applies first, then the ratio, then the floor.

    Raises:
        ValueError: a malformed argument.
    """
    check_arguments(attempt=attempt, base_ms=base_ms, cap_ms=cap_ms, jitter=jitter)
    capped: int = min(cap_ms, base_ms * 2 ** (attempt - 1))
    return math.floor(capped * jitter)


class QueueModel:
    """The whole queue: its jobs in seq order and its redrive audit log, nothing else.

    Its jobs share one lifecycle machine (``model.job.new_machine``): one
    machine per queue, never one per job.

    ``claim_order`` is the backend's row of ``model.lifecycle.CLAIM_ORDERS``:
    ``strict`` (SQLite) or ``relaxed`` (PostgreSQL), whose claims pass over the jobs
    declared ``held_elsewhere``. With nothing held the two are the same.

    Raises:
        ValueError: an unknown claim order.
    """

    def __init__(self, claim_order: str = "strict") -> None:
        if claim_order not in CLAIM_ORDERS:
            known = sorted(CLAIM_ORDERS)
            raise ValueError(f"claim order must be one of {known}, not {claim_order!r}")
        self.claim_order = claim_order
        self._lifecycle = new_machine()
        self._jobs: dict[str, Job] = {}
        self._redrives: list[Redrive] = []
        self._held: frozenset[str] = frozenset()

    @classmethod
    def from_rows(cls, rows: Rows, claim_order: str = "strict") -> QueueModel:
        """The queue whose ``rows()`` are ``rows``: each job put back in its lifecycle
        state, the audit log as it was. ``QueueModel.from_rows(q.rows())`` behaves as
        ``q`` from then on (the queue's whole state is its two tables)."""
        queue = cls(claim_order)
        for values in rows["jobs"]:
            row: JobRow = tuple(values)
            job = Job(row[0], row[1], row[2], row[5], 0, 0)
            queue._lifecycle.add_model(job)
            job.restore(row)
            queue._jobs[job.id] = job
        queue._redrives = [Redrive(*values) for values in rows["redrives"]]
        return queue

    def held_elsewhere(self, job_ids: Iterable[str]) -> None:
        """Declare the jobs ``job_ids`` locked by overlapping calls, for the claims that
        follow (``relaxed`` order only): both steps of a claim pass over them, as
        ``FOR UPDATE SKIP LOCKED`` does. An empty collection releases them.

        Raises:
            ValueError: a job held under the ``strict`` order, where no claim ever
                meets a row held by another call.
        """
        held = frozenset(job_ids)
        if held and self.claim_order != "relaxed":
            raise ValueError(f"a {self.claim_order} claim order holds no rows elsewhere")
        self._held = held

    def quarantinable(self, now_ms: int) -> list[str]:
        """The ids of the jobs a claim at ``now_ms`` would quarantine, in seq order."""
        call = Call(now_ms=now_ms)
        return [job.id for job in self._jobs.values() if _may_fire(job, QUARANTINE_TRIGGERS, call)]

    def claimable(self, now_ms: int) -> list[str]:
        """The ids of the jobs a claim at ``now_ms`` may lease once its quarantine is
        done (``claim`` or ``reclaim`` fires on them), in seq order."""
        call = Call(now_ms=now_ms)
        return [
            job.id
            for job in self._jobs.values()
            if not _may_fire(job, QUARANTINE_TRIGGERS, call)
            and _may_fire(job, CLAIM_TRIGGERS, call)
        ]

    # --- 3. enqueue ----------------------------------------------------------

    def enqueue(
        self, event: dict[str, Any], now_ms: int, ttl_ms: int, max_attempts: int = 3
    ) -> bool:
        """Add the job ``event`` (exactly ``{"id", "qty"}``) as pending.

        Returns ``True`` for a new job (attempts 0, token 0, available at
        ``now_ms``, deadline ``now_ms + ttl_ms``) and ``False`` for an intake
        retry of the same id and qty, which keeps the whole existing row.

        Raises:
            Conflict: the id exists with another qty; nothing changed.
            ValueError: a malformed argument; nothing changed.
        """
        check_arguments(event=event, now_ms=now_ms, ttl_ms=ttl_ms, max_attempts=max_attempts)
        return self._admit(event, now_ms, ttl_ms, max_attempts)

    def enqueue_many(
        self, events: list[dict[str, Any]], now_ms: int, ttl_ms: int, max_attempts: int = 3
    ) -> list[bool | Conflict]:
        """``enqueue`` each event in list order, in one write; one result per event.

        ``True`` for a new job, ``False`` for an intake retry (of a job from
        before the batch or from earlier in it), and for a conflicting qty the
        ``Conflict`` that ``enqueue`` would raise, returned instead: nothing is
        written for that event and the others still apply. No hooks; an empty
        list returns ``[]``.

        Raises:
            ValueError: a malformed argument, the events checked one by one
                (``events[3]['qty']``); nothing changed.
        """
        check_arguments(events=events, now_ms=now_ms, ttl_ms=ttl_ms, max_attempts=max_attempts)
        results: list[bool | Conflict] = []
        with self._write_transaction(fault=None):
            for event in events:
                try:
                    results.append(self._admit(event, now_ms, ttl_ms, max_attempts))
                except Conflict as conflict:
                    results.append(conflict)
        return results

    def _admit(self, event: dict[str, Any], now_ms: int, ttl_ms: int, max_attempts: int) -> bool:
        """``enqueue`` after its checks: insert a new job, or recognise an intake retry.

        Raises:
            Conflict: the id exists with another qty; nothing changed.
        """
        job_id, qty = event["id"], event["qty"]
        existing = self._jobs.get(job_id)
        if existing is None:
            job = Job(len(self._jobs) + 1, job_id, qty, max_attempts, now_ms, ttl_ms)
            self._lifecycle.add_model(job)
            self._jobs[job_id] = job
            return True
        if existing.qty == qty:
            return False
        raise Conflict(f"job {job_id!r} exists with qty {existing.qty}, not {qty}")

    # --- 4. claim ------------------------------------------------------------

    def claim(
        self, owner: str, now_ms: int, lease_ms: int = 1000, fault: Fault | None = None
    ) -> dict[str, Any] | None:
        """Quarantine what can no longer succeed, then lease the oldest claimable job.

        In one write: every job, in seq order, tries ``quarantine_deadline``
        then ``quarantine_exhausted``; then the lowest-seq job for which
        ``claim`` (pending) or ``reclaim`` (expired lease) fires is leased to
        ``owner`` with a new fencing token.

        Returns the ticket ``{id, qty, owner, token, attempt, lease_until}``,
        or ``None`` if nothing was claimable; the quarantine is kept either way
        and ``None`` calls no hook. Hooks: ``after-claim``, then ``after-commit``.

        Raises:
            ValueError: a malformed argument; nothing changed.
        """
        check_arguments(owner=owner, now_ms=now_ms, lease_ms=lease_ms, fault=fault)
        call = Call(now_ms=now_ms, owner=owner, lease_ms=lease_ms)
        with self._write_transaction(fault) as hooks:
            self._quarantine(call)
            job = self._lease_first_claimable(call)
            if job is None:
                return None
            hooks.reached("after-claim")
            return job.ticket()

    # The contract's signature, deliberately the same as worker.claim_many's (minus con).
    def claim_many(
        self,
        owner: str,
        now_ms: int,
        limit: int,
        lease_ms: int = 1000,
        fault: Fault | None = None,
    ) -> list[dict[str, Any]]:
        """``claim`` up to ``limit`` times at ``now_ms`` in one write; stop at the first ``None``.

        The quarantine runs once (a second one at the same ``now_ms`` would
        find nothing more: every lease just taken ends after ``now_ms``), then
        the lowest-seq claimable job is leased, again and again. Returns the
        tickets in claim order; ``[]`` when nothing was claimable, the
        quarantine kept all the same.

        Hooks, only if a ticket was issued: ``after-claim`` once after the
        last lease, then ``after-commit`` once.

        Raises:
            ValueError: a malformed argument; nothing changed.
        """
        check_arguments(owner=owner, now_ms=now_ms, limit=limit, lease_ms=lease_ms, fault=fault)
        call = Call(now_ms=now_ms, owner=owner, lease_ms=lease_ms)
        tickets: list[dict[str, Any]] = []
        with self._write_transaction(fault) as hooks:
            self._quarantine(call)
            while len(tickets) < limit:
                job = self._lease_first_claimable(call)
                if job is None:
                    break
                tickets.append(job.ticket())
            if tickets:
                hooks.reached("after-claim")
        return tickets

    def _quarantine(self, call: Call) -> None:
        """Move to ``dead`` every pending job and expired lease that can no longer succeed
        (passing over the jobs held elsewhere)."""
        for job in self._jobs.values():
            if job.id not in self._held:
                fire_first(job, QUARANTINE_TRIGGERS, call)

    def _lease_first_claimable(self, call: Call) -> Job | None:
        """Lease the lowest-seq job that ``claim`` or ``reclaim`` fires on (passing over the
        jobs held elsewhere); ``None`` if none."""
        for job in self._jobs.values():
            if job.id not in self._held and fire_first(job, CLAIM_TRIGGERS, call) is not None:
                return job
        return None

    # --- 5. finish -----------------------------------------------------------

    def finish(
        self,
        ticket: dict[str, Any],
        outcome: str,
        now_ms: int,
        delay_ms: int = 0,
        fault: Fault | None = None,
    ) -> str | bool:
        """Record the ``outcome`` (``ok``, ``retry`` or ``permanent``) of a live ticket.

        The first of ``FINISH_TRIGGERS[outcome]`` whose guards hold fires:
        ``ok`` -> done; ``permanent`` -> dead/permanent; ``retry`` ->
        dead/exhausted if the budget is spent, else dead/deadline if
        ``now_ms + delay_ms >= deadline``, else pending/retry available at
        ``now_ms + delay_ms``. Returns the new status.

        Returns ``False``, changing nothing and calling no hook, when the ticket
        is not live: no such job, not leased, any ticket field differs, or
        ``now_ms >= lease_until`` or ``now_ms >= deadline``.
        Hooks: ``after-finish``, then ``after-commit``.

        Raises:
            ValueError: a malformed argument; nothing changed.
        """
        check_arguments(
            ticket=ticket, outcome=outcome, now_ms=now_ms, delay_ms=delay_ms, fault=fault
        )
        with self._write_transaction(fault) as hooks:
            status = self._settle(ticket, outcome, now_ms, delay_ms)
            if status is False:
                return False
            hooks.reached("after-finish")
            return status

    def finish_many(
        self, results: list[dict[str, Any]], now_ms: int, fault: Fault | None = None
    ) -> list[str | bool]:
        """``finish`` each item ``{ticket, outcome, delay_ms}`` in list order, in one write.

        One result per item: the new status, or ``False`` for a ticket that is
        not live, including one already finished earlier in the same batch.

        Hooks, only if an item changed a job: ``after-finish`` once after the
        last update, then ``after-commit`` once.

        Raises:
            ValueError: a malformed argument, the results checked one by one
                (``results[3]['ticket']['token']``); nothing changed.
        """
        check_arguments(results=results, now_ms=now_ms, fault=fault)
        statuses: list[str | bool] = []
        with self._write_transaction(fault) as hooks:
            for result in results:
                statuses.append(
                    self._settle(result["ticket"], result["outcome"], now_ms, result["delay_ms"])
                )
            if any(status is not False for status in statuses):
                hooks.reached("after-finish")
        return statuses

    def _settle(
        self, ticket: dict[str, Any], outcome: str, now_ms: int, delay_ms: int
    ) -> str | bool:
        """``finish`` after its checks: the new status, or ``False`` for a ticket not live.

        The first of ``FINISH_TRIGGERS[outcome]`` whose guards hold fires; if
        none does, nothing changed.
        """
        call = Call(now_ms=now_ms, ticket=dict(ticket), delay_ms=delay_ms)
        job = self._jobs.get(ticket["id"])
        if job is None or fire_first(job, FINISH_TRIGGERS[outcome], call) is None:
            return False
        return job.state

    # --- 6. redrive ----------------------------------------------------------

    def redrive(
        self, job_id: str, now_ms: int, ttl_ms: int, note: str, fault: Fault | None = None
    ) -> bool:
        """Re-queue the dead job ``job_id`` with a renewed budget; return ``True``.

        In one write and in this order: the audit row (id, current token,
        ``at_ms=now_ms``, note) -> ``after-audit`` -> ``redrive`` fires (pending,
        attempts 0, available now, deadline ``now_ms + ttl_ms``, no owner,
        lease or reason; qty, max_attempts and token kept) -> ``after-redrive``
        -> commit -> ``after-commit``. Never an audit row without its redrive,
        nor a redrive without its audit row.

        Raises:
            ValueError: a malformed argument, or no such job, or the job is not
                dead; nothing changed, no audit row and no hook.
        """
        check_arguments(job_id=job_id, now_ms=now_ms, ttl_ms=ttl_ms, note=note, fault=fault)
        call = Call(now_ms=now_ms, ttl_ms=ttl_ms)
        job = self._jobs.get(job_id)
        if job is None:
            raise ValueError(f"no job {job_id!r} to redrive")
        if not job.may_trigger(REDRIVE_TRIGGERS[0], call):
            raise ValueError(f"job {job_id!r} is {job.state}, only a dead job can be redriven")
        with self._write_transaction(fault) as hooks:
            self._redrives.append(Redrive(len(self._redrives) + 1, job_id, job.token, now_ms, note))
            hooks.reached("after-audit")
            fire_first(job, REDRIVE_TRIGGERS, call)
            hooks.reached("after-redrive")
        return True

    # --- 7. run_once ---------------------------------------------------------

    def run_once(
        self, owner: str, clock: Clock, send: Send, jitter: float, lease_ms: int = 1000
    ) -> dict[str, Any] | None:
        """Claim one job at ``clock()``, deliver it with ``send``, finish it at ``clock()``.

        ``jitter`` (then every other argument) is checked before ``clock()`` is
        read. No claimable job: ``None``, and ``send`` is not called. Otherwise
        ``send`` gets a fresh ``{id, qty}`` once; only an exact ``True`` is
        ``ok``, ``Retryable`` is ``retry`` with delay
        ``retry_delay(attempt, 100, 1000, jitter)``, ``Permanent`` is
        ``permanent``. Then ``clock()`` is read again and the ticket finished at
        that time. Returns ``{"id", "token", "status"}``, status ``"stale"``
        when ``finish`` returned ``False``.

        Raises:
            ValueError: a malformed argument (nothing changed, ``clock`` not
                called); or the second ``clock()`` reading is malformed or
                earlier than the first (the claim stays).
            BadAck: ``send`` returned anything but ``True``; no second reading,
                the job stays leased.
            Anything else ``send`` raises (``BaseException`` included)
                propagates untouched: no second reading, the job stays leased.
        """
        check_arguments(jitter=jitter, owner=owner, lease_ms=lease_ms, clock=clock, send=send)
        claimed_at = clock()
        ticket = self.claim(owner, claimed_at, lease_ms)
        if ticket is None:
            return None
        outcome, delay_ms = _deliver(send, ticket, jitter)
        finished_at = clock()
        check_arguments(**{"second clock()": finished_at})
        if finished_at < claimed_at:
            raise ValueError(f"clock went backwards: {finished_at} after {claimed_at}")
        status = self.finish(ticket, outcome, finished_at, delay_ms)
        return {"id": ticket["id"], "token": ticket["token"], "status": status or "stale"}

    # --- the tables ----------------------------------------------------------

    def rows(self) -> Rows:
        """Both tables as SQLite would return them: plain tuples in column order, by seq.

        ``jobs``: seq, id, qty, status, attempts, max_attempts, token,
        available_at, deadline, owner, lease_until, reason. ``redrives``: seq,
        id, token, at_ms, note.
        """
        return {
            "jobs": [job.row() for job in self._jobs.values()],
            "redrives": [audit.row() for audit in self._redrives],
        }

    # --- all or nothing --------------------------------------------------------

    @contextlib.contextmanager
    def _write_transaction(self, fault: Fault | None) -> Iterator[_Hooks]:
        """Run the body as one all-or-nothing write, like ``BEGIN IMMEDIATE ... COMMIT``.

        The commit point is the end of the body. Any exception before it
        (``BaseException`` included) restores the state from before the body
        and propagates unchanged; after it, ``after-commit`` runs if the body
        reached a change point, and its error propagates with the state kept.
        """
        hooks = _Hooks(fault)
        saved = self._snapshot()
        try:
            yield hooks
        except BaseException:
            self._restore(saved)
            raise
        hooks.committed()

    def _snapshot(self) -> tuple[list[JobRow], int]:
        """Every job's row (its lifecycle state included) and the audit log's length."""
        return [job.row() for job in self._jobs.values()], len(self._redrives)

    def _restore(self, saved: tuple[list[JobRow], int]) -> None:
        """Undo a write: jobs and audit rows only get appended inside one, so drop
        the new ones (their seq numbers come back) and put back every old row."""
        rows, audit_count = saved
        for job in list(self._jobs.values())[len(rows) :]:
            self._lifecycle.remove_model(job)
            del self._jobs[job.id]
        for job, row in zip(self._jobs.values(), rows, strict=True):
            job.restore(row)
        del self._redrives[audit_count:]


def _may_fire(job: Job, triggers: tuple[str, ...], call: Call) -> bool:
    """Whether one of ``triggers`` would fire on ``job`` for ``call`` (nothing changes)."""
    return any(job.may_trigger(trigger, call) for trigger in triggers)


# A deliberate copy of worker.py's _deliver (the classification of a send's answer):
# the model restates the contract's rule rather than importing the code it checks.
def _deliver(send: Send, ticket: dict[str, Any], jitter: float) -> tuple[str, int]:
    """Call ``send`` once with a fresh ``{id, qty}``; return ``(outcome, delay_ms)``.

    Only an exact ``True`` is ``ok``; ``Retryable`` is ``retry`` with the capped,
    jittered backoff of this attempt; ``Permanent`` is ``permanent``.

    Raises:
        BadAck: ``send`` returned anything but ``True``.
        Any other exception from ``send``, untouched.
    """
    try:
        ack = send({"id": ticket["id"], "qty": ticket["qty"]})
    except Retryable:
        return "retry", retry_delay(ticket["attempt"], RETRY_BASE_MS, RETRY_CAP_MS, jitter)
    except Permanent:
        return "permanent", 0
    if ack is not True:
        raise BadAck(f"send must return exactly True, got {ack!r}")
    return "ok", 0
