"""The model as the checker runs it: ``QueueModel``, one call at a time, from rows.

A state is the queue's two tables (as frozen rows) plus the tickets that ``run_once``
claims hold between their claim and their finish. ``step`` rebuilds a ``QueueModel``
from the rows (``QueueModel.from_rows``), makes the call with the arguments the real
call got, and accepts it only if the model returns or raises exactly what the real
call did. ``final`` accepts a state whose rows are the rows found after the run (under the
relaxed order, without their seq numbers: ``unnumbered``).

The model's side of each fault: ``raise`` raises the same error at the same point (so
the model rolls back, or keeps an after-commit change, as the contract says); ``pause``
does nothing; ``kill`` raises ``Killed`` at its point, since a call that returned never
got there. A call that never returned is made with no hook and its output not checked.

The claim order is the backend's row of ``model.lifecycle.CLAIM_ORDERS``. Under
``relaxed`` (PostgreSQL), a claim may pass over the rows that the calls overlapping it
in real time may hold locked (``may_hold``); which of them it met locked, the history
does not say, so ``step`` tries every subset of those that matters (the rows its two
steps would touch) and returns the ``Choices`` of the states where the model did what
the call was seen to do.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import model
from model.lifecycle import CLAIM_ORDERS
from model.queue import RETRY_BASE_MS, RETRY_CAP_MS
from tests.parallel.checker import Choices, Operation
from tests.parallel.history import Observed, frozen, outcome_of
from tests.parallel.program import Fault, Killed, Send
from tests.support import Rows

JobRows = tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class State:
    """The queue's rows, and the tickets of the run_once claims not yet finished."""

    jobs: JobRows
    redrives: JobRows
    holding: tuple[tuple[int, Any], ...] = ()

    def queue(self, claim_order: str = "strict") -> model.QueueModel:
        return model.QueueModel.from_rows(
            {"jobs": list(self.jobs), "redrives": list(self.redrives)}, claim_order
        )

    def ticket_of(self, claim: int) -> dict[str, Any] | None:
        for op_id, ticket in self.holding:
            if op_id == claim:
                return dict(ticket)
        return None


def state_of(rows: Rows, holding: tuple[tuple[int, Any], ...] = ()) -> State:
    return State(tuple(map(tuple, rows["jobs"])), tuple(map(tuple, rows["redrives"])), holding)


def unnumbered(state: State) -> tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]]]:
    """The two tables without their seq numbers, as multisets of rows: what the relaxed
    order compares at the end. A PostgreSQL sequence numbers a row when its insert runs,
    not when it commits, so the jobs (or audit rows) of two overlapping calls may be
    numbered in the other order than the one they took effect in; which job a claim
    took is still judged, call by call, from what it returned."""
    return (
        Counter(row[1:] for row in state.jobs),
        Counter(row[1:] for row in state.redrives),
    )


