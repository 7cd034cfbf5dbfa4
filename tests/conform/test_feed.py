"""The change feed: opt-in, in the writer's own transaction, and gone without a trace.

Each example runs on a queue file and on a PostgreSQL database (``fed``). Installing
the feed leaves the contract's two tables as they were, a rolled-back write leaves no
event, and removing it leaves the schema exactly as ``open_queue`` made it. The feed
records each row after a change only; the reader rebuilds the row before from the row's
previous event, starting from the baseline events ``--install`` writes.
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
from courier.conform import postgres_feed, sqlite_feed
from courier.conform.checker import Feed, check_all, rules_for
from courier.conform.feed import Event, Images, NotInstalled
from courier.conform.postgres_feed import Cursor
from courier.conform.tables import net_changes
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


def test_a_postgres_statement_is_one_event_row_read_back_as_one_event_per_row(
    tmp_path: Path, pg_conninfo: str
) -> None:
    """A statement that changes many rows writes one event row, its columns arrays in
    the rows' seq order; the reader gets one event per changed row back, in that order,
    a deletion's and a truncation's included, and a statement that changed nothing
    writes nothing."""
    fed = open_fed("postgres", tmp_path, pg_conninfo)
    q, con = fed.module, fed.con
    now = fed.now() - 1000
    try:
        q.enqueue_many(con, [{"id": f"j{n}", "qty": n + 1} for n in range(5)], now, 60_000)
        tickets = q.claim_many(con, "c1", now + 1, 3)
        assert len(q.claim_many(con, "c2", now + 1, 3)) == 2
        assert q.claim_many(con, "c3", now + 2, 3) == []  # changes nothing
        fed.sql("DELETE FROM jobs WHERE id IN ('j3', 'j4')")
        fed.sql("TRUNCATE redrives")
        with psycopg.connect(fed.target, autocommit=True) as raw:
            rows = raw.execute(
                "SELECT tbl, op, a_id, a_status, a_seq FROM conform_events ORDER BY seq"
            ).fetchall()
        assert [row[:4] for row in rows] == [
            ("jobs", "I", [f"j{n}" for n in range(5)], ["pending"] * 5),
            ("jobs", "U", ["j0", "j1", "j2"], ["leased"] * 3),
            ("jobs", "U", ["j3", "j4"], ["leased"] * 2),
            ("jobs", "D", None, None),
            ("redrives", "T", None, None),
        ]
        assert [t["id"] for t in tickets] == ["j0", "j1", "j2"]
        feed = Feed(fed.target, rules_for(fed.target, simulated=False, skew_ms=0))
        try:
            _, blocks = feed.start()
            events = [[(e.op, e.seq, e.after and e.after[1]) for e in b.events] for b in blocks]
        finally:
            feed.close()
        seq = dict(zip([f"j{n}" for n in range(5)], rows[0][4], strict=True))
        assert events == [
            [("I", seq[f"j{n}"], f"j{n}") for n in range(5)],
            [("U", seq[f"j{n}"], f"j{n}") for n in range(3)],
            [("U", seq["j3"], "j3"), ("U", seq["j4"], "j4")],
            [("D", seq["j3"], None), ("D", seq["j4"], None)],
            [("T", 0, None)],
        ]
    finally:
        fed.close()


def test_a_read_cut_at_its_commit_leaves_the_cursor_where_it_was(
    tmp_path: Path, pg_conninfo: str
) -> None:
    """A reader whose connection is lost at the ``COMMIT`` of its read (its server process
    terminated just before) has not moved its cursor: the next read, on a new
    connection, returns the same transactions, so a follower that reconnects skips
    nothing."""
    fed = open_fed("postgres", tmp_path, pg_conninfo)
    now = fed.now() - 1000
    fed.module.enqueue(fed.con, {"id": "a", "qty": 1}, now, 60_000)
    fed.close()
    reader = psycopg.connect(pg_conninfo, autocommit=True)

    class CutAtCommit:
        """The reader's connection, its server process terminated before ``COMMIT``."""

        def execute(self, statement: str, params: Any = None) -> Any:
            if statement == "COMMIT":
                with psycopg.connect(pg_conninfo, autocommit=True) as admin:
                    pid = reader.info.backend_pid
                    admin.execute("SELECT pg_terminate_backend(%s, 10000)", (pid,))
            return reader.execute(statement, params)

    cursor = Cursor()
    try:
        with pytest.raises(psycopg.OperationalError):
            postgres_feed.read_blocks(CutAtCommit(), cursor)
    finally:
        reader.close()
    assert (cursor.top, cursor.missing) == (0, set())
    with psycopg.connect(pg_conninfo, autocommit=True) as again:
        blocks = postgres_feed.read_blocks(again, cursor)
    assert [[e.after[1] for e in b.events if e.after] for b in blocks] == [["a"]]
    assert cursor.top > 0


