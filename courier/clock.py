"""The host's wall clock in milliseconds: the time base of a queue file and its receiver.

Every courier of a queue file and the receiver beside it read this one clock, so a
lease written by one process is judged by another on the same base. On PostgreSQL a
courier reads the database server's clock instead (``courier.backend.server_clock_ms``).
"""

from __future__ import annotations

import time

__all__ = ["clock_ms"]


def clock_ms() -> int:
    """The host's wall clock in whole milliseconds: the queue's shared time base."""
    return time.time_ns() // 1_000_000
