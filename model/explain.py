"""Why a job is where it is, and what happens next: the lifecycle read for one row.

An operator asks of a job "why isn't it running, and what happens next?". The
tables of ``model.lifecycle`` and the guards of ``model.job.Job`` answer it from
the job's row and the time, with the standard library alone (no ``transitions``
machine is built: the courier runs this at run time). The rules it keeps:

1. **One vocabulary.** Every transition is a row of ``TRANSITIONS`` (its trigger,
   source and destination) and every reason a guard of that row, by its method
   name; every effect predicted is a method of ``Job`` run as the machine runs it.
2. **Time moves, the row does not.** Each guard compares ``now_ms`` with one of
   the row's times (``BOUNDARIES``: available_at, deadline, lease_until) or reads
   no time at all, so between two of those times no guard changes its answer. A
   row's earliest firing time is the first of ``now_ms`` and the row's later
   times at which all its guards hold, if nothing else happens to the job.
3. **Who moves it.** ``claim`` rows (steps 1 and 2 of a claim: the quarantine,
   then the lease) fire at any courier's next claim; ``finish`` rows only on the
   ticket of the current lease (judged with that ticket, ``delay_ms`` 0; a retry's
   delay must end before the deadline); ``redrive`` only by an operator.
4. **The next claim decides in decision order** (``OPERATION_STEPS``): at the
   earliest time at which some claim row can fire, the first of the quarantine
   triggers that fires wins, else the first lease trigger. That is ``next``: the
   prediction a test holds against both backends (a claim 1 ms earlier changes
   nothing about the job; a claim then does exactly ``next.row``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from model.job import BOUNDARIES, GUARDS, ROW_FIELDS, Call, Job, JobRow
from model.lifecycle import (
    CLAIM_TRIGGERS,
    EFFECTS,
    FINISH_TRIGGERS,
    QUARANTINE_TRIGGERS,
    REDRIVE_TRIGGERS,
    TRANSITIONS,
)
from model.rules import MAX_DURATION_MS

__all__ = [
    "BOUNDARIES",
    "Blocker",
    "Explanation",
    "Next",
    "RowVerdict",
    "When",
    "after_firing",
    "explain",
    "headline",
    "lines",
    "relative",
]


ACTORS: dict[str, str] = {
    **dict.fromkeys(QUARANTINE_TRIGGERS, "claim"),
    **dict.fromkeys(CLAIM_TRIGGERS, "claim"),
    **{trigger: "finish" for triggers in FINISH_TRIGGERS.values() for trigger in triggers},
    **dict.fromkeys(REDRIVE_TRIGGERS, "redrive"),
}
"""Trigger -> the operation that fires it: any courier's ``claim``, the lease holder's
``finish``, an operator's ``redrive`` (rule 3)."""

_CLAIM_ORDER = (*QUARANTINE_TRIGGERS, *CLAIM_TRIGGERS)  # a claim's two steps, in order


Blocker = tuple[str, int | None]
"""A guard that fails, and the time it stops failing (``None``: never by time alone)."""


@dataclass(frozen=True)
class RowVerdict:
    """One row of ``TRANSITIONS`` from the job's state, judged now and ahead.

    ``number`` is the row's place in ``TRANSITIONS`` (1-based, as the docs number
    them). ``blockers`` is what stands in the way from now on, in time order: each
    guard that is the first to fail, with the time it stops failing (``None``: not by
    time alone); empty when the row can fire now. ``from_ms`` is the earliest time
    from now at which every guard holds if the row stays as it is (``None``: never
    by time alone), ``until_ms`` the first time after that at which one fails again
    (``None``: never).
    """

    number: int
    trigger: str
    dest: str
    actor: str
    guards: tuple[str, ...]
    blockers: tuple[Blocker, ...]
    from_ms: int | None
    until_ms: int | None

    @property
    def enabled(self) -> bool:
        """Every guard holds now."""
        return not self.blockers

    @property
    def blocked_by(self) -> str | None:
        """The first guard that fails now (``None``: the row can fire now)."""
        return self.blockers[0][0] if self.blockers else None

    def as_dict(self) -> dict[str, Any]:
        """The verdict as JSON-ready data."""
        return {
            "row": self.number,
            "trigger": self.trigger,
            "dest": self.dest,
            "by": self.actor,
            "guards": list(self.guards),
            "enabled": self.enabled,
            "blocked_by": [{"guard": g, "until_ms": until} for g, until in self.blockers],
            "from_ms": self.from_ms,
            "until_ms": self.until_ms,
        }


@dataclass(frozen=True)
class Next:
    """What the next claim at or after ``at_ms`` does to the job, if nothing else
    happens first (no finish, no redrive): ``trigger`` of row ``row`` fires, the job
    becomes ``dest`` (``reason`` is the one a quarantine sets)."""

    row: int
    trigger: str
    dest: str
    at_ms: int
    reason: str | None

    def as_dict(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "trigger": self.trigger,
            "dest": self.dest,
            "at_ms": self.at_ms,
            "reason": self.reason,
        }