def test_rows_from_before_the_feed_start_from_their_baseline_events(fed: Fed) -> None:
    """The feed records each row after a change only; a row's row before is its previous
    event's, and for a row the queue held at ``--install`` its baseline event's."""
    q, con = fed.module, fed.con
    assert uninstall_feed(fed.target) is True
    now = fed.now() - 10_000
    q.enqueue_many(con, [{"id": f"j{n}", "qty": n + 1} for n in range(4)], now, 60_000)
    done = q.claim(con, "c0", now + 1)
    assert done is not None and q.finish(con, done, "ok", now + 2) == "done"
    held = q.claim(con, "c0", now + 3)  # j1 stays leased across the install
    assert held is not None
    assert install_feed(fed.target) is True
    assert q.finish(con, held, "retry", now + 4, 0) == "pending"
    tickets = q.claim_many(con, "c1", now + 5, 3, 500)  # j1, j2, j3
    assert [t["id"] for t in tickets] == ["j1", "j2", "j3"]
    results = [{"ticket": t, "outcome": "ok", "delay_ms": 0} for t in tickets]
    assert q.finish_many(con, results, now + 6) == ["done"] * 3
    feed = Feed(fed.target, rules_for(fed.target, simulated=False, skew_ms=0))
    try:
        checker, blocks = feed.start()
        held_then = {row[1]: row[3] for row in checker.tables.jobs.values()}
        assert held_then == {"j0": "done", "j1": "leased", "j2": "pending", "j3": "pending"}
        finish = blocks[0].events[0]
        assert finish.before is not None and finish.after is not None
        assert (finish.before[1], finish.before[3], finish.before[6]) == ("j1", "leased", 1)
        assert (finish.after[3], finish.after[6]) == ("pending", 1)
        for block in blocks:
            checker.check(block)
    finally:
        feed.close()
    assert [f.problems for f in checker.unexplained] == []
    assert dict(checker.operations) == {"finish": 1, "claim_many": 1, "finish_many": 1}


def test_a_change_the_feed_did_not_record_is_flagged(fed: Fed) -> None:
    """The row before is rebuilt from the feed's own events: a claim made while the
    update trigger was gone leaves the next finish to be judged from the pending row the
    feed last saw, which no finish settles; a row updated that the feed never saw
    inserted is flagged as such."""
    q, con = fed.module, fed.con
    now = fed.now() - 10_000
    q.enqueue(con, {"id": "a", "qty": 1}, now, 60_000)
    q.enqueue(con, {"id": "b", "qty": 1}, now, 60_000)
    trigger = "conform_jobs_update"
    if fed.kind == "sqlite":
        fed.sql(f"DROP TRIGGER {trigger}")
        ticket = q.claim(con, "c1", now + 1)
        fed.sql(sqlite_feed.TRIGGERS[trigger])
    else:
        fed.sql(f"ALTER TABLE jobs DISABLE TRIGGER {trigger}")
        ticket = q.claim(con, "c1", now + 1)
        fed.sql(f"ALTER TABLE jobs ENABLE TRIGGER {trigger}")
    assert ticket is not None and ticket["id"] == "a"
    assert q.finish(con, ticket, "ok", now + 2) == "done"
    fed.sql(
        "DELETE FROM conform_events WHERE tbl = 'jobs' AND op = 'I' AND 'b' = ANY(a_id)"
        if fed.kind == "postgres"
        else "DELETE FROM conform_events WHERE tbl = 'jobs' AND op = 'I' AND a1 = 'b'"
    )
    fed.sql("UPDATE jobs SET qty = 2 WHERE id = 'b'")
    checker = fed.check()
    assert checker.transactions == 3  # enqueue a, the finish, the update of b
    finish, update = checker.unexplained
    (change,) = finish.changes
    assert change.before is not None and change.after is not None
    assert (change.before[3], change.before[6]) == ("pending", 0)  # the feed's last image
    assert (change.after[3], change.after[6]) == ("done", 1)
    assert any("a finish settles a leased job" in p for p in finish.problems), finish.problems
    assert any("no earlier image of this row" in p for p in update.problems), update.problems


