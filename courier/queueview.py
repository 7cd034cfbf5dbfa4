"""Read-only views of a queue file, for the operator CLI, the demo and the drills.

``worker.py`` owns every write; this module only reads. It never creates a file: a
missing path is ``FileNotFoundError`` and a SQLite file without the queue's two tables
is ``ValueError``, so a typo cannot turn into an empty queue or a stray schema.
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path
from typing import Any

__all__ = [
    "JOB_COLUMNS",
    "REDRIVE_COLUMNS",
    "STATUSES",
    "connect_existing",
    "dead_jobs",
    "job_rows",
    "leased_ticket",
    "next_due",
    "overview",
    "read_queue",
    "redrive_row",
    "require_queue_file",
    "status_counts",
    "table_rows",
    "unfinished_count",
]

STATUSES = ("pending", "leased", "done", "dead")
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
# What a claim at :now would take: due, and not about to be quarantined.
_DUE = """FROM jobs
  WHERE ((status = 'pending' AND available_at <= :now)
      OR (status = 'leased' AND lease_until <= :now))
    AND deadline > :now AND attempts < max_attempts"""
_SELECT_NEXT_DUE = f"SELECT {', '.join(JOB_COLUMNS)} {_DUE} ORDER BY seq LIMIT 1"
_COUNT_DUE = f"SELECT count(*) {_DUE}"
_SELECT_LEASE = """SELECT id, qty, owner, token, attempts, lease_until FROM jobs
  WHERE id = ? AND status = 'leased' AND owner = ?"""
_SELECT_REDRIVE = f"SELECT {', '.join(REDRIVE_COLUMNS)} FROM redrives WHERE seq = ?"
_QUEUE_TABLES = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)"


def require_queue_file(path: str | os.PathLike[str]) -> Path:
    """Return ``path`` if it is an existing regular file, else raise ``FileNotFoundError``."""
    file = Path(path)
    try:
        is_file = stat.S_ISREG(file.stat().st_mode)
    except FileNotFoundError:
        is_file = False
    if not is_file:
        raise FileNotFoundError(f"no queue file at {str(file)!r} (create one with 'init')")
    return file


def connect_existing(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open an existing queue file for reading (1 s busy timeout, autocommit).

    The connection may write only to roll back a hot journal left by a killed
    writer, as any SQLite reader does. Raises ``FileNotFoundError`` for a missing
    file and ``ValueError`` for a SQLite file without the ``jobs`` and ``redrives``
    tables (the connection is closed in both cases).
    """
    file = require_queue_file(path)
    con = sqlite3.connect(file, timeout=1, isolation_level=None)
    try:
        (tables,) = con.execute(_QUEUE_TABLES, ("jobs", "redrives")).fetchone()
        if tables != 2:
            raise ValueError(f"{str(file)!r} is not a queue file (no jobs/redrives tables)")
    except BaseException:
        con.close()
        raise
    return con


def _job(row: tuple[Any, ...]) -> dict[str, Any]:
    return dict(zip(JOB_COLUMNS, row, strict=True))


def table_rows(con: sqlite3.Connection) -> dict[str, list[tuple[Any, ...]]]:
    """Every row of ``jobs`` and ``redrives``, in seq order, as tuples.

    Keys ``"jobs"`` (columns in ``JOB_COLUMNS`` order) and ``"redrives"``
    (``REDRIVE_COLUMNS``). One query per table and no transaction of its own, so it
    reads what ``con`` sees, also inside a transaction a fault hook is called in.
    """
    return {
        "jobs": con.execute(_SELECT_JOBS).fetchall(),
        "redrives": con.execute(_SELECT_REDRIVES).fetchall(),
    }


