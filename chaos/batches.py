"""The soak's couriers in batches (``python -m chaos --batch N``): the product's batched rounds,
recorded.

A batched soak courier runs ``courier.batch_rounds.BatchRounds`` itself, on the
queue's calls as ``courier run --batch`` makes them: the production ``FileRounds``
on a file (a kept connection, turns at writing), or on PostgreSQL the soak's own
``chaos.pgchild.Link`` (which notes every lost connection and reconnect). What
the soak adds sits between the rounds and the queue (``RecordedCalls``):

1. The event log: a ``claimed`` line for each ticket of a ``claim_many``, and a
   ``result`` line for each item of a ``finish_many`` with the status it got
   (``stale`` when refused), the time it was judged at (``now_ms``), the ticket's
   ``lease_until`` and how many times that ticket's finish was tried (a finish
   that met a lost connection is tried again with the next group), so the
   checker can tell a late finish that was refused from one accepted. A busy
   queue file is logged (``busy``) and raised again.
2. The drill (``chaos.schedule.Drill``): from the drill's round on (a round is a
   ``claim_many``), the drill's hook is passed to ``claim_many`` and
   ``finish_many``, and SIGKILLs the process at its point, mid-batch.
3. On PostgreSQL the claims ahead go on a connection of their own, as ``courier
   run`` makes them (``courier.batch_rounds``, rule 2): ``ClaimsApart`` records and
   drills them as the others, so a kill at a claim's hook may come while this
   batch's finish is in flight on the other connection.
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from courier.batch_rounds import QueueCalls
from courier.transient import is_busy

__all__ = ["ClaimsApart", "RecordedCalls", "RecordedModule"]

T = TypeVar("T")


class Events(Protocol):
    """Where a soak courier writes its lines (``chaos.child.EventLog``)."""

    def write(self, event: str, **fields: object) -> None: ...


class Hook(Protocol):
    """A drill's fault hooks (``chaos.child.DrillHook``)."""

    def claim(self, point: str) -> None: ...

    def finish(self, point: str) -> None: ...


class RecordedModule:
    """``claim_many`` and ``finish_many`` of the queue's ``module``, recorded and drilled
    (rule 1 and 2) for one call of ``RecordedCalls``."""

    def __init__(self, module: Any, calls: RecordedCalls) -> None:
        self.module = module
        self.calls = calls

    def claim_many(
        self, con: Any, owner: str, now_ms: int, limit: int, lease_ms: int
    ) -> list[dict[str, Any]]:
        hook = self.calls.arm()
        fault = None if hook is None else hook.claim
        tickets: list[dict[str, Any]] = self.module.claim_many(
            con, owner, now_ms, limit, lease_ms, fault
        )
        for ticket in tickets:
            self.calls.events.write(
                "claimed", id=ticket["id"], token=ticket["token"], lease_until=ticket["lease_until"]
            )
        return tickets

    def finish_many(self, con: Any, items: list[dict[str, Any]], now_ms: int) -> list[Any]:
        hook = self.calls.hook
        tries = self.calls.tries
        for item in items:
            tries[(item["ticket"]["id"], item["ticket"]["token"])] += 1
        statuses: list[Any] = self.module.finish_many(
            con, items, now_ms, None if hook is None else hook.finish
        )
        for item, status in zip(items, statuses, strict=True):
            ticket = item["ticket"]
            tried = tries.pop((ticket["id"], ticket["token"]))
            self.calls.events.write(
                "result",
                id=ticket["id"],
                token=ticket["token"],
                status=status or "stale",
                outcome=item["outcome"],
                now_ms=now_ms,
                lease_until=ticket["lease_until"],
                tries=tried,
                retried=tried > 1,
            )
        return statuses


class RecordedCalls:
    """The queue's ``calls`` (``courier.batch_rounds.QueueCalls``) with the soak's
    records and the drill's ``drill_hook``, passed from round ``armed_at`` on (see the
    module's rules)."""

    def __init__(
        self, calls: QueueCalls, events: Events, drill_hook: Hook | None = None, armed_at: int = 1
    ) -> None:
        self.calls = calls
        self.events = events
        self.drill_hook = drill_hook
        self.armed_at = armed_at
        self.claims = 0
        self.hook: Hook | None = None
        self.tries: Counter[tuple[str, int]] = Counter()

    def arm(self) -> Hook | None:
        """Count a round; the drill's hook once its round has come."""
        self.claims += 1
        if self.claims >= self.armed_at:
            self.hook = self.drill_hook
        return self.hook

    def now_ms(self) -> int:
        return self.calls.now_ms()

    def call(self, action: Callable[[Any, Any, int], T]) -> T:
        def recorded(module: Any, con: Any, now_ms: int) -> T:
            return action(RecordedModule(module, self), con, now_ms)

        try:
            return self.calls.call(recorded)
        except sqlite3.OperationalError as error:
            if is_busy(error):
                self.events.write("busy", detail=str(error))
            raise

    def drained(self) -> bool:
        return self.calls.drained()

    def close(self) -> None:
        self.calls.close()


class ClaimsApart:
    """The claims ahead of a ``RecordedCalls`` on the queue's ``calls`` of another
    connection (``BatchRounds``' ``claims``; rule 3): recorded and drilled by that
    ``RecordedCalls`` (one count of rounds, one drill)."""

    def __init__(self, recorded: RecordedCalls, calls: QueueCalls) -> None:
        self.recorded = recorded
        self.calls = calls

    def now_ms(self) -> int:
        return self.calls.now_ms()

    def call(self, action: Callable[[Any, Any, int], T]) -> T:
        def recorded(module: Any, con: Any, now_ms: int) -> T:
            return action(RecordedModule(module, self.recorded), con, now_ms)

        return self.calls.call(recorded)

    def drained(self) -> bool:
        return self.calls.drained()

    def close(self) -> None:
        self.calls.close()
