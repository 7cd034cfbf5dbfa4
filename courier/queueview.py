"""Read-only views of a queue, for the operator CLI, the web page, the demo and the drills.

``worker.py`` and ``pgworker.py`` own every write; this module only reads, on
either backend (``courier.backend``): each statement is written once, in SQLite's
placeholders (``?`` and ``:name``), which ``backend.qmark`` runs on a PostgreSQL
connection too. It never creates a queue: a missing path is
``FileNotFoundError`` and a file or database without the queue's two tables is
``ValueError``, so a typo cannot turn into an empty queue or a stray schema.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Iterator
from typing import Any

from courier.backend import Connection, Target, connect_existing, qmark, require_queue_file

__all__ = [
    "DEAD_REASONS",
    "JOB_COLUMNS",
    "REASONS",
    "REDRIVE_COLUMNS",
    "STATUSES",
    "connect_existing",
    "count_jobs",
    "dead_jobs",
    "find_jobs",
    "is_drained",
    "job",
    "job_rows",
    "leased_ticket",
    "next_due",
    "oldest_due",
    "overview",
    "read_queue",
    "redrive_row",
    "redrives",
    "require_queue_file",
    "snapshot",
    "status_counts",
    "table_rows",
    "unfinished_count",
]

STATUSES = ("pending", "leased", "done", "dead")
# The reasons a row can hold: why a job is dead, and 'retry' on a job pending again after
# a failed attempt (the model's mark_* effects; tests/unit/test_cli_words.py pins them).
DEAD_REASONS = ("deadline", "exhausted", "permanent")
REASONS = (*DEAD_REASONS, "retry")
# The contract's jobs columns in order; model/job.py's ROW_FIELDS is a deliberate
# restatement of them (the model imports nothing it checks).
JOB_COLUMNS = (
    "seq",
    "id",
    "qty",
    "status",
    "attempts",
    "max_attempts",
    "token",
    "available_at",
    "deadline",
    "owner",
    "lease_until",
    "reason",
)
REDRIVE_COLUMNS = ("seq", "id", "token", "at_ms", "note")

_SELECT_JOBS = f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs ORDER BY seq"
_SELECT_REDRIVES = f"SELECT {', '.join(REDRIVE_COLUMNS)} FROM redrives ORDER BY seq"
_SELECT_DEAD = f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs WHERE status = 'dead' ORDER BY seq"
_COUNT_BY_STATUS = "SELECT status, count(*) FROM jobs GROUP BY status"
_COUNT_UNFINISHED = "SELECT count(*) FROM jobs WHERE status IN ('pending', 'leased')"
_COUNT_REDRIVES = "SELECT count(*) FROM redrives WHERE id = ?"
_COUNT_ALL_REDRIVES = "SELECT count(*) FROM redrives"
# Times before 1973-03-03 (10**11 ms): seconds were passed where milliseconds belong.
SECONDS_SUSPECT_BELOW_MS = 100_000_000_000
_COUNT_SECONDS_SUSPECTS = f"SELECT count(*) FROM jobs WHERE deadline < {SECONDS_SUSPECT_BELOW_MS}"
# What a claim at :now would take: due, and not about to be quarantined.
_DUE = """FROM jobs
  WHERE ((status = 'pending' AND available_at <= :now)
      OR (status = 'leased' AND lease_until <= :now))
    AND deadline > :now AND attempts < max_attempts"""
_SELECT_NEXT_DUE = f"SELECT {', '.join(JOB_COLUMNS)} {_DUE} ORDER BY seq LIMIT 1"
_COUNT_DUE = f"SELECT count(*) {_DUE}"
# The due job that has waited longest: due since its available_at (pending) or the
# end of its lease (leased), earliest first.
_DUE_SINCE = "CASE WHEN status = 'pending' THEN available_at ELSE lease_until END"
_SELECT_OLDEST_DUE = (
    f"SELECT {', '.join(JOB_COLUMNS)}, {_DUE_SINCE} {_DUE} ORDER BY {_DUE_SINCE}, seq LIMIT 1"
)
_SELECT_LEASE = """SELECT id, qty, owner, token, attempts, lease_until FROM jobs
  WHERE id = ? AND status = 'leased' AND owner = ?"""
_SELECT_REDRIVE = f"SELECT {', '.join(REDRIVE_COLUMNS)} FROM redrives WHERE seq = ?"
_PG_SNAPSHOT = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
# jobs: every filter is optional (a NULL parameter matches every row; the CAST tells
# PostgreSQL the parameter's type where it stands alone). Pages go by seq (keyset):
# after a seq, lowest first, or before one, highest first (turned back by find_jobs).
_MATCHING = """(CAST(:status AS TEXT) IS NULL OR status = :status)
    AND (CAST(:reason AS TEXT) IS NULL OR reason = :reason)
    AND (CAST(:owner AS TEXT) IS NULL OR owner = :owner)
    AND (CAST(:prefix AS TEXT) IS NULL OR substr(id, 1, length(:prefix)) = :prefix)"""
_FIND_JOBS = f"""SELECT {", ".join(JOB_COLUMNS)} FROM jobs
  WHERE {_MATCHING} AND (CAST(:after AS BIGINT) IS NULL OR seq > :after)
  ORDER BY seq LIMIT :limit"""
_FIND_JOBS_BEFORE = f"""SELECT {", ".join(JOB_COLUMNS)} FROM jobs
  WHERE {_MATCHING} AND seq < :before ORDER BY seq DESC LIMIT :limit"""
_COUNT_JOBS = f"SELECT count(*) FROM jobs WHERE {_MATCHING}"
_SELECT_JOB = f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs WHERE id = ?"
_FIND_REDRIVES = f"""SELECT {", ".join(REDRIVE_COLUMNS)} FROM redrives
  WHERE (CAST(:id AS TEXT) IS NULL OR id = :id) ORDER BY seq LIMIT :limit"""


def _rows(con: Connection, statement: str, params: Any = ()) -> list[tuple[Any, ...]]:
    return list(qmark(con).execute(statement, params).fetchall())


def _one(con: Connection, statement: str, params: Any = ()) -> tuple[Any, ...] | None:
    row: tuple[Any, ...] | None = qmark(con).execute(statement, params).fetchone()
    return row


@contextlib.contextmanager
def snapshot(con: Connection) -> Iterator[None]:
    """One read transaction: every query in the block sees the same state of the queue."""
    if isinstance(con, sqlite3.Connection):
        con.execute("BEGIN")
    else:
        con.execute(_PG_SNAPSHOT)
    try:
        yield
    finally:
        con.execute("COMMIT")


def _job(row: tuple[Any, ...]) -> dict[str, Any]:
    return dict(zip(JOB_COLUMNS, row, strict=True))


def _redrive(row: tuple[Any, ...]) -> dict[str, Any]:
    return dict(zip(REDRIVE_COLUMNS, row, strict=True))


def table_rows(con: Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of ``jobs`` and ``redrives``, in seq order, as tuples.

    Keys ``"jobs"`` (columns in ``JOB_COLUMNS`` order) and ``"redrives"``
    (``REDRIVE_COLUMNS``). One query per table and no transaction of its own, so it
    reads what ``con`` sees, also inside a transaction a fault hook is called in.
    """
    return {"jobs": _rows(con, _SELECT_JOBS), "redrives": _rows(con, _SELECT_REDRIVES)}


