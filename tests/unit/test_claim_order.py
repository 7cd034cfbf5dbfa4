"""Claim step 2: the lowest claimable seq wins, in every queue state and at every window.

``worker`` finds that job in stages (``_next_claimable``): the oldest
``_CLAIM_HEAD_WINDOW`` rows of each pending queue (fresh, retried) and the oldest
expired lease in one statement, then, for a queue whose head is all waiting, a
search on windows that grow fourfold (``_lowest_due``). These tests compare its
choice with the contract's rule written as one plain query over the whole table,
on states built of long runs of alike rows, so that the heads fill up, the
windows grow several times and the first due row falls on and around their edges.
The window is a tuning knob: every value must claim the same job.
"""

from __future__ import annotations

import sqlite3
import tempfile
from collections.abc import Callable, Iterator
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
# Run lengths around the window's edges: 64, 64 * 4 and 64 * 16 (and, with a window
# of 1 or 3, their own edges), often enough to matter.
RUN_LENGTHS = st.one_of(
    st.sampled_from([1, 2, 3, 4, 5, 63, 64, 65, 255, 256, 257, 1023, 1024, 1025]),
    st.integers(1, 1100),
)
RUNS = st.lists(st.tuples(st.sampled_from(sorted(KINDS)), RUN_LENGTHS), min_size=1, max_size=6)
WINDOWS = st.sampled_from([64, 1, 2, 3, 5, 64, 100])


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


@contextmanager
def head_window(window: int) -> Iterator[None]:
    default = worker._CLAIM_HEAD_WINDOW
    worker._CLAIM_HEAD_WINDOW = window
    try:
        yield
    finally:
        worker._CLAIM_HEAD_WINDOW = default


def claimable_ids(con: sqlite3.Connection, limit: int) -> list[str]:
    rows = con.execute(CLAIMABLE_IN_ORDER, {"now": NOW, "limit": limit})
    return [str(job_id) for (job_id,) in rows]


def claimed_id(con: sqlite3.Connection) -> str | None:
    ticket = worker.claim(con, "c1", NOW, 1000)
    return None if ticket is None else str(ticket["id"])


@settings(max_examples=150)
@given(runs=RUNS, window=WINDOWS)
def test_claim_takes_the_lowest_claimable_seq(runs: list[tuple[str, int]], window: int) -> None:
    with queue_in(runs) as con, head_window(window):
        expected = claimable_ids(con, 1)
        assert claimed_id(con) == (expected[0] if expected else None)


@settings(max_examples=40)
@given(runs=RUNS, window=WINDOWS, limit=st.integers(1, 70))
def test_claim_many_takes_the_claimable_jobs_in_seq_order(
    runs: list[tuple[str, int]], window: int, limit: int
) -> None:
    with queue_in(runs) as con, head_window(window):
        expected = claimable_ids(con, limit)
        tickets = worker.claim_many(con, "c1", NOW, limit, 1000)
        assert [ticket["id"] for ticket in tickets] == expected


@pytest.mark.parametrize("window", [1, 64])
@pytest.mark.parametrize(
    ("waiting", "due"),
    [(63, 1), (64, 1), (65, 1), (256, 256), (257, 1), (1024, 3000), (3000, 1024), (5000, 5000)],
)
@pytest.mark.parametrize("queue", ["fresh", "retried"])
def test_a_due_row_behind_a_long_waiting_head_is_found(
    queue: str, waiting: int, due: int, window: int
) -> None:
    """Either search may end first: a few waiting rows and a huge due backlog, or the
    other way round; the answer is the same first due row."""
    runs = [(f"{queue} waiting", waiting), (f"{queue} due", due)]
    with queue_in(runs) as con, head_window(window):
        assert claimed_id(con) == f"j{waiting}"


