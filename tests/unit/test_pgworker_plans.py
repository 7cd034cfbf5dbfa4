"""pgworker's claim stays flat in the states a crash or an outage leaves behind.

A queue on PostgreSQL can hold many rows that no claim should read: the expired leases of
a fleet that died (claimable, but only the lowest seq matters), the running leases of a
fleet at work, retries waiting out their backoff, and a long done/dead history. Each test
builds one such state with many rows and counts the pages the claim's statement touches
(``EXPLAIN (ANALYZE, BUFFERS)``, a count of work, not a time): under both plans a
``claim`` and a ``claim_many`` of 64 get (the first runs on a connection are planned for
their values, then PostgreSQL keeps one plan for any values; see pgworker's
"Planning"). A claim that sorted
or scanned the whole state would touch hundreds of pages; a flat one touches a few dozen
whatever the size. Then a real claim takes the job the contract names.

An old database, made before the indexes the flat claim needs, gets them at
``open_queue``, every missing one in one transaction.
"""

from __future__ import annotations

import json
import re
from typing import Any

import psycopg
import pytest

import pgworker

Connection = psycopg.Connection[Any]

T0 = 1_700_000_000_000
NOW = T0 + 10_000
FAR = T0 + 10**9
ROWS = 20_000  # a seq scan of jobs reads about 290 pages at this size
SMALL = 200
SLACK = 50  # pages more at ROWS than at SMALL (measured: at most 4; a sort or a scan: 250+)
BACKLOG = 100  # due fresh jobs behind the state

_INSERT = """INSERT INTO jobs (id, qty, status, attempts, max_attempts, token, available_at,
    deadline, owner, lease_until, reason)
  SELECT %(prefix)s || n, 1, %(status)s, %(attempts)s, 5, %(attempts)s, %(available_at)s,
    %(deadline)s, %(owner)s, %(lease_until)s, %(reason)s
  FROM generate_series(1, %(count)s) AS n"""

# (state, what its rows are, the id prefix a claim must take, with the row fields)
STATES: dict[str, dict[str, Any]] = {
    "expired-leases": dict(status="leased", attempts=1, owner="died", lease_until=T0 + 1),
    "running-last-attempts": dict(status="leased", attempts=5, owner="c", lease_until=FAR - 1),
    "waiting-retries": dict(status="pending", attempts=1, available_at=NOW + 10**7),
    "due-retries": dict(status="pending", attempts=1),
    "done-history": dict(status="done", attempts=1),
    "dead-history": dict(status="dead", attempts=5, reason="exhausted"),
}
# The job a claim takes in each state: the state's own rows where they are claimable
# (lowest seq first), else the backlog behind them.
TAKES = {"expired-leases": "state-", "due-retries": "state-"}


def fill(con: Connection, state: str, rows: int = ROWS) -> None:
    """Fill the queue with ``rows`` rows of ``state``, then ``BACKLOG`` due fresh jobs."""
    row = {"available_at": T0, "deadline": FAR, "owner": None, "lease_until": None}
    row |= {"reason": None, **STATES[state]}
    con.execute(_INSERT, {**row, "prefix": "state-", "count": rows})
    backlog = {"status": "pending", "attempts": 0, "available_at": T0, "deadline": FAR}
    backlog |= {"owner": None, "lease_until": None, "reason": None}
    con.execute(_INSERT, {**backlog, "prefix": "due-", "count": BACKLOG})
    con.execute("ANALYZE jobs")


def pages_read(con: Connection, statement: str, generic: bool) -> int:
    """The pages (shared buffers hit or read) the searches of one run of the claim
    ``statement`` touch, under a generic or a custom plan, rolled back afterwards."""
    names = ["now", "owner", "lease_ms"] + (["limit"] if "%(limit)s" in statement else [])
    text = statement
    for number, name in enumerate(names, 1):
        text = text.replace(f"%({name})s", f"${number}")
    assert re.search(r"%\(\w+\)s", text) is None, text  # every parameter was given
    types = ["bigint", "text", "integer", "integer"][: len(names)]
    values = [str(NOW), "'x'", "60000", "64"][: len(names)]  # a claim_many of 64
    mode = "force_generic_plan" if generic else "force_custom_plan"
    with con.transaction(force_rollback=True):
        con.execute(f"SET LOCAL plan_cache_mode = {mode}")
        con.execute(f"PREPARE claim_plan ({', '.join(types)}) AS {text}")
        explained = con.execute(
            f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) EXECUTE claim_plan ({', '.join(values)})"
        ).fetchone()
        con.execute("DEALLOCATE claim_plan")
    assert explained is not None
    plan = explained[0]
    root = (json.loads(plan) if isinstance(plan, str) else plan)[0]["Plan"]
    parts = searches(root)
    assert len(parts) == 4, plan  # the quarantine's search and the three queues'
    return sum(blocks(node) for node in parts)


