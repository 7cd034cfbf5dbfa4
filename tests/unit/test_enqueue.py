"""Section 3, what only a SQLite file has: the busy timeout. The contract's examples
of enqueue run on every backend in ``tests/contract/test_enqueue.py``."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import worker
from tests.support import read_rows


def test_a_busy_database_raises_and_leaves_no_transaction_open(
    con: sqlite3.Connection, queue_path: Path
) -> None:
    other = sqlite3.connect(queue_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            worker.enqueue(con, {"id": "a", "qty": 1}, 0, 10)
        assert not con.in_transaction
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert read_rows(con)["jobs"] == []