@dataclass(frozen=True)
class Explanation:
    """A job's row explained at ``now_ms``: each row of ``TRANSITIONS`` from its state
    (``rows``, in decision order) and the next claim's doing (``next``, ``None``
    when no claim can ever move the job: done, dead)."""

    job: Mapping[str, Any]
    now_ms: int
    rows: tuple[RowVerdict, ...]
    next: Next | None

    @property
    def state(self) -> str:
        return str(self.job["status"])

    def enabled(self, actor: str | None = None) -> list[RowVerdict]:
        """The rows that can fire now (by ``actor`` only, if given)."""
        return [row for row in self.rows if row.enabled and actor in (None, row.actor)]

    def as_dict(self) -> dict[str, Any]:
        """The explanation as JSON-ready data, with its headline."""
        return {
            "now_ms": self.now_ms,
            "status": self.state,
            "headline": headline(self),
            "next": None if self.next is None else self.next.as_dict(),
            "transitions": [row.as_dict() for row in self.rows],
        }


def _as_job(row: JobRow | Mapping[str, Any]) -> Job:
    """A ``Job`` holding ``row`` (a ``JobRow`` tuple, or a mapping of the contract's
    column names), outside any machine: its guards and effects are plain methods."""
    if isinstance(row, Mapping):
        values = tuple(row["status" if name == "state" else name] for name in ROW_FIELDS)
    else:
        values = tuple(row)
    job = Job(values[0], values[1], values[2], values[5], 0, 0)
    job.restore(values)
    return job


def _calls(job: Job, trigger: str, now_ms: int) -> list[Call]:
    """The calls a row is judged with (rule 3): a finish presents the current ticket,
    with the shortest and the longest delay the holder may choose."""
    if ACTORS[trigger] != "finish":
        return [Call(now_ms=now_ms)]
    ticket = job.ticket()
    return [Call(now_ms=now_ms, ticket=ticket, delay_ms=d) for d in (0, MAX_DURATION_MS)]


def _failing(job: Job, trigger: str, guards: Sequence[str], now_ms: int) -> str | None:
    """``None`` if every guard holds for one of the row's calls, else the failing guard
    of the call that gets furthest (the first one's on a tie)."""
    furthest: tuple[int, str] | None = None
    for call in _calls(job, trigger, now_ms):
        passed = next((i for i, name in enumerate(guards) if not getattr(job, name)(call)), None)
        if passed is None:
            return None
        if furthest is None or passed > furthest[0]:
            furthest = (passed, guards[passed])
    assert furthest is not None
    return furthest[1]


def _moments(job: Job, now_ms: int) -> list[int]:
    """``now_ms`` and every later time of the row, in order: where answers can change.

    A retry's guards compare ``now_ms + delay_ms`` with the deadline: with the longest
    delay their answer changes ``MAX_DURATION_MS`` before it, one more moment."""
    times = [getattr(job, name) for name in BOUNDARIES] + [job.deadline - MAX_DURATION_MS]
    return [now_ms, *sorted({t for t in times if t is not None and t > now_ms})]


def explain(row: JobRow | Mapping[str, Any], now_ms: int) -> Explanation:
    """Explain the job ``row`` at ``now_ms``: every transition from its state, what
    blocks each, and what the next claim does (see the module's rules).

    ``row`` is a ``JobRow`` tuple or a mapping with the contract's column names
    (``status`` for the state), as ``courier.queueview`` reads it.
    """
    job = _as_job(row)
    moments = _moments(job, now_ms)
    verdicts = []
    for number, transition in enumerate(TRANSITIONS, start=1):
        if transition["source"] != job.state:
            continue
        trigger = transition["trigger"]
        guards = GUARDS[(trigger, job.state)]
        failing = [_failing(job, trigger, guards, t) for t in moments]
        start = next((i for i, guard in enumerate(failing) if guard is None), None)
        end = None
        if start is not None:
            end = next((i for i in range(start, len(failing)) if failing[i] is not None), None)
        verdicts.append(
            RowVerdict(
                number=number,
                trigger=trigger,
                dest=transition["dest"],
                actor=ACTORS[trigger],
                guards=guards,
                blockers=_blockers(failing[: len(failing) if start is None else start], moments),
                from_ms=None if start is None else moments[start],
                until_ms=None if end is None else moments[end],
            )
        )
    mapping = dict(zip(ROW_FIELDS, job.row(), strict=True))
    mapping["status"] = mapping.pop("state")
    return Explanation(mapping, now_ms, tuple(verdicts), _next_claim(job, verdicts, moments))


def _blockers(failing: Sequence[str | None], moments: Sequence[int]) -> tuple[Blocker, ...]:
    """Runs of one failing guard over ``moments``, each with the moment it ends."""
    runs: list[Blocker] = []
    for index, guard in enumerate(failing):
        assert guard is not None
        following = moments[index + 1] if index + 1 < len(moments) else None
        if runs and runs[-1][0] == guard:
            runs[-1] = (guard, following)
        else:
            runs.append((guard, following))
    return tuple(runs)


