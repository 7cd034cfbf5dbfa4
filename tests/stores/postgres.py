"""``pgworker.py`` on a PostgreSQL database: one queue per schema."""

from __future__ import annotations

import contextlib
import itertools
import os
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, ClassVar

import psycopg
from psycopg import conninfo as libpq
from psycopg import sql
from psycopg.pq import TransactionStatus

from tests.stores import Store
from tests.support import JOB_COLUMNS, REDRIVE_COLUMNS, Rows

__all__ = ["CLAIM_LOCK_TIMEOUT_MS", "PostgresStore", "schema_of"]

# A claim that waited longer than this for a row lock did wait (a correct claim never
# does); a shorter wait goes unseen, and its results are judged as any others.
CLAIM_LOCK_TIMEOUT_MS = 1
_SCHEMAS = itertools.count(1)
_ADMIN: dict[str, psycopg.Connection[Any]] = {}


@dataclass(frozen=True)
class PostgresStore(Store):
    """Queues in the database of ``conninfo``, each in a schema of its own (one
    database holds many queues, one per schema, as ``pgworker.open_queue`` says).

    Claims that overlap in time pass over the rows the others hold locked (``FOR UPDATE
    SKIP LOCKED``): the ``relaxed`` claim order. A claim must never wait for a lock, so
    under ``watching_waits`` it runs with a ``lock_timeout`` of ``claim_lock_timeout_ms``
    and a claim that waited longer fails, changing nothing (``None``: claims wait as
    long as they like). Other writes wait for the rows they change, as they should.
    """

    conninfo: str
    claim_lock_timeout_ms: int | None = CLAIM_LOCK_TIMEOUT_MS

    name: ClassVar[str] = "postgres"
    default_module: ClassVar[str] = "pgworker"
    connection_type: ClassVar[str] = "a psycopg.Connection"
    claim_order: ClassVar[str] = "relaxed"
    dense_seq: ClassVar[bool] = False
    lock_wait_s: ClassVar[float | None] = None
    unsynced: ClassVar[str] = "SET synchronous_commit = off"

    def run_target(self) -> Any:
        return self.module().run_database

    def fresh(self, label: str = "queue") -> str:
        schema = f"q_{os.getpid()}_{next(_SCHEMAS)}_{re.sub(r'[^a-z0-9_]', '_', label.lower())}"
        schema = schema[:63]
        self._admin().execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        target = in_schema(self.conninfo, schema)
        self.connect(target).close()
        return target

    def remove(self, target: str) -> None:
        statement = sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE")
        self._admin().execute(statement.format(sql.Identifier(schema_of(target))))

    def caller(self, target: str) -> psycopg.Connection[Any]:
        return psycopg.connect(target, autocommit=True)

    def rows(self, con: Any) -> Rows:
        jobs = con.execute(f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs ORDER BY seq").fetchall()
        audit = con.execute(f"SELECT {', '.join(REDRIVE_COLUMNS)} FROM redrives ORDER BY seq")
        return {"jobs": list(jobs), "redrives": list(audit.fetchall())}

    def in_transaction(self, con: Any) -> bool:
        return bool(con.info.transaction_status != TransactionStatus.IDLE)

    def empty(self, con: Any) -> None:
        con.execute("TRUNCATE jobs, redrives RESTART IDENTITY")

    def rewrite(self, con: Any, job_id: str, **columns: object) -> None:
        assert set(columns) <= set(JOB_COLUMNS), columns
        assignments = sql.SQL(", ").join(
            sql.SQL("{} = %s").format(sql.Identifier(column)) for column in columns
        )
        statement = sql.SQL("UPDATE jobs SET {} WHERE id = %s").format(assignments)
        con.execute(statement, (*columns.values(), job_id))

    def assert_configured(self, con: Any) -> None:
        """open_queue's settings: autocommit, READ COMMITTED as the session's default."""
        isolation = con.execute("SHOW default_transaction_isolation").fetchone()[0]
        assert (con.autocommit, isolation) == (True, "read committed"), (con.autocommit, isolation)

    def lock_not_granted(self, error_type: str, message: str) -> bool:
        """A claim gave up waiting for a row lock (``watching_waits``): its transaction
        rolled back, nothing was written."""
        return error_type == "LockNotAvailable"

    @contextlib.contextmanager
    def watching_waits(self, con: Any, verb: str) -> Iterator[None]:
        """Run a ``claim`` or ``claim_many`` with a lock timeout, any other call as it is."""
        if verb not in ("claim", "claim_many") or self.claim_lock_timeout_ms is None:
            yield
            return
        con.execute(f"SET lock_timeout = '{self.claim_lock_timeout_ms}ms'")
        try:
            yield
        finally:
            con.execute("SET lock_timeout = 0")

    def settle(self, con: Any) -> None:
        """Vacuumed, and the statistics brought up to date, as autovacuum keeps a live
        queue within a minute of such a change (a table filled seconds ago has no
        statistics, and the planner would read every live lease to find a batch's rows;
        and the index entries of the versions that leasing 100,000 jobs left behind are
        read past by every claim until a vacuum removes them: 1.4-1.9x on claim+finish)."""
        con.execute("VACUUM (ANALYZE) jobs")

    def durability(self, con: Any) -> str:
        names = ("fsync", "synchronous_commit", "full_page_writes", "wal_sync_method")
        return ", ".join(f"{name}={con.execute(f'SHOW {name}').fetchone()[0]}" for name in names)

    def scheduled_connect(
        self, target: str, gate: Any, explicit: bool = False
    ) -> psycopg.Connection[Any]:
        """open_queue's connection (autocommit, READ COMMITTED) whose statements and
        transactions take turns at ``gate`` (``_ScheduledConnection``).

        A write that is one statement runs as its own transaction on an autocommit
        connection, so under the scheduler no other statement can run while it holds
        its locks, where a server running two couriers' statements at once can.
        ``explicit`` hands pgworker a connection that is not in autocommit (a borrowed
        connection it supports): every write is then ``BEGIN``, its statement, and a
        step before ``COMMIT`` while its row locks are held.

        The connection is the one the module's ``open_queue`` makes (so a planted copy's
        session settings hold too), given turns by becoming a ``_ScheduledConnection``."""
        con = self.connect(target)
        con.__class__ = _ScheduledConnection
        assert isinstance(con, _ScheduledConnection)
        con.autocommit = not explicit
        con.gate = gate
        con.cursor_factory = _ScheduledCursor
        return con

    def monitor(self, target: str) -> psycopg.Connection[Any]:
        return psycopg.connect(target, autocommit=True)

    def server_pid(self, con: Any) -> int | None:
        return int(con.info.backend_pid)

    def blocked(self, monitor: Any, pid: int, pids: list[int]) -> bool:
        """PostgreSQL's isolation tester's question: does ``pid`` wait for a lock that
        one of ``pids`` holds (or for a safe snapshot)?"""
        row = monitor.execute(_IS_BLOCKED, (pid, pids)).fetchone()
        return bool(row[0])

    def abandon(self, con: Any) -> None:
        """Close the connection: the server rolls back what it had open, as when a
        courier's process dies (its socket closes)."""
        con.close()

    def await_gone(self, monitor: Any, pid: int) -> None:
        for _ in range(2_000):  # bounded: 2,000 polls of 1 ms at most
            if monitor.execute(_ALIVE, (pid,)).fetchone()[0] == 0:
                return
            time.sleep(0.001)
        raise RuntimeError(f"server process {pid} still holds its session after 2 s")

    def _admin(self) -> psycopg.Connection[Any]:
        """This process's own connection to the database, for schemas (kept open)."""
        con = _ADMIN.get(self.conninfo)
        if con is None or con.closed:
            con = _ADMIN[self.conninfo] = psycopg.connect(self.conninfo, autocommit=True)
        return con


_IS_BLOCKED = "SELECT pg_isolation_test_session_is_blocked(%s, %s::integer[])"
_ALIVE = "SELECT count(*) FROM pg_stat_activity WHERE pid = %s"


class _ScheduledConnection(psycopg.Connection[Any]):
    """A connection whose transactions take turns at a gate: ``BEGIN``, ``COMMIT`` and
    ``ROLLBACK`` are step boundaries, as every statement is (``_ScheduledCursor``)."""

    gate: Any = None

    @contextlib.contextmanager
    def transaction(
        self, savepoint_name: str | None = None, force_rollback: bool = False
    ) -> Iterator[psycopg.Transaction]:
        if self.gate is None:
            with super().transaction(savepoint_name, force_rollback) as tx:
                yield tx
            return
        self.gate.point("BEGIN")
        tx = psycopg.Transaction(self, savepoint_name, force_rollback)
        tx.__enter__()
        try:
            yield tx
        except BaseException as error:
            if not self.gate.dead:
                self.gate.point("ROLLBACK")
            if not tx.__exit__(type(error), error, error.__traceback__):
                raise
        else:
            self.gate.point("COMMIT")
            tx.__exit__(None, None, None)


class _ScheduledCursor(psycopg.Cursor[Any]):
    """Each statement first waits for its turn; one that waited for a lock in the server
    waits for a turn again when it comes back (``Gate.after_statement``)."""

    def execute(self, query: Any, params: Any = None, **options: Any) -> Any:
        gate = getattr(self.connection, "gate", None)
        if gate is None:
            return super().execute(query, params, **options)
        gate.point(query if isinstance(query, str) else "a composed statement")
        try:
            return super().execute(query, params, **options)
        finally:
            gate.after_statement()


def in_schema(conninfo: str, schema: str) -> str:
    """``conninfo`` with its search path set to ``schema``: the queue in that schema."""
    return str(libpq.make_conninfo(conninfo, options=f"-c search_path={schema}"))


def schema_of(target: str) -> str:
    """The schema a target made by ``in_schema`` selects."""
    return str(libpq.conninfo_to_dict(target)["options"]).rpartition("=")[2]