class QueueSpec:
    """``QueueModel`` as the checker's ``Model``: ``init``, ``step``, ``final``.

    ``claim_order`` is the backend's promise about claim order, a key of
    ``model.lifecycle.CLAIM_ORDERS``; under ``relaxed``, ``history`` (every operation
    of the run) says which calls overlap which.
    """

    def __init__(
        self, final_rows: Rows, claim_order: str = "strict", history: Sequence[Operation] = ()
    ) -> None:
        if claim_order not in CLAIM_ORDERS:
            raise ValueError(f"claim order {claim_order!r} is not modelled")
        self.final_rows = state_of(final_rows)
        self.claim_order = claim_order
        self.overlapping: dict[int, tuple[Operation, ...]] = {}
        if claim_order == "relaxed":
            self.overlapping = {
                op.id: tuple(other for other in history if other.id != op.id and overlap(op, other))
                for op in history
            }
        self.by_id = {op.id: op for op in history}

    def init(self) -> State:
        return State((), ())

    def final(self, state: State) -> bool:
        if self.claim_order == "relaxed":
            return unnumbered(state) == unnumbered(self.final_rows)
        return (state.jobs, state.redrives) == (self.final_rows.jobs, self.final_rows.redrives)

    def step(self, state: State, op: Operation) -> State | Choices | None:
        observed: Observed = op.call
        if observed.verb in CLAIMS or observed.part == "claim":
            held = self.may_hold(state, op)
            if held:
                return self.claim_choices(state, op, held)
        return self.step_holding(state, op, frozenset())

    def claim_choices(self, state: State, op: Operation, held: frozenset[str]) -> Choices:
        """Every state the claim ``op`` may leave, meeting locked any subset of ``held``."""
        after = []
        for size in range(len(held) + 1):
            for subset in itertools.combinations(sorted(held), size):
                got = self.step_holding(state, op, frozenset(subset))
                if got is not None and got not in after:
                    after.append(got)
        return Choices(after)

    def may_hold(self, state: State, op: Operation) -> frozenset[str]:
        """The jobs that the calls overlapping ``op`` may hold locked while it runs, among
        those its quarantine or its search would touch in ``state``."""
        overlapping = self.overlapping.get(op.id, ())
        if not overlapping:
            return frozenset()
        queue = state.queue()
        now_ms = claim_time(op.call)
        if now_ms is None:
            return frozenset()
        touched = touched_by_claim(queue, now_ms, limit=None)
        held: set[str] = set()
        for other in overlapping:
            held |= self.locked_by(queue, other)
        return frozenset(held & touched)

    def locked_by(self, queue: model.QueueModel, op: Operation) -> set[str]:
        """The jobs ``op`` may lock (PostgreSQL's row locks): a finish its tickets' jobs, a
        redrive its job, a claim what it quarantines, leases or looks at first in each of
        its searches."""
        observed: Observed = op.call
        kwargs = observed.kwargs
        if observed.verb == "finish":
            return ticket_ids([kwargs.get("ticket")])
        if observed.verb == "finish_many":
            return ticket_ids([item.get("ticket") for item in kwargs.get("results", [])])
        if observed.verb == "redrive":
            return {kwargs["job_id"]} if isinstance(kwargs.get("job_id"), str) else set()
        if observed.part == "finish":
            assert observed.pair is not None
            return {self.by_id[observed.pair].call.output[1]["id"]}
        if observed.verb in CLAIMS or observed.part == "claim":
            now_ms = claim_time(observed)
            if now_ms is None:
                return set()
            limit = kwargs.get("limit", 1)
            reach = limit + sum(rows_held(other) for other in self.overlapping.get(op.id, ()))
            return locked_by_claim(queue, now_ms, limit, reach, tickets_seen(observed))
        return set()

    def step_holding(self, state: State, op: Operation, held: frozenset[str]) -> State | None:
        """``step`` with the jobs ``held`` locked by other calls (``relaxed`` only)."""
        observed: Observed = op.call
        queue = state.queue(self.claim_order)
        queue.held_elsewhere(held)
        if observed.verb == "run_once":
            return self.courier_round(state, queue, observed, op)
        kwargs = observed.kwargs
        fault = kwargs.pop("fault", None)
        kwargs = {name: value for name, value in kwargs.items() if value is not None}
        if "fault" in observed.kwargs:
            kwargs["fault"] = None if not op.completed else hook_for(fault)
        call = getattr(queue, observed.verb)
        got = outcome_of(lambda: call(**kwargs))
        if op.completed and got != observed.output:
            return None
        return state_of(queue.rows(), state.holding)

    def courier_round(
        self, state: State, queue: model.QueueModel, observed: Observed, op: Operation
    ) -> State | None:
        """One half of a ``run_once``: its claim at the first clock reading, or its finish
        at the second, with the ticket the model's claim gave and the send's answer
        classified as ``run_once`` classifies it."""
        args = observed.kwargs
        first, second = args["readings"]
        lease = {"lease_ms": args["lease_ms"]} if args["lease_ms"] is not None else {}
        if observed.part == "claim":
            got = outcome_of(lambda: queue.claim(args["owner"], first, **lease))
            if not claimed_as_seen(got, observed.output):
                return None
            holding = state.holding
            if got[1] is not None and observed.output[0] == "claimed":
                holding = (*holding, (op.id, frozen(got[1])))
            return state_of(queue.rows(), holding)
        assert observed.pair is not None
        ticket = state.ticket_of(observed.pair)
        if ticket is None:
            return None
        outcome, delay_ms = classified(args["send"], ticket, args["jitter"])
        got = outcome_of(lambda: queue.finish(ticket, outcome, second, delay_ms))
        if got[0] != "returned":
            return None
        result = {"id": ticket["id"], "token": ticket["token"], "status": got[1] or "stale"}
        if observed.output != ("returned", result):
            return None
        holding = tuple(held for held in state.holding if held[0] != observed.pair)
        return state_of(queue.rows(), holding)


def claimed_as_seen(got: tuple[Any, ...], seen: tuple[Any, ...]) -> bool:
    """Whether the model's claim matches what the courier saw: nothing (``run_once``
    returned None), or the delivery's id and qty and the token it returned."""
    if seen[0] != "claimed":
        return got == seen
    if got[0] != "returned" or got[1] is None:
        return False
    ticket, wanted = got[1], seen[1]
    return (
        ticket["id"] == wanted["id"]
        and ticket["qty"] == wanted["qty"]
        and wanted["token"] in (None, ticket["token"])
    )


def classified(send: Send, ticket: dict[str, Any], jitter: float) -> tuple[str, int]:
    """The outcome and delay ``run_once`` gives ``finish`` for the send's answer."""
    if send.behaviour == "retryable":
        return "retry", model.retry_delay(ticket["attempt"], RETRY_BASE_MS, RETRY_CAP_MS, jitter)
    if send.behaviour == "permanent":
        return "permanent", 0
    return "ok", 0


