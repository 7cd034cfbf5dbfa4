"""The backends the contract suite runs on, behind one small adapter.

Every example in ``tests/contract`` is written once against ``Queue``: the
queue's operations without ``con`` (``QueueModel``'s signatures), plus a few
ways to look at the state. Three backends implement it:

- ``worker``: ``worker.py`` on a SQLite file;
- ``pgworker``: ``pgworker.py`` on a fresh PostgreSQL database (``tests/postgres.py``);
- ``model``: ``model.QueueModel``, the executable specification.

The backends differ in what they are, and the suite handles each difference
here, by name, never by skipping a test in silence:

- ``model`` has no connection: ``in_transaction()`` is always ``False`` and
  ``other()`` is the model itself (another worker's view of the same queue);
  the examples that need a real connection take the ``database`` fixture,
  which runs on ``worker`` and ``pgworker`` only.
- ``dense_seq``: SQLite's AUTOINCREMENT and the model give a rolled-back insert's
  seq number back; a PostgreSQL sequence does not (``pgworker``'s docstring), so
  there the next row's seq leaves a gap. Only the order of seq numbers is the
  contract's.
- ``rewrite(job_id, **columns)`` changes a row the way an operator's SQL would
  (the model is rebuilt from its rows, ``QueueModel.from_rows``).
"""

from __future__ import annotations

import sqlite3
from pathlib import Path
from types import ModuleType
from typing import Any

from psycopg import conninfo as libpq
from psycopg import sql as pgsql
from psycopg.pq import TransactionStatus

import model
import pgworker
import worker
from tests.support import JOB_COLUMNS, REDRIVE_COLUMNS, Rows
from tests.support import read_rows as read_sqlite_rows

BACKENDS = ("worker", "pgworker", "model")
DATABASES = ("worker", "pgworker")

_OPERATIONS = (
    "enqueue",
    "enqueue_many",
    "claim",
    "claim_many",
    "finish",
    "finish_many",
    "redrive",
    "run_once",
)