def job_rows(con: Connection) -> list[dict[str, Any]]:
    """Every job as a dict keyed by column name, in seq order."""
    return [_job(row) for row in _rows(con, _SELECT_JOBS)]


def read_queue(target: Target) -> dict[str, list[dict[str, Any]]]:
    """Every job and every audit row of the existing queue at ``target``, as dicts.

    Keys ``"jobs"`` and ``"redrives"``, each in seq order, read in one read
    transaction (a consistent snapshot). Raises as ``connect_existing`` does.
    """
    con = connect_existing(target)
    try:
        with snapshot(con):
            rows = table_rows(con)
    finally:
        con.close()
    return {
        "jobs": [_job(row) for row in rows["jobs"]],
        "redrives": [_redrive(row) for row in rows["redrives"]],
    }


def status_counts(con: Connection) -> dict[str, int]:
    """The number of jobs per status, with every status present (zero included)."""
    counts = dict.fromkeys(STATUSES, 0)
    counts.update((status, int(n)) for status, n in _rows(con, _COUNT_BY_STATUS))
    return counts


def unfinished_count(con: Connection) -> int:
    """The number of jobs still ``pending`` or ``leased``."""
    row = _one(con, _COUNT_UNFINISHED)
    return int(row[0]) if row else 0


def is_drained(target: Target) -> bool:
    """True if no job of the existing queue at ``target`` is pending or leased.

    Opens and closes a connection of its own; raises as ``connect_existing`` does.
    """
    con = connect_existing(target)
    try:
        return unfinished_count(con) == 0
    finally:
        con.close()


def next_due(con: Connection, now_ms: int) -> tuple[dict[str, Any] | None, int]:
    """The job a claim at ``now_ms`` would take, and how many jobs are due.

    Due means pending with ``available_at <= now_ms`` or leased with an expired lease,
    and neither past its deadline nor out of attempts (those a claim quarantines).
    """
    row = _one(con, _SELECT_NEXT_DUE, {"now": now_ms})
    due = _one(con, _COUNT_DUE, {"now": now_ms})
    return (None if row is None else _job(row)), int(due[0]) if due else 0


