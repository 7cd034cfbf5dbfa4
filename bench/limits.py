"""The limit: what the disk and SQLite allow before any queue logic runs.

- ``bare_transactions``: ``BEGIN IMMEDIATE; UPDATE one row; COMMIT`` in a loop on a
  fresh file, under the journal mode and synchronous setting given (the contract's
  are ``DELETE`` and ``FULL``). Its rate is the ceiling of any queue call that is one
  write transaction on this disk.
- ``raw_fsync``: write 4 KiB at offset 0 of a file and ``fsync`` it, in a loop: what
  one durable write costs the disk, with no SQLite at all.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Sequence
from pathlib import Path

from bench.measure import Timed, pragmas, run_counted

__all__ = [
    "bare_connection",
    "bare_transaction",
    "bare_transactions",
    "connection_in",
    "raw_fsync",
]

PAGE = b"\0" * 4096
_ONE_ROW = (
    "CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)",
    "INSERT INTO t VALUES (1, 0)",
)


def connection_in(
    path: Path, setup: Sequence[str], journal: str = "DELETE", sync: str = "FULL"
) -> sqlite3.Connection:
    """A connection to ``path`` in the given journal and sync modes (the contract's by
    default), after running the ``setup`` statements; closed again if they fail."""
    con = sqlite3.connect(path, timeout=1, isolation_level=None)
    try:
        con.execute(f"PRAGMA journal_mode={journal}").fetchall()
        con.execute(f"PRAGMA synchronous={sync}")
        for statement in setup:
            con.execute(statement)
    except BaseException:
        con.close()
        raise
    return con


def bare_connection(path: Path, journal: str = "DELETE", sync: str = "FULL") -> sqlite3.Connection:
    """A fresh file holding one row, on a connection in the given journal and sync modes."""
    return connection_in(path, _ONE_ROW, journal, sync)


def bare_transaction(con: sqlite3.Connection) -> None:
    """One limit transaction on a ``bare_connection``: update its one row and commit."""
    con.execute("BEGIN IMMEDIATE")
    con.execute("UPDATE t SET n = n + 1 WHERE id = 1")
    con.execute("COMMIT")


def bare_transactions(
    folder: Path, count: int, max_seconds: float, journal: str = "DELETE", sync: str = "FULL"
) -> tuple[Timed, tuple[str, str]]:
    """Time ``count`` one-row write transactions; return the figure and the pragmas read back."""
    con = bare_connection(folder / f"bare-{journal.lower()}-{sync.lower()}.sqlite", journal, sync)
    try:

        def step(_: int) -> int:
            bare_transaction(con)
            return 1

        return run_counted(step, count, max_seconds), pragmas(con)
    finally:
        con.close()


def raw_fsync(folder: Path, count: int, max_seconds: float) -> Timed:
    """Time ``count`` rounds of "write 4 KiB at offset 0, then fsync" on one file."""
    fd = os.open(folder / "fsync.bin", os.O_RDWR | os.O_CREAT, 0o644)
    try:

        def step(_: int) -> int:
            os.pwrite(fd, PAGE, 0)
            os.fsync(fd)
            return 1

        return run_counted(step, count, max_seconds)
    finally:
        os.close(fd)
