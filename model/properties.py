"""What the explorer proves about the queue: ``always`` properties and ``sometimes`` goals.

Stateright's vocabulary (TLA+'s invariants and action properties), checked by
``model.explore`` as it searches:

- ``@always``: an invariant of one world, which must hold in every state found
  (a function of the ``Snapshot``; the first state that breaks it ends the
  shortest counterexample);
- ``@always_on_steps``: a property of one step (the world before, the step, what
  the model answered, the world after), which must hold on every edge;
- ``@sometimes``: a goal, which must hold on some edge: the first that does ends
  the shortest witness, a trace that shows how the goal is reached.

Each property is a named function; its docstring's first line is its line in the
report and in ``docs/state-machine.md``. The goals that each transition row fires
are made from ``model.lifecycle.TRANSITIONS``, one per row.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from model.explain import after_firing, explain
from model.job import FIRES, JobRow
from model.lifecycle import TRANSITIONS
from model.rules import MAX_BATCH

if TYPE_CHECKING:
    from model.explore import Edge, Snapshot

DEAD_REASONS = ("deadline", "exhausted", "permanent")
# The hook points of the contract, before COMMIT and after it.
BEFORE_COMMIT = ("after-claim", "after-finish", "after-audit", "after-redrive")
AFTER_COMMIT = "after-commit"


@dataclass(frozen=True)
class Property:
    """A named check of one edge. ``kind`` is ``always`` or ``sometimes``; an ``always``
    of ``scope`` "state" looks at the world after the edge alone, so it is checked once
    per state found; of "step", on every edge. A goal with ``expected`` false must never
    be witnessed (a row no operation can fire)."""

    name: str
    summary: str
    kind: str
    scope: str
    holds: Callable[[Edge], bool]
    expected: bool = True


ALWAYS: list[Property] = []
SOMETIMES: list[Property] = []


def _summary(check: Callable[..., bool]) -> str:
    return (check.__doc__ or "").strip().splitlines()[0].removesuffix(".")


def always(check: Callable[[Snapshot], bool]) -> Callable[[Snapshot], bool]:
    """Register ``check``, a function of one world, as an invariant of every state."""
    ALWAYS.append(
        Property(check.__name__, _summary(check), "always", "state", lambda e: check(e.after))
    )
    return check


def always_on_steps(check: Callable[[Edge], bool]) -> Callable[[Edge], bool]:
    """Register ``check``, a function of one edge, as a property of every step."""
    ALWAYS.append(Property(check.__name__, _summary(check), "always", "step", check))
    return check


def sometimes(check: Callable[[Edge], bool]) -> Callable[[Edge], bool]:
    """Register ``check``, a function of one edge, as a goal some step must reach."""
    SOMETIMES.append(Property(check.__name__, _summary(check), "sometimes", "step", check))
    return check


# --- always: in every state ----------------------------------------------------------


@always
def at_most_one_live_ticket(world: Snapshot) -> bool:
    """At most one ticket per job is live: of all tickets held, finish would accept one."""
    live = Counter(t["id"] for t in world.tickets if world.is_live(t))
    return all(count <= 1 for count in live.values())


@always
def a_dead_job_has_a_reason_and_no_owner(world: Snapshot) -> bool:
    """A dead job has a reason (deadline, exhausted or permanent) and no owner or lease."""
    return all(
        job.reason in DEAD_REASONS and job.owner is None and job.lease_until is None
        for job in world.jobs.values()
        if job.status == "dead"
    )


@always
def only_a_leased_job_has_an_owner(world: Snapshot) -> bool:
    """A leased job has an owner and a lease; a pending or done job has neither."""
    return all(
        (job.owner is not None and job.lease_until is not None) == (job.status == "leased")
        for job in world.jobs.values()
        if job.status != "dead"
    )


@always
def a_lease_never_outlives_its_deadline(world: Snapshot) -> bool:
    """A lease never outlives its job's deadline: `lease_until <= deadline`."""
    return all(
        job.lease_until <= job.deadline
        for job in world.jobs.values()
        if job.lease_until is not None
    )