def oldest_due(con: Connection, now_ms: int) -> dict[str, Any] | None:
    """The due job (as ``next_due`` means it) that has been due longest, with
    ``due_since`` and ``due_for_ms``; ``None`` if nothing is due."""
    row = _one(con, _SELECT_OLDEST_DUE, {"now": now_ms})
    if row is None:
        return None
    job = _job(row[:-1])
    job["due_since"] = row[-1]
    job["due_for_ms"] = now_ms - row[-1]
    return job


def overview(con: Connection, now_ms: int) -> dict[str, Any]:
    """The queue at ``now_ms`` in one read transaction, for ``status``.

    Keys: ``now_ms``; ``counts`` (jobs per status); ``due`` and ``next_due`` (see
    ``next_due``); ``redrives`` (audit rows in total); ``seconds_suspects``
    (jobs whose deadline lies before 1973: their times were given in seconds).
    """
    with snapshot(con):
        job, due = next_due(con, now_ms)
        redrive_count = _one(con, _COUNT_ALL_REDRIVES)
        suspects = _one(con, _COUNT_SECONDS_SUSPECTS)
        return {
            "now_ms": now_ms,
            "counts": status_counts(con),
            "due": due,
            "next_due": job,
            "redrives": int(redrive_count[0]) if redrive_count else 0,
            "seconds_suspects": int(suspects[0]) if suspects else 0,
        }


def dead_jobs(con: Connection) -> list[dict[str, Any]]:
    """Every quarantined job, in seq order, with ``redrives`` (its audit row count)."""
    jobs = [_job(row) for row in _rows(con, _SELECT_DEAD)]
    for job_row in jobs:
        count = _one(con, _COUNT_REDRIVES, (job_row["id"],))
        job_row["redrives"] = int(count[0]) if count else 0
    return jobs


def find_jobs(
    con: Connection,
    status: str | None = None,
    reason: str | None = None,
    owner: str | None = None,
    prefix: str | None = None,
    limit: int = 100,
    after: int | None = None,
    before: int | None = None,
) -> list[dict[str, Any]]:
    """The jobs matching every filter given (``None``: any), lowest seq first, at most
    ``limit``: the first ones, or those right after seq ``after``, or right before seq
    ``before`` (a page back)."""
    params = {"status": status, "reason": reason, "owner": owner, "prefix": prefix}
    if before is not None:
        rows = _rows(con, _FIND_JOBS_BEFORE, {**params, "before": before, "limit": limit})
        return [_job(row) for row in reversed(rows)]
    found = _rows(con, _FIND_JOBS, {**params, "after": after, "limit": limit})
    return [_job(row) for row in found]


def count_jobs(
    con: Connection,
    status: str | None = None,
    reason: str | None = None,
    owner: str | None = None,
    prefix: str | None = None,
) -> int:
    """How many jobs match every filter given (``None``: any)."""
    params = {"status": status, "reason": reason, "owner": owner, "prefix": prefix}
    row = _one(con, _COUNT_JOBS, params)
    return int(row[0]) if row else 0


def job(con: Connection, job_id: str) -> dict[str, Any] | None:
    """The row of job ``job_id``, or ``None``."""
    row = _one(con, _SELECT_JOB, (job_id,))
    return None if row is None else _job(row)


def redrives(con: Connection, job_id: str | None = None, limit: int = 1000) -> list[dict[str, Any]]:
    """Audit rows (of ``job_id`` only, if given), in seq order, at most ``limit``."""
    return [_redrive(row) for row in _rows(con, _FIND_REDRIVES, {"id": job_id, "limit": limit})]


def redrive_row(con: Connection, seq: int) -> dict[str, Any] | None:
    """The audit row with ``seq`` in ``redrives``, or ``None``."""
    row = _one(con, _SELECT_REDRIVE, (seq,))
    return None if row is None else _redrive(row)


def leased_ticket(target: Target, job_id: str, owner: str) -> dict[str, Any] | None:
    """The live-looking ticket of ``owner`` on ``job_id``, rebuilt from its row.

    Returns the six ticket keys as ``claim`` returned them (``attempt`` is the row's
    ``attempts``) if the job is leased to ``owner``, else ``None``. A courier's send
    hook uses it to capture the ticket that ``run_file`` keeps to itself.
    """
    con = connect_existing(target)
    try:
        row = _one(con, _SELECT_LEASE, (job_id, owner))
    finally:
        con.close()
    if row is None:
        return None
    return dict(zip(("id", "qty", "owner", "token", "attempt", "lease_until"), row, strict=True))
