"""(b) A process SIGKILLed at each fault hook leaves exactly the before- or after-state.

For every hook point the contract names, a spawned child runs the operation on a
real queue file and kills itself (SIGKILL, no cleanup of any kind) when the hook is
reached. Killed before COMMIT, the file must hold exactly the state before the
call; killed after COMMIT, exactly the state the call commits (computed by running
the same call, without a hook, on a copy of the file). Either way the next process
re-opens the file with ``open_queue``, which rolls back the hot journal a
mid-transaction kill leaves, finds no transaction open, and work goes on.
"""

from __future__ import annotations

import shutil
import signal
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import worker
from tests.processes import drills
from tests.processes.conftest import Spawner

JOIN_TIMEOUT_S = 30.0

# (operation, hook point, whether the kill comes after COMMIT)
CASES = [
    ("claim", "after-claim", False),
    ("claim", "after-commit", True),
    ("finish", "after-finish", False),
    ("finish", "after-commit", True),
    ("redrive", "after-audit", False),
    ("redrive", "after-redrive", False),
    ("redrive", "after-commit", True),
]


def read_state(path: Path) -> drills.Rows:
    con = worker.open_queue(path)
    try:
        return drills.full_rows(con)
    finally:
        con.close()


def committed_state(path: Path, scratch: Path, operation: str, ticket: Any) -> drills.Rows:
    """The state ``operation`` commits, from a run without hooks on a copy of ``path``."""
    shutil.copyfile(path, scratch)
    con = worker.open_queue(scratch)
    try:
        drills.OPERATIONS[operation](con, None, ticket)
        return drills.full_rows(con)
    finally:
        con.close()


def work_continues(con: sqlite3.Connection) -> list[str]:
    """Enqueue, then claim and finish everything due at ``LATER``; the ids finished."""
    assert worker.enqueue(con, {"id": "after-crash", "qty": 1}, drills.LATER, drills.TTL_MS)
    finished = []
    for _ in range(10):
        ticket = worker.claim(con, "survivor", drills.LATER, drills.LEASE_MS)
        if ticket is None:
            break
        assert worker.finish(con, ticket, "ok", drills.LATER + 1) == "done"
        finished.append(ticket["id"])
    return finished


@pytest.mark.parametrize(("operation", "point", "after_commit"), CASES)
def test_sigkill_at_hook_leaves_before_or_after_state(
    tmp_path: Path, spawner: Spawner, operation: str, point: str, after_commit: bool
) -> None:
    path = tmp_path / "queue.sqlite"
    ticket = drills.SETUPS[operation](path)
    before = read_state(path)
    after = committed_state(path, tmp_path / "replay.sqlite", operation, ticket)
    assert after != before, "the operation under test must change something"

    child = spawner.start(drills.crash_at, str(path), operation, point, ticket)
    child.join(JOIN_TIMEOUT_S)
    assert child.exitcode == -signal.SIGKILL, f"the hook {point!r} did not kill the child"
    journal = Path(f"{path}-journal")
    # Killed mid-transaction, SQLite leaves a hot journal for the next opener to roll back.
    assert journal.exists() == (not after_commit)

    con = worker.open_queue(path)
    try:
        assert not con.in_transaction
        assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        assert drills.full_rows(con) == (after if after_commit else before)
        finished = work_continues(con)
        assert "after-crash" in finished
        assert not con.in_transaction
    finally:
        con.close()
    assert not journal.exists(), "the hot journal was not rolled back"
