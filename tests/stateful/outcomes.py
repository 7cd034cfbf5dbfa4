"""How the lockstep machine runs one call on both sides and compares what came back.

``outcome_of`` turns a call into a comparable result (what it returned, or the
exception it raised with the words an operator reads); ``FaultAt`` and
``ScriptedClock`` are the hooks and clocks both sides are given, the same for
each; the refusal texts are what both must say. ``tests/stateful/lockstep.py``
holds the machine that uses them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, NamedTuple

from hypothesis import note
from hypothesis.errors import InvalidArgument

import model
import worker
from tests.divergence import abbreviated, clipped_lines

__all__ = [
    "EXPECTED_ERRORS",
    "NO_QUEUE_FILE",
    "OPEN_TRANSACTION",
    "Caught",
    "FaultAt",
    "InjectedFault",
    "Result",
    "ScriptedClock",
    "ScriptedSend",
    "SendCrash",
    "call_text",
    "comparable",
    "explain",
    "outcome_of",
    "refusal_of_path",
    "summary_of",
    "supplied",
]

Result = tuple[Any, ...]


def supplied(**arguments: object) -> dict[str, Any]:
    """The optional arguments that were given (None: left out, so the default applies)."""
    return {name: value for name, value in arguments.items() if value is not None}


def explain(message: str) -> None:
    """Attach ``message`` to a failing example; print it when a test replays steps by hand.

    Each line is clipped (``tests.divergence.clipped``): the values in it should be
    ``abbreviated`` already, and no line of a printed program is wider than that."""
    message = clipped_lines(message)
    try:
        note(message)
    except InvalidArgument:  # outside hypothesis: a regression test calling rules directly
        print(message)


def call_text(function: str, arguments: dict[str, Any], con: bool = True) -> str:
    """The call as made, each value abbreviated: ``finish(con, ticket={...}, outcome='ok',
    now_ms=-1, delay_ms=0)``; ``con`` says whether a connection comes first."""
    shown = [f"{name}={abbreviated(value, '    ')}" for name, value in arguments.items()]
    return f"{function}({', '.join(['con', *shown] if con else shown)})"


class InjectedFault(Exception):
    """Raised by a fault hook at the point it was told to fail at."""


class SendCrash(Exception):
    """An unclassified failure of ``send``: it must propagate untouched."""


# Exceptions a step may legitimately end with; anything else fails the test.
EXPECTED_ERRORS = (ValueError, worker.Conflict, worker.BadAck, InjectedFault, SendCrash)


class Caught(NamedTuple):
    """An exception returned in a list (``enqueue_many``'s ``Conflict``), as compared:
    exceptions are not equal by value, so by their type and whole message."""

    type: str
    message: str


def comparable(value: Any) -> Any:
    """``value``, with each exception of a returned list as a ``Caught``."""
    if type(value) is list:
        return [
            Caught(type(item).__name__, str(item)) if isinstance(item, BaseException) else item
            for item in value
        ]
    return value


def outcome_of(call: Callable[[], Any], *also: type[BaseException]) -> Result:
    """``("returned", value)`` or ``("raised", exception type name[, message])``.

    A ``ValueError``, ``Conflict`` or ``BadAck`` carries its whole message: both
    sides must reject the same argument (or job) in the same words, the words an
    operator reads (``'owner' must be a str of ... (got '' that is a 'str')``).
    A ``Conflict`` returned in a list is compared the same way (``comparable``).
    """
    try:
        return ("returned", comparable(call()))
    except ValueError as error:
        return ("raised", type(error).__name__, str(error))
    except (worker.Conflict, worker.BadAck) as error:
        return ("raised", type(error).__name__, str(error))
    except EXPECTED_ERRORS as error:
        return ("raised", type(error).__name__)
    except BaseException as error:
        if isinstance(error, also):  # what one backend may also end a step with
            return ("raised", type(error).__name__)
        raise


def summary_of(result: Result) -> str:
    """A coarse label of a result for ``--hypothesis-show-statistics`` (coverage at a glance)."""
    if result[0] == "raised":
        return str(result[1])
    value = result[1]
    if isinstance(value, list):  # a batch: which results it had, e.g. "[Conflict, False, True]"
        return "[" + ", ".join(sorted({summary_of(("returned", item)) for item in value})) + "]"
    if isinstance(value, Caught):
        return value.type
    if isinstance(value, dict):
        return str(value.get("status", "ticket"))
    return repr(value) if value is None or isinstance(value, bool | str) else type(value).__name__


class FaultAt:
    """A fault hook that records every point, with the rows it sees there, and
    raises at ``fail_at``.

    ``look`` reads the rows as the hook sees them: inside the transaction before
    COMMIT, so both sides must have made the same changes, in the same order, by
    the time each hook fires (for example the audit row before the redrive).
    """

    def __init__(self, fail_at: str | None, look: Callable[[], Any]) -> None:
        self.fail_at = fail_at
        self.look = look
        self.points: list[tuple[str, Any]] = []

    def __call__(self, point: str) -> None:
        self.points.append((point, self.look()))
        if point == self.fail_at:
            raise InjectedFault(point)


class ScriptedClock:
    """Returns the scripted readings in order (the same script for both sides)."""

    def __init__(self, readings: list[object]) -> None:
        self.readings = list(readings)
        self.calls = 0

    def __call__(self) -> Any:
        reading = self.readings[min(self.calls, len(self.readings) - 1)]
        self.calls += 1
        return reading

    def __repr__(self) -> str:
        return f"ScriptedClock({self.readings!r})"


class ScriptedSend:
    """A ``send`` that logs each delivery and behaves as ``behaviour`` says (one of
    ``strategies.SENDS``); ``enqueue_elsewhere`` enqueues through another connection."""

    def __init__(
        self, behaviour: str, log: list[dict[str, Any]], enqueue_elsewhere: Callable[[], None]
    ) -> None:
        self.behaviour = behaviour
        self.log = log
        self.enqueue_elsewhere = enqueue_elsewhere

    def __call__(self, delivery: dict[str, Any]) -> object:
        self.log.append(dict(delivery))
        if self.behaviour == "bad_ack":
            return 1
        if self.behaviour == "retryable":
            raise worker.Retryable("timeout")
        if self.behaviour == "permanent":
            raise worker.Permanent("rejected")
        if self.behaviour == "crash":
            raise SendCrash("connection reset")
        if self.behaviour == "vandal":
            delivery.clear()
            delivery.update(id="zzz", qty=999, token=10**9)
        if self.behaviour == "enqueue_elsewhere":
            self.enqueue_elsewhere()
        return True

    def __repr__(self) -> str:
        return f"ScriptedSend({self.behaviour!r})"


OPEN_TRANSACTION = "'con' has an open transaction; finish it before calling the queue"
NO_QUEUE_FILE = "no queue file (run open_queue to create one)"


def refusal_of_path(path: object) -> str:
    """The message ``open_queue`` gives for a value that names no queue file."""
    try:
        a_path = type(path) is str or (isinstance(path, os.PathLike) and bool(os.fspath(path)))
    except TypeError:  # a PathLike whose __fspath__ gives no path
        a_path = False
    if a_path:
        return str(
            model.rules.malformed("path", "a local file path (not in-memory, not empty)", path)
        )
    return str(model.rules.malformed("path", "a str or os.PathLike naming a local file", path))
