"""pgworker's writes that wait for rows take them in one order, so two cannot deadlock.

Found by two threads making the same call with the same ids or tickets in opposite
orders: PostgreSQL failed one of every four ``enqueue_many`` and one of every twenty
``finish_many`` with ``DeadlockDetected`` (each waited for a row the other held), an
error from deep inside the call that the contract has no place for. An intake now
inserts its new rows in id order (their seqs still in list order), and a
``finish_many`` locks its live rows in seq order before it changes them.

Each test holds one row in a transaction of its own, lets the call wait for it, and
then asks, without waiting (``NOWAIT``, a short ``lock_timeout``), which of the other
rows the waiting call has already taken: a deterministic view of the order it takes
them in, where racing two calls would fail only now and then.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
import pytest
from psycopg import errors

import pgworker

WAIT_S = 10.0
T0 = 1_000
TTL_MS = 60_000


def _blocked(monitor: psycopg.Connection[Any], pid: int) -> bool:
    row = monitor.execute(
        "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)
    ).fetchone()
    return bool(row and row[0])


@contextmanager
def _waiting(conninfo: str, call: Callable[[psycopg.Connection[Any]], Any]) -> Iterator[list[Any]]:
    """``call`` on a connection of its own, in a thread, once it waits for a lock (the
    block's body then runs); its result (or error) in the list once it has returned."""
    con = pgworker.open_queue(conninfo)
    monitor = psycopg.connect(conninfo, autocommit=True)
    ended: list[Any] = []

    def run() -> None:
        try:
            ended.append(call(con))
        except Exception as error:
            ended.append(error)

    thread = threading.Thread(target=run, daemon=True)
    try:
        thread.start()
        deadline = time.monotonic() + WAIT_S
        while not _blocked(monitor, con.info.backend_pid):
            assert not ended, f"the call did not wait: {ended}"
            assert time.monotonic() < deadline, "the call never waited for the held row"
            time.sleep(0.01)
        yield ended
    finally:
        thread.join(WAIT_S)
        monitor.close()
        con.close()


def _free(conninfo: str, statement: str, job_id: str) -> bool:
    """Whether ``statement`` on ``job_id`` runs at once, in a transaction rolled back."""
    with psycopg.connect(conninfo) as probe:
        probe.execute("SET lock_timeout = '200ms'")
        try:
            probe.execute(statement, (job_id,))
        except (errors.LockNotAvailable, errors.QueryCanceled):
            return False
        finally:
            probe.rollback()
    return True


_INSERT = """INSERT INTO jobs (id, qty, status, attempts, max_attempts, token, available_at,
  deadline) VALUES (%s, 1, 'pending', 0, 3, 0, 1000, 61000) ON CONFLICT (id) DO NOTHING"""
_LOCK = "SELECT 1 FROM jobs WHERE id = %s FOR UPDATE NOWAIT"


def test_an_intake_inserts_its_new_rows_in_id_order(pg_conninfo: str) -> None:
    holder = psycopg.connect(pg_conninfo)
    try:
        holder.execute(_INSERT, ("m",))  # uncommitted: an intake of "m" waits for it
        events = [{"id": job_id, "qty": 1} for job_id in ("z", "m", "a")]
        with _waiting(pg_conninfo, lambda con: pgworker.enqueue_many(con, events, T0, TTL_MS)):
            # In id order: "a" went in before the wait for "m", "z" waits behind it.
            assert not _free(pg_conninfo, _INSERT, "a")
            assert _free(pg_conninfo, _INSERT, "z")
            holder.rollback()
    finally:
        holder.close()
    con = pgworker.open_queue(pg_conninfo)
    try:
        rows = con.execute("SELECT id FROM jobs ORDER BY seq").fetchall()
    finally:
        con.close()
    assert [job_id for (job_id,) in rows] == ["z", "m", "a"]  # seqs in list order


def test_a_batch_finish_locks_its_rows_in_seq_order(pg_conninfo: str) -> None:
    con = pgworker.open_queue(pg_conninfo)
    try:
        # Seqs b=1, c=2, a=3: seq order is neither id order nor the order given.
        pgworker.enqueue_many(con, [{"id": j, "qty": 1} for j in ("b", "c", "a")], T0, TTL_MS)
        tickets = {t["id"]: t for t in pgworker.claim_many(con, "c1", T0 + 1, 3, TTL_MS)}
    finally:
        con.close()
    items = [{"ticket": tickets[j], "outcome": "ok", "delay_ms": 0} for j in ("a", "c", "b")]
    holder = psycopg.connect(pg_conninfo)
    try:
        holder.execute(_LOCK, ("a",))  # the highest seq, first in the list
        with _waiting(pg_conninfo, lambda c: pgworker.finish_many(c, items, T0 + 2)) as ended:
            assert not _free(pg_conninfo, _LOCK, "b")  # taken before the wait for "a"
            assert not _free(pg_conninfo, _LOCK, "c")
            holder.rollback()
    finally:
        holder.close()
    assert ended == [["done", "done", "done"]]


@pytest.mark.parametrize("calls", [20])
def test_the_same_calls_in_opposite_orders_never_deadlock(pg_conninfo: str, calls: int) -> None:
    """The race itself, bounded: each round, two threads make the same call, one with
    the list reversed (before the change, a deadlock in about one round of four)."""
    cons = [pgworker.open_queue(pg_conninfo) for _ in range(2)]
    failures: list[BaseException] = []

    def race(first: Callable[[Any], Any], second: Callable[[Any], Any]) -> None:
        start = threading.Barrier(2)

        def run(call: Callable[[Any], Any], con: Any) -> None:
            try:
                start.wait(WAIT_S)
                call(con)
            except Exception as error:
                failures.append(error)

        threads = [
            threading.Thread(target=run, args=(first, cons[0])),
            threading.Thread(target=run, args=(second, cons[1])),
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(WAIT_S * 3)

    def enqueue(events: list[dict[str, Any]]) -> Callable[[Any], Any]:
        return lambda con: pgworker.enqueue_many(con, events, T0, TTL_MS)

    def finish(items: list[dict[str, Any]]) -> Callable[[Any], Any]:
        return lambda con: pgworker.finish_many(con, items, T0 + 2)

    try:
        for n in range(calls):
            events = [{"id": f"r{n}-{k}", "qty": 1} for k in range(300)]
            race(enqueue(events), enqueue(events[::-1]))
            tickets = pgworker.claim_many(cons[0], "c1", T0 + 1, 300, TTL_MS)
            items = [{"ticket": t, "outcome": "ok", "delay_ms": 0} for t in tickets]
            race(finish(items), finish(items[::-1]))
    finally:
        for con in cons:
            con.close()
    assert failures == []
