"""(b) A process SIGKILLed at each fault hook leaves exactly the before- or after-state.

For every hook point the contract names, a spawned child runs the operation on a
real queue and kills itself (SIGKILL, no cleanup of any kind) when the hook is
reached. Killed before COMMIT, the queue must hold exactly the state before the
call; killed after COMMIT, exactly the state the call commits (computed by running
the same call, without a hook, on a copy of the queue). Either way the next process
re-opens the queue with ``open_queue``, finds no transaction open, and work goes on.

On SQLite the copy is a copy of the file, and a mid-transaction kill leaves a hot
journal that the next opener rolls back. On PostgreSQL the copy is a database made
from the queue's (``CREATE DATABASE ... TEMPLATE``); the server rolls back the dead
session's transaction itself, and the test waits for that session to end (its row
locks go with it) before work goes on.
"""

from __future__ import annotations

import shutil
import signal
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo as libpq

from tests.postgres import Server
from tests.processes import drills
from tests.processes.conftest import Spawner

JOIN_TIMEOUT_S = 30.0
SESSION_END_TIMEOUT_S = 10.0

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


def read_state(backend: str, target: str) -> drills.Rows:
    con = drills.open_queue(backend, target)
    try:
        return drills.full_rows(con)
    finally:
        con.close()


def replayed(backend: str, target: str, operation: str, ticket: Any) -> drills.Rows:
    con = drills.open_queue(backend, target)
    try:
        drills.run_operation(backend, con, operation, ticket)
        return drills.full_rows(con)
    finally:
        con.close()


def committed_state(
    backend: str, target: str, tmp_path: Path, server: Server | None, operation: str, ticket: Any
) -> drills.Rows:
    """The state ``operation`` commits, from a run without hooks on a copy of the queue."""
    if server is None:
        scratch = tmp_path / "replay.sqlite"
        shutil.copyfile(target, scratch)
        return replayed(backend, str(scratch), operation, ticket)
    source = libpq.conninfo_to_dict(target)["dbname"]
    copy = f"{source}_replay"
    server.con.execute(f'CREATE DATABASE "{copy}" TEMPLATE "{source}"')
    try:
        return replayed(backend, server.conninfo(copy), operation, ticket)
    finally:
        server.drop(server.conninfo(copy))


def wait_for_other_sessions_to_end(con: Any) -> None:
    """Until no other session is connected to this database (the killed one included)."""
    until = time.monotonic() + SESSION_END_TIMEOUT_S
    while time.monotonic() < until:
        others = con.execute(
            "SELECT count(*) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchone()[0]
        if others == 0:
            return
        time.sleep(0.01)
    raise AssertionError("the killed child's session did not end")


def work_continues(module: Any, con: Any) -> list[str]:
    """Enqueue, then claim and finish everything due at ``LATER``; the ids finished."""
    assert module.enqueue(con, {"id": "after-crash", "qty": 1}, drills.LATER, drills.TTL_MS)
    finished = []
    for _ in range(10):
        ticket = module.claim(con, "survivor", drills.LATER, drills.LEASE_MS)
        if ticket is None:
            break
        assert module.finish(con, ticket, "ok", drills.LATER + 1) == "done"
        finished.append(ticket["id"])
    return finished


@pytest.mark.parametrize("backend", ["worker", "pgworker"])
@pytest.mark.parametrize(("operation", "point", "after_commit"), CASES)
def test_sigkill_at_hook_leaves_before_or_after_state(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    spawner: Spawner,
    backend: str,
    operation: str,
    point: str,
    after_commit: bool,
) -> None:
    server: Server | None = None
    if backend == "worker":
        target = str(tmp_path / "queue.sqlite")
    else:
        target, server = (
            request.getfixturevalue("pg_conninfo"),
            request.getfixturevalue("pg_server"),
        )
    ticket = drills.SETUPS[operation](backend, target)
    before = read_state(backend, target)
    after = committed_state(backend, target, tmp_path, server, operation, ticket)
    assert after != before, "the operation under test must change something"

    child = spawner.start(drills.crash_at, backend, target, operation, point, ticket)
    child.join(JOIN_TIMEOUT_S)
    assert child.exitcode == -signal.SIGKILL, f"the hook {point!r} did not kill the child"
    journal = Path(f"{target}-journal")
    if backend == "worker":
        # Killed mid-transaction, SQLite leaves a hot journal for the next opener to roll back.
        assert journal.exists() == (not after_commit)

    module = drills.MODULES[backend]
    con = module.open_queue(target)
    try:
        if backend == "worker":
            assert not con.in_transaction
            assert con.execute("PRAGMA integrity_check").fetchone() == ("ok",)
        else:
            wait_for_other_sessions_to_end(con)
            assert con.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert drills.full_rows(con) == (after if after_commit else before)
        finished = work_continues(module, con)
        assert "after-crash" in finished
    finally:
        con.close()
    assert not journal.exists(), "the hot journal was not rolled back"
