"""Which errors a courier waits out instead of dying: a busy file, a server out of reach.

A busy SQLite file (``database is locked`` after the busy timeout) and a
PostgreSQL server that is restarting, failing over or cut off are conditions that
pass; a courier backs off and tries again. Anything else is a fault to report.
A busy error during ``finish`` leaves the job leased; its lease expires and it is
delivered again, which the receiver's inbox absorbs.
"""

from __future__ import annotations

import sqlite3
import sys

from courier import backend
from courier.backend import is_busy

__all__ = ["is_busy", "is_transient"]


def is_transient(error: BaseException) -> bool:
    """True for an error a courier waits out: a busy SQLite file, or a PostgreSQL
    server it lost or cannot reach for now (a restart, a failover)."""
    if isinstance(error, sqlite3.OperationalError):
        return is_busy(error)
    if isinstance(error, backend.Unreachable | backend.Busy):
        return True
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(error, psycopg.OperationalError)
