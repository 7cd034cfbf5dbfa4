"""What only pgworker.py has: open_queue(conninfo), run_database, schemas, locks.

The contract's examples run on pgworker in ``tests/contract``; here are the
PostgreSQL side of sections 2 and 8 and what concurrency on one server adds.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo as libpq
from psycopg import errors
from psycopg.pq import TransactionStatus
from psycopg.rows import dict_row

import pgworker
import worker
from tests.postgres import Server
from tests.support import RecordingSend, ScriptedClock
from tests.unit.test_open_queue import leave_a_redriven_job

Connection = psycopg.Connection[Any]


def in_schema(conninfo: str, schema: str) -> str:
    return libpq.make_conninfo(conninfo, options=f"-csearch_path={schema}")


def remember_connections(monkeypatch: pytest.MonkeyPatch) -> list[Connection]:
    """Every connection ``psycopg.connect`` makes from now on (to see it closed)."""
    opened: list[Connection] = []
    connect = psycopg.connect

    def remember(*args: Any, **kwargs: Any) -> Connection:
        opened.append(connect(*args, **kwargs))
        return opened[-1]

    monkeypatch.setattr(psycopg, "connect", remember)
    return opened


def columns(con: Connection, table: str) -> list[tuple[Any, ...]]:
    return con.execute(
        """SELECT column_name, data_type, is_nullable FROM information_schema.columns
        WHERE table_schema = current_schema() AND table_name = %s ORDER BY ordinal_position""",
        (table,),
    ).fetchall()


@pytest.fixture
def bare(pg_server: Any) -> Iterator[str]:
    """A fresh database without the queue's tables."""
    name = f"{pg_server.prefix}_bare"
    pg_server.con.execute(f'CREATE DATABASE "{name}"')
    conninfo = pg_server.conninfo(name)
    try:
        yield conninfo
    finally:
        pg_server.drop(conninfo)


# --- open_queue ------------------------------------------------------------------------


def test_exceptions_and_retry_delay_are_workers_own() -> None:
    for name in ("Conflict", "Retryable", "Permanent", "BadAck", "retry_delay"):
        assert getattr(pgworker, name) is getattr(worker, name)


def test_creates_both_tables_with_the_contracts_columns_and_check(bare: str) -> None:
    con = pgworker.open_queue(bare)
    try:
        assert con.autocommit
        assert con.execute("SHOW default_transaction_isolation").fetchone() == ("read committed",)
        assert [c[0] for c in columns(con, "jobs")] == [
            "seq", "id", "qty", "status", "attempts", "max_attempts", "token",
            "available_at", "deadline", "owner", "lease_until", "reason",
        ]  # fmt: skip
        nullable = {name for name, _, null in columns(con, "jobs") if null == "YES"}
        assert nullable == {"owner", "lease_until", "reason"}
        assert [c[:2] for c in columns(con, "redrives")] == [
            ("seq", "bigint"), ("id", "text"), ("token", "bigint"),
            ("at_ms", "bigint"), ("note", "text"),
        ]  # fmt: skip
        with pytest.raises(errors.CheckViolation):
            con.execute(
                "INSERT INTO jobs (id, qty, status, attempts, max_attempts, token, available_at,"
                " deadline) VALUES ('x', 1, 'lost', 0, 1, 0, 0, 1)"
            )
        with pytest.raises(errors.UniqueViolation):
            for _ in range(2):
                con.execute(
                    "INSERT INTO jobs (id, qty, status, attempts, max_attempts, token,"
                    " available_at, deadline) VALUES ('y', 1, 'pending', 0, 1, 0, 0, 1)"
                )
        indexes = {row[0] for row in con.execute("SELECT indexname FROM pg_indexes")}
        assert set(pgworker._INDEX_NAMES) <= indexes
    finally:
        con.close()


def test_reopening_keeps_the_rows_and_creates_nothing_twice(pg_conninfo: str) -> None:
    con = pgworker.open_queue(pg_conninfo)
    leave_a_redriven_job(pgworker, con)
    before = con.execute("SELECT * FROM jobs").fetchall(), con.execute("SELECT * FROM redrives")
    rows = before[0], before[1].fetchall()
    con.close()
    again = pgworker.open_queue(pg_conninfo)
    try:
        assert (again.execute("SELECT * FROM jobs").fetchall(),) == (rows[0],)
        assert again.execute("SELECT * FROM redrives").fetchall() == rows[1]
    finally:
        again.close()


