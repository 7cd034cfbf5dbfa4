"""What a change feed holds: each change of a row as an ``Event``, grouped into ``Block``s.

Both backends' feeds read back into these, so the checker is written once:

- an ``Event`` is one row inserted, updated or deleted in ``jobs`` or ``redrives`` (or
  a whole table truncated), with the row before and after as plain tuples in the
  contract's column order, and the feed's clock at the change;
- a ``Block`` is a stretch of changes that one writer committed with nobody else's
  change in between, as lists of statements. On PostgreSQL a block is exactly one
  transaction (``exact``): the feed knows each transaction's id and its commit order.
  On SQLite a trigger cannot see where a transaction begins; a block is the run of
  statements of one connection (told apart by its change counter), holding one or more
  whole transactions whose boundaries lie between statements, and the checker finds
  them (``courier.conform.checker``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from courier.queueview import JOB_COLUMNS, REDRIVE_COLUMNS

__all__ = [
    "COLUMNS",
    "FEED_TABLES",
    "JOBS",
    "REDRIVES",
    "Block",
    "Event",
    "NotInstalled",
    "Row",
]

JOBS = "jobs"
REDRIVES = "redrives"
COLUMNS: dict[str, tuple[str, ...]] = {JOBS: JOB_COLUMNS, REDRIVES: REDRIVE_COLUMNS}
# The feed's own tables (and, on PostgreSQL, its sequence and functions) all carry this prefix.
FEED_TABLES = ("conform_events",)

Row = tuple[Any, ...]
"""A row of ``jobs`` or ``redrives``: plain values in the contract's column order."""


class NotInstalled(ValueError):
    """The queue has no change feed (or only part of one): ``courier conform --install``."""


@dataclass(frozen=True, slots=True)
class Event:
    """One changed row, as the feed recorded it inside the writer's transaction.

    ``op`` is ``I`` (insert: no ``before``), ``U`` (update), ``D`` (delete: no
    ``after``) or ``T`` (the whole table truncated: neither). ``clock_ms`` is the
    feed's clock at the change: the host's on SQLite, the server's on PostgreSQL,
    the time base the writers read. ``changes`` is SQLite's ``total_changes()`` of
    the writer's connection at the change (0 on PostgreSQL).
    """

    number: int
    table: str
    op: str
    before: Row | None
    after: Row | None
    clock_ms: int
    changes: int = 0

    @property
    def seq(self) -> int:
        """The seq of the row it changed (0 for a truncation)."""
        row = self.after if self.after is not None else self.before
        return int(row[0]) if row is not None else 0


@dataclass(frozen=True)
class Block:
    """Changes one writer committed with nobody else's in between, statement by statement.

    ``exact``: the block is one transaction (PostgreSQL). Otherwise (SQLite) it is one
    or more whole transactions of one connection, in order. ``writer`` is what the feed
    knows of who wrote it (PostgreSQL: the server process, application and client).
    """

    label: str
    statements: tuple[tuple[Event, ...], ...]
    exact: bool
    writer: dict[str, Any] = field(default_factory=dict)
    position: int = 0  # where the feed's reader goes on after this block

    @property
    def events(self) -> list[Event]:
        """Every event of the block, in order."""
        return [event for statement in self.statements for event in statement]

    @property
    def clock_ms(self) -> int:
        """The earliest clock reading among its changes: no writer's ``now`` lies after it."""
        return min(event.clock_ms for event in self.events)
