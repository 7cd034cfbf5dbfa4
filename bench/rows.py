"""Queue rows built fast with direct SQL, in the contract's schema (docs/spec/CONTRACT.md).

Going through ``enqueue`` would cost one durable transaction per row (a million rows
would take ten minutes); one ``INSERT ... SELECT`` over a counter (SQLite's recursive
one, PostgreSQL's ``generate_series``) writes them in one statement, its own
transaction, in seconds. Every row is one that the contract's calls could have
produced: ids are identifiers, ``qty`` is 1-1000, the token counts the leases
(``attempts``), and ``deadline - available_at`` never exceeds a ttl of 60 s for a
live row. ``fill`` writes ``n`` rows alike (by default due fresh jobs) on either
backend; ``fill_shape`` the two latency shapes (SQLite; ``n`` rows in all, seq order
is insertion order):

- ``pending``: every row is ``pending``, attempts 0, token 0, due since
  ``now - 1000`` ms and dead-lined at ``now + 59000`` ms.
- ``history``: the last ``DUE_ROWS`` (500) rows by seq are due ``pending`` jobs as in
  ``pending``. The older ``n - 500`` rows are the history, by ``i``, their 1-based
  position: every 10th (``i % 10 == 0``) is a retried job *not yet available*:
  ``pending``, attempts 1, token 1, reason ``retry``, available at ``now + 30000``,
  deadline ``now + 59000``. Their seq is lower than every due job's, as a retried job's
  is. Of the others, ``i % 10 == 5`` is ``dead``/``exhausted`` (attempts 3, token 3) and
  the rest ``done`` (attempts 1, token 1), all with owner and lease_until NULL. At
  1,000,000 rows that is 99,950 waiting retries, 99,950 dead and 799,600 done rows
  (plus the 500 due ones).
"""

from __future__ import annotations

import sqlite3
from typing import Any

__all__ = ["DUE_ROWS", "SHAPES", "fill", "fill_shape"]

DUE_ROWS = 500
SHAPES = ("pending", "history")
NOT_YET_IN_MS = 30_000
DEADLINE_IN_MS = 59_000
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

# i is the 1-based position; rows i > :older are the due jobs at the end of the queue.
_FILL_HISTORY = f"""{_COUNTER}
{_COLUMNS}
SELECT 'job-' || printf('%08d', i), 1 + i % 1000,
  CASE WHEN i > :older THEN 'pending' WHEN i % 10 = 0 THEN 'pending'
       WHEN i % 10 = 5 THEN 'dead' ELSE 'done' END,
  CASE WHEN i > :older THEN 0 WHEN i % 10 = 5 THEN 3 ELSE 1 END,
  3,
  CASE WHEN i > :older THEN 0 WHEN i % 10 = 5 THEN 3 ELSE 1 END,
  CASE WHEN i > :older THEN :due_at WHEN i % 10 = 0 THEN :not_yet_at ELSE :past END,
  CASE WHEN i > :older OR i % 10 = 0 THEN :deadline ELSE :past + 60000 END,
  NULL, NULL,
  CASE WHEN i > :older THEN NULL WHEN i % 10 = 0 THEN 'retry'
       WHEN i % 10 = 5 THEN 'exhausted' ELSE NULL END
FROM c"""


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


def fill_shape(con: sqlite3.Connection, shape: str, n: int, now_ms: int) -> None:
    """Insert the ``n`` rows of ``shape`` (see the module docstring) in one transaction."""
    if shape == "pending":
        fill(con, n, now_ms, ttl_ms=DUE_SINCE_MS + DEADLINE_IN_MS)
        return
    if shape != "history":
        raise ValueError(f"unknown shape {shape!r}; expected one of {SHAPES}")
    if n < DUE_ROWS:
        raise ValueError(f"the history shape needs at least {DUE_ROWS} rows, got {n}")
    con.execute(
        _FILL_HISTORY,
        {
            "n": n,
            "older": n - DUE_ROWS,
            "due_at": now_ms - DUE_SINCE_MS,
            "not_yet_at": now_ms + NOT_YET_IN_MS,
            "deadline": now_ms + DEADLINE_IN_MS,
            "past": now_ms - 3_600_000,
        },
    )
