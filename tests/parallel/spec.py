"""The model as the checker runs it: ``QueueModel``, one call at a time, from rows.

A state is the queue's two tables (as frozen rows) plus the tickets that ``run_once``
claims hold between their claim and their finish. ``step`` rebuilds a ``QueueModel``
from the rows (``QueueModel.from_rows``), makes the call with the arguments the real
call got, and accepts it only if the model returns or raises exactly what the real
call did. ``final`` accepts a state whose rows are the rows found after the run.

The model's side of each fault: ``raise`` raises the same error at the same point (so
the model rolls back, or keeps an after-commit change, as the contract says); ``pause``
does nothing; ``kill`` raises ``Killed`` at its point, since a call that returned never
got there. A call that never returned is made with no hook and its output not checked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import model
from model.queue import RETRY_BASE_MS, RETRY_CAP_MS
from tests.parallel.checker import Operation
from tests.parallel.history import Observed, frozen, outcome_of
from tests.parallel.program import Fault, InjectedFault, Killed, Send
from tests.support import Rows

JobRows = tuple[tuple[Any, ...], ...]


@dataclass(frozen=True)
class State:
    """The queue's rows, and the tickets of the run_once claims not yet finished."""

    jobs: JobRows
    redrives: JobRows
    holding: tuple[tuple[int, Any], ...] = ()

    def queue(self) -> model.QueueModel:
        return model.QueueModel.from_rows(
            {"jobs": list(self.jobs), "redrives": list(self.redrives)}
        )

    def ticket_of(self, claim: int) -> dict[str, Any] | None:
        for op_id, ticket in self.holding:
            if op_id == claim:
                return dict(ticket)
        return None


def state_of(rows: Rows, holding: tuple[tuple[int, Any], ...] = ()) -> State:
    return State(tuple(map(tuple, rows["jobs"])), tuple(map(tuple, rows["redrives"])), holding)


class QueueSpec:
    """``QueueModel`` as the checker's ``Model``: ``init``, ``step``, ``final``.

    ``claim_order`` is the backend's promise about claim order (``strict``: each claim
    takes the lowest-seq claimable job at the moment it takes effect).
    """

    def __init__(self, final_rows: Rows, claim_order: str = "strict") -> None:
        if claim_order != "strict":
            raise ValueError(f"claim order {claim_order!r} is not modelled")
        self.final_rows = state_of(final_rows)
        self.claim_order = claim_order

    def init(self) -> State:
        return State((), ())

    def final(self, state: State) -> bool:
        return (state.jobs, state.redrives) == (self.final_rows.jobs, self.final_rows.redrives)

    def step(self, state: State, op: Operation) -> State | None:
        observed: Observed = op.call
        queue = state.queue()
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
    """The model's fault hook for ``fault`` (``None``: no hook at all)."""
    if fault is None:
        return None

    def hook(point: str) -> None:
        if point != fault.point:
            return
        if fault.kind == "raise":
            raise InjectedFault(point)
        if fault.kind == "kill":
            raise Killed(point)

    return hook
