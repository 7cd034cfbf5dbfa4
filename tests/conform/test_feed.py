"""The change feed: opt-in, in the writer's own transaction, and gone without a trace.

Each example runs on a queue file and on a PostgreSQL database (``fed``). Installing
the feed leaves the contract's two tables as they were, a rolled-back write leaves no
event, and removing it leaves the schema exactly as ``open_queue`` made it.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import worker
from courier.commands.conform import install_feed, uninstall_feed
from courier.conform.checker import Feed, check_all, rules_for
from courier.conform.feed import NotInstalled
from courier.conform.postgres_feed import Cursor
from tests.conform.fed import Fed, open_fed


def _schema(fed: Fed) -> list[tuple[Any, ...]]:
    """Every object of the queue's schema (name, type and definition)."""
    if fed.kind == "sqlite":
        file = sqlite3.connect(fed.target)
        try:
            return file.execute(
                "SELECT type, name, sql FROM sqlite_master ORDER BY name"
            ).fetchall()
        finally:
            file.close()
    query = """SELECT c.relname, c.relkind::text, coalesce(a.attname, ''),
        coalesce(format_type(a.atttypid, a.atttypmod), '')
      FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
      LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0
      WHERE n.nspname = current_schema() ORDER BY 1, 3"""
    triggers = "SELECT tgname FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1"
    functions = """SELECT proname FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
      WHERE n.nspname = current_schema() ORDER BY 1"""
    with psycopg.connect(fed.target) as con:
        return [
            *con.execute(query).fetchall(),
            *con.execute(triggers).fetchall(),
            *con.execute(functions).fetchall(),
        ]


def _without_feed(schema: list[tuple[Any, ...]]) -> list[tuple[Any, ...]]:
    """The schema's objects that are not the feed's (each of whose names says conform)."""
    return [row for row in schema if not any("conform" in str(value) for value in row)]


def test_uninstall_leaves_the_schema_open_queue_made(fed: Fed) -> None:
    fed.close()
    assert uninstall_feed(fed.target) is True
    bare = _schema(fed)
    assert _without_feed(bare) == bare
    assert install_feed(fed.target) is True
    assert install_feed(fed.target) is False  # already there: nothing changes
    installed = _schema(fed)
    assert _without_feed(installed) == _without_feed(bare)
    assert uninstall_feed(fed.target) is True
    assert uninstall_feed(fed.target) is False
    assert _schema(fed) == bare
    fed.con = fed.module.open_queue(fed.target)


def test_every_operation_of_the_contract_is_one_step(fed: Fed) -> None:
    q, con = fed.module, fed.con
    now = fed.now()
    past = now - 10_000  # a writer's now may lie before the clock, never after it
    assert q.enqueue(con, {"id": "a", "qty": 1}, past, 60_000, 2) is True
    assert q.enqueue(con, {"id": "a", "qty": 1}, past, 60_000) is False  # no change
    q.enqueue_many(con, [{"id": f"b{n}", "qty": n + 1} for n in range(3)], past, 60_000)
    q.enqueue(con, {"id": "late", "qty": 1}, past, 1)  # its deadline has passed
    ticket = q.claim(con, "c1", past + 1)  # quarantines late, leases a
    assert ticket is not None and ticket["id"] == "a"
    assert q.finish(con, ticket, "retry", past + 2, 0) == "pending"
    ticket = q.claim(con, "c1", past + 3)
    assert q.finish(con, ticket, "retry", past + 4, 50) == "dead"  # budget of 2 spent
    tickets = q.claim_many(con, "c2", past + 5, 3, 500)
    results = [
        {"ticket": tickets[0], "outcome": "ok", "delay_ms": 0},
        {"ticket": tickets[1], "outcome": "permanent", "delay_ms": 0},
    ]
    assert q.finish_many(con, results, past + 6) == ["done", "dead"]
    assert q.finish(con, tickets[0], "ok", past + 7) is False  # stale: no change
    assert q.redrive(con, "a", past + 8, 30_000, "operator-1") is True
    other = fed.other()
    try:
        assert q.claim(other, "c3", past + 9, 100) is not None
    finally:
        other.close()
    checker = fed.check()
    assert [f.problems for f in checker.unexplained] == []
    assert checker.transactions == 11
    assert dict(checker.operations) == {
        "enqueue": 2,
        "enqueue_many": 1,
        "claim": 3,
        "claim_many": 1,
        "finish": 2,
        "finish_many": 1,
        "redrive": 1,
    }


