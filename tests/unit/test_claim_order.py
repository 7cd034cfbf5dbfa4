"""Claim step 2: the lowest claimable seq wins, in every queue state.

``worker`` finds the claimable jobs by reading each of three queues (fresh,
retried, leased) in seq order up to its first claimable rows (``_FRESH_HEAD``,
``_RETRIED_HEAD``, ``_LEASED_HEAD``; the last two only when ``_CLAIMABLE_QUEUES`` says
one of their rows is due) and merging them. These tests compare its choice with the
contract's rule written as one plain query over the whole table, on states built
of long runs of alike rows, so that long waiting heads, due rows out of time
order and expired leases behind running ones all occur.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import worker

NOW = 10_000
FAR = NOW + 10**9  # a deadline that never passes in these tests
# The contract's rule, read with no index: pending and due, or leased and expired,
# lowest seq first.
CLAIMABLE_IN_ORDER = """SELECT id FROM jobs NOT INDEXED
  WHERE (status = 'pending' AND available_at <= :now)
     OR (status = 'leased' AND lease_until <= :now)
  ORDER BY seq LIMIT :limit"""
INSERT = """INSERT INTO jobs (id, qty, status, attempts, max_attempts, token,
  available_at, deadline, owner, lease_until, reason) VALUES (?, 1, ?, ?, 16, ?, ?, ?, ?, ?, ?)"""

# Kinds of rows (status, attempts, time): the time is available_at for pending
# rows and lease_until for leased ones; "due" and "expired" are claimable at NOW.
KINDS = {
    "fresh due": ("pending", 0, NOW),
    "fresh due earlier": ("pending", 0, 0),
    "fresh waiting": ("pending", 0, NOW + 1),
    "retried due": ("pending", 2, NOW),
    "retried due earlier": ("pending", 2, 0),
    "retried waiting": ("pending", 1, NOW + 30_000),
    "leased expired": ("leased", 1, NOW),
    "leased running": ("leased", 1, NOW + 1),
    "done": ("done", 1, NOW),
    "dead": ("dead", 3, NOW),
}
# Short and long runs, often enough to matter.
RUN_LENGTHS = st.one_of(
    st.sampled_from([1, 2, 3, 4, 5, 63, 64, 65, 255, 256, 257, 1023, 1024, 1025]),
    st.integers(1, 1100),
)
RUNS = st.lists(st.tuples(st.sampled_from(sorted(KINDS)), RUN_LENGTHS), min_size=1, max_size=6)


def row_of(kind: str, number: int) -> tuple[object, ...]:
    status, attempts, time = KINDS[kind]
    leased = status == "leased"
    available_at = NOW - 5 if leased or status in ("done", "dead") else time
    return (
        f"j{number}",
        status,
        attempts,
        attempts,
        available_at,
        FAR,
        "c0" if leased else None,
        time if leased else None,
        "retry" if status == "pending" and attempts else None,
    )


@contextmanager
def queue_in(runs: list[tuple[str, int]]) -> Iterator[sqlite3.Connection]:
    """A fresh queue file holding ``runs`` of alike rows, in seq order."""
    with tempfile.TemporaryDirectory(prefix="claim-order-") as folder:
        con = worker.open_queue(Path(folder) / "queue.sqlite")
        try:
            rows, number = [], 0
            for kind, length in runs:
                for _ in range(length):
                    rows.append(row_of(kind, number))
                    number += 1
            con.execute("BEGIN IMMEDIATE")
            con.executemany(INSERT, rows)
            con.execute("COMMIT")
            yield con
        finally:
            con.close()


def claimable_ids(con: sqlite3.Connection, limit: int) -> list[str]:
    rows = con.execute(CLAIMABLE_IN_ORDER, {"now": NOW, "limit": limit})
    return [str(job_id) for (job_id,) in rows]


def claimed_id(con: sqlite3.Connection) -> str | None:
    ticket = worker.claim(con, "c1", NOW, 1000)
    return None if ticket is None else str(ticket["id"])


@settings(max_examples=150)
@given(runs=RUNS)
def test_claim_takes_the_lowest_claimable_seq(runs: list[tuple[str, int]]) -> None:
    with queue_in(runs) as con:
        expected = claimable_ids(con, 1)
        assert claimed_id(con) == (expected[0] if expected else None)


@settings(max_examples=40)
@given(runs=RUNS, limit=st.integers(1, 70))
def test_claim_many_takes_the_claimable_jobs_in_seq_order(
    runs: list[tuple[str, int]], limit: int
) -> None:
    with queue_in(runs) as con:
        expected = claimable_ids(con, limit)
        tickets = worker.claim_many(con, "c1", NOW, limit, 1000)
        assert [ticket["id"] for ticket in tickets] == expected


@pytest.mark.parametrize(
    ("waiting", "due"), [(1, 1), (63, 1), (64, 1), (65, 1), (257, 1), (3000, 1024), (5000, 5000)]
)
@pytest.mark.parametrize("queue", ["fresh", "retried"])
def test_a_due_row_behind_a_long_waiting_head_is_found(queue: str, waiting: int, due: int) -> None:
    runs = [(f"{queue} waiting", waiting), (f"{queue} due", due)]
    with queue_in(runs) as con:
        assert claimed_id(con) == f"j{waiting}"


@pytest.mark.parametrize(("waiting", "due_now", "due_earlier"), [(1, 4, 4), (100, 100, 1000)])
@pytest.mark.parametrize("queue", ["fresh", "retried"])
def test_the_lowest_due_seq_wins_over_the_earliest_due_time(
    queue: str, waiting: int, due_now: int, due_earlier: int
) -> None:
    """Due rows whose time order is not their seq order: the first due rows by time
    may not stand in for the lowest due seq."""
    runs = [
        (f"{queue} waiting", waiting),
        (f"{queue} due", due_now),
        (f"{queue} due earlier", due_earlier),
    ]
    with queue_in(runs) as con:
        assert claimed_id(con) == f"j{waiting}"


@pytest.mark.parametrize("running", [1, 100, 3000])
def test_an_expired_lease_behind_running_ones_is_found(running: int) -> None:
    runs = [("leased running", running), ("leased expired", 2), ("fresh due", 5)]
    with queue_in(runs) as con:
        assert claimed_id(con) == f"j{running}"
        tickets = worker.claim_many(con, "c2", NOW, 3, 1000)
        assert [t["id"] for t in tickets] == [f"j{running + i}" for i in (1, 2, 3)]


def test_a_queue_with_nothing_due_claims_nothing() -> None:
    runs = [("fresh waiting", 700), ("retried waiting", 300), ("leased running", 100)]
    with queue_in(runs) as con:
        assert claimed_id(con) is None
        assert worker.claim_many(con, "c1", NOW, 10, 1000) == []


def test_a_batch_takes_due_rows_between_long_waiting_runs() -> None:
    runs = [
        ("fresh waiting", 300),
        ("fresh due", 2),
        ("retried waiting", 100),
        ("fresh waiting", 700),
        ("leased expired", 1),
        ("fresh due", 3),
        ("retried due", 1),
        ("fresh waiting", 260),
        ("fresh due", 1),
    ]
    with queue_in(runs) as con:
        expected = claimable_ids(con, 20)
        tickets = worker.claim_many(con, "c1", NOW, 20, 1000)
        assert [ticket["id"] for ticket in tickets] == expected
        assert len(expected) == 8
