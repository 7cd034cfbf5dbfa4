"""A parallel program: a sequential prefix, then two or three branches run at once.

A program is plain data, drawn whole on the main thread before anything runs
(hypothesis assumes a test is single-threaded): each call names an API verb of the
queue and its arguments. Times are concrete numbers. What cannot be known before the
run, the tickets that claims will return, is named by a ``TicketRef``: "the first
ticket that call 2 of branch 1 received", resolved while the branch runs.

``describe(program)`` prints it as a listing that reads like the program it is::

    prefix
      p0 = enqueue({'id': 'a', 'qty': 1}, now_ms=1000, ttl_ms=100, max_attempts=2)
    branch b1
      b1.0 = claim(owner='c1', now_ms=1000, lease_ms=10, fault=pause@after-claim 2ms)
      b1.1 = finish(ticket=b1.0[0], outcome='ok', now_ms=1004, delay_ms=0)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

PREFIX = "p"

# The hook points before COMMIT, where a pause widens a race or a kill loses the change,
# and the one after it, where a kill keeps the change.
BEFORE_COMMIT = ("after-claim", "after-finish", "after-audit", "after-redrive")
AFTER_COMMIT = "after-commit"
# What the scripted send of run_once does: answer at once, raise, or pause first; "die"
# kills the courier right after the receiver got the delivery (the mission's story).
SENDS = ("ack", "retryable", "permanent", "bad_ack", "crash", "pause", "die")


@dataclass(frozen=True)
class TicketRef:
    """The ``item``-th ticket returned by call ``call`` of lane ``lane`` (``p`` is the
    prefix, ``b1``... the branches); unresolved if that call returned fewer."""

    lane: str
    call: int
    item: int = 0

    def __repr__(self) -> str:
        return f"{self.label(self.lane, self.call)}[{self.item}]"

    @staticmethod
    def label(lane: str, call: int) -> str:
        """How a call is named in listings and timelines: ``p3``, ``b2.0``."""
        return f"{lane}{call}" if lane == PREFIX else f"{lane}.{call}"


@dataclass(frozen=True)
class Fault:
    """What the fault hook does at ``point``: ``raise`` an error there, ``pause`` for
    ``ms`` milliseconds (inside the transaction: a race widener), or ``kill`` the
    process with SIGKILL."""

    kind: str
    point: str
    ms: int = 0

    def __repr__(self) -> str:
        return f"{self.kind}@{self.point}" + (f" {self.ms}ms" if self.kind == "pause" else "")

    def hook(
        self, pause: Callable[[int], None], kill: Callable[[str], None]
    ) -> Callable[[str], None]:
        """The fault hook of this fault, for the real branch or for the model: at its
        point it raises ``InjectedFault``, or calls ``pause(ms)`` or ``kill(point)``;
        anywhere else it does nothing."""

        def at(point: str) -> None:
            if point != self.point:
                return
            if self.kind == "raise":
                raise InjectedFault(point)
            if self.kind == "pause":
                pause(self.ms)
            elif self.kind == "kill":
                kill(point)

        return at


@dataclass(frozen=True)
class Send:
    """The scripted ``send`` of one ``run_once``: its behaviour (``SENDS``) and, for
    ``pause``, how long it waits before it answers True."""

    behaviour: str
    ms: int = 0

    def __repr__(self) -> str:
        return self.behaviour + (f" {self.ms}ms" if self.behaviour == "pause" else "")


@dataclass(frozen=True)
class Call:
    """One call of a verb with keyword arguments, in the order the verb takes them
    (``fault`` among them for the verbs that have a hook)."""

    verb: str
    args: tuple[tuple[str, Any], ...]

    @property
    def kwargs(self) -> dict[str, Any]:
        return dict(self.args)

    def arg(self, name: str) -> Any:
        return self.kwargs[name]

    @property
    def fault(self) -> Fault | None:
        fault = self.kwargs.get("fault")
        return fault if isinstance(fault, Fault) else None

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={value!r}" for name, value in self.args if value is not None)
        return f"{self.verb}({shown})"


@dataclass(frozen=True)
class Program:
    """A sequential prefix and the branches that run at once after it."""

    prefix: tuple[Call, ...]
    branches: tuple[tuple[Call, ...], ...]

    def lanes(self) -> list[tuple[str, tuple[Call, ...]]]:
        """``("p", prefix)``, then ``("b1", ...)``, ``("b2", ...)``..."""
        return [(PREFIX, self.prefix)] + [
            (f"b{number}", calls) for number, calls in enumerate(self.branches, start=1)
        ]

    @property
    def size(self) -> int:
        """How many calls the program has, prefix included."""
        return len(self.prefix) + sum(len(calls) for calls in self.branches)

    def __repr__(self) -> str:
        return describe(self)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """How hypothesis prints a drawn program: the listing."""
        printer.text("\n" + describe(self))


def describe(program: Program) -> str:
    """The program as a listing, one call a line, named as the timeline names them."""
    lines = []
    for lane, calls in program.lanes():
        lines.append("prefix" if lane == PREFIX else f"branch {lane}")
        lines.extend(
            f"  {TicketRef.label(lane, index)} = {call!r}" for index, call in enumerate(calls)
        )
    return "\n".join(lines)


def encoded(program: Program) -> dict[str, Any]:
    """``program`` as plain JSON data (``decoded`` reads it back): each call a list of
    its verb and its arguments, tickets, faults and sends as tagged lists."""

    def value(item: Any) -> Any:
        if isinstance(item, TicketRef):
            return {"ticket": [item.lane, item.call, item.item]}
        if isinstance(item, Fault):
            return {"fault": [item.kind, item.point, item.ms]}
        if isinstance(item, Send):
            return {"send": [item.behaviour, item.ms]}
        if isinstance(item, tuple):
            return {"tuple": [value(part) for part in item]}
        if isinstance(item, list):
            return [value(part) for part in item]
        if isinstance(item, dict):
            return {"dict": [[key, value(part)] for key, part in item.items()]}
        return item

    def call(one: Call) -> list[Any]:
        return [one.verb, [[name, value(argument)] for name, argument in one.args]]

    return {
        "prefix": [call(one) for one in program.prefix],
        "branches": [[call(one) for one in calls] for calls in program.branches],
    }


def decoded(data: dict[str, Any]) -> Program:
    """The program that ``encoded`` wrote (``ValueError`` for anything else)."""
    tags: dict[str, Callable[[Any], Any]] = {
        "ticket": lambda parts: TicketRef(*parts),
        "fault": lambda parts: Fault(*parts),
        "send": lambda parts: Send(*parts),
        "tuple": lambda parts: tuple(value(part) for part in parts),
        "dict": lambda pairs: {key: value(part) for key, part in pairs},
    }

    def value(item: Any) -> Any:
        if isinstance(item, list):
            return [value(part) for part in item]
        if isinstance(item, dict):
            if len(item) != 1 or next(iter(item)) not in tags:
                raise ValueError(f"not a value of a program: {item!r}")
            tag, parts = next(iter(item.items()))
            return tags[tag](parts)
        return item

    def call(one: Any) -> Call:
        verb, arguments = one
        return Call(str(verb), tuple((str(name), value(argument)) for name, argument in arguments))

    try:
        return Program(
            tuple(call(one) for one in data["prefix"]),
            tuple(tuple(call(one) for one in calls) for calls in data["branches"]),
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ValueError(f"not a program: {error}") from None


class InjectedFault(Exception):
    """Raised by a fault hook at the point it was told to fail at (``Fault('raise', ...)``)."""


class SendCrash(Exception):
    """An unclassified failure of ``send`` (behaviour ``crash``): it must propagate untouched."""


class Killed(Exception):
    """Raised by the model's hook where the real process was told to die: a call that
    returned cannot have passed that point."""