def _next_claim(job: Job, verdicts: list[RowVerdict], moments: list[int]) -> Next | None:
    """The first moment at which a claim moves the job, and the row that fires then."""
    by_trigger = {v.trigger: v for v in verdicts if v.actor == "claim"}
    for moment in moments:
        for trigger in _CLAIM_ORDER:
            verdict = by_trigger.get(trigger)
            if verdict is None or _failing(job, trigger, verdict.guards, moment) is not None:
                continue
            after = after_firing(job.row(), trigger, moment)
            return Next(verdict.number, trigger, verdict.dest, moment, after[11])
    return None


def after_firing(
    row: JobRow | Mapping[str, Any],
    trigger: str,
    now_ms: int,
    owner: str | None = None,
    lease_ms: int = 0,
) -> JobRow:
    """The row after ``trigger`` fires on it at ``now_ms`` (a claim by ``owner`` for
    ``lease_ms``): the destination state, then each effect of ``EFFECTS[trigger]`` in
    order, as the machine runs them. The guards are not checked here."""
    job = _as_job(row)
    job.state = next(
        t["dest"] for t in TRANSITIONS if t["trigger"] == trigger and t["source"] == job.state
    )
    call = Call(now_ms=now_ms, owner=owner, lease_ms=lease_ms)
    for effect in EFFECTS[trigger]:
        getattr(job, effect)(call)
    return job.row()


# --- in words -----------------------------------------------------------------------

When = Callable[[int, int], str]
"""How a time is shown beside ``now_ms``: ``when(ms, now_ms)``."""


def relative(ms: int, now_ms: int) -> str:
    """``1500 (in 300 ms)``, ``1200 (now)``, ``1000 (200 ms ago)``: the default ``When``."""
    if ms == now_ms:
        return f"{ms} (now)"
    return f"{ms} (in {ms - now_ms} ms)" if ms > now_ms else f"{ms} ({now_ms - ms} ms ago)"


def headline(explanation: Explanation, when: When = relative) -> str:
    """The answer in one sentence: why the job is where it is and what happens next."""
    job, now = explanation.job, explanation.now_ms
    state, following = explanation.state, explanation.next
    if state == "done":
        return "done: final, nothing moves it again"
    if state == "dead":
        return (
            f"dead ({job['reason']}): stays dead until an operator redrives it"
            " (`redrive`: a fresh budget and deadline, the token kept)"
        )
    made = f"{job['attempts']} of {job['max_attempts']} attempts made"
    if state == "leased":
        lease_until = int(job["lease_until"])
        said = f"leased to {job['owner']} (token {job['token']}, {made})"
        if explanation.enabled("finish"):
            said += f": only its finish moves it until {when(lease_until, now)}"
        else:
            said += f": the lease of courier {job['owner']} ended at {when(lease_until, now)}"
        return said if following is None else f"{said}; then {_fate(following, now, when)}"
    if following is None:
        return f"pending ({made}): no claim can take it"
    return f"pending ({made}): {_fate(following, now, when)}"


def _fate(following: Next, now: int, when: When) -> str:
    """What the next claim does, in words."""
    at = when(following.at_ms, now)
    if following.trigger == "claim":
        if following.at_ms > now:
            return f"due at {at}: claimable from then (`claim`)"
        return "claimable now (`claim`): the next claim takes it, lowest seq first"
    if following.trigger == "reclaim":
        return f"claimable again by any courier from {at} (`reclaim`)"
    if following.trigger == "quarantine_exhausted":
        return (
            f"no attempts left: quarantined as exhausted by the first claim from {at}"
            " (`quarantine_exhausted`)"
        )
    return f"quarantined as deadline by the first claim from {at} (`quarantine_deadline`)"


ACTOR_WORDS = {"claim": "any claim", "finish": "the holder's finish", "redrive": "an operator"}


def lines(explanation: Explanation, when: When = relative) -> list[str]:
    """Each transition from the job's state in words: who fires it, and what stands in
    its way (each guard that fails, until when) or until when it can fire."""
    now = explanation.now_ms
    out = []
    for row in explanation.rows:
        name = f"row {row.number} `{row.trigger}` -> {row.dest} (by {ACTOR_WORDS[row.actor]})"
        if row.enabled:
            until = "" if row.until_ms is None else f" until {when(row.until_ms, now)}"
            out.append(f"{name}: can fire now{until}{_retry_window(explanation, row)}")
            continue
        parts = [f"`{row.blockers[0][0]}` fails now"]
        parts += [
            f"from {when(start, now)} `{guard}` fails"
            for (_, start), (guard, _) in zip(row.blockers, row.blockers[1:], strict=False)
            if start is not None
        ]
        parts.append(
            "never by time alone"
            if row.from_ms is None
            else f"can fire from {when(row.from_ms, now)}"
        )
        blocked = "; ".join(parts)
        out.append(f"{name}: {blocked}")
    return out


def _retry_window(explanation: Explanation, row: RowVerdict) -> str:
    """A retry's delay decides between ``finish_retry`` and ``finish_deadline``."""
    room = int(explanation.job["deadline"]) - explanation.now_ms
    if "retry_before_deadline" in row.guards:
        return f", with a delay below {room} ms"
    if "retry_past_deadline" in row.guards:
        return f", with a delay of {room} ms or more"
    return ""