def test_a_feed_of_an_earlier_version_is_named_as_such(fed: Fed) -> None:
    """A feed whose events hold other columns (an earlier version's, with the row before
    too) is refused with what to do, and --uninstall, --install repair it."""
    fed.close()
    column = "b0" if fed.kind == "sqlite" else "b_seq bigint"
    fed.sql(f"ALTER TABLE conform_events ADD COLUMN {column}")
    with pytest.raises(NotInstalled, match=r"earlier version.*--uninstall, then --install"):
        check_all(fed.target, rules_for(fed.target, simulated=False, skew_ms=0))
    with pytest.raises(NotInstalled, match="earlier version"):
        install_feed(fed.target)
    assert uninstall_feed(fed.target) is True
    assert install_feed(fed.target) is True
    if fed.kind == "postgres":  # the version of one event row a changed row
        fed.sql("ALTER TABLE conform_events ALTER COLUMN a_id TYPE text USING a_id[1]")
        with pytest.raises(NotInstalled, match=r"earlier version.*a_id text,"):
            check_all(fed.target, rules_for(fed.target, simulated=False, skew_ms=0))
        assert uninstall_feed(fed.target) is True
        assert install_feed(fed.target) is True
    if fed.kind == "postgres":  # the first version's commits table
        fed.sql("CREATE TABLE conform_commits (seq bigint)")
        with pytest.raises(NotInstalled, match="earlier version"):
            check_all(fed.target, rules_for(fed.target, simulated=False, skew_ms=0))
        assert uninstall_feed(fed.target) is True
    fed.con = fed.module.open_queue(fed.target)


def test_images_rebuild_each_row_before_from_its_previous_event() -> None:
    def event(number: int, op: str, seq: int, after: tuple[Any, ...] | None) -> Event:
        return Event(number, "redrives", op, seq, after, 0)

    images = Images()
    assert images.start([event(1, "B", 7, (7, "a", 1, 5, "x"))]) == {
        "jobs": [],
        "redrives": [(7, "a", 1, 5, "x")],
    }
    events = [
        event(2, "U", 7, (7, "a", 1, 5, "y")),
        event(3, "I", 8, (8, "b", 2, 6, "z")),
        event(4, "U", 7, (7, "a", 1, 5, "w")),
        event(5, "D", 8, None),
        event(6, "U", 9, (9, "c", 3, 7, "v")),  # never seen: no image
    ]
    images.rebuild(events)
    assert [e.before for e in events] == [
        (7, "a", 1, 5, "x"),
        None,
        (7, "a", 1, 5, "y"),
        (8, "b", 2, 6, "z"),
        None,
    ]
    changes, odd = net_changes(events)
    assert [(c.seq, c.before, c.after) for c in changes] == [
        (7, (7, "a", 1, 5, "x"), (7, "a", 1, 5, "w")),
        (8, None, None),
        (9, None, (9, "c", 3, 7, "v")),
    ]
    assert odd == [
        "redrives seq 9: the feed holds no earlier image of this row (a change "
        "of it was not recorded)"
    ]
