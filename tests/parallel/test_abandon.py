"""A killed branch lets go of the queue at once (``Store.abandon``), as a killed process
does: the next branch's write must not find the file still locked.

Found as a rare false alarm of the scheduled suite (one run in thousands, under load): a
branch killed at a hook inside its claim closed its connection, but a cursor that the
dying thread's frames still held kept its statement, so SQLite kept the closed
connection's lock until the thread's frames were collected, and the next branch's
claim was refused "database is locked".
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tests.stores.sqlite import SQLiteStore

INSERT = (
    "INSERT INTO jobs (id, qty, status, attempts, max_attempts, token, available_at, deadline)"
    " VALUES (?, 1, 'pending', 0, 3, 0, 0, 10)"
)


def test_a_killed_connection_holding_a_cursor_lets_go_of_the_file(tmp_path: Path) -> None:
    store = SQLiteStore(str(tmp_path))
    target = store.fresh()
    con = store.scheduled_connect(target, gate=None)
    con.execute("BEGIN IMMEDIATE")
    con.execute(INSERT, ("a",))
    held = con.execute("SELECT id FROM jobs")  # a statement the dying frame still holds
    store.abandon(con)
    other = sqlite3.connect(target, timeout=0, isolation_level=None)
    try:
        other.execute("BEGIN IMMEDIATE")
        other.execute(INSERT, ("b",))
        other.execute("COMMIT")  # needs every other connection's lock gone
        assert [row[0] for row in other.execute("SELECT id FROM jobs")] == ["b"]
    finally:
        other.close()
    del held