@always
def attempts_never_exceed_the_budget(world: Snapshot) -> bool:
    """Attempts never exceed the budget: `attempts <= max_attempts`."""
    return all(job.attempts <= job.max_attempts for job in world.jobs.values())


@always
def a_pending_job_has_budget_left(world: Snapshot) -> bool:
    """A pending job has budget left: `attempts < max_attempts`.

    Enqueue and redrive start at 0 attempts and a retry is pending again only while
    `budget_left`, so no operation can fire `quarantine_exhausted` from `pending`.
    """
    return all(
        job.attempts < job.max_attempts for job in world.jobs.values() if job.status == "pending"
    )


@always
def no_audit_row_is_above_its_job(world: Snapshot) -> bool:
    """No audit row's token is above its job's token (and every audit row has its job)."""
    jobs = world.jobs
    return all(row.id in jobs and row.token <= jobs[row.id].token for row in world.audit)


@always
def every_job_is_explained(world: Snapshot) -> bool:
    """Every job is explained: a claim at the predicted time does as predicted, 1 ms before nothing

    ``model.explain`` predicts from the row and the clock alone; the prediction is held
    against the machine: ``claim_many`` (every claimable job, after the quarantine) on
    the job alone 1 ms before the predicted time changes nothing, and at that time
    makes the row ``after_firing`` predicts. A done or dead job is never moved by a
    claim, however late.
    """
    return all(_prediction_holds(_relative(row, world.now)) for row in world.rows["jobs"])


EXPLAINED_AT = 1000
"""The clock ``every_job_is_explained`` judges a job at, its times moved alike (a
prediction depends on the times relative to the clock only)."""


def _relative(row: tuple[object, ...], now: int) -> JobRow:
    def moved(t: object) -> object:
        return None if t is None else int(t) - now + EXPLAINED_AT  # type: ignore[call-overload]

    return (*row[:7], moved(row[7]), moved(row[8]), row[9], moved(row[10]), row[11])  # type: ignore[return-value]


@functools.cache
def _prediction_holds(row: JobRow) -> bool:
    """``every_job_is_explained`` for one job at ``EXPLAINED_AT`` (cached: the explorer's
    states share few situations of one job)."""
    from model.queue import QueueModel  # the machine; model.explain runs without it

    now = EXPLAINED_AT
    following = explain(row, now).next

    def claimed_at(t: int) -> JobRow:
        queue = QueueModel.from_rows({"jobs": [row], "redrives": []})
        queue.claim_many("explainer", t, MAX_BATCH, lease_ms=1000)
        after: JobRow = queue.rows()["jobs"][0]
        return after

    if following is None:
        return claimed_at(now) == row and claimed_at(now + 10**6) == row
    if following.at_ms > now and claimed_at(following.at_ms - 1) != row:
        return False
    expected = after_firing(row, following.trigger, following.at_ms, "explainer", 1000)
    return claimed_at(following.at_ms) == expected


# --- always: on every step -----------------------------------------------------------


@always_on_steps
def tokens_never_go_down(edge: Edge) -> bool:
    """Tokens never go down: no step lowers a job's fencing token (or loses the job)."""
    after = edge.after.jobs
    return all(
        job_id in after and after[job_id].token >= job.token
        for job_id, job in edge.before.jobs.items()
    )


@always_on_steps
def a_new_ticket_has_a_newer_token(edge: Edge) -> bool:
    """A claim's ticket has a token above its job's before the claim: none is reused."""
    new = edge.issued
    if new is None:
        return True
    job = edge.before.jobs.get(new["id"])
    held = [t["token"] for t in edge.before.tickets if t["id"] == new["id"]]
    return job is not None and new["token"] > max([job.token, *held])


