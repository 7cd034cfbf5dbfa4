"""Where a queue's rows live, for every suite and benchmark: one ``Store`` per kind.

A *store* is the one adapter between the code that exercises a queue (the contract
examples, the lockstep machine, the parallel programs, the benchmarks) and a queue
module: ``worker.py`` on SQLite files, ``pgworker.py`` on a PostgreSQL database, or a
planted copy of either. It makes a fresh, empty queue and names it by a *target* (a
file path, or a conninfo that selects the queue's schema), connects to it through the
module, reads its rows back, and states as data what differs between the kinds, so
that no suite asks which kind it runs on:

- ``claim_order``: what the model promises about claims that overlap in time
  (``model.lifecycle.CLAIM_ORDERS``): ``strict`` on SQLite, ``relaxed`` on PostgreSQL;
- ``dense_seq``: whether a rolled-back insert gives its seq number back (SQLite's
  AUTOINCREMENT does, a PostgreSQL sequence does not: only the order of seq numbers is
  the contract's, so ``comparable_rows`` numbers them densely);
- ``lock_wait_s``: how long a write waits for a lock before it is refused (SQLite's
  busy timeout, set by ``open_queue``); ``None`` where a write waits as long as it must;
- ``lock_not_granted``: which error says a write was refused its lock, having changed
  nothing.

``tests/stores/sqlite.py`` and ``tests/stores/postgres.py`` are the two kinds; a third
would be one more module. A store is a small frozen value, so it can be sent to the
processes of the parallel suite.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, ClassVar

from tests.support import Rows

__all__ = ["Rows", "Store", "dense", "load_copy"]


@dataclass(frozen=True)
class Store:
    """What every kind of store does alike; each kind fills in the rest.

    ``module_path`` names a copy of the queue module (a planted bug) to run instead of
    the kind's own module (``default_module``).
    """

    module_path: str | None = field(default=None, kw_only=True)

    name: ClassVar[str]
    default_module: ClassVar[str]
    connection_type: ClassVar[str]  # as the refusal of a wrong ``con`` names it
    claim_order: ClassVar[str]
    dense_seq: ClassVar[bool]
    lock_wait_s: ClassVar[float | None]

    # --- the module of calls --------------------------------------------------------

    def module(self) -> ModuleType:
        """The module of calls: ``default_module``, or the copy at ``module_path``."""
        if self.module_path is None:
            return importlib.import_module(self.default_module)
        return load_copy(self.module_path)

    @property
    def label(self) -> str:
        """How failure messages name the real side: ``worker.py``, ``pgworker.py``."""
        return f"{self.default_module}.py"

    def connect(self, target: str) -> Any:
        """The module's own connection to the queue at ``target`` (``open_queue``)."""
        return self.module().open_queue(target)

    def run_target(self) -> Callable[..., Any]:
        """The module's round on a connection of its own: ``run_file`` or ``run_database``."""
        raise NotImplementedError

    # --- queues ---------------------------------------------------------------------

    def fresh(self, label: str = "queue") -> str:
        """Make a new, empty queue named after ``label``; its target."""
        raise NotImplementedError

    def remove(self, target: str) -> None:
        """Delete the queue at ``target`` and everything it holds."""
        raise NotImplementedError

    @contextlib.contextmanager
    def queue(self, label: str = "queue") -> Iterator[Any]:
        """A fresh queue, connected; closed and removed when the block ends."""
        target = self.fresh(label)
        try:
            con = self.connect(target)
            try:
                yield con
            finally:
                con.close()
        finally:
            self.remove(target)

    def caller(self, target: str) -> Any:
        """A connection of the driver's own, as a caller of the queue would hold it."""
        raise NotImplementedError

    # --- reading and writing rows directly ---------------------------------------------

    def rows(self, con: Any) -> Rows:
        """Both tables through ``con``, in seq order, as plain tuples in column order."""
        raise NotImplementedError

    def rows_at(self, target: str) -> Rows:
        """``comparable_rows`` of the queue at ``target``, through a connection of their own."""
        con = self.caller(target)
        try:
            return self.comparable_rows(con)
        finally:
            con.close()

    def comparable_rows(self, con: Any) -> Rows:
        """``rows``, with seq numbers made dense where a sequence leaves gaps: what the
        model's rows are compared with."""
        rows = self.rows(con)
        return rows if self.dense_seq else dense(rows)

    def in_transaction(self, con: Any) -> bool:
        """Whether ``con`` has a transaction open."""
        raise NotImplementedError

    def empty(self, con: Any) -> None:
        """Delete every row of both tables and start the seq numbers again at 1."""
        raise NotImplementedError

    def rewrite(self, con: Any, job_id: str, **columns: object) -> None:
        """Set ``columns`` of job ``job_id``'s row, as an operator's SQL would."""
        raise NotImplementedError

    def assert_configured(self, con: Any) -> None:
        """Fail unless ``con`` has the settings ``open_queue`` promises."""
        raise NotImplementedError

    # --- locks ----------------------------------------------------------------------

    def lock_not_granted(self, error_type: str, message: str) -> bool:
        """Whether an error (its type's name and message) says a write was refused its
        lock and so changed nothing."""
        raise NotImplementedError

    @contextlib.contextmanager
    def watching_waits(self, con: Any, verb: str) -> Iterator[None]:
        """Run one call so that a wait the contract forbids fails instead (the parallel
        suite's ``claims never wait``); nothing to watch by default."""
        yield

    # --- under the controlled scheduler (tests/parallel/scheduler.py) -------------------

    def scheduled_connect(self, target: str, gate: Any, explicit: bool = False) -> Any:
        """A connection to the queue at ``target`` on which every statement first waits
        for its turn at ``gate`` (``gate.point``), and on which a statement that would
        wait for a lock is reported to the gate instead of waiting out a timeout.
        ``explicit``: a connection on which every write is a transaction of its own
        with a step before its COMMIT, where the kind has that choice."""
        raise NotImplementedError

    def holds_write_lock(self, con: Any) -> bool:
        """Whether ``con`` holds a lock that keeps every other writer out, and keeps what
        it wrote unseen until its COMMIT (SQLite's); row locks do not count."""
        return False

    def must_wait(self, sql: str, others: list[Any]) -> bool:
        """Whether ``sql``, the next statement of a connection, is sure to be refused its
        lock while the connections ``others`` stay as they are (``False``: it may run)."""
        return False

    def monitor(self, target: str) -> Any:
        """What the scheduler asks whether a statement waits for a lock (``None``: none)."""
        return None

    def server_pid(self, con: Any) -> int | None:
        """The server process behind ``con`` (``None``: no server, nothing waits there)."""
        return None

    def blocked(self, monitor: Any, pid: int, pids: list[int]) -> bool:
        """Whether the statement of server process ``pid`` waits for a lock one of ``pids``
        holds."""
        return False

    def abandon(self, con: Any) -> None:
        """Drop ``con`` as a killed process would: what it had not committed is lost."""
        con.close()

    def await_gone(self, monitor: Any, pid: int) -> None:
        """Return once the server has let go of what process ``pid`` held."""

    # --- what the benchmarks read -----------------------------------------------------

    unsynced: ClassVar[str]  # the statement that turns the durable commit off

    def settle(self, con: Any) -> None:
        """Untimed, after a queue is filled and between two phases of a benchmark."""

    def durability(self, con: Any) -> str:
        """The settings ``con`` really commits with, read back from it."""
        raise NotImplementedError


def dense(rows: Rows) -> Rows:
    """``rows`` with the seq numbers of each table renumbered 1, 2, ... in their order."""
    return {
        table: [(n, *row[1:]) for n, row in enumerate(found, 1)] for table, found in rows.items()
    }


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
