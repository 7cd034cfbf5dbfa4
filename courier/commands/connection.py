"""How a command reaches its queue: a connection for one read, the queue module's own
connection for a write, the queue's clock, and a job's status.

A queue is a SQLite file's path or a PostgreSQL conninfo (``courier.backend``); a
command never creates one it was not asked to (only ``init`` does).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from courier import backend, queueview
from courier.backend import Target
from courier.clock import clock_ms
from courier.stop_signal import pause
from courier.transient import is_transient

__all__ = [
    "known_status",
    "now_ms",
    "open_existing_queue",
    "transient_trouble",
    "wait_for_queue",
    "with_queue",
]

WAIT_CAP_S = 1.0


def now_ms(con: backend.Connection, target: Target) -> int:
    """The queue's time base now: the server's clock on PostgreSQL, else this host's."""
    return backend.server_clock_ms(con) if backend.is_conninfo(target) else clock_ms()


def with_queue(target: Target, read: Callable[[Any], Any]) -> Any:
    """``read(con)`` on a connection of its own to an existing queue, closed after."""
    con = backend.connect_existing(target)
    try:
        return read(con)
    finally:
        con.close()


def open_existing_queue(target: Target) -> Any:
    """The queue module's own connection to a queue that must already exist."""
    return backend.open_existing(target)


def known_status(con: Any, job_id: str) -> str:
    """The job's status, or ``unknown`` when the queue holds no such job."""
    row = queueview.job(con, job_id)
    return "unknown" if row is None else str(row["status"])


def transient_trouble(target: Target) -> Exception | None:
    """Check that ``target`` holds a queue now: ``None`` if it does, the error if it is
    busy or out of reach for now (``courier.transient``).

    Raises:
        Whatever ``backend.connect_existing`` raises that is not transient (no such
        file, a file that is not a queue, a database without one).
    """
    try:
        backend.connect_existing(target).close()
    except Exception as error:
        if not is_transient(error):
            raise
        return error
    return None


def wait_for_queue(
    target: Target,
    stop: Any,
    log: Callable[[str], None],
    who: str,
    max_seconds: float | None,
) -> bool:
    """Wait until ``target`` holds a queue that answers (``transient_trouble``), with a
    growing pause of at most ``WAIT_CAP_S``; ``log`` says why it waits. Returns
    ``True`` once it answers, ``False`` if ``stop`` (an event) was set or
    ``max_seconds`` passed first.

    Raises:
        As ``transient_trouble``.
    """
    started = time.monotonic()
    for attempt in range(10**9):
        trouble = transient_trouble(target)
        if trouble is None:
            return True
        what = "busy" if isinstance(trouble, backend.Busy) else "unreachable"
        log(f"{who}: queue {what} ({trouble}); waiting for it")
        waited = time.monotonic() - started
        if stop.is_set() or (max_seconds is not None and waited >= max_seconds):
            return False
        pause(min(WAIT_CAP_S, 0.05 * 2 ** min(attempt, 5)), stop)
    return False
