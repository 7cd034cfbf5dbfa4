"""The model's verdict on a proposed step, and the nearest step for a change nothing explains.

The judge holds a ``Step`` (``courier.conform.inference``) against ``model/``: the
step's arguments must pass the model's argument rules (``model.rules.check_arguments``),
and each changed row must be what the model's lifecycle makes of the row before: its
transitions (``model.lifecycle.TRANSITIONS``, first that fires wins, in the operation's
decision order) with their guards and effects (``model.job.Job``'s methods). A strict
claim's untouched live jobs must be ones the model's quarantine and claim pass over.

The transitions are fired by ``fire`` straight from the model's tables, the way the
``transitions`` machine built from them does (``model.job.machine_config``: guards
hold, then the state changes, then the effects run), without the machine's event
dispatch, which would cost more than everything else the checker does per row;
``tests/unit/test_conform_judge.py`` holds ``fire`` to ``model.job.fire_first``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from courier.conform.feed import COLUMNS, JOBS, REDRIVES, Row
from courier.conform.inference import Step
from courier.conform.tables import (
    AVAILABLE_AT,
    DEADLINE,
    ID,
    LEASE_UNTIL,
    MAX_ATTEMPTS,
    OWNER,
    QTY,
    TOKEN,
    Change,
)
from model.job import GUARDS, SOURCES, Call, Job
from model.lifecycle import (
    CLAIM_TRIGGERS,
    EFFECTS,
    FINISH_TRIGGERS,
    INITIAL,
    QUARANTINE_TRIGGERS,
    REDRIVE_TRIGGERS,
    TRANSITIONS,
)
from model.rules import MAX_DURATION_MS, check_arguments

__all__ = ["Difference", "Nearest", "Verdict", "fire", "job_of", "judge", "may_fire", "nearest"]

_DEST = {(row["trigger"], row["source"]): row["dest"] for row in TRANSITIONS}
_OPERATION_OF = {
    **dict.fromkeys(QUARANTINE_TRIGGERS + CLAIM_TRIGGERS, "claim"),
    **{trigger: "finish" for triggers in FINISH_TRIGGERS.values() for trigger in triggers},
    **dict.fromkeys(REDRIVE_TRIGGERS, "redrive"),
}
_OUTCOME_OF_TRIGGER = {t: outcome for outcome, ts in FINISH_TRIGGERS.items() for t in ts}


@dataclass(frozen=True)
class Difference:
    """One column where the model's row and the queue's row disagree."""

    row: str  # "jobs order-7 (seq 3)" or "redrives seq 2"
    column: str
    model: Any
    queue: Any


@dataclass(frozen=True)
class Verdict:
    """The model's answer: ``problems`` empty means the step explains the changes."""

    step: Step
    problems: list[str] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)

    @property
    def explained(self) -> bool:
        return not self.problems and not self.differences


@dataclass(frozen=True)
class Nearest:
    """The model step nearest to changes nothing explains: per changed row, the transition
    (or ``None``: no step changes the row) with the arguments guessed for it, the guards
    that do not hold, and the columns where its effect differs from the queue's row."""

    operation: str
    rows: list[dict[str, Any]]


def job_of(row: Row) -> Job:
    """A model ``Job`` holding ``row`` (its lifecycle state included), on no machine."""
    job = Job.__new__(Job)
    job.restore(row)
    return job


def fire(job: Job, triggers: Sequence[str], call: Call) -> str | None:
    """Fire the first of ``triggers`` whose guards hold for ``job``, as the lifecycle
    machine does: the state moves to the row's ``dest``, then the trigger's effects run.
    Returns the trigger, or ``None`` (nothing fired, nothing changed)."""
    for trigger in triggers:
        guards = GUARDS.get((trigger, job.state))
        if guards is None:
            continue
        if all(getattr(job, guard)(call) for guard in guards):
            job.state = _DEST[(trigger, job.state)]
            for effect in EFFECTS[trigger]:
                getattr(job, effect)(call)
            return trigger
    return None


def may_fire(job: Job, triggers: Sequence[str], call: Call) -> bool:
    """Whether one of ``triggers`` would fire for ``job`` (nothing changes)."""
    for trigger in triggers:
        guards = GUARDS.get((trigger, job.state))
        if guards is not None and all(getattr(job, guard)(call) for guard in guards):
            return True
    return False


def failing_guard(job: Job, trigger: str, call: Call) -> str | None:
    """The first guard of ``trigger``'s row from the job's state that does not hold."""
    for guard in GUARDS.get((trigger, job.state), ()):
        if not getattr(job, guard)(call):
            return guard
    return None


def row_name(table: str, row: Row) -> str:
    """How a report names a row: ``jobs order-7 (seq 3)``, ``redrives seq 2``."""
    if table == JOBS:
        return f"jobs {row[ID]} (seq {row[0]})"
    return f"{table} seq {row[0]}"


