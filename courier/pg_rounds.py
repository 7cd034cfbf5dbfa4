"""A courier's rounds on PostgreSQL: one kept connection, on the server's clock.

Time is the database server's clock (``courier.backend.server_clock_ms``), read on
the courier's own connection, so couriers on many hosts judge every lease on one
time base whatever their own clocks say. A connection lost to a restart, a
failover or a cut link is closed and made again on the next use; the error itself
is the courier's to wait out (``courier.transient``).
"""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType
from typing import Any, TypeVar

from courier import backend
from courier.delivery import Send
from courier.queueview import unfinished_count
from courier.transient import is_transient

__all__ = ["PgRounds"]

T = TypeVar("T")


class PgRounds:
    """A courier's rounds on the queue a conninfo names (``courier.runner.Rounds``):
    ``pgworker.run_once`` on one kept connection. ``close`` it when done."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._con: Any = None

    def connection(self) -> Any:
        """The kept connection, made (and checked to hold a queue) when needed."""
        if self._con is None or self._con.closed:
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
        """The server's clock in milliseconds (see ``backend.server_clock_ms``)."""
        now: int = self._guarded(backend.server_clock_ms)
        return now

    def round(
        self,
        owner: str,
        send: Send,
        jitter: Callable[[], float],
        lease_ms: int,
        last: bool = False,
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
        result: T = self._guarded(lambda con: action(pgworker, con, backend.server_clock_ms(con)))
        return result

    def holding(self) -> bool:
        """False: a round of one job holds nothing for the next (``last`` changes nothing)."""
        return False

    def drained(self) -> bool:
        """True if no job is pending or leased (read on the kept connection)."""
        return bool(self._guarded(unfinished_count) == 0)

    def close(self) -> None:
        """Close the kept connection, if any."""
        if self._con is not None:
            self._con.close()
            self._con = None