def test_a_database_with_only_the_two_tables_gets_the_indexes(bare: str) -> None:
    with psycopg.connect(bare, autocommit=True) as con:
        for statement in pgworker.SCHEMA:
            con.execute(statement)
        con.execute(
            "INSERT INTO jobs (id, qty, status, attempts, max_attempts, token, available_at,"
            " deadline) VALUES ('a', 2, 'pending', 0, 3, 0, 0, 1000)"
        )
    con = pgworker.open_queue(bare)
    try:
        indexes = {row[0] for row in con.execute("SELECT indexname FROM pg_indexes")}
        assert set(pgworker._INDEX_NAMES) <= indexes
        assert pgworker.claim(con, "c1", 0) is not None
    finally:
        con.close()


def test_one_database_holds_one_queue_per_schema(pg_conninfo: str) -> None:
    with psycopg.connect(pg_conninfo, autocommit=True) as admin:
        admin.execute("CREATE SCHEMA east")
        admin.execute("CREATE SCHEMA west")
    east = pgworker.open_queue(in_schema(pg_conninfo, "east"))
    west = pgworker.open_queue(in_schema(pg_conninfo, "west"))
    try:
        assert pgworker.enqueue(east, {"id": "a", "qty": 1}, 0, 100)
        assert pgworker.enqueue(west, {"id": "a", "qty": 2}, 0, 100), "no Conflict across queues"
        assert pgworker.claim(west, "c1", 0) == {
            "id": "a", "qty": 2, "owner": "c1", "token": 1, "attempt": 1, "lease_until": 100,
        }  # fmt: skip
        assert east.execute("SELECT status, qty FROM jobs").fetchall() == [("pending", 1)]
        assert east.execute("SELECT current_schema()").fetchone() == ("east",)
    finally:
        east.close()
        west.close()


@pytest.mark.parametrize("conninfo", ["", None, b"dbname=x", 7])
def test_rejects_a_conninfo_that_is_not_a_non_empty_str(conninfo: object) -> None:
    with pytest.raises(ValueError, match="conninfo"):
        pgworker.open_queue(conninfo)  # type: ignore[arg-type]


def test_an_unreachable_server_is_named_and_the_password_never_shown() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))  # bound, never listening: refused
        port = closed.getsockname()[1]
        conninfo = f"postgresql://queue:s3cret-pw@127.0.0.1:{port}/jobs?connect_timeout=5"
        with pytest.raises(psycopg.OperationalError) as raised:
            pgworker.open_queue(conninfo)
    message = str(raised.value)
    assert "127.0.0.1" in message and str(port) in message
    assert "s3cret-pw" not in message


