"""What a change feed holds: each change of a row as an ``Event``, grouped into ``Block``s.

Both backends' feeds read back into these, so the checker is written once:

- an ``Event`` is one row inserted, updated or deleted in ``jobs`` or ``redrives`` (or
  a whole table truncated), with the row after the change as a plain tuple in the
  contract's column order, and the feed's clock at the change. The feed records no row
  before: ``Images`` rebuilds it from the row's previous event. Every row's history
  starts inside the feed: ``--install`` writes one baseline event (``B``) per row the
  queue holds, in the transaction that creates the triggers;
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
    "BASELINE",
    "COLUMNS",
    "EARLIER_VERSION",
    "FEED_TABLES",
    "JOBS",
    "REDRIVES",
    "Block",
    "Event",
    "Images",
    "NotInstalled",
    "Row",
    "split_baseline",
]

JOBS = "jobs"
REDRIVES = "redrives"
COLUMNS: dict[str, tuple[str, ...]] = {JOBS: JOB_COLUMNS, REDRIVES: REDRIVE_COLUMNS}
# The feed's own tables (and, on PostgreSQL, its sequence and functions) all carry this prefix.
FEED_TABLES = ("conform_events",)

Row = tuple[Any, ...]
"""A row of ``jobs`` or ``redrives``: plain values in the contract's column order."""


class NotInstalled(ValueError):
    """The queue has no change feed (or only part of one, or one an earlier version
    installed): ``courier conform --install``."""


EARLIER_VERSION = (
    "the change feed was installed by an earlier version of courier conform (its events "
    "table has other columns: {found}): run --uninstall, then --install"
)


@dataclass(slots=True)
class Event:
    """One changed row, as the feed recorded it inside the writer's transaction.

    ``op`` is ``I`` (insert), ``U`` (update), ``D`` (delete: no ``after``), ``T`` (the
    whole table truncated: no row, ``seq`` 0) or ``B`` (baseline: a row the queue held
    when the feed was installed). ``seq`` is the changed row's. ``after`` is the row
    after the change, as the feed recorded it; ``before`` the row before it, rebuilt by
    ``Images`` from the row's previous event (``None`` for an insert, and for an update
    or delete of a row the feed holds no earlier image of). ``clock_ms`` is the feed's
    clock at the change: the host's on SQLite, the server's on PostgreSQL, the time base
    the writers read. ``changes`` is SQLite's ``total_changes()`` of the writer's
    connection at the change (0 on PostgreSQL).
    """

    number: int
    table: str
    op: str
    seq: int
    after: Row | None
    clock_ms: int
    changes: int = 0
    before: Row | None = None


BASELINE = "B"


def split_baseline(events: list[Event]) -> tuple[list[Event], list[Event]]:
    """The feed's leading baseline events (written by ``--install``) and the rest."""
    end = 0
    while end < len(events) and events[end].op == BASELINE:
        end += 1
    return events[:end], events[end:]


class Images:
    """Each row's image after its last event read so far: the row before its next event.

    The reader gives it the baseline first (``start``), then every block in the order
    the checker replays them (``rebuild``); each update's and deletion's ``before`` is
    set to the image the row's previous event left. On PostgreSQL the blocks come in
    the order of their last events, and of two transactions that changed one row the
    second's events on it are numbered above all of the first's, so a row's events come
    in the order they committed on both backends. A row without an image (an update of
    a row nobody inserted since the baseline) keeps ``before`` ``None``: the checker
    reports it (``courier.conform.tables.net_changes``). A truncation, like the replay,
    leaves the images as they were.
    """

    def __init__(self) -> None:
        self.rows: dict[str, dict[int, Row]] = {JOBS: {}, REDRIVES: {}}

    def start(self, baseline: list[Event]) -> dict[str, list[Row]]:
        """Take the baseline events; the rows they hold, by table, in seq order."""
        for event in baseline:
            if event.after is not None:
                self.rows.setdefault(event.table, {})[event.seq] = event.after
        return {table: [rows[seq] for seq in sorted(rows)] for table, rows in self.rows.items()}

    def rebuild(self, events: list[Event]) -> None:
        """Set each event's ``before`` from the image its row's previous event left, and
        keep its ``after`` as the row's image (in place, in the events' order)."""
        for event in events:
            rows = self.rows.get(event.table)
            if rows is None:  # a table the feed does not record
                continue
            if event.op == "U":
                event.before = rows.get(event.seq)
            elif event.op == "D":
                event.before = rows.pop(event.seq, None)
            if event.after is not None:  # an insert, an update or a baseline event
                rows[event.seq] = event.after


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
