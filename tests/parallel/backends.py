"""Backends of the parallel suite: how to make a queue, connect to it and read it back.

The runner and the checker know nothing of SQLite: a backend is a way to create a
queue, open a connection to it, the module of calls (``worker`` or a planted copy of
it), and how to read the rows and recognise a lock that was not granted. A backend is a
small frozen value, so it can be sent to the branch processes.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sqlite3
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

from tests.support import Rows, read_rows

# The contract's busy timeout (open_queue's timeout=1): a write that waited this long
# for the lock and gave up is a lock timeout, which must have changed nothing.
SQLITE_BUSY_TIMEOUT_S = 1.0


@dataclass(frozen=True)
class SQLiteBackend:
    """``worker.py`` (or the planted copy at ``module_path``) on one real SQLite file.

    ``claim_order`` is what the model promises about claim order under concurrency:
    ``strict`` (the lowest seq claimable at the moment the claim takes effect), since
    every claim holds the file's one write lock from its first read to its commit.
    """

    module_path: str | None = None
    name: str = "sqlite"
    claim_order: str = "strict"
    busy_timeout_s: float = SQLITE_BUSY_TIMEOUT_S

    def module(self) -> ModuleType:
        """The module of calls: ``worker``, or the copy at ``module_path``."""
        if self.module_path is None:
            return importlib.import_module("worker")
        return load_copy(self.module_path)

    def create(self, folder: Path) -> str:
        """Create an empty queue in ``folder``; its path is the target to connect to."""
        path = str(folder / "queue.sqlite")
        self.module().open_queue(path).close()
        return path

    def connect(self, target: str) -> Any:
        return self.module().open_queue(target)

    def close(self, con: Any) -> None:
        con.close()

    def in_transaction(self, con: Any) -> bool:
        return bool(con.in_transaction)

    def rows(self, target: str) -> Rows:
        """Both tables, read through a connection of their own after the run."""
        con = sqlite3.connect(target)
        try:
            return read_rows(con)
        finally:
            con.close()

    def lock_not_granted(self, error_type: str, message: str) -> bool:
        """Whether an error says the write lock was not granted (nothing was written)."""
        return error_type == "OperationalError" and "locked" in message


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


Backend = SQLiteBackend
