"""One job of the queue: a row of the ``jobs`` table driven by the lifecycle machine.

``Job`` holds the twelve columns of a row; its ``state`` is the ``status`` column
and is moved only by the ``transitions`` machine built from ``model.lifecycle``.
Its methods are the vocabulary of that machine:

- **guards** (``is_due``, ``lease_expired``, ``deadline_passed``, ...) answer one
  question about the row at the time of the call, and change nothing;
- **effects** (``take_lease``, ``release_lease``, ``available_now``, ...) run after
  a transition and each owns one field rule.

Every guard and effect takes the ``Call`` that fired the trigger, which carries
the time (``now_ms``) and whatever else the queue operation was given. The first
line of each docstring is what ``docs/state-machine.md`` prints for it.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from model.lifecycle import EFFECTS, INITIAL, STATES, TRANSITIONS

if TYPE_CHECKING:
    from transitions import Machine

JobRow = tuple[int, str, int, str, int, int, int, int, int, str | None, int | None, str | None]
"""A row of the ``jobs`` table: seq, id, qty, status, attempts, max_attempts, token,
available_at, deadline, owner, lease_until, reason."""

# The job's attributes in the row's column order (``state`` is the status column): a
# deliberate restatement of the contract's jobs table, not an import of
# courier.queueview.JOB_COLUMNS, so that the model stays independent of the code it checks.
ROW_FIELDS = (
    "seq",
    "id",
    "qty",
    "state",
    "attempts",
    "max_attempts",
    "token",
    "available_at",
    "deadline",
    "owner",
    "lease_until",
    "reason",
)
_ROW = operator.attrgetter(*ROW_FIELDS)  # the row in one call (the checker asks often)

BOUNDARIES = ("available_at", "deadline", "lease_until")
"""The row's times. Every guard compares the call's ``now_ms`` with one of them (or
reads no time at all), so between two of them no guard changes its answer; the
explorer moves its clock onto them and ``model.explain`` looks ahead to them."""


@dataclass(frozen=True, slots=True)
class Call:
    """The arguments of the queue operation that fires a transition.

    ``now_ms`` is always given (time is a parameter, never a global); the rest
    only by the operations that have them: ``owner`` and ``lease_ms`` by claim,
    ``ticket`` and ``delay_ms`` by finish, ``ttl_ms`` by redrive.
    """

    now_ms: int
    owner: str | None = None
    lease_ms: int = 0
    ticket: Mapping[str, object] | None = None
    delay_ms: int = 0
    ttl_ms: int = 0


class Job:
    """One job: its row, the lifecycle guards about it and the effects on it.

    A new job is the enqueue rule: ``pending``, attempts 0, token 0, available
    at ``now_ms``, deadline ``now_ms + ttl_ms``, no owner, no lease, no reason.
    """

    # Set by the lifecycle machine once the job is added to it (``add_model``).
    state: str
    trigger: Callable[..., bool]
    may_trigger: Callable[..., bool]

    def __init__(
        self, seq: int, job_id: str, qty: int, max_attempts: int, now_ms: int, ttl_ms: int
    ) -> None:
        self.seq = seq
        self.id = job_id
        self.qty = qty
        self.attempts = 0
        self.max_attempts = max_attempts
        self.token = 0
        self.available_at = now_ms
        self.deadline = now_ms + ttl_ms
        self.owner: str | None = None
        self.lease_until: int | None = None
        self.reason: str | None = None

    # --- the row -------------------------------------------------------------

    def row(self) -> JobRow:
        """The job as a row of the ``jobs`` table, in column order."""
        return cast(JobRow, _ROW(self))

    def restore(self, row: JobRow) -> None:
        """Put back every field, the lifecycle state included, from ``row()``."""
        for field, value in zip(ROW_FIELDS, row, strict=True):
            setattr(self, field, value)

    def ticket(self) -> dict[str, Any]:
        """The ticket of the current lease: the only one ``finish`` accepts.

        Keys in claim's order: id, qty, owner, token, attempt (= attempts),
        lease_until. A fresh dict each time.
        """
        return {
            "id": self.id,
            "qty": self.qty,
            "owner": self.owner,
            "token": self.token,
            "attempt": self.attempts,
            "lease_until": self.lease_until,
        }

    # --- guards: one question each, at the time of the call ---------------------

    def is_due(self, call: Call) -> bool:
        """`available_at <= now_ms`: its retry backoff is over."""
        return self.available_at <= call.now_ms

    def lease_expired(self, call: Call) -> bool:
        """`lease_until <= now_ms`: a lease is over at the very millisecond it ends."""
        return self.lease_until is not None and self.lease_until <= call.now_ms

    def deadline_passed(self, call: Call) -> bool:
        """`deadline <= now_ms`: a job is late at the very millisecond of its deadline."""
        return self.deadline <= call.now_ms

    def before_deadline(self, call: Call) -> bool:
        """`now_ms < deadline`: not `deadline_passed`."""
        return not self.deadline_passed(call)

    def budget_spent(self, call: Call) -> bool:
        """`attempts >= max_attempts`: every attempt of the budget has been claimed."""
        return self.attempts >= self.max_attempts

    def budget_left(self, call: Call) -> bool:
        """`attempts < max_attempts`: not `budget_spent`."""
        return not self.budget_spent(call)

    def ticket_live(self, call: Call) -> bool:
        """the ticket is the current lease's in full; not `lease_expired`, not `deadline_passed`.

        Equal in full means id, qty, owner, token, attempt (= attempts) and
        lease_until: the same owner may be an older run of itself, holding an
        older token. A ticket is stale at ``now_ms == lease_until``.
        """
        return (
            call.ticket == self.ticket()
            and not self.lease_expired(call)
            and not self.deadline_passed(call)
        )

    def retry_past_deadline(self, call: Call) -> bool:
        """`now_ms + delay_ms >= deadline`: the retry could not be due before the deadline."""
        return call.now_ms + call.delay_ms >= self.deadline

    def retry_before_deadline(self, call: Call) -> bool:
        """`now_ms + delay_ms < deadline`: not `retry_past_deadline`."""
        return not self.retry_past_deadline(call)

    # --- effects: each field rule in exactly one place ---------------------------

    def take_lease(self, call: Call) -> None:
        """attempts + 1, token + 1, owner = claimant, lease_until = min(now_ms + lease_ms, deadline)

        The new fencing token makes every earlier ticket stale; the lease never
        outlives the job's deadline.
        """
        self.attempts += 1
        self.token += 1
        self.owner = call.owner
        self.lease_until = min(call.now_ms + call.lease_ms, self.deadline)

    def release_lease(self, call: Call) -> None:
        """owner = NULL, lease_until = NULL."""
        self.owner = None
        self.lease_until = None

    def available_now(self, call: Call) -> None:
        """available_at = now_ms."""
        self.available_at = call.now_ms

    def available_after_delay(self, call: Call) -> None:
        """available_at = now_ms + delay_ms (the retry backoff)."""
        self.available_at = call.now_ms + call.delay_ms

    def renew_budget(self, call: Call) -> None:
        """attempts = 0, deadline = now_ms + ttl_ms (the token is kept).

        The attempt budget is renewed, the fencing generation never reused.
        """
        self.attempts = 0
        self.deadline = call.now_ms + call.ttl_ms

    def clear_reason(self, call: Call) -> None:
        """reason = NULL."""
        self.reason = None

    def mark_deadline(self, call: Call) -> None:
        """reason = 'deadline'."""
        self.reason = "deadline"

    def mark_exhausted(self, call: Call) -> None:
        """reason = 'exhausted'."""
        self.reason = "exhausted"

    def mark_permanent(self, call: Call) -> None:
        """reason = 'permanent'."""
        self.reason = "permanent"

    def mark_retry(self, call: Call) -> None:
        """reason = 'retry'."""
        self.reason = "retry"


def machine_config() -> dict[str, Any]:
    """The lifecycle as ``transitions.Machine`` arguments, declared strictly.

    No auto transitions (no ``to_<state>``), invalid triggers raise
    ``MachineError``, guards and effects receive the ``Call`` itself, and every
    row of ``TRANSITIONS`` runs its trigger's ``EFFECTS`` after the state change.
    """
    return {
        "states": list(STATES),
        "transitions": [{**row, "after": list(EFFECTS[row["trigger"]])} for row in TRANSITIONS],
        "initial": INITIAL,
        "auto_transitions": False,
        "ignore_invalid_triggers": False,
        "send_event": False,
    }


def new_machine() -> Machine:
    """One lifecycle machine for all the jobs of a queue (add each with ``add_model``).

    ``transitions`` is imported here, not with the module: the tables, the guards and
    the effects (what ``model.explain`` and the courier read) need only the standard
    library; the machine (``QueueModel``, the tests, the diagram) needs the ``test``
    extra.

    Raises:
        ImportError: ``transitions`` is not installed (the message says what to install).
    """
    try:
        from transitions import Machine
    except ImportError as error:
        raise ImportError(
            f"the lifecycle machine needs transitions: pip install 'lease-queue[test]' ({error})"
        ) from None
    return Machine(model=None, **machine_config())


SOURCES: dict[str, frozenset[str]] = {
    trigger: frozenset(row["source"] for row in TRANSITIONS if row["trigger"] == trigger)
    for trigger in dict.fromkeys(row["trigger"] for row in TRANSITIONS)
}
"""Trigger -> the states it has a row from (any other state would raise ``MachineError``)."""


GUARDS: dict[tuple[str, str], tuple[str, ...]] = {
    (row["trigger"], row["source"]): tuple(row.get("conditions", [])) for row in TRANSITIONS
}
"""(trigger, source) -> the guards of that row, in the row's order."""