def job_rows(con: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every job as a dict keyed by column name, in seq order."""
    return [_job(row) for row in con.execute(_SELECT_JOBS)]


def read_queue(path: str | os.PathLike[str]) -> dict[str, list[dict[str, Any]]]:
    """Every job and every audit row of the existing queue file at ``path``, as dicts.

    Keys ``"jobs"`` and ``"redrives"``, each in seq order, read in one read
    transaction (a consistent snapshot). Raises as ``connect_existing`` does.
    """
    con = connect_existing(path)
    try:
        con.execute("BEGIN")
        rows = table_rows(con)
        con.execute("COMMIT")
    finally:
        con.close()
    return {
        "jobs": [_job(row) for row in rows["jobs"]],
        "redrives": [dict(zip(REDRIVE_COLUMNS, row, strict=True)) for row in rows["redrives"]],
    }


def status_counts(con: sqlite3.Connection) -> dict[str, int]:
    """The number of jobs per status, with every status present (zero included)."""
    counts = dict.fromkeys(STATUSES, 0)
    counts.update(con.execute(_COUNT_BY_STATUS).fetchall())
    return counts


def unfinished_count(con: sqlite3.Connection) -> int:
    """The number of jobs still ``pending`` or ``leased``."""
    count: int = con.execute(_COUNT_UNFINISHED).fetchone()[0]
    return count


def next_due(con: sqlite3.Connection, now_ms: int) -> tuple[dict[str, Any] | None, int]:
    """The job a claim at ``now_ms`` would take, and how many jobs are due.

    Due means pending with ``available_at <= now_ms`` or leased with an expired lease,
    and neither past its deadline nor out of attempts (those a claim quarantines).
    """
    row = con.execute(_SELECT_NEXT_DUE, {"now": now_ms}).fetchone()
    (due,) = con.execute(_COUNT_DUE, {"now": now_ms}).fetchone()
    return (None if row is None else _job(row)), due


def overview(con: sqlite3.Connection, now_ms: int) -> dict[str, Any]:
    """The queue at ``now_ms`` in one read transaction, for ``status``.

    Keys: ``now_ms``; ``counts`` (jobs per status); ``due`` and ``next_due`` (see
    ``next_due``); ``redrives`` (audit rows in total).
    """
    con.execute("BEGIN")
    try:
        job, due = next_due(con, now_ms)
        return {
            "now_ms": now_ms,
            "counts": status_counts(con),
            "due": due,
            "next_due": job,
            "redrives": con.execute(_COUNT_ALL_REDRIVES).fetchone()[0],
        }
    finally:
        con.execute("COMMIT")


def dead_jobs(con: sqlite3.Connection) -> list[dict[str, Any]]:
    """Every quarantined job, in seq order, with ``redrives`` (its audit row count)."""
    jobs = [_job(row) for row in con.execute(_SELECT_DEAD)]
    for job in jobs:
        job["redrives"] = con.execute(_COUNT_REDRIVES, (job["id"],)).fetchone()[0]
    return jobs


def redrive_row(con: sqlite3.Connection, seq: int) -> dict[str, Any] | None:
    """The audit row with ``seq`` in ``redrives``, or ``None``."""
    row = con.execute(_SELECT_REDRIVE, (seq,)).fetchone()
    return None if row is None else dict(zip(REDRIVE_COLUMNS, row, strict=True))


def leased_ticket(path: str | os.PathLike[str], job_id: str, owner: str) -> dict[str, Any] | None:
    """The live-looking ticket of ``owner`` on ``job_id``, rebuilt from its row.

    Returns the six ticket keys as ``claim`` returned them (``attempt`` is the row's
    ``attempts``) if the job is leased to ``owner``, else ``None``. A courier's send
    hook uses it to capture the ticket that ``run_file`` keeps to itself.
    """
    con = connect_existing(path)
    try:
        row = con.execute(_SELECT_LEASE, (job_id, owner)).fetchone()
    finally:
        con.close()
    if row is None:
        return None
    return dict(zip(("id", "qty", "owner", "token", "attempt", "lease_until"), row, strict=True))
