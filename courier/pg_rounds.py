"""A courier's rounds on PostgreSQL: one kept connection, on the server's clock.

Time is the database server's clock (``courier.backend.server_clock_ms``), read on
the courier's own connection, so couriers on many hosts judge every lease on one
time base whatever their own clocks say. It is read again once the last reading is
``CLOCK_READ_S`` old, and carried forward in between on this host's monotonic
clock from the moment the reading came back: a time given to the queue is then never
later than the server's clock at that moment (on one host the monotonic clock and the
wall clock run at one rate; across hosts they differ by the clocks' drift, parts per
million of a second), and lags it by no more than the reading's round trip, as a
time read just before each call does. This saves a round trip per queue call: the
batched courier makes two a batch (``courier.batch_rounds``). A connection lost to a
restart, a failover or a cut link is closed and made again on the next use, its
clock read anew; the error itself is the courier's to wait out
(``courier.transient``).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from courier import backend
from courier.delivery import Send
from courier.queueview import unfinished_count
from courier.transient import is_transient

__all__ = ["CLOCK_READ_S", "PgRounds"]

T = TypeVar("T")

CLOCK_READ_S = 1.0  # how old a reading of the server's clock may grow before the next


class PgRounds:
    """A courier's rounds on the queue a conninfo names (``courier.runner.Rounds``):
    ``pgworker.run_once`` on one kept connection. ``close`` it when done."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._con: Any = None
        self._read: tuple[int, float] | None = None  # the server's clock, when it came back

    def connection(self) -> Any:
        """The kept connection, made (and checked to hold a queue) when needed."""
        if self._con is None or self._con.closed:
            self._read = None  # perhaps another server: its clock is read anew
            self._con = backend.connect_existing(self.conninfo)
        return self._con

    def _guarded(self, action: Callable[[Any], Any]) -> Any:
        """``action`` on the kept connection, which is dropped if the action met a
        transient error (the next use makes another)."""
        try:
            return action(self.connection())
        except BaseException as error:
            if is_transient(error):
                self.close()
            raise

    def now_ms(self) -> int:
        """The server's clock in milliseconds (``backend.server_clock_ms``), read again
        once the last reading is ``CLOCK_READ_S`` old (see the module)."""
        now: int = self._guarded(self._clock)
        return now

    def _clock(self, con: Any) -> int:
        """The server's clock on ``con``: the last reading carried forward on the monotonic
        clock, or a new reading if it is ``CLOCK_READ_S`` old."""
        if self._read is None or time.monotonic() - self._read[1] >= CLOCK_READ_S:
            server_ms = backend.server_clock_ms(con)
            self._read = (server_ms, time.monotonic())
        server_ms, back = self._read
        return server_ms + int((time.monotonic() - back) * 1000)

    def round(
        self,
        owner: str,
        send: Send,
        jitter: Callable[[], float],
        lease_ms: int,
        later: int | None = None,
    ) -> list[dict[str, Any]]:
        """One ``pgworker.run_once`` round with one ``jitter()``, on the server's clock:
        its result, or ``[]`` if nothing was claimable."""
        drawn = jitter()
        pgworker = backend.queue_module(self.conninfo)
        result: dict[str, Any] | None = self._guarded(
            lambda con: pgworker.run_once(con, owner, self.now_ms, send, drawn, lease_ms)
        )
        return [] if result is None else [result]

    def call(self, action: Callable[[ModuleType, Any, int], T]) -> T:
        """``action(pgworker, con, now_ms)``: one queue call on the kept connection at the
        server's clock, for rounds of another kind (``courier.batch_rounds``); its
        result. A transient error drops the connection (the next use makes another)."""
        pgworker = backend.queue_module(self.conninfo)
        result: T = self._guarded(lambda con: action(pgworker, con, self._clock(con)))
        return result

    def holding(self) -> bool:
        """False: a round of one job holds nothing for the next (``later`` changes nothing)."""
        return False

    def drained(self) -> bool:
        """True if no job is pending or leased (read on the kept connection)."""
        return bool(self._guarded(unfinished_count) == 0)

    def close(self) -> None:
        """Close the kept connection, if any."""
        self._read = None
        if self._con is not None:
            self._con.close()
            self._con = None
