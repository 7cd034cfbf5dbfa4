"""What a run of a parallel program recorded, and the history the checker reads from it.

Every call is recorded with its invocation and its return on one system-wide clock
(``time.monotonic_ns``: CLOCK_MONOTONIC, the same in every process of the machine), the
concrete arguments it was given (tickets resolved) and its result or exception. A call
whose process was killed has no return.

``operations(records, store)`` turns the records into the checker's ``Operation``s:

- a ``run_once`` is two calls, its claim and its finish, because it really is two
  transactions with a send between them: the claim from the invocation to the moment
  the send was entered, the finish from the moment the send returned to the return;
  the finish uses the ticket the model's claim gave (see ``tests.parallel.spec``);
- a call that failed because the write lock was not granted (SQLite's ``database is
  locked``) must have had no effect: it is left out, so every later result and the rows
  at the end must be explained without it.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from tests.parallel.checker import Operation
from tests.parallel.program import Program, TicketRef
from tests.support import Rows

Outcome = tuple[Any, ...]
"""``("returned", value)`` or ``("raised", exception type name, message)``."""


def clock_ns() -> int:
    """The one clock of every record: system-wide, monotonic, in nanoseconds."""
    return time.monotonic_ns()


class Caught(NamedTuple):
    """An exception returned inside a list (``enqueue_many``'s ``Conflict``), as compared:
    by its type's name and its message."""

    type: str
    message: str


def plain(value: Any) -> Any:
    """``value`` with each exception of a returned list as a ``Caught``: comparable and
    picklable."""
    if type(value) is list:
        return [
            Caught(type(item).__name__, str(item)) if isinstance(item, BaseException) else item
            for item in value
        ]
    return value


def outcome_of(call: Any) -> Outcome:
    """Run ``call()``: ``("returned", value)`` or ``("raised", type name, message)``."""
    try:
        return ("returned", plain(call()))
    except Exception as error:
        return ("raised", type(error).__name__, str(error))


@dataclass
class SendTrace:
    """What the scripted send of a ``run_once`` saw: when it was entered and left, the
    delivery, and whether the courier's connection had a transaction open meanwhile."""

    entered: int
    delivery: dict[str, Any]
    in_transaction: bool
    left: int | None = None


@dataclass
class Record:
    """One call of one lane, as it ran."""

    lane: str
    index: int
    verb: str
    args: dict[str, Any]
    invoked: int
    returned: int | None = None
    outcome: Outcome | None = None
    send: SendTrace | None = None

    @property
    def label(self) -> str:
        return TicketRef.label(self.lane, self.index)

    @property
    def killed(self) -> bool:
        return self.returned is None


@dataclass
class Run:
    """One run of a program: every call's record, lane by lane, and the rows after it."""

    program: Program
    records: list[Record]
    rows: Rows
    notes: list[str] = field(default_factory=list)

    def interleaving(self) -> tuple[tuple[str, str], ...]:
        """The order of the invocations and returns seen, by call label: what makes two
        runs of one program different."""
        events = [(r.invoked, "call", r.label) for r in self.records]
        events += [(r.returned, "return", r.label) for r in self.records if r.returned]
        return tuple((kind, label) for _, kind, label in sorted(events))


@dataclass(frozen=True)
class Observed:
    """The call the checker places: the verb, its concrete arguments and what was seen
    (``output`` is the outcome; ``None`` for a call that never returned)."""

    label: str
    verb: str
    args: tuple[tuple[str, Any], ...]
    output: Any
    part: str = ""  # "claim" or "finish" for the two halves of a run_once
    pair: int | None = None  # the claim half's operation id, on the finish half

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.args)


def frozen(value: Any) -> Any:
    """A hashable copy of plain data (dicts become sorted tuples of items)."""
    if isinstance(value, dict):
        return tuple(sorted((key, frozen(item)) for key, item in value.items()))
    if isinstance(value, list | tuple) and not isinstance(value, Caught):
        return tuple(frozen(item) for item in value)
    return value


def operations(records: list[Record], lock_not_granted: Any) -> list[Operation]:
    """The checker's history: one operation per call (two per ``run_once`` that got as far
    as its send), leaving out the calls whose lock was not granted."""
    ops: list[Operation] = []

    def add(observed: Observed, invoked: int, returned: int | None) -> int:
        ops.append(
            Operation(len(ops), observed.label, observed, observed.output, invoked, returned)
        )
        return len(ops) - 1

    for record in records:
        refused = not_granted(record, lock_not_granted)
        args = tuple(record.args.items())
        send = record.send
        if refused and (record.verb != "run_once" or send is None):
            continue
        if record.verb != "run_once":
            observed = Observed(record.label, record.verb, args, record.outcome)
            add(observed, record.invoked, record.returned)
            continue
        if send is None:  # no delivery: the claim found nothing
            observed = Observed(record.label, "run_once", args, record.outcome, part="claim")
            add(observed, record.invoked, record.returned)
            continue
        token = None
        if record.outcome is not None and record.outcome[0] == "returned":
            token = record.outcome[1]["token"]
        claimed = {"id": send.delivery.get("id"), "qty": send.delivery.get("qty"), "token": token}
        claim_id = add(
            Observed(record.label, "run_once", args, ("claimed", claimed), part="claim"),
            record.invoked,
            send.entered,
        )
        if send.left is None or record.outcome is None or refused:
            continue  # the courier died in its send, or its finish got no lock: no finish
        if record.outcome[0] == "raised" and record.outcome[1] in ("BadAck", "SendCrash"):
            continue  # the answer was not classified: no finish, the job stays leased
        observed = Observed(
            record.label, "run_once", args, record.outcome, part="finish", pair=claim_id
        )
        add(observed, send.left, record.returned)
    return ops


def not_granted(record: Record, lock_not_granted: Any) -> bool:
    """Whether the call failed because the write lock was not granted."""
    outcome = record.outcome
    return (
        outcome is not None
        and outcome[0] == "raised"
        and bool(lock_not_granted(outcome[1], outcome[2]))
    )