def searches(node: dict[str, Any]) -> list[dict[str, Any]]:
    """The parts of a claim's plan that read: the three searches (CTEs) and the
    quarantine's own search (the InitPlan of its UPDATE), not the writes."""
    name = node.get("Subplan Name", "")
    if name == "CTE quarantined":  # its InitPlans: the search, and a single claim's now
        found = [part for part in node["Plans"] if part.get("Parent Relationship") == "InitPlan"]
        return [part for part in found if "Plans" in part]
    if name.startswith("CTE "):
        return [node]
    return [found for part in node.get("Plans", []) for found in searches(part)]


def blocks(node: dict[str, Any]) -> int:
    """Shared buffers a plan node (with its children) hit or read."""
    return int(node["Shared Hit Blocks"]) + int(node["Shared Read Blocks"])


@pytest.fixture
def queue(pg_conninfo: str) -> Any:
    con = pgworker.open_queue(pg_conninfo)
    try:
        yield con
    finally:
        con.close()


@pytest.mark.parametrize("state", list(STATES))
def test_a_claim_touches_a_few_pages_however_many_rows_the_state_holds(
    queue: Connection, state: str
) -> None:
    touched = []  # pages read under each plan of each size, at SMALL then at ROWS

    def measured(rows: int, limit: int, generic: bool) -> int:
        # on a fresh table: a claim rolled back leaves dead row versions that the
        # next one reads past (64 of them cost 124 pages more)
        queue.execute("TRUNCATE jobs")
        fill(queue, state, rows)
        statement = pgworker._CLAIM_ONE if limit == 1 else pgworker._CLAIM_MANY
        return pages_read(queue, statement, generic)

    for rows in (SMALL, ROWS):
        touched.append(
            [measured(rows, limit, generic) for limit in (1, 64) for generic in (True, False)]
        )
    queue.execute("TRUNCATE jobs")
    fill(queue, state)
    names = [
        f"{call} ({plan} plan)"
        for call in ("claim", "claim_many(64)")
        for plan in ("generic", "custom")
    ]
    for name, small, large in zip(names, *touched, strict=True):
        assert large <= small + SLACK, f"{name} in {state}: {touched}"
    ticket = pgworker.claim(queue, "c1", NOW, 60_000)
    assert ticket is not None and ticket["id"] == f"{TAKES.get(state, 'due-')}1"


def test_an_expired_lease_behind_running_ones_is_still_found(queue: Connection) -> None:
    fill(queue, "running-last-attempts")
    queue.execute(
        "UPDATE jobs SET lease_until = %s, attempts = 1 WHERE id = %s", (T0 + 1, f"state-{ROWS}")
    )
    ticket = pgworker.claim(queue, "c1", NOW, 60_000)
    assert ticket is not None and ticket["id"] == f"state-{ROWS}"


@pytest.mark.parametrize("limit", [1, 10, 64])
def test_a_claim_of_one_size_is_planned_once_on_a_table_with_statistics(
    queue: Connection, limit: int
) -> None:
    # a backlog of fresh jobs, ANALYZEd: estimates that could follow a value
    queue.execute("TRUNCATE jobs")
    backlog = {"status": "pending", "attempts": 0, "available_at": T0, "deadline": FAR}
    backlog |= {"owner": None, "lease_until": None, "reason": None}
    queue.execute(_INSERT, {**backlog, "prefix": "due-", "count": 8_000})
    queue.execute("ANALYZE jobs")
    for _ in range(12):  # psycopg prepares at the sixth run, PostgreSQL decides by the 11th
        pgworker.claim_many(queue, "c1", NOW, limit, 60_000)
    plans = queue.execute(
        "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
        " WHERE statement LIKE '%%quarantined%%'"
    ).fetchall()
    assert len(plans) == 1, plans  # one statement for every claim of this size
    ((generic, custom),) = plans
    assert custom == 5 and generic == 2, plans  # five custom, then the generic one kept


NEW_INDEXES = ("jobs_leased_by_seq", "jobs_leased_spent")


def test_an_old_database_gets_the_new_indexes_at_open_queue_in_one_transaction(
    pg_conninfo: str,
) -> None:
    with psycopg.connect(pg_conninfo, autocommit=True) as con:
        for name in NEW_INDEXES:
            con.execute(f"DROP INDEX {name}")
        fill(con, "expired-leases")
    again = pgworker.open_queue(pg_conninfo)
    try:
        made = again.execute(
            "SELECT relname, xmin::text FROM pg_class WHERE relname = ANY(%s)",
            (list(NEW_INDEXES),),
        ).fetchall()
        assert sorted(name for name, _ in made) == sorted(NEW_INDEXES)
        assert len({transaction for _, transaction in made}) == 1, made
        ticket = pgworker.claim(again, "c1", NOW, 60_000)
        assert ticket is not None and ticket["id"] == "state-1"
    finally:
        again.close()
