"""Queue rows built fast with direct SQL, in the contract's schema (docs/spec/CONTRACT.md).
See docs/benchmarks.md, ``bench.rows``."""

from __future__ import annotations

import sqlite3
from typing import Any

__all__ = ["fill"]

DUE_SINCE_MS = 1_000

_COUNTER = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < :n)"
_COLUMNS = """INSERT INTO jobs (id, qty, status, attempts, max_attempts, token,
  available_at, deadline, owner, lease_until, reason)"""

_FILL_SQLITE = f"""{_COUNTER}
{_COLUMNS}
SELECT :prefix || printf('%08d', i), 1 + i % 1000, :status, :attempts, :max_attempts,
  :attempts, :available_at, :deadline, :owner, :lease_until, :reason FROM c"""

_FILL_POSTGRES = f"""{_COLUMNS}
SELECT %(prefix)s || lpad(i::text, 8, '0'), 1 + mod(i, 1000), %(status)s, %(attempts)s,
  %(max_attempts)s, %(attempts)s, %(available_at)s, %(deadline)s, %(owner)s,
  %(lease_until)s, %(reason)s
FROM generate_series(1, %(n)s) AS i"""


def fill(
    con: Any,
    n: int,
    now_ms: int,
    prefix: str = "job-",
    *,
    status: str = "pending",
    attempts: int = 0,
    max_attempts: int = 3,
    since_ms: int = DUE_SINCE_MS,
    ttl_ms: int = 60_000,
    owner: str | None = None,
    lease_until: int | None = None,
    reason: str | None = None,
) -> None:
    """Insert ``n`` rows alike, ids ``prefix00000001``..., on a worker.py or a pgworker.py
    connection: available since ``now_ms - since_ms`` (negative: not yet), dead-lined
    ``ttl_ms`` after that, token ``attempts``; by default due fresh jobs."""
    if n <= 0:
        return
    available_at = now_ms - since_ms
    columns = {"n": n, "prefix": prefix, "status": status, "attempts": attempts}
    columns |= {"max_attempts": max_attempts, "available_at": available_at, "owner": owner}
    columns |= {"deadline": available_at + ttl_ms, "lease_until": lease_until, "reason": reason}
    sqlite = isinstance(con, sqlite3.Connection)
    con.execute(_FILL_SQLITE if sqlite else _FILL_POSTGRES, columns)