def test_a_failed_initialisation_closes_the_connection(
    pg_conninfo: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened = remember_connections(monkeypatch)
    with pytest.raises(psycopg.Error, match="no schema has been selected"):
        pgworker.open_queue(in_schema(pg_conninfo, "no_such_schema"))
    assert len(opened) == 1 and opened[0].closed


# --- borrowed connections of any kind ----------------------------------------------------


def test_a_connection_not_in_autocommit_mode_is_served_and_left_idle(pg_conninfo: str) -> None:
    with psycopg.connect(pg_conninfo) as con:  # psycopg's default: autocommit off
        assert pgworker.enqueue(con, {"id": "a", "qty": 1}, 0, 100) is True
        assert con.info.transaction_status == TransactionStatus.IDLE
        ticket = pgworker.claim(con, "c1", 0)
        assert con.info.transaction_status == TransactionStatus.IDLE
        assert ticket is not None and pgworker.finish(con, ticket, "ok", 1) == "done"
        assert con.info.transaction_status == TransactionStatus.IDLE
    with psycopg.connect(pg_conninfo, autocommit=True) as other:
        assert other.execute("SELECT status FROM jobs").fetchall() == [("done",)]


def test_the_callers_row_factory_does_not_matter(pg_conninfo: str) -> None:
    con = pgworker.open_queue(pg_conninfo)
    con.row_factory = dict_row
    try:
        assert pgworker.enqueue_many(con, [{"id": "a", "qty": 1}], 0, 100) == [True]
        assert pgworker.claim_many(con, "c1", 0, 2)[0]["id"] == "a"
        with pytest.raises(ValueError, match="only a dead job"):
            pgworker.redrive(con, "a", 0, 100, "ops")
    finally:
        con.close()


def plans(con: Connection, statement: str) -> tuple[int, int]:
    """(custom, generic) plans made so far for the prepared statements of this session
    that begin with ``statement``."""
    row = con.execute(
        """SELECT coalesce(sum(custom_plans), 0)::int, coalesce(sum(generic_plans), 0)::int
        FROM pg_prepared_statements WHERE statement LIKE %s || '%%'""",
        (statement,),
    ).fetchone()
    assert row is not None
    return row[0], row[1]


@pytest.mark.parametrize("hooked", [False, True], ids=["no hook", "a hook"])
def test_a_single_claim_and_finish_are_planned_once_and_leave_the_planner_as_it_was(
    pg_con: Connection, hooked: bool
) -> None:
    """A claim's planning costs more than running it (docs/dev). psycopg prepares a
    statement at its sixth run; PostgreSQL plans it for its values five times, then keeps
    its plan for any values, estimated no dearer (pgworker's "Planning"). Nothing of the
    session is changed for it."""
    assert pgworker.enqueue_many(pg_con, [{"id": f"j{n}", "qty": 1} for n in range(30)], 0, 100)
    fault = (lambda point: None) if hooked else None
    for _ in range(30):
        ticket = pgworker.claim(pg_con, "c1", 0, fault=fault)
        assert ticket is not None
        assert pgworker.finish(pg_con, ticket, "ok", 1, fault=fault) == "done"
    assert plans(pg_con, "WITH quarantined AS") == (5, 20)
    assert plans(pg_con, "UPDATE jobs SET") == (5, 20)
    assert pg_con.execute("SHOW plan_cache_mode").fetchone() == ("auto",)
    assert pg_con.info.transaction_status == TransactionStatus.IDLE


# --- a batch's settlements ------------------------------------------------------------------


def settle_a_batch(module: Any, con: Any) -> list[Any]:
    """Jobs whose ids are the identifiers an array's text could misread (``NULL``, digits,
    a lone ``-``, 64 characters), claimed by an owner spelled ``NULL``, then finished in
    one batch with every outcome, one ticket stale and one given twice."""
    ids = ["NULL", "null", "9", "-", "_", "a" * 64]
    for job_id in ids:
        module.enqueue(con, {"id": job_id, "qty": 2}, 0, 10_000)
    tickets = module.claim_many(con, "NULL", 0, len(ids), 1_000)
    assert [ticket["id"] for ticket in tickets] == ids
    stale = {**tickets[3], "token": tickets[3]["token"] + 1}
    outcomes = ["ok", "retry", "permanent", "ok", "retry", "ok"]
    results = [
        {"ticket": ticket, "outcome": outcome, "delay_ms": 5}
        for ticket, outcome in zip([*tickets[:3], stale, *tickets[4:]], outcomes, strict=True)
    ]
    results.append({"ticket": tickets[0], "outcome": "ok", "delay_ms": 0})
    rows = con.execute(
        "SELECT id, status, reason, available_at, owner, lease_until FROM jobs ORDER BY seq"
    ).fetchall()
    return [module.finish_many(con, results, 10), [tuple(row) for row in rows]]


def test_a_batch_is_settled_as_worker_settles_it_whatever_its_ids(
    pg_con: Connection, tmp_path: Any
) -> None:
    """finish_many sends a batch's fields as arrays in PostgreSQL's text form: an id or an
    owner spelled ``NULL`` must stay a string there, every item judged on its own."""
    file = worker.open_queue(tmp_path / "queue.sqlite")
    try:
        expected = settle_a_batch(worker, file)
    finally:
        file.close()
    assert expected[0] == ["done", "pending", "dead", False, "pending", "done", False]
    assert settle_a_batch(pgworker, pg_con) == expected


# --- concurrency on one server -------------------------------------------------------------


def test_a_claim_passes_over_a_row_another_transaction_holds(pg_con: Connection) -> None:
    for job_id in ("a", "b"):
        pgworker.enqueue(pg_con, {"id": job_id, "qty": 1}, 0, 1000)
    pg_con.execute("SET lock_timeout = '2s'")  # a claim that waited would fail, not hang
    holder = psycopg.connect(pg_con.info.dsn, autocommit=True)
    try:
        holder.execute("BEGIN")
        holder.execute("SELECT * FROM jobs WHERE id = 'a' FOR UPDATE")
        ticket = pgworker.claim(pg_con, "c1", 0)
        assert ticket is not None and ticket["id"] == "b", "the held row is skipped, not waited for"
        holder.execute("COMMIT")
        again = pgworker.claim(pg_con, "c1", 0)
        assert again is not None and again["id"] == "a"
    finally:
        holder.close()


def test_a_finish_waiting_for_a_concurrent_reclaim_judges_the_new_row(pg_con: Connection) -> None:
    pgworker.enqueue(pg_con, {"id": "a", "qty": 1}, 0, 10_000)
    old = pgworker.claim(pg_con, "c1", 0, 100)
    assert old is not None
    rival = psycopg.connect(pg_con.info.dsn, autocommit=True)
    try:
        rival.execute("BEGIN")
        # Another host reclaims with a clock past the lease: the row is locked meanwhile.
        rival.execute("UPDATE jobs SET token = token + 1, attempts = attempts + 1 WHERE id = 'a'")
        answers: list[object] = []
        finisher = threading.Thread(
            target=lambda: answers.append(pgworker.finish(pg_con, old, "ok", 50))
        )
        finisher.start()
        finisher.join(0.3)
        assert finisher.is_alive(), "finish waits for the row lock"
        rival.execute("COMMIT")
        finisher.join(10)
        assert answers == [False], "re-checked on the committed row: the ticket is stale"
    finally:
        rival.close()
    assert pg_con.execute("SELECT token, status FROM jobs").fetchone() == (2, "leased")


# --- run_database --------------------------------------------------------------------------


def test_run_database_runs_one_job_and_closes_its_connection(
    pg_con: Connection, monkeypatch: pytest.MonkeyPatch
) -> None:
    pgworker.enqueue(pg_con, {"id": "a", "qty": 3}, 0, 1000)
    opened = remember_connections(monkeypatch)
    send = RecordingSend(True)
    result = pgworker.run_database(pg_con.info.dsn, "c1", ScriptedClock(10, 20), send, 0.5)
    assert result == {"id": "a", "token": 1, "status": "done"}
    assert send.deliveries == [{"id": "a", "qty": 3}]
    assert len(opened) == 1 and opened[0].closed
    assert pgworker.run_database(pg_con.info.dsn, "c1", ScriptedClock(30), send, 0.5) is None
    assert len(opened) == 2 and opened[1].closed


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_run_database_closes_its_connection_when_send_fails(
    pg_con: Connection, monkeypatch: pytest.MonkeyPatch, error: BaseException
) -> None:
    pgworker.enqueue(pg_con, {"id": "a", "qty": 3}, 0, 1000)
    opened = remember_connections(monkeypatch)
    with pytest.raises(type(error)):
        pgworker.run_database(pg_con.info.dsn, "c1", ScriptedClock(10), RecordingSend(error), 1)
    assert len(opened) == 1 and opened[0].closed
    assert pg_con.execute("SELECT status FROM jobs").fetchone() == ("leased",)


def test_run_database_refuses_a_database_without_the_queue_and_creates_nothing(bare: str) -> None:
    with pytest.raises(errors.UndefinedTable, match="no table jobs or redrives") as raised:
        pgworker.run_database(bare, "c1", ScriptedClock(0), RecordingSend(), 1)
    assert "open_queue" in str(raised.value)
    with psycopg.connect(bare, autocommit=True) as con:
        assert con.execute("SELECT to_regclass('jobs'), to_regclass('redrives')").fetchone() == (
            None,
            None,
        )


@pytest.mark.parametrize(
    ("argument", "value"),
    [
        ("jitter", 2),
        ("owner", "a b"),
        ("lease_ms", 0),
        ("clock", None),
        ("send", 1),
        ("conninfo", ""),
    ],
)
def test_run_database_validates_before_connecting(
    bare: str, monkeypatch: pytest.MonkeyPatch, argument: str, value: object
) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise AssertionError("connected before validating")

    monkeypatch.setattr(psycopg, "connect", refuse)
    arguments: dict[str, Any] = {
        "conninfo": bare,
        "owner": "c1",
        "clock": ScriptedClock(),
        "send": RecordingSend(),
        "jitter": 0.5,
        "lease_ms": 100,
        argument: value,
    }
    with pytest.raises(ValueError, match=argument):
        pgworker.run_database(**arguments)


def test_run_database_adds_missing_indexes_to_an_existing_queue(pg_conninfo: str) -> None:
    with psycopg.connect(pg_conninfo, autocommit=True) as con:
        con.execute("DROP INDEX jobs_fresh_by_seq")
    assert pgworker.run_database(pg_conninfo, "c1", ScriptedClock(0), RecordingSend(), 1) is None
    with psycopg.connect(pg_conninfo, autocommit=True) as con:
        assert con.execute("SELECT to_regclass('jobs_fresh_by_seq')").fetchone() is not None


def test_the_test_server_of_an_unreachable_conninfo_is_named_without_its_password() -> None:
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]
        conninfo = f"host=127.0.0.1 port={port} dbname=ci user=ci password=hunter2-pw"
        with pytest.raises(RuntimeError) as raised:
            Server(conninfo, "LEASE_QUEUE_PG")
    message = str(raised.value)
    assert message.startswith("cannot connect to the PostgreSQL server of LEASE_QUEUE_PG")
    assert f"host '127.0.0.1', port '{port}', dbname 'ci', user 'ci'" in message
    assert "hunter2-pw" not in message
    assert raised.value.__cause__ is None and raised.value.__suppress_context__