def read_pg_rows(con: Any) -> Rows:
    """Every row of both tables of a ``pgworker`` connection, in seq order, as tuples."""
    jobs = con.execute(f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs ORDER BY seq").fetchall()
    audit = con.execute(
        f"SELECT {', '.join(REDRIVE_COLUMNS)} FROM redrives ORDER BY seq"
    ).fetchall()
    return {"jobs": jobs, "redrives": audit}


class Queue:
    """One backend's queue: the operations of ``QueueModel`` and ways to look at it."""

    name: str
    dense_seq: bool
    module: Any  # the module (or object) whose exceptions and constants apply

    def __getattr__(self, operation: str) -> Any:
        raise AttributeError(operation)

    def rows(self) -> Rows:
        """Both tables, in seq order, as plain tuples in column order."""
        raise NotImplementedError

    def job(self, job_id: str) -> dict[str, Any]:
        """One job row as a dict keyed by column name."""
        for row in self.rows()["jobs"]:
            if row[1] == job_id:
                return dict(zip(JOB_COLUMNS, row, strict=True))
        raise AssertionError(f"no job {job_id!r}")

    def in_transaction(self) -> bool:
        """Whether the queue's connection has a transaction open (never, for the model)."""
        raise NotImplementedError

    def other(self) -> Queue:
        """Another worker's handle on the same queue."""
        raise NotImplementedError

    def rewrite(self, job_id: str, **columns: object) -> None:
        """Set ``columns`` of job ``job_id``'s row, as an operator's SQL would."""
        raise NotImplementedError

    def twin(self) -> Queue:
        """A second, independent empty queue on the same backend (closed with this one)."""
        raise NotImplementedError

    def reset(self) -> None:
        """Empty both tables and start the seq numbers again at 1 (between examples)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the connection, if any."""


class Bound(Queue):
    """``worker`` or ``pgworker`` with one connection: each operation gets ``con`` first."""

    def __init__(self, name: str, module: ModuleType, con: Any, reopen: Any, twin: Any) -> None:
        self.name = name
        self.module = module
        self.con = con
        self.dense_seq = module is worker
        self._reopen = reopen
        self._twin = twin
        self._others: list[Bound] = []

    def __getattr__(self, operation: str) -> Any:
        if operation not in _OPERATIONS:
            raise AttributeError(operation)
        function = getattr(self.module, operation)
        return lambda *args, **kwargs: function(self.con, *args, **kwargs)

    def rows(self) -> Rows:
        if self.module is worker:
            return read_sqlite_rows(self.con)
        return read_pg_rows(self.con)

    def in_transaction(self) -> bool:
        if self.module is worker:
            return bool(self.con.in_transaction)
        return bool(self.con.info.transaction_status != TransactionStatus.IDLE)

    def other(self) -> Queue:
        other = Bound(self.name, self.module, self._reopen(), self._reopen, self._twin)
        self._others.append(other)
        return other

    def twin(self) -> Queue:
        twin: Bound = self._twin(self.con)
        self._others.append(twin)
        return twin

    def reset(self) -> None:
        if self.module is worker:
            self.con.execute("BEGIN IMMEDIATE")
            for table in ("jobs", "redrives", "sqlite_sequence"):
                self.con.execute(f"DELETE FROM {table}")
            self.con.execute("COMMIT")
        else:
            self.con.execute("TRUNCATE jobs, redrives RESTART IDENTITY")

    def rewrite(self, job_id: str, **columns: object) -> None:
        assert set(columns) <= set(JOB_COLUMNS), columns
        if self.module is worker:
            sets = ", ".join(f"{column} = ?" for column in columns)
            self.con.execute(f"UPDATE jobs SET {sets} WHERE id = ?", (*columns.values(), job_id))
            return
        assignments = pgsql.SQL(", ").join(
            pgsql.SQL("{} = %s").format(pgsql.Identifier(column)) for column in columns
        )
        statement = pgsql.SQL("UPDATE jobs SET {} WHERE id = %s").format(assignments)
        self.con.execute(statement, (*columns.values(), job_id))

    def close(self) -> None:
        for other in self._others:
            other.close()
        self.con.close()


class Modelled(Queue):
    """``model.QueueModel``: the operations are its own methods."""

    name = "model"
    dense_seq = True
    module = model

    def __init__(self) -> None:
        self.model = model.QueueModel()

    def __getattr__(self, operation: str) -> Any:
        if operation not in _OPERATIONS:
            raise AttributeError(operation)
        return getattr(self.model, operation)

    def rows(self) -> Rows:
        return self.model.rows()

    def in_transaction(self) -> bool:
        return False

    def other(self) -> Queue:
        return self

    def twin(self) -> Queue:
        return Modelled()

    def reset(self) -> None:
        self.model = model.QueueModel()

    def rewrite(self, job_id: str, **columns: object) -> None:
        rows = self.model.rows()
        index = {column: n for n, column in enumerate(JOB_COLUMNS)}
        jobs = []
        for row in rows["jobs"]:
            values = list(row)
            if values[1] == job_id:
                for column, value in columns.items():
                    values[index[column]] = value
            jobs.append(tuple(values))
        self.model = model.QueueModel.from_rows({"jobs": jobs, "redrives": rows["redrives"]})


def sqlite_queue(path: Path) -> Bound:
    """``worker.py`` on a new queue file at ``path``; its twin is a file beside it."""
    return Bound(
        "worker",
        worker,
        worker.open_queue(path),
        lambda: worker.open_queue(path),
        lambda _: sqlite_queue(path.with_name(f"twin-{path.name}")),
    )


def postgres_queue(conninfo: str) -> Bound:
    """``pgworker.py`` on the (fresh) database of ``conninfo``; its twin is a queue in
    schema ``twin`` of the same database (one queue per schema)."""
    return Bound(
        "pgworker",
        pgworker,
        pgworker.open_queue(conninfo),
        lambda: pgworker.open_queue(conninfo),
        lambda con: _schema_twin(con, conninfo),
    )


def _schema_twin(con: Any, conninfo: str) -> Bound:
    con.execute("CREATE SCHEMA IF NOT EXISTS twin")
    return postgres_queue(libpq.make_conninfo(conninfo, options="-csearch_path=twin"))


def connection_state(queue: Queue) -> sqlite3.Connection | Any:
    """The raw connection of a database backend (for the examples about ``con`` itself)."""
    assert isinstance(queue, Bound), f"{queue.name} has no connection"
    return queue.con
