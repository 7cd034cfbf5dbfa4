"""A deadlock among branches is the server's to break, as it is among couriers.

Two branches that update the same two rows in opposite orders, each inside an explicit
transaction, wait for each other in the server once both hold their first row. No branch
can run then, and none is merely busy: the scheduler must not give up on the run (before,
it raised ``ScheduleFailed``, so a plant that deadlocks ended the hunt as a broken rig
instead of as a finding). It waits for PostgreSQL's deadlock detector, which fails the
statement of the session that began to wait first, and goes on; the replay of the
realized schedule breaks the same deadlock the same way.
"""

from __future__ import annotations

from typing import Any

from tests.parallel.schedule import Replay
from tests.parallel.scheduler import DONE, WAITING, Branch, Gate, Scheduler
from tests.stores.postgres import PostgresStore

INSERT = (
    "INSERT INTO jobs (id, qty, status, attempts, max_attempts, token, available_at, deadline)"
    " VALUES (%s, 1, 'pending', 0, 3, 0, 0, 10)"
)
BUMP = "UPDATE jobs SET attempts = attempts + 1 WHERE id = %s"
ORDER = {"b1": ("a", "b"), "b2": ("b", "a")}
# Both BEGIN, both take their first row, then each asks for the other's.
INTO_THE_DEADLOCK = "explicit 121212"


def _run(store: PostgresStore, schedule: str) -> tuple[Scheduler, dict[str, str], list[str]]:
    target = store.fresh("deadlock")
    try:
        con = store.connect(target)
        try:
            for job in ("a", "b"):
                con.execute(INSERT, (job,))
        finally:
            con.close()
        ended: dict[str, str] = {}

        def body(branch: Branch, gate: Gate) -> None:
            con: Any = branch.con
            try:
                with con.transaction():
                    for job in ORDER[branch.lane]:
                        con.execute(BUMP, (job,))
                ended[branch.lane] = "committed"
            except Exception as error:  # the server's verdict is this branch's outcome
                ended[branch.lane] = type(error).__name__

        policy = Replay.of(schedule)
        scheduler = Scheduler(store, target, policy, explicit=True)
        steps = scheduler.run([Branch("b1", ()), Branch("b2", ())], body)
        check = store.connect(target)
        try:
            rows = check.execute("SELECT id, attempts FROM jobs ORDER BY id").fetchall()
        finally:
            check.close()
        assert all(step.ended != WAITING for step in steps[-2:])
        assert {branch.state for branch in scheduler.branches} == {DONE}
        return scheduler, ended, [f"{job}={attempts}" for job, attempts in rows] + [policy.text]
    finally:
        store.remove(target)


def test_the_server_breaks_a_deadlock_among_branches_and_the_replay_breaks_it_alike(
    pg_conninfo: str,
) -> None:
    store = PostgresStore(pg_conninfo)
    scheduler, ended, seen = _run(store, INTO_THE_DEADLOCK)
    # The first to wait (b1, at step 5) is the one the detector fails; b2 then commits.
    assert ended == {"b1": "DeadlockDetected", "b2": "committed"}
    assert seen[:2] == ["a=1", "b=1"]  # b2's two updates, nothing of b1's
    assert len(scheduler.deadlocks) == 1
    assert [cycle.split()[0] for cycle in scheduler.deadlocks[0]] == ["b1", "b2"]
    realized = seen[2]
    assert realized.startswith(INTO_THE_DEADLOCK) and len(realized) > len(INTO_THE_DEADLOCK)

    again, ended_again, seen_again = _run(store, realized)
    assert (ended_again, seen_again) == (ended, seen)
    assert len(again.deadlocks) == 1