@always_on_steps
def only_a_live_ticket_finishes(edge: Edge) -> bool:
    """Only a live ticket finishes: a stale or forged one gets `False` and changes nothing."""
    ticket = edge.presented
    if ticket is None or edge.before.is_live(ticket):
        return True
    return edge.result == ("returned", False) and edge.after.rows == edge.before.rows


@always_on_steps
def done_is_final(edge: Edge) -> bool:
    """`done` is final: a done job's row never changes again."""
    after = edge.after.jobs
    return all(
        after.get(job_id) == job for job_id, job in edge.before.jobs.items() if job.status == "done"
    )


@always_on_steps
def a_fault_before_commit_changes_nothing(edge: Edge) -> bool:
    """A fault before COMMIT changes nothing: the tables stay as they were, no ticket is issued."""
    if edge.failed_at not in BEFORE_COMMIT:
        return True
    return edge.after.rows == edge.before.rows and edge.issued is None


@always_on_steps
def a_fault_after_commit_keeps_the_write(edge: Edge) -> bool:
    """A fault after COMMIT keeps the write: the tables are those of the same step without it."""
    return edge.failed_at != AFTER_COMMIT or edge.after.rows == edge.unfaulted.rows


# --- sometimes -------------------------------------------------------------------


NEVER_FIRES: dict[tuple[str, str], str] = {
    ("quarantine_exhausted", "pending"): "a_pending_job_has_budget_left",
}
"""Rows of ``TRANSITIONS`` no sequence of operations can fire, each with the invariant
that says why; their goals expect no witness, and a witness fails the run."""


def _row_fires(number: int, trigger: str, source: str) -> Property:
    def fires(edge: Edge) -> bool:
        return (source, trigger, FIRES) in edge.tried

    never = NEVER_FIRES.get((trigger, source))
    summary = f"row {number} fires: `{trigger}` from `{source}`"
    if never is not None:
        summary += f" (never: `{never}`)"
    name = f"row_{number}_{trigger}_from_{source}"
    return Property(name, summary, "sometimes", "step", fires, expected=never is None)


SOMETIMES.extend(
    _row_fires(number, row["trigger"], row["source"])
    for number, row in enumerate(TRANSITIONS, start=1)
)


@sometimes
def a_stale_finish_is_refused(edge: Edge) -> bool:
    """A stale finish is refused: a ticket once issued, no longer live, gets `False`."""
    return edge.step.rule == "finish" and edge.result == ("returned", False)


def _quarantined(edge: Edge, reason: str) -> bool:
    before = edge.before.jobs
    return any(
        job.status == "dead" and job.reason == reason and before.get(job_id, job).status != "dead"
        for job_id, job in edge.after.jobs.items()
    )


@sometimes
def a_job_is_quarantined_by_its_deadline(edge: Edge) -> bool:
    """A job is quarantined by its deadline: it becomes dead with reason `deadline`."""
    return _quarantined(edge, "deadline")


@sometimes
def a_job_is_quarantined_exhausted(edge: Edge) -> bool:
    """A job is quarantined with its budget spent: it becomes dead with reason `exhausted`."""
    return _quarantined(edge, "exhausted")


@sometimes
def a_job_is_quarantined_as_permanent(edge: Edge) -> bool:
    """A job is quarantined as a permanent failure: it becomes dead with reason `permanent`."""
    return _quarantined(edge, "permanent")


@sometimes
def a_redriven_job_is_claimed_again_with_a_newer_token(edge: Edge) -> bool:
    """A redriven job is claimed again, with a token above its audit row's."""
    new = edge.issued
    return new is not None and any(
        row.id == new["id"] and row.token < new["token"] for row in edge.after.audit
    )


BY_NAME: dict[str, Property] = {p.name: p for p in [*ALWAYS, *SOMETIMES]}
"""Every property by name (what ``--trace NAME`` takes)."""