def _differences(table: str, model: Row, queue: Row) -> list[Difference]:
    name = row_name(table, queue)
    return [
        Difference(name, column, mine, theirs)
        for column, mine, theirs in zip(COLUMNS[table], model, queue, strict=False)
        if mine != theirs or type(mine) is not type(theirs)
    ]


def _arguments(step: Step) -> dict[str, Any]:
    return dict(step.arguments)


def judge(step: Step, claim_order: str) -> Verdict:
    """The model's verdict on ``step`` for its changes (see the module's docstring)."""
    problems: list[str] = []
    differences: list[Difference] = []
    try:
        check_arguments(**_arguments(step))
    except ValueError as error:
        problems.append(f"{step.operation} would need an argument the contract refuses: {error}")
        return Verdict(step, problems)
    try:
        if step.operation.startswith("enqueue"):
            _enqueue(step, differences)
        elif step.operation.startswith("claim"):
            _claim(step, claim_order, problems, differences)
        elif step.operation.startswith("finish"):
            _finish(step, problems, differences)
        else:
            _redrive(step, problems, differences)
    except (TypeError, ValueError) as error:  # a hand-made row the guards cannot compare
        problems.append(f"a changed row holds a value the model cannot read: {error}")
    return Verdict(step, problems, differences)


def _enqueue(step: Step, differences: list[Difference]) -> None:
    now, ttl_ms, max_attempts = (step.arguments[k] for k in ("now_ms", "ttl_ms", "max_attempts"))
    for change in step.changes:
        after = change.after
        assert after is not None
        job = Job(change.seq, after[ID], after[QTY], max_attempts, now, ttl_ms)
        job.state = INITIAL  # what the machine gives a job it is added to
        differences += _differences(JOBS, job.row(), after)


def _claim(
    step: Step, claim_order: str, problems: list[str], differences: list[Difference]
) -> None:
    arguments = step.arguments
    call = Call(
        now_ms=arguments["now_ms"], owner=arguments["owner"], lease_ms=arguments["lease_ms"]
    )
    leased_top = 0
    for change in step.changes:
        before, after = change.before, change.after
        assert before is not None and after is not None
        job = job_of(before)
        name = row_name(JOBS, before)
        if after[3] == "leased":
            leased_top = max(leased_top, change.seq)
            if may_fire(job, QUARANTINE_TRIGGERS, call):
                problems.append(f"{name}: the claim's quarantine takes it; it was leased instead")
                continue
            triggers: tuple[str, ...] = CLAIM_TRIGGERS
        else:
            triggers = QUARANTINE_TRIGGERS
        if fire(job, triggers, call) is None:
            guards = ", ".join(
                f"{t}: {failing_guard(job, t, call)} fails"
                for t in triggers
                if (t, job.state) in GUARDS
            )
            problems.append(
                f"{name}: no transition of the claim fires ({guards or 'none from ' + job.state})"
            )
            continue
        differences += _differences(JOBS, job.row(), after)
    if claim_order != "strict":
        return
    for row in step.unchanged:
        job = job_of(row)
        name = row_name(JOBS, row)
        if may_fire(job, QUARANTINE_TRIGGERS, call):
            problems.append(f"{name}: the claim's quarantine had to take it, and left it")
        elif (leased_top == 0 or row[0] < leased_top) and may_fire(job, CLAIM_TRIGGERS, call):
            problems.append(
                f"{name}: claimable with a lower seq than a job leased, and passed over"
            )


def _finish(step: Step, problems: list[str], differences: list[Difference]) -> None:
    arguments = step.arguments
    if "results" in arguments:
        results = arguments["results"]
    else:
        results = [{k: arguments[k] for k in ("ticket", "outcome", "delay_ms")}]
    for change, result in zip(step.changes, results, strict=True):
        before, after = change.before, change.after
        assert before is not None and after is not None
        job = job_of(before)
        call = Call(
            now_ms=arguments["now_ms"], ticket=dict(result["ticket"]), delay_ms=result["delay_ms"]
        )
        triggers = FINISH_TRIGGERS[result["outcome"]]
        if fire(job, triggers, call) is None:
            guards = ", ".join(f"{t}: {failing_guard(job, t, call)} fails" for t in triggers)
            problems.append(f"{row_name(JOBS, before)}: the finish fires nothing ({guards})")
            continue
        differences += _differences(JOBS, job.row(), after)


def _redrive(step: Step, problems: list[str], differences: list[Difference]) -> None:
    arguments = step.arguments
    call = Call(now_ms=arguments["now_ms"], ttl_ms=arguments["ttl_ms"])
    audit = next(c for c in step.changes if c.table == REDRIVES)
    change = next(c for c in step.changes if c.table == JOBS)
    before, after = change.before, change.after
    assert before is not None and after is not None and audit.after is not None
    job = job_of(before)
    expected_audit = (audit.seq, before[ID], before[TOKEN], arguments["now_ms"], arguments["note"])
    differences += _differences(REDRIVES, expected_audit, audit.after)
    if fire(job, REDRIVE_TRIGGERS, call) is None:
        problems.append(f"{row_name(JOBS, before)}: only a dead job can be redriven")
        return
    differences += _differences(JOBS, job.row(), after)