@pytest.mark.parametrize(
    ("window", "waiting", "due_now", "due_earlier"),
    [(1, 1, 4, 4), (64, 64, 256, 256), (64, 100, 100, 1000), (3, 20, 20, 200)],
)
@pytest.mark.parametrize("queue", ["fresh", "retried"])
def test_the_lowest_due_seq_wins_over_the_earliest_due_time(
    queue: str, window: int, waiting: int, due_now: int, due_earlier: int
) -> None:
    """Due rows whose time order is not their seq order, more of them than a round's
    window: neither the first due rows by time nor the first row of a later run may
    stand in for the lowest due seq."""
    runs = [
        (f"{queue} waiting", waiting),
        (f"{queue} due", due_now),
        (f"{queue} due earlier", due_earlier),
    ]
    with queue_in(runs) as con, head_window(window):
        assert claimed_id(con) == f"j{waiting}"


@pytest.mark.parametrize("window", [1, 64])
def test_a_queue_with_nothing_due_claims_nothing(window: int) -> None:
    runs = [("fresh waiting", 700), ("retried waiting", 300), ("leased running", 100)]
    with queue_in(runs) as con, head_window(window):
        assert claimed_id(con) is None


def deeper_searches(con: sqlite3.Connection, claim: Callable[[], object]) -> int:
    """How many statements of ``_lowest_due`` (beyond the heads) ``claim()`` ran.

    The trace shows each statement with its parameters filled in, so a statement
    is known by its text up to its first parameter.
    """
    deeper = [*worker._LOWEST_OF_FEW_DUE.values(), *worker._FIRST_DUE_IN_HEAD.values()]
    prefixes = tuple(statement.split(":")[0] for statement in deeper)
    ran: list[str] = []
    con.set_trace_callback(ran.append)
    try:
        claim()
    finally:
        con.set_trace_callback(None)
    return sum(statement.startswith(prefixes) for statement in ran)


@pytest.mark.parametrize(
    "runs",
    [
        [("fresh waiting", 300), ("fresh due", 100)],
        [("fresh waiting", 3000), ("fresh due", 3000)],
        [("retried waiting", 300), ("retried due", 100)],
        [("retried waiting", 3000), ("retried due", 3000)],
        [("fresh waiting", 3000), ("retried due", 100)],  # nothing due in the searched queue
        [("retried waiting", 3000), ("fresh due", 100)],
    ],
)
def test_a_batch_searches_a_long_waiting_head_once(runs: list[tuple[str, int]]) -> None:
    """claim_many goes on from where its last search stopped: the waiting rows it has
    read are not read again for each job it leases."""
    with queue_in(runs) as con:
        one = deeper_searches(con, lambda: worker.claim(con, "c1", NOW, 1000))
    with queue_in(runs) as con:
        batch = deeper_searches(con, lambda: worker.claim_many(con, "c1", NOW, 64, 1000))
        expected = claimable_ids(con, 3)
        assert [t["id"] for t in worker.claim_many(con, "c2", NOW, 3, 1000)] == expected
    assert one > 0
    assert batch == one


@pytest.mark.parametrize("window", [1, 3, 64])
def test_a_batch_takes_due_rows_between_long_waiting_runs(window: int) -> None:
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
    with queue_in(runs) as con, head_window(window):
        expected = claimable_ids(con, 20)
        tickets = worker.claim_many(con, "c1", NOW, 20, 1000)
        assert [ticket["id"] for ticket in tickets] == expected
        assert len(expected) == 8


@pytest.mark.parametrize("queue", ["fresh", "retried"])
def test_a_short_waiting_head_is_searched_in_one_round(queue: str) -> None:
    """100 waiting rows before 5,000 due ones: the first round (a window of 256)
    counts 256 due rows by time, so it reads the head in seq order, and finds the
    first due row there. Two statements, not a round per fourfold window up to the
    whole backlog."""
    runs = [(f"{queue} waiting", 100), (f"{queue} due", 5000)]
    with queue_in(runs) as con:
        assert deeper_searches(con, lambda: worker.claim(con, "c1", NOW, 1000)) == 2
        assert claimable_ids(con, 1) == ["j101"]