def test_a_rolled_back_write_leaves_no_event(fed: Fed) -> None:
    q, con = fed.module, fed.con
    now = fed.now() - 1000
    q.enqueue(con, {"id": "a", "qty": 1}, now, 60_000)

    def fail(point: str) -> None:
        raise RuntimeError(point)

    with pytest.raises(RuntimeError):
        q.claim(con, "c1", now, fault=fail)
    with pytest.raises(ValueError):
        q.redrive(con, "a", now, 1000, "note")  # not dead: refused before any write
    checker = fed.check()
    assert checker.transactions == 1 and not checker.unexplained
    assert q.claim(con, "c1", now) is not None  # the claim that rolled back left a free job


def test_a_queue_without_a_feed_is_refused(tmp_path: Path) -> None:
    path = str(tmp_path / "bare.sqlite")
    worker.open_queue(path).close()
    with pytest.raises(NotInstalled, match="--install"):
        check_all(path, rules_for(path, simulated=False, skew_ms=0))


def test_a_cursor_passes_a_missing_number_once_its_owners_have_ended() -> None:
    cursor = Cursor()
    cursor.advance([1, 3], xmin=101, xmax=103)  # 2: still open, or rolled back
    assert (cursor.position, cursor.top, cursor.missing) == (1, 3, {2})
    cursor.advance([], xmin=102, xmax=104)  # its owner (below 103) may still be open
    assert cursor.position == 1
    cursor.advance([2], xmin=104, xmax=104)  # it committed after all
    assert (cursor.position, cursor.missing, cursor.waits) == (3, set(), [])
    cursor.advance([6], xmin=104, xmax=105)  # 4 and 5 missing
    assert (cursor.position, cursor.missing) == (3, {4, 5})
    cursor.advance([5, 7], xmin=105, xmax=106)  # every transaction below 105 has ended
    assert (cursor.position, cursor.top, cursor.missing, cursor.waits) == (7, 7, set(), [])


def test_postgres_checks_each_transaction_as_it_becomes_visible(
    tmp_path: Path, pg_conninfo: str
) -> None:
    """A transaction still open holds nothing up, and one that rolled back is passed over
    (SQLite has one writer at a time: its feed is in commit order)."""
    fed = open_fed("postgres", tmp_path, pg_conninfo)
    q, con = fed.module, fed.con
    now = fed.now() - 1000
    feed = Feed(fed.target, rules_for(fed.target, simulated=False, skew_ms=0))
    try:
        checker, _ = feed.start()
        insert = """INSERT INTO jobs (id, qty, status, attempts, max_attempts, token,
            available_at, deadline) VALUES (%s, 1, 'pending', 0, 3, 0, %s, %s)"""
        with psycopg.connect(fed.target) as slow, psycopg.connect(fed.target) as undone:
            slow.execute(insert, ("slow", now, now + 60_000))  # open: its number first
            undone.execute(insert, ("undone", now, now + 60_000))
            undone.rollback()  # its number is never used
            q.enqueue(con, {"id": "b", "qty": 1}, now, 60_000)
            blocks = feed.poll()
            assert [[e.after[1] for e in b.events if e.after] for b in blocks] == [["b"]]
            for block in blocks:
                checker.check(block)
            slow.commit()
        waited = 0
        while feed.cursor.position < 3 and waited < 100:  # other sessions' may be open
            blocks += feed.poll()
            waited += 1
            time.sleep(0.05)
        for block in blocks[1:]:
            checker.check(block)
        assert [[e.after[1] for e in b.events if e.after] for b in blocks] == [["b"], ["slow"]]
        assert (feed.cursor.position, feed.position, checker.transactions) == (3, 3, 2)
    finally:
        feed.close()
        fed.close()