FIRES = "fires"
"""The guard outcome of a trigger that fired; any other outcome is ``"<guard> fails"``."""

Recorder = Callable[[str, str, str], None]
"""Told ``(source state, trigger, guard outcome)`` each time ``fire_first`` tries a trigger."""

recorder: Recorder | None = None
"""Off (``None``) by default; switched on by ``recording`` (coverage reports, the explorer)."""


@contextlib.contextmanager
def recording(record: Recorder) -> Iterator[None]:
    """Tell ``record`` every trigger ``fire_first`` tries inside the block; then put back
    whatever recorder was on before."""
    global recorder
    before, recorder = recorder, record
    try:
        yield
    finally:
        recorder = before


def first_failing_guard(job: Job, trigger: str, call: Call) -> str | None:
    """The first guard of ``trigger``'s row from the job's state that does not hold, or
    ``None`` when all hold (guards change nothing, so asking is free of effects)."""
    for name in GUARDS[(trigger, job.state)]:
        if not getattr(job, name)(call):
            return name
    return None


def fire_first(job: Job, triggers: Sequence[str], call: Call) -> str | None:
    """Fire the first of ``triggers`` whose guards hold for ``job``; return its name.

    ``triggers`` are tried in decision order; one with no row from the job's
    state is skipped. ``None`` means that nothing fired and nothing changed.
    With a ``recorder`` on, each trigger tried is told to it with its outcome:
    ``"fires"``, or the first guard of its row that fails (``"is_due fails"``).
    """
    for trigger in triggers:
        if job.state not in SOURCES[trigger]:
            continue
        if recorder is None:
            if job.trigger(trigger, call):
                return trigger
            continue
        source, failing = job.state, first_failing_guard(job, trigger, call)
        fired = job.trigger(trigger, call)
        recorder(source, trigger, FIRES if fired else f"{failing} fails")
        if fired:
            return trigger
    return None
