"""The change feed of a queue file: row triggers on ``jobs`` and ``redrives``.

``install`` adds, in one ``BEGIN IMMEDIATE`` transaction, the table ``conform_events``,
six ``AFTER`` row triggers (insert, update, delete on each of the two tables), each of
which records the row after the change (a deletion: its seq) in the writer's own
transaction (a rolled back write leaves no event), and one baseline event (``B``) per
row the queue holds then: every row's history starts inside the feed, and the checker
rebuilds each change's row before from the row's previous event
(``courier.conform.feed.Images``). The contract's two tables are not touched;
``uninstall`` drops the triggers and the table again. ``worker.py`` does not know the
feed is there.

A trigger cannot see where a transaction begins, so each event also records the writer
connection's ``total_changes()``: within one statement it goes up by one per event (the
trigger's own insert), and from one statement to the next of the same connection by one
more plus the rows the statement before changed. Anything else means another connection
wrote in between (``blocks``). The triggers use only functions SQLite lets a trigger use
under ``PRAGMA trusted_schema=OFF`` (no JSON, no table-valued pragma), so no writer's
settings can make them fail. The clock is SQLite's ``'now'``, the same reading for every
row of one statement: the host's wall clock in milliseconds, as ``courier.clock`` reads it.

Row values go into untyped slots (``a0``..; a ``redrives`` row uses the first five), so a
value keeps the type the writer gave it: an id written as a number shows as one. A feed
installed by an earlier version (whose events held the row before too, in ``b0``..) is
reported as such (``installed``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

from courier.conform.feed import (
    BASELINE,
    COLUMNS,
    EARLIER_VERSION,
    JOBS,
    REDRIVES,
    Block,
    Event,
    NotInstalled,
    split_baseline,
)
from courier.transient import is_busy

__all__ = ["TRIGGERS", "blocks", "install", "installed", "read_events", "read_transaction"]
__all__ += ["snapshot", "uninstall"]

T = TypeVar("T")

EVENTS = "conform_events"
SLOTS = len(COLUMNS[JOBS])
_AFTER = tuple(f"a{n}" for n in range(SLOTS))
# SQLite's 'now' in whole milliseconds: one reading per statement step.
_CLOCK = "CAST(round((julianday('now') - 2440587.5) * 86400000) AS INTEGER)"

_CREATE_EVENTS = f"""CREATE TABLE IF NOT EXISTS {EVENTS} (
  seq INTEGER PRIMARY KEY,
  changes INTEGER NOT NULL, at_ms INTEGER NOT NULL, tbl TEXT NOT NULL, op TEXT NOT NULL,
  {", ".join(_AFTER)})"""
_EVENT_COLUMNS = ("seq", "changes", "at_ms", "tbl", "op", *_AFTER)


def _trigger(table: str, when: str, op: str) -> tuple[str, str]:
    columns = COLUMNS[table]
    # A deletion records the seq it deleted; an insert and an update the whole new row.
    values = ["OLD.seq"] if op == "D" else [f"NEW.{c}" for c in columns]
    name = f"conform_{table}_{when.lower()}"
    return name, (
        f"CREATE TRIGGER IF NOT EXISTS {name} AFTER {when} ON {table} BEGIN "
        f"INSERT INTO {EVENTS} (changes, at_ms, tbl, op, {', '.join(_AFTER[: len(values)])}) "
        f"VALUES (total_changes(), {_CLOCK}, '{table}', '{op}', {', '.join(values)}); END"
    )


def _baseline(table: str) -> str:
    columns = COLUMNS[table]
    return (
        f"INSERT INTO {EVENTS} (changes, at_ms, tbl, op, {', '.join(_AFTER[: len(columns)])}) "
        f"SELECT 0, {_CLOCK}, '{table}', '{BASELINE}', {', '.join(columns)} "
        f"FROM {table} ORDER BY seq"
    )


TRIGGERS = dict(
    _trigger(table, when, op)
    for table in (JOBS, REDRIVES)
    for when, op in (("INSERT", "I"), ("UPDATE", "U"), ("DELETE", "D"))
)

_QUEUE_TABLES = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)"
_FEED_PARTS = "SELECT type, name FROM sqlite_master WHERE name = ? OR name LIKE 'conform_%'"
_EVENTS_COLUMNS = f"SELECT name FROM pragma_table_info('{EVENTS}') ORDER BY cid"
_SELECT_EVENTS = f"""SELECT {", ".join(_EVENT_COLUMNS)}
  FROM {EVENTS} WHERE seq > ? ORDER BY seq LIMIT ?"""
_FORGET_SEQUENCE = f"DELETE FROM sqlite_sequence WHERE name = '{EVENTS}'"
_INSTALL_BUSY_MS = 10_000
SNAPSHOT_CHUNK = 20_000  # events per read transaction of a first read
# The feed's reader waits for writers itself (``read_transaction``): its connection's
# busy timeout, the pause between two tries, and how long a first read keeps trying (a
# busy queue file, not a broken one).
READER_BUSY_TIMEOUT = "PRAGMA busy_timeout = 0"
RETRY_S = 0.001
SNAPSHOT_PATIENCE_S = 30.0


def installed(con: sqlite3.Connection) -> bool:
    """Whether the whole feed is there (its table and its six triggers).

    Raises:
        NotInstalled: only part of it is there, or an earlier version's feed (say which,
            and how to repair it).
    """
    parts = {name for _, name in con.execute(_FEED_PARTS, (EVENTS,)).fetchall()}
    wanted = {EVENTS, *TRIGGERS}
    found = parts & wanted
    if EVENTS in found:
        columns = tuple(name for (name,) in con.execute(_EVENTS_COLUMNS).fetchall())
        if columns != _EVENT_COLUMNS:
            raise NotInstalled(EARLIER_VERSION.format(found=", ".join(columns)))
    if found and found != wanted:
        missing = ", ".join(sorted(wanted - found))
        raise NotInstalled(
            f"the change feed is only partly installed (missing {missing}): "
            "run --uninstall, then --install"
        )
    return found == wanted


def install(con: sqlite3.Connection) -> bool:
    """Add the feed, with one baseline event per row the queue holds, in one transaction;
    ``False`` if it was already there.

    Raises:
        ValueError: the file holds no queue (no ``jobs`` and ``redrives`` tables).
        NotInstalled: part of a feed, or an earlier version's, is there.
    """
    con.execute(f"PRAGMA busy_timeout = {_INSTALL_BUSY_MS}")
    con.execute("BEGIN IMMEDIATE")
    try:
        (tables,) = con.execute(_QUEUE_TABLES, (JOBS, REDRIVES)).fetchone()
        if tables != 2:
            raise ValueError("not a queue: no jobs and redrives tables")
        if installed(con):
            con.execute("ROLLBACK")
            return False
        con.execute(_CREATE_EVENTS)
        for statement in TRIGGERS.values():
            con.execute(statement)
        for table in (JOBS, REDRIVES):
            con.execute(_baseline(table))
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise
    return True


def uninstall(con: sqlite3.Connection) -> bool:
    """Remove the feed (its triggers, then its table) in one transaction; ``False`` if
    there was none. The queue's own tables and rows are not touched."""
    con.execute(f"PRAGMA busy_timeout = {_INSTALL_BUSY_MS}")
    con.execute("BEGIN IMMEDIATE")
    try:
        parts = {name for _, name in con.execute(_FEED_PARTS, (EVENTS,)).fetchall()}
        for name in TRIGGERS:
            if name in parts:
                con.execute(f"DROP TRIGGER {name}")
        if EVENTS in parts:
            con.execute(f"DROP TABLE {EVENTS}")
            con.execute(_FORGET_SEQUENCE)
        con.execute("COMMIT")
    except BaseException:
        if con.in_transaction:
            con.execute("ROLLBACK")
        raise
    return bool(parts & {EVENTS, *TRIGGERS})


