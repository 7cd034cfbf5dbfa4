"""The implementations the contract suite runs on, behind one small adapter.

Every example in ``tests/contract`` is written once against ``Queue``: the
queue's operations without ``con`` (``QueueModel``'s signatures), plus a few
ways to look at the state. Three implementations provide it:

- ``worker``: ``worker.py`` on a SQLite file;
- ``pgworker``: ``pgworker.py`` on a fresh PostgreSQL database (``tests/postgres.py``);
- ``model``: ``model.QueueModel``, the executable specification.

The two that keep rows in a database reach them through their store (``tests/stores``,
the adapter every suite shares), which states what differs between them as data. The
differences the examples meet are handled here, by name, never by skipping a test in
silence:

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

from typing import Any

import model
from tests.stores import Store
from tests.support import JOB_COLUMNS, Rows

IMPLEMENTATIONS = ("worker", "pgworker", "model")
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


class Queue:
    """One implementation's queue: the operations of ``QueueModel`` and ways to look at it."""

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
        """A second, independent empty queue of the same implementation (closed with this one)."""
        raise NotImplementedError

    def reset(self) -> None:
        """Empty both tables and start the seq numbers again at 1 (between examples)."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the connection, if any."""


class Bound(Queue):
    """``worker`` or ``pgworker`` with one connection to the queue at ``target`` of
    ``store``: each operation gets ``con`` first."""

    def __init__(self, name: str, store: Store, target: str) -> None:
        self.name = name
        self.store = store
        self.target = target
        self.module = store.module()
        self.con = store.connect(target)
        self.dense_seq = store.dense_seq
        self._others: list[Bound] = []

    def __getattr__(self, operation: str) -> Any:
        if operation not in _OPERATIONS:
            raise AttributeError(operation)
        function = getattr(self.module, operation)
        return lambda *args, **kwargs: function(self.con, *args, **kwargs)

    def rows(self) -> Rows:
        return self.store.rows(self.con)

    def in_transaction(self) -> bool:
        return self.store.in_transaction(self.con)

    def other(self) -> Queue:
        other = Bound(self.name, self.store, self.target)
        self._others.append(other)
        return other

    def twin(self) -> Queue:
        twin = Bound(self.name, self.store, self.store.fresh("twin"))
        self._others.append(twin)
        return twin

    def reset(self) -> None:
        self.store.empty(self.con)

    def rewrite(self, job_id: str, **columns: object) -> None:
        self.store.rewrite(self.con, job_id, **columns)

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
