"""Decision 10: extra indexes, created by open_queue with IF NOT EXISTS, keep claim flat.

The partial indexes cover only live rows (pending, leased), so claim's cost does not
grow with the done/dead history. These tests pin what the indexes are for: each claim
statement searches an index, never the whole table; a file of an earlier open_queue
gets the new ones; a file without the indexes still answers the same; long waiting
heads never change which job is claimed.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

import worker
from tests.support import read_rows

INDEX_NAMES = [
    "jobs_fresh_by_seq",
    "jobs_leased_by_lease_until",
    "jobs_leased_by_seq",
    "jobs_leased_spent",
    "jobs_live_by_deadline",
    "jobs_pending_spent",
    "jobs_retried_by_available_at",
    "jobs_retried_by_seq",
]
# What open_queue created before the search read each queue in seq order only.
EARLIER_INDEXES = (
    """CREATE INDEX jobs_fresh_by_available_at
  ON jobs(available_at) WHERE status = 'pending' AND attempts = 0""",
    """CREATE INDEX jobs_retried_by_available_at
  ON jobs(available_at) WHERE status = 'pending' AND attempts > 0""",
    """CREATE INDEX jobs_leased_by_lease_until
  ON jobs(lease_until) WHERE status = 'leased'""",
)
CLAIM_STATEMENTS = {
    "_QUARANTINE_DEADLINE": worker._QUARANTINE_DEADLINE,
    "_QUARANTINE_EXHAUSTED_PENDING": worker._QUARANTINE_EXHAUSTED_PENDING,
    "_QUARANTINE_EXHAUSTED_LEASED": worker._QUARANTINE_EXHAUSTED_LEASED,
    "_QUARANTINE_DUE": worker._QUARANTINE_DUE,
    "_CLAIMABLE_QUEUES": worker._CLAIMABLE_QUEUES,
    "_FRESH_HEAD": worker._FRESH_HEAD,
    "_RETRIED_HEAD": worker._RETRIED_HEAD,
    "_LEASED_HEAD": worker._LEASED_HEAD,
}


def indexes(con: sqlite3.Connection) -> list[str]:
    rows = con.execute(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name"
    )
    return [name for (name,) in rows]


def table_sql(con: sqlite3.Connection) -> list[str]:
    return [sql for (sql,) in con.execute("SELECT sql FROM sqlite_master WHERE type = 'table'")]


def test_open_queue_creates_the_indexes(con: sqlite3.Connection) -> None:
    assert indexes(con) == INDEX_NAMES


def test_a_file_with_only_the_two_tables_gets_the_indexes_and_keeps_its_tables(
    queue_path: Path,
) -> None:
    foreign = sqlite3.connect(queue_path)
    for statement in worker.SCHEMA:
        foreign.execute(statement.replace(" IF NOT EXISTS", ""))
    foreign.execute(
        "INSERT INTO jobs (id, qty, status, attempts, max_attempts, token, available_at,"
        " deadline) VALUES ('a', 1, 'pending', 0, 3, 0, 0, 100)"
    )
    foreign.commit()
    tables, rows = table_sql(foreign), read_rows(foreign)
    foreign.close()
    con = worker.open_queue(queue_path)
    try:
        assert indexes(con) == INDEX_NAMES
        assert table_sql(con) == tables, "the two tables keep exactly their schema"
        assert read_rows(con) == rows
        ticket = worker.claim(con, "c1", 0)
        assert ticket is not None and ticket["id"] == "a"
    finally:
        con.close()


@pytest.mark.parametrize("name", CLAIM_STATEMENTS)
def test_a_file_of_an_earlier_open_queue_gets_the_new_indexes_and_the_same_plans(
    queue_path: Path, name: str
) -> None:
    """The indexes an earlier ``open_queue`` made stay, unread: the new ones are
    created on open and each statement plans as it does in a new file."""
    fresh = worker.open_queue(queue_path.with_name("new.sqlite"))
    earlier = sqlite3.connect(queue_path)
    for statement in (*worker.SCHEMA, *EARLIER_INDEXES):
        earlier.execute(statement)
    earlier.close()
    con = worker.open_queue(queue_path)
    try:
        assert set(indexes(con)) == {*INDEX_NAMES, *(s.split()[2] for s in EARLIER_INDEXES)}
        plans = [
            [
                row[3]
                for row in c.execute(
                    "EXPLAIN QUERY PLAN " + CLAIM_STATEMENTS[name], {"now": 0, "limit": 1}
                )
            ]
            for c in (fresh, con)
        ]
        assert plans[0] == plans[1]
    finally:
        con.close()
        fresh.close()


def test_reopening_does_not_duplicate_or_rebuild_the_indexes(queue_path: Path) -> None:
    worker.open_queue(queue_path).close()
    con = worker.open_queue(queue_path)
    try:
        assert indexes(con) == INDEX_NAMES
    finally:
        con.close()


@pytest.mark.parametrize("name", CLAIM_STATEMENTS)
def test_each_claim_statement_searches_an_index_never_the_whole_table(
    con: sqlite3.Connection, name: str
) -> None:
    sql = CLAIM_STATEMENTS[name]
    explained = con.execute("EXPLAIN QUERY PLAN " + sql, {"now": 0, "limit": 1})
    plan = [row[3] for row in explained]
    touching_jobs = [step for step in plan if " jobs" in step]
    assert touching_jobs, plan
    assert all("USING" in step for step in touching_jobs), plan


def add_many(con: sqlite3.Connection, count: int, prefix: str, now: int = 0) -> None:
    """``count`` jobs enqueued at ``now`` (available then), due by now + 60 s."""
    events = [{"id": f"{prefix}{i}", "qty": 1} for i in range(count)]
    assert worker.enqueue_many(con, events, now, 60000, 16) == [True] * count


def hold_back(con: sqlite3.Connection, count: int, now: int) -> None:
    """Claim the first ``count`` jobs and retry them far into the future: old rows
    (low seq) that are pending but not available, as retried jobs are."""
    tickets = worker.claim_many(con, "c0", now, count, 100)
    results = [{"ticket": t, "outcome": "retry", "delay_ms": 50000} for t in tickets]
    assert worker.finish_many(con, results, now) == ["pending"] * count


@pytest.mark.parametrize("held", [63, 64, 65, 200])
def test_the_oldest_due_job_wins_behind_many_jobs_not_yet_available(
    con: sqlite3.Connection, held: int
) -> None:
    add_many(con, held, "held-")
    hold_back(con, held, 0)
    add_many(con, 2, "due-", now=1)
    ticket = worker.claim(con, "c1", 10)
    assert ticket is not None and ticket["id"] == "due-0"


@pytest.mark.parametrize("held", [63, 64, 65])
def test_an_expired_lease_with_a_lower_seq_beats_a_due_pending_job(
    con: sqlite3.Connection, held: int
) -> None:
    add_many(con, 1, "leased-")
    assert worker.claim(con, "c0", 0, 5) is not None  # expires at 5
    add_many(con, held, "held-")
    hold_back(con, held, 0)
    add_many(con, 1, "due-")
    ticket = worker.claim(con, "c1", 10)
    assert ticket is not None and (ticket["id"], ticket["token"]) == ("leased-0", 2)


@pytest.mark.parametrize("waiting", [63, 64, 65, 200])
def test_a_fresh_job_enqueued_later_than_others_but_due_first_is_found(
    con: sqlite3.Connection, waiting: int
) -> None:
    add_many(con, waiting, "future-", now=50000)  # enqueued with a later clock
    add_many(con, 2, "now-", now=0)
    ticket = worker.claim(con, "c1", 10)
    assert ticket is not None and ticket["id"] == "now-0"


@pytest.mark.parametrize("waiting", [63, 64, 65, 200])
def test_a_due_retry_behind_many_waiting_retries_beats_a_later_fresh_job(
    con: sqlite3.Connection, waiting: int
) -> None:
    add_many(con, waiting + 2, "r-")
    tickets = worker.claim_many(con, "c0", 0, waiting + 2, 100)
    delays = [50000] * waiting + [0, 0]
    results = [
        {"ticket": t, "outcome": "retry", "delay_ms": d}
        for t, d in zip(tickets, delays, strict=True)
    ]
    assert worker.finish_many(con, results, 1) == ["pending"] * (waiting + 2)
    add_many(con, 1, "fresh-", now=1)
    ticket = worker.claim(con, "c1", 10)
    assert ticket is not None and (ticket["id"], ticket["attempt"]) == (f"r-{waiting}", 2)


def test_a_due_job_at_the_head_is_taken_even_when_older_ones_wait(
    con: sqlite3.Connection,
) -> None:
    add_many(con, 3, "a-")
    hold_back(con, 1, 0)  # a-0 waits until 50000
    ticket = worker.claim(con, "c1", 10)
    assert ticket is not None and ticket["id"] == "a-1"


def test_a_file_without_indexes_gives_the_same_answers(tmp_path: Path) -> None:
    indexed = worker.open_queue(tmp_path / "indexed.sqlite")
    bare = worker.open_queue(tmp_path / "bare.sqlite")
    try:
        for name in INDEX_NAMES:
            bare.execute(f"DROP INDEX {name}")  # names from the list above
        for con in (indexed, bare):
            add_many(con, 70, "j-")
            hold_back(con, 66, 0)
            worker.claim(con, "c2", 0, 3)
            add_many(con, 3, "k-", now=2)
        claims = [
            [worker.claim(con, "c1", now, 10) for now in (1, 2, 3, 2000, 55000)]
            for con in (indexed, bare)
        ]
        assert claims[0] == claims[1]
        assert read_rows(indexed) == read_rows(bare)
    finally:
        indexed.close()
        bare.close()