def _event(row: tuple[Any, ...]) -> Event:
    number, changes, at_ms, table, op, seq = row[:6]
    width = len(COLUMNS.get(table, ()))
    after = tuple(row[5 : 5 + width]) if op in ("I", "U", BASELINE) else None
    return Event(int(number), str(table), str(op), int(seq or 0), after, int(at_ms), int(changes))


def read_events(con: sqlite3.Connection, after: int, limit: int) -> list[Event]:
    """The feed's events numbered above ``after``, at most ``limit``, in order."""
    cursor = con.cursor()
    cursor.row_factory = None
    rows = cursor.execute(_SELECT_EVENTS, (after, limit)).fetchall()
    cursor.close()
    return [_event(row) for row in rows]


def read_transaction(
    con: sqlite3.Connection, read: Callable[[sqlite3.Connection], T], patience_s: float
) -> T:
    """``read(con)`` in one read transaction, begun again every ``RETRY_S`` while writers
    hold the file's lock, for up to ``patience_s``.

    In the DELETE journal mode a writer holds the lock from the moment it starts to
    commit until its journal is gone, fsyncs included; with a fleet of writers that is
    most of the time, and the gaps between two commits are short. SQLite's own busy
    handler sleeps longer and longer between tries (up to 100 ms) and misses most of
    them; a reader that waits on its connection's busy timeout fell behind the fleet by
    more than a second. So the feed's reader sets the busy timeout to 0
    (``READER_BUSY_TIMEOUT``) and tries again itself, every millisecond.

    Raises:
        sqlite3.OperationalError: the file stayed busy for ``patience_s`` (or any other
            error of ``read``).
    """
    deadline = time.monotonic() + patience_s
    while True:
        con.execute("BEGIN")
        try:
            return read(con)
        except sqlite3.OperationalError as error:
            if not is_busy(error) or time.monotonic() >= deadline:
                raise
        finally:
            if con.in_transaction:
                con.execute("COMMIT")
        time.sleep(RETRY_S)


