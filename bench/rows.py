"""Queue rows built fast with direct SQL, in the contract's schema (docs/spec/CONTRACT.md).

Going through ``worker.enqueue`` would cost one durable transaction per row (a million
rows would take ten minutes); a single ``INSERT ... SELECT`` over a recursive counter
writes them in one transaction in seconds. Every row is one that the contract's calls
could have produced: ids are identifiers, ``qty`` is 1-1000, tokens and attempts are
consistent with the status, and ``deadline - available_at`` never exceeds a ttl of
60 s for a live row.

The two latency shapes (``n`` rows in all; seq order is insertion order):

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

__all__ = [
    "DUE_ROWS",
    "SHAPES",
    "fill_dead",
    "fill_pending",
    "fill_shape",
    "status_counts",
]

DUE_ROWS = 500
SHAPES = ("pending", "history")
NOT_YET_IN_MS = 30_000
DEADLINE_IN_MS = 59_000
DUE_SINCE_MS = 1_000

_COUNTER = "WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < :n)"
_COLUMNS = """INSERT INTO jobs (id, qty, status, attempts, max_attempts, token,
  available_at, deadline, owner, lease_until, reason)"""

_FILL_PENDING = f"""{_COUNTER}
{_COLUMNS}
SELECT :prefix || printf('%08d', i), 1 + i % 1000, 'pending', 0, 3, 0,
  :available_at, :deadline, NULL, NULL, NULL FROM c"""

_FILL_DEAD = f"""{_COUNTER}
{_COLUMNS}
SELECT :prefix || printf('%08d', i), 1 + i % 1000, 'dead', 3, 3, 3,
  :available_at, :deadline, NULL, NULL, 'exhausted' FROM c"""

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


def fill_pending(
    con: sqlite3.Connection, n: int, now_ms: int, prefix: str = "job-", ttl_ms: int = 60_000
) -> None:
    """Insert ``n`` due ``pending`` jobs (ids ``prefix00000001``...) in one transaction."""
    if n <= 0:
        return
    with con:
        con.execute("BEGIN IMMEDIATE")
        con.execute(
            _FILL_PENDING,
            {
                "n": n,
                "prefix": prefix,
                "available_at": now_ms - DUE_SINCE_MS,
                "deadline": now_ms - DUE_SINCE_MS + ttl_ms,
            },
        )


def fill_dead(con: sqlite3.Connection, n: int, now_ms: int, prefix: str = "dead-") -> None:
    """Insert ``n`` jobs that spent their budget of 3 (``dead``/``exhausted``, token 3) in
    one transaction, ids ``prefix00000001``...: each can be redriven."""
    if n <= 0:
        return
    with con:
        con.execute("BEGIN IMMEDIATE")
        con.execute(
            _FILL_DEAD,
            {"n": n, "prefix": prefix, "available_at": now_ms - 2_000, "deadline": now_ms},
        )


def fill_shape(con: sqlite3.Connection, shape: str, n: int, now_ms: int) -> None:
    """Insert the ``n`` rows of ``shape`` (see the module docstring) in one transaction."""
    if shape == "pending":
        fill_pending(con, n, now_ms, ttl_ms=DUE_SINCE_MS + DEADLINE_IN_MS)
        return
    if shape != "history":
        raise ValueError(f"unknown shape {shape!r}; expected one of {SHAPES}")
    if n < DUE_ROWS:
        raise ValueError(f"the history shape needs at least {DUE_ROWS} rows, got {n}")
    with con:
        con.execute("BEGIN IMMEDIATE")
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


def status_counts(con: sqlite3.Connection, now_ms: int) -> dict[str, int]:
    """Rows by kind: done, dead, leased, due (pending and available) and waiting."""
    counts = {"done": 0, "dead": 0, "leased": 0, "due": 0, "waiting": 0}
    query = """SELECT CASE WHEN status = 'pending' AND available_at <= ? THEN 'due'
                        WHEN status = 'pending' THEN 'waiting' ELSE status END, count(*)
               FROM jobs GROUP BY 1"""
    for kind, count in con.execute(query, (now_ms,)):
        counts[str(kind)] = int(count)
    return counts