# --- the nearest step -------------------------------------------------------------------


def _guess(trigger: str, before: Row, after: Row, bound: int | None) -> Call:
    """The arguments a transition would need to turn ``before`` into ``after``, guessed
    from the rows (and the clock at the write), for the nearest step."""
    effects = EFFECTS[trigger]
    available = after[AVAILABLE_AT] if type(after[AVAILABLE_AT]) is int else 0
    if "available_now" in effects:
        now = available
    elif bound is not None:
        now = bound
    else:
        now = available
    ticket = {
        "id": before[ID],
        "qty": before[QTY],
        "owner": before[OWNER],
        "token": before[TOKEN],
        "attempt": before[4],
        "lease_until": before[LEASE_UNTIL],
    }
    lease_until, deadline = after[LEASE_UNTIL], after[DEADLINE]
    lease_ms = lease_until - now if type(lease_until) is int else 1000
    delay_ms = available - now if "available_after_delay" in effects else 0
    ttl_ms = deadline - now if type(deadline) is int and trigger == "redrive" else 0
    return Call(
        now_ms=now,
        owner=after[OWNER] if isinstance(after[OWNER], str) else None,
        lease_ms=lease_ms if 1 <= lease_ms <= MAX_DURATION_MS else 1000,
        ticket=ticket,
        delay_ms=delay_ms,
        ttl_ms=ttl_ms,
    )


def _call_arguments(trigger: str, call: Call) -> dict[str, Any]:
    operation = _OPERATION_OF[trigger]
    if operation == "claim":
        return {"owner": call.owner, "now_ms": call.now_ms, "lease_ms": call.lease_ms}
    if operation == "finish":
        outcome = _OUTCOME_OF_TRIGGER[trigger]
        return {
            "ticket": call.ticket,
            "outcome": outcome,
            "now_ms": call.now_ms,
            "delay_ms": call.delay_ms,
        }
    return {"now_ms": call.now_ms, "ttl_ms": call.ttl_ms}


def _nearest_row(change: Change, bound: int | None) -> dict[str, Any]:
    before, after = change.before, change.after
    if change.table != JOBS:
        what = "inserted" if before is None else "changed" if after is not None else "deleted"
        return {
            "row": row_name(change.table, after or before or (change.seq,)),
            "transition": "redrive" if before is None else None,
            "note": f"an audit row is {what} only by a redrive, with its job's update",
            "guards_failing": [],
            "differences": [],
        }
    if after is None or before is None:
        row = after if after is not None else before
        assert row is not None
        if before is None:
            job = Job(change.seq, row[ID], row[QTY], row[MAX_ATTEMPTS], row[AVAILABLE_AT], 0)
            job.state = INITIAL
            try:
                job.deadline = row[DEADLINE]
                found = _differences(JOBS, job.row(), row)
            except TypeError:
                found = []
            return {
                "row": row_name(JOBS, row),
                "transition": "enqueue",
                "arguments": {"now_ms": row[AVAILABLE_AT]},
                "guards_failing": [],
                "differences": [d.__dict__ for d in found],
            }
        return {
            "row": row_name(JOBS, row),
            "transition": None,
            "note": "no step of the model deletes a job",
            "guards_failing": [],
            "differences": [],
        }
    best: tuple[int, dict[str, Any]] | None = None
    unchanged = _differences(JOBS, before, after)
    best = (
        len(unchanged),
        {
            "row": row_name(JOBS, before),
            "transition": None,
            "note": f"no step changes it: the model keeps the {before[3]} job as it was",
            "guards_failing": [],
            "differences": [d.__dict__ for d in unchanged],
        },
    )
    for trigger in (row["trigger"] for row in TRANSITIONS):
        if before[3] not in SOURCES[trigger]:
            continue
        try:
            call = _guess(trigger, before, after, bound)
            job = job_of(before)
            failing = [g for g in GUARDS[(trigger, job.state)] if not getattr(job, g)(call)]
            job.state = _DEST[(trigger, job.state)]
            for effect in EFFECTS[trigger]:
                getattr(job, effect)(call)
            found = _differences(JOBS, job.row(), after)
        except (TypeError, ValueError):
            continue
        score = len(failing) + len(found)
        if score < best[0]:
            best = (
                score,
                {
                    "row": row_name(JOBS, before),
                    "transition": trigger,
                    "arguments": _call_arguments(trigger, call),
                    "guards_failing": failing,
                    "differences": [d.__dict__ for d in found],
                },
            )
    return best[1]


def nearest(changes: Sequence[Change], bound: int | None) -> Nearest:
    """For each changed row, the transition nearest to its change (fewest guards failing
    plus columns differing), with the arguments guessed from the rows."""
    rows = [_nearest_row(change, bound) for change in changes]
    operations = [
        _OPERATION_OF.get(str(row.get("transition")), str(row.get("transition"))) for row in rows
    ]
    named = [op for op in operations if op != "None"]
    operation = max(set(named), key=named.count) if named else "none"
    return Nearest(operation, rows)
