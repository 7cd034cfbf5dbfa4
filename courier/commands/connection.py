"""How a command reaches its queue: a connection for one read, the queue module's own
connection for a write, the queue's clock, and a job's status.

A queue is a SQLite file's path or a PostgreSQL conninfo (``courier.backend``); a
command never creates one it was not asked to (only ``init`` does).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from courier import backend, queueview
from courier.backend import Target
from courier.clock import clock_ms

__all__ = ["known_status", "now_ms", "open_existing_queue", "with_queue"]


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