def snapshot(con: sqlite3.Connection) -> tuple[list[Event], list[Block]]:
    """Every event of the feed: its baseline (the rows when it was installed) and the
    blocks after it.

    The events are read in chunks, each in a read transaction of its own (a read holds
    the file's shared lock, which keeps writers from committing): events are only ever
    added, so the chunks together are the feed as it was at the last one.

    Raises:
        NotInstalled: the queue has no feed (or part of one, or an earlier version's).
        sqlite3.OperationalError: the file stayed busy for ``SNAPSHOT_PATIENCE_S``.
    """
    events: list[Event] = []

    def chunk(con: sqlite3.Connection) -> list[Event]:
        if not installed(con):
            raise NotInstalled("no change feed on this queue: run courier conform --install first")
        return read_events(con, events[-1].number if events else 0, SNAPSHOT_CHUNK)

    while True:
        batch = read_transaction(con, chunk, SNAPSHOT_PATIENCE_S)
        events += batch
        if len(batch) < SNAPSHOT_CHUNK:
            baseline, rest = split_baseline(events)
            return baseline, blocks(rest)


def _statements(events: list[Event]) -> Iterator[tuple[list[Event], bool]]:
    """Split ``events`` into statements; each with whether it continues the connection of
    the statement before it (``total_changes()``, see the module's docstring)."""
    statement: list[Event] = []
    continues = False  # whether ``statement`` continues the connection of the one before
    for event in events:
        if statement:
            last = statement[-1]
            if event.changes == last.changes + 1 and event.clock_ms == last.clock_ms:
                statement.append(event)
                continue
            yield statement, continues
            continues = event.changes == last.changes + 1 + len(statement)
            statement = []
        statement.append(event)
    if statement:
        yield statement, continues


def blocks(events: list[Event]) -> list[Block]:
    """The events as blocks: each the run of statements of one connection with nobody
    else's change in between (one or more whole transactions, ``exact`` False)."""
    found: list[list[list[Event]]] = []
    for statement, same_connection in _statements(events):
        if not found or not same_connection:
            found.append([])
        found[-1].append(statement)
    return [
        Block(
            label=_label(statements),
            statements=tuple(tuple(s) for s in statements),
            exact=False,
            position=statements[-1][-1].number,
        )
        for statements in found
    ]


def _label(statements: list[list[Event]]) -> str:
    first, last = statements[0][0].number, statements[-1][-1].number
    return f"feed #{first}" if first == last else f"feed #{first}-#{last}"
