"""A queue with its change feed installed, on SQLite or PostgreSQL, for the conform tests.

``Fed`` holds the queue module's own connection (``con``), says the time on the queue's
clock (``now``: the host's for a file, the server's on PostgreSQL), writes rows by hand
as an operator's SQL would (``sql``), and checks the whole feed (``check``).
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg

import pgworker
import worker
from courier import backend
from courier.clock import clock_ms
from courier.commands.conform import install_feed
from courier.conform.checker import Checker, check_all, rules_for

__all__ = ["Fed", "open_fed"]


@dataclass
class Fed:
    """A queue with its feed: ``kind`` is ``sqlite`` or ``postgres``."""

    kind: str
    module: Any
    target: str
    con: Any

    def now(self) -> int:
        """The queue's clock now (what its writers pass as ``now_ms``)."""
        return backend.server_clock_ms(self.con) if self.kind == "postgres" else clock_ms()

    def other(self) -> Any:
        """Another writer's connection, through the queue module."""
        return self.module.open_queue(self.target)

    def sql(self, statement: str, *params: object) -> None:
        """Run ``statement`` as an operator's hand-made SQL, in its own transaction."""
        if self.kind == "postgres":
            with psycopg.connect(self.target, autocommit=True) as con:
                con.execute(statement.replace("?", "%s"), params or None)
            return
        file = sqlite3.connect(self.target, isolation_level=None)
        try:
            file.execute(statement, params)
        finally:
            file.close()

    def check(self, simulated: bool = False, skew_ms: int = 0) -> Checker:
        """The checker after the whole feed."""
        checker, _ = check_all(self.target, rules_for(self.target, simulated, skew_ms))
        return checker

    def close(self) -> None:
        self.con.close()


def open_fed(kind: str, tmp_path: Path, pg_conninfo: str | None = None) -> Fed:
    """A fresh queue of ``kind`` with its feed installed."""
    module: Any = pgworker if kind == "postgres" else worker
    target = pg_conninfo if kind == "postgres" else str(tmp_path / "queue.sqlite")
    assert target is not None
    con = module.open_queue(target)
    install_feed(target)
    return Fed(kind, module, target, con)