def hook_for(fault: Fault | None) -> Callable[[str], None] | None:
    """The model's fault hook for ``fault`` (``None``: no hook at all): where the branch
    SIGKILLs itself the model raises ``Killed``, and a pause changes nothing in the model."""
    if fault is None:
        return None

    def killed(point: str) -> None:
        raise Killed(point)

    return fault.hook(pause=lambda ms: None, kill=killed)


CLAIMS = ("claim", "claim_many")


def overlap(one: Operation, other: Operation) -> bool:
    """Whether two calls overlap in real time (a call that never returned overlaps every
    call after its invocation)."""
    return (one.returned is None or other.invoked < one.returned) and (
        other.returned is None or one.invoked < other.returned
    )


def claim_time(observed: Observed) -> int | None:
    """The ``now_ms`` of a claim (a ``run_once``'s first clock reading); ``None`` when
    the call was malformed and so took no lock."""
    kwargs = observed.kwargs
    now_ms = kwargs["readings"][0] if observed.verb == "run_once" else kwargs.get("now_ms")
    output = observed.output
    if type(now_ms) is not int or (output is not None and output[:2] == ("raised", "ValueError")):
        return None
    return now_ms


def touched_by_claim(queue: model.QueueModel, now_ms: int, limit: int | None) -> set[str]:
    """The jobs a claim at ``now_ms`` would lock in ``queue``: every one its quarantine
    takes, and the first ``limit`` claimable jobs of each search (or every claimable job
    when ``limit`` is None)."""
    touched = set(queue.quarantinable(now_ms))
    for found in searches(queue, now_ms).values():
        touched.update(found if limit is None else found[:limit])
    return touched


def searches(queue: model.QueueModel, now_ms: int) -> dict[str, list[str]]:
    """The claimable jobs at ``now_ms`` in each of the searches ``pgworker``'s claim makes
    (fresh, retried, expired leases), in seq order."""
    rows = {row[1]: row for row in queue.rows()["jobs"]}
    found: dict[str, list[str]] = {"fresh": [], "retried": [], "expired": []}
    for job_id in queue.claimable(now_ms):
        status, attempts = rows[job_id][3], rows[job_id][4]
        found["expired" if status == "leased" else "fresh" if attempts == 0 else "retried"].append(
            job_id
        )
    return found


def rows_held(op: Operation) -> int:
    """How many rows of one search ``op`` may hold at once: a claim that leased or never
    returned ``limit`` (one that returned nothing found nothing to lock), a finish one per
    ticket, a redrive one; so many rows another claim may have had to pass over."""
    observed: Observed = op.call
    kwargs = observed.kwargs
    if observed.verb in CLAIMS or observed.part == "claim":
        if observed.output is not None and not tickets_seen(observed):
            return 0  # it returned having found nothing to lock, or was malformed
        limit = kwargs.get("limit", 1)
        return limit if type(limit) is int and limit > 0 else 0
    if observed.verb in ("finish", "redrive") or observed.part == "finish":
        return 1
    if observed.verb == "finish_many":
        results = kwargs.get("results")
        return len(results) if isinstance(results, list) else 0
    return 0


def locked_by_claim(
    queue: model.QueueModel,
    now_ms: int,
    limit: int,
    reach: int,
    tickets: dict[str, dict[str, Any]],
) -> set[str]:
    """The jobs another claim at ``now_ms`` may have locked, seen from ``queue``: what it
    quarantines, what it leased (``tickets``: id -> the ticket's fields seen) and, in each
    search, ``limit`` claimable jobs among the first ``reach``: it locks the first
    ``limit`` it does not pass over, and the calls overlapping it may hold up to
    ``reach - limit`` of each search. Once its leases are in ``queue`` they are no longer
    claimable there, so a fresh job it leased takes a place of the fresh search."""
    rows = {row[1]: row for row in queue.rows()["jobs"]}
    fresh_taken = 0
    for job_id, seen in tickets.items():
        row = rows.get(job_id)
        token = seen.get("token")
        if row is not None and token is not None and row[6] >= token:
            fresh_taken += seen.get("attempt") == 1
    locked = set(queue.quarantinable(now_ms)) | set(tickets)
    for search, found in searches(queue, now_ms).items():
        places = reach - fresh_taken if search == "fresh" else reach
        locked.update(found[: max(places, 0)])
    return locked


def tickets_seen(observed: Observed) -> dict[str, dict[str, Any]]:
    """The jobs a claim was seen to lease, with what was seen of each ticket (a
    ``run_once`` shows its delivery's id and, when it returned, the token)."""
    output = observed.output
    if output is None or output[0] not in ("returned", "claimed"):
        return {}
    value = output[1]
    if isinstance(value, list):
        return {ticket["id"]: ticket for ticket in value}
    if isinstance(value, dict) and value.get("id") is not None:
        return {value["id"]: value}
    return {}


def ticket_ids(tickets: list[Any]) -> set[str]:
    """The job ids of the well-formed tickets among ``tickets``."""
    return {
        ticket["id"]
        for ticket in tickets
        if isinstance(ticket, dict) and isinstance(ticket.get("id"), str)
    }
