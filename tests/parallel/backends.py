"""Backends of the parallel suite: how to make a queue, connect to it and read it back.

The runner and the checker know nothing of SQLite or PostgreSQL: a backend is a way to
create a queue, open a connection to it, the module of calls (``worker``, ``pgworker``
or a planted copy of one), how to read the rows and recognise a lock that was not
granted, and the claim order the model holds it to (``model.lifecycle.CLAIM_ORDERS``).
A backend is a small frozen value, so it can be sent to the branch processes.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import itertools
import os
import sqlite3
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from tests.support import JOB_COLUMNS, REDRIVE_COLUMNS, Rows, read_rows

# The contract's busy timeout (open_queue's timeout=1): a write that waited this long
# for the lock and gave up is a lock timeout, which must have changed nothing.
SQLITE_BUSY_TIMEOUT_S = 1.0


class _ModuleCalls:
    """What both backends do alike: their module of calls, and connections through it."""

    module_path: str | None
    default_module: ClassVar[str]

    def module(self) -> ModuleType:
        """The module of calls: ``default_module``, or the copy at ``module_path``."""
        if self.module_path is None:
            return importlib.import_module(self.default_module)
        return load_copy(self.module_path)

    def connect(self, target: str) -> Any:
        return self.module().open_queue(target)

    def close(self, con: Any) -> None:
        con.close()


@dataclass(frozen=True)
class SQLiteBackend(_ModuleCalls):
    """``worker.py`` (or the planted copy at ``module_path``) on one real SQLite file.

    ``claim_order`` is what the model promises about claim order under concurrency:
    ``strict`` (the lowest seq claimable at the moment the claim takes effect), since
    every claim holds the file's one write lock from its first read to its commit.
    """

    module_path: str | None = None
    name: str = "sqlite"
    claim_order: str = "strict"
    busy_timeout_s: float = SQLITE_BUSY_TIMEOUT_S
    default_module: ClassVar[str] = "worker"

    def create(self, folder: Path) -> str:
        """Create an empty queue in ``folder``; its path is the target to connect to."""
        path = str(folder / "queue.sqlite")
        self.module().open_queue(path).close()
        return path

    def in_transaction(self, con: Any) -> bool:
        return bool(con.in_transaction)

    def rows(self, target: str) -> Rows:
        """Both tables, read through a connection of their own after the run."""
        con = sqlite3.connect(target)
        try:
            return read_rows(con)
        finally:
            con.close()

    def discard(self, target: str) -> None:
        """Nothing to do: the queue file goes with its temporary folder."""

    @contextlib.contextmanager
    def watching_waits(self, con: Any, verb: str) -> Iterator[None]:
        """Nothing to watch: every SQLite write waits its turn for the file's lock."""
        yield

    def lock_not_granted(self, error_type: str, message: str) -> bool:
        """Whether an error says the write lock was not granted (nothing was written)."""
        return error_type == "OperationalError" and "locked" in message


# A claim that waited longer than this for a row lock did wait (a correct claim never
# does); a shorter wait goes unseen here, and its results are judged as any others.
CLAIM_LOCK_TIMEOUT_MS = 1


@dataclass(frozen=True)
class PostgresBackend(_ModuleCalls):
    """``pgworker.py`` (or the planted copy at ``module_path``) on a real PostgreSQL
    database (``conninfo``), each program's queue in a schema of its own.

    ``claim_order`` is ``relaxed``: claims overlapping in time pass over the rows the
    others hold locked (``FOR UPDATE SKIP LOCKED``). A claim must never wait for a
    lock, so claims run with a ``lock_timeout`` of ``claim_lock_timeout_ms``
    (``watching_waits``): a claim that waited longer fails, changing nothing, and the
    judge reports it (``None``: claims wait as long as they like, and only the model
    judges what they return). Other writes wait for the rows they need, as they should.
    """

    conninfo: str
    module_path: str | None = None
    name: str = "postgres"
    claim_order: str = "relaxed"
    busy_timeout_s: float = 0.0
    claim_lock_timeout_ms: int | None = CLAIM_LOCK_TIMEOUT_MS
    default_module: ClassVar[str] = "pgworker"

    def create(self, folder: Path) -> str:
        """Create an empty queue in a new schema; the conninfo that selects it."""
        from psycopg import conninfo as libpq
        from psycopg import sql

        schema = f"program_{os.getpid()}_{next(_SCHEMAS)}"
        self._admin().execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(schema)))
        target = libpq.make_conninfo(self.conninfo, options=f"-c search_path={schema}")
        self.module().open_queue(target).close()
        return target

    def in_transaction(self, con: Any) -> bool:
        from psycopg.pq import TransactionStatus

        return bool(con.info.transaction_status != TransactionStatus.IDLE)

    def rows(self, target: str) -> Rows:
        """Both tables, with the seq numbers made dense (a PostgreSQL sequence leaves a
        gap where an insert rolled back; only their order is the contract's)."""
        import psycopg

        with psycopg.connect(target, autocommit=True) as con:
            jobs = con.execute(f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs ORDER BY seq")
            audit = con.execute(f"SELECT {', '.join(REDRIVE_COLUMNS)} FROM redrives ORDER BY seq")
            return {
                "jobs": [(n, *row[1:]) for n, row in enumerate(jobs.fetchall(), 1)],
                "redrives": [(n, *row[1:]) for n, row in enumerate(audit.fetchall(), 1)],
            }

    def discard(self, target: str) -> None:
        """Drop the program's schema."""
        from psycopg import conninfo as libpq
        from psycopg import sql

        schema = str(libpq.conninfo_to_dict(target)["options"]).rpartition("=")[2]
        statement = sql.SQL("DROP SCHEMA {} CASCADE").format(sql.Identifier(schema))
        self._admin().execute(statement)

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

    def lock_not_granted(self, error_type: str, message: str) -> bool:
        """Whether a claim gave up waiting for a lock (``watching_waits``): its
        transaction rolled back, nothing was written."""
        return error_type == "LockNotAvailable"

    def _admin(self) -> Any:
        """This process's own connection to the database, for schemas (kept open)."""
        import psycopg

        con = _ADMIN.get(self.conninfo)
        if con is None or con.closed:
            con = _ADMIN[self.conninfo] = psycopg.connect(self.conninfo, autocommit=True)
        return con


_SCHEMAS = itertools.count(1)
_ADMIN: dict[str, Any] = {}


def load_copy(path: str) -> ModuleType:
    """Import the module file at ``path`` under a name of its own (once per process)."""
    name = "planted_" + Path(path).stem + "_" + str(abs(hash(os.path.realpath(path))))
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


Backend = SQLiteBackend | PostgresBackend
