"""The change feed of a PostgreSQL queue: statement triggers and the writers' transaction ids.

``install`` adds to the queue's schema, in one transaction, the table ``conform_events``,
one trigger function per table, ``AFTER ... FOR EACH STATEMENT`` triggers on ``jobs``
and ``redrives``, and one baseline event (``B``) per row the queue holds then. Each
statement that changes rows writes, from its transition table, **one** event row for
all of them: the writer's transaction id (``pg_current_xact_id_if_assigned()``), its
server process, the server's clock, and the rows after the change column by column,
each column an array in the rows' seq order (``a_`` for a job, ``ra_`` for a redrive;
a deletion fills only the seqs). One event row a statement, not one a changed row: a
``claim_many`` of 64 writes one heap row, one index entry and their WAL where it wrote
64 of each, which took the feed's cost on a batch cycle of 64 from 0.83 of the rate
without it to 0.92 (docs/dev/2026-12-05-feed-a-row-per-statement.md). The reader's
query (``_SELECT_EVENTS``) takes the arrays apart on the server, so it gets one plain
row per changed row, in typed values; no JSON is built. The row
before is not recorded: every row's history starts inside the feed (its baseline event
or its insert), and the checker rebuilds each change's row before from the row's
previous event (``courier.conform.feed.Images``). A transaction that rolls back leaves
no event.

The order of the transactions is recovered from the events alone, without a trigger at
commit. All the events of a transaction become visible at once, when it commits, and
their numbers (``seq``, from an identity) are taken in the order they were written. If
two transactions changed the same row, the second waited for the first's row lock, so
it wrote that row's event after the first had committed: its last event is numbered above
every event of the first. Transactions that changed no row in common may be replayed in
either order with the same result. So ``read_blocks`` takes the transactions that became
visible since the last read, in the order of their last events; one that becomes visible
later may end below one already checked only if the two share no row.

A number below the last one read and not yet seen belongs to a transaction still open or
one that rolled back. The reader notes the server's next transaction id when it first sees
the gap; once every transaction below that id has ended (the oldest open transaction of a
later read's snapshot is at or past it) and the number is still missing, it was rolled
back, and the reader goes past it (``Cursor``). The trigger functions run with the rights
of the role that installed the feed (``SECURITY DEFINER``), so a writer whose role may only
make its own calls (docs/postgres.md, roles) needs no grant on ``conform_events``, and with
the search path of the installation (``SET search_path FROM CURRENT``, which also keeps a
writer's search path from redirecting them), so a writer whose own search path names
another schema still records into this queue's feed. ``uninstall`` drops all
of it again (an earlier version's feed too); the contract's tables and rows are not
touched.

Logical decoding was the other way: it costs the writers nothing, but it needs
``wal_level = logical`` (a server restart), a replication slot that holds back the WAL
while the checker is not reading, and an output plugin; triggers need none of that,
install per queue, and work the same way on SQLite.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from courier.conform.feed import (
    BASELINE,
    COLUMNS,
    EARLIER_VERSION,
    JOBS,
    REDRIVES,
    Block,
    Event,
    NotInstalled,
    Row,
)

__all__ = ["Cursor", "blocks_from_rows", "install", "installed", "read_blocks", "snapshot"]
__all__ += ["uninstall"]

# The server's clock in whole milliseconds, rounded up: never below a reading a writer
# took earlier, whether it rounded (courier.backend) or floored (the soak) its own.
_CLOCK = "ceil(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

# Each table's columns and their types (pgworker.py's schema), and the event's slots.
_TYPES: dict[str, tuple[str, ...]] = {
    JOBS: (
        *("bigint", "text", "integer", "text", "integer", "integer", "bigint"),
        *("bigint", "bigint", "text", "bigint", "text"),
    ),
    REDRIVES: ("bigint", "text", "bigint", "bigint", "text"),
}
_PREFIX = {JOBS: "a_", REDRIVES: "ra_"}


def _slots(table: str) -> list[str]:
    return [f"{_PREFIX[table]}{column}" for column in COLUMNS[table]]


_SLOTS = [slot for table in (JOBS, REDRIVES) for slot in _slots(table)]
_SLOT_TYPES = [f"{kind}[]" for table in (JOBS, REDRIVES) for kind in _TYPES[table]]
_HEAD: tuple[tuple[str, str], ...] = (("seq", "bigint"), ("xid", "bigint"), ("pid", "integer"))
_HEAD += (("tbl", "text"), ("op", "text"), ("at_ms", "bigint"))
# The events table's columns and their types, as format_type names them: an earlier
# version's table (one event row a changed row, in plain columns) differs in its types.
_EVENT_COLUMNS = (*_HEAD, *zip(_SLOTS, _SLOT_TYPES, strict=True))

_PARTS = (
    ("table", "conform_events"),
    *(("function", f"conform_{t}") for t in (JOBS, REDRIVES)),
    *(("trigger", f"conform_{t}_{w}") for t in (JOBS, REDRIVES) for w in ("insert", "update")),
    *(("trigger", f"conform_{t}_{w}") for t in (JOBS, REDRIVES) for w in ("delete", "truncate")),
)


def _record(table: str) -> str:
    """The trigger function of ``table``: one ``INSERT ... SELECT`` of one event row a
    statement, each column of the changed rows an array in seq order.

    A statement that changed a row has a transaction id already; one that changed none
    (a claim that found nothing) writes no event (``HAVING``), and asking for the id only
    if assigned keeps it from making a read-only transaction write a commit record."""
    slots = _slots(table)
    head = "INSERT INTO conform_events (xid, pid, tbl, op, at_ms"

    def insert(op: str, slots: list[str], columns: list[str], rows: str) -> str:
        arrays = ", ".join(f"array_agg({column} ORDER BY seq)" for column in columns)
        return (
            f"{head}, {', '.join(slots)})\n      SELECT txn, pg_backend_pid(), '{table}', "
            f"'{op}', at, {arrays}\n      FROM {rows} HAVING count(*) > 0;"
        )

    new = list(COLUMNS[table])
    return f"""CREATE FUNCTION conform_{table}() RETURNS trigger LANGUAGE plpgsql
  SECURITY DEFINER SET search_path FROM CURRENT AS $$
DECLARE
  txn bigint := pg_current_xact_id_if_assigned()::text::bigint;
  at bigint := {_CLOCK};
BEGIN
  IF TG_OP = 'UPDATE' THEN
    {insert("U", slots, new, "new_rows")}
  ELSIF TG_OP = 'INSERT' THEN
    {insert("I", slots, new, "new_rows")}
  ELSIF TG_OP = 'DELETE' THEN
    {insert("D", slots[:1], ["seq"], "old_rows")}
  ELSE
    INSERT INTO conform_events (xid, pid, tbl, op, at_ms)
      VALUES (txn, pg_backend_pid(), '{table}', 'T', at);
  END IF;
  RETURN NULL;
END $$"""


def _baseline(table: str) -> str:
    """One baseline event per row of ``table`` (arrays of one), in the installing
    transaction."""
    arrays = ", ".join(f"ARRAY[{column}]" for column in COLUMNS[table])
    return (
        f"INSERT INTO conform_events (xid, pid, tbl, op, at_ms, {', '.join(_slots(table))})\n"
        f"  SELECT pg_current_xact_id()::text::bigint, pg_backend_pid(), '{table}', "
        f"'{BASELINE}', {_CLOCK}, {arrays} FROM {table} ORDER BY seq"
    )


_CREATE = (
    f"""CREATE TABLE conform_events (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  xid bigint NOT NULL, pid integer NOT NULL, tbl text NOT NULL, op text NOT NULL,
  at_ms bigint NOT NULL,
  {", ".join(f"{slot} {kind}" for slot, kind in zip(_SLOTS, _SLOT_TYPES, strict=True))})""",
    *(_record(table) for table in (JOBS, REDRIVES)),
    *(
        f"""CREATE TRIGGER conform_{table}_insert AFTER INSERT ON {table}
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION conform_{table}()"""
        for table in (JOBS, REDRIVES)
    ),
    *(
        f"""CREATE TRIGGER conform_{table}_update AFTER UPDATE ON {table}
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION conform_{table}()"""
        for table in (JOBS, REDRIVES)
    ),
    *(
        f"""CREATE TRIGGER conform_{table}_delete AFTER DELETE ON {table}
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION conform_{table}()"""
        for table in (JOBS, REDRIVES)
    ),
    *(
        f"""CREATE TRIGGER conform_{table}_truncate AFTER TRUNCATE ON {table}
  FOR EACH STATEMENT EXECUTE FUNCTION conform_{table}()"""
        for table in (JOBS, REDRIVES)
    ),
    *(_baseline(table) for table in (JOBS, REDRIVES)),
)

# The names an earlier version of the feed used are dropped too (conform_commits, its
# sequence, conform_record and conform_commit), so --uninstall removes either version.
_DROP = (
    *(
        f"DROP TRIGGER IF EXISTS conform_{t}_{w} ON {t}"
        for t in (JOBS, REDRIVES)
        for w in ("insert", "update", "delete", "truncate")
    ),
    "DROP TABLE IF EXISTS conform_events",
    "DROP TABLE IF EXISTS conform_commits",
    "DROP SEQUENCE IF EXISTS conform_commit_seq",
    *(f"DROP FUNCTION IF EXISTS conform_{t}()" for t in (JOBS, REDRIVES)),
    "DROP FUNCTION IF EXISTS conform_record()",
    "DROP FUNCTION IF EXISTS conform_commit()",
)

_FOUND_PARTS = """SELECT 'table', relname FROM pg_class
    WHERE relnamespace = current_schema()::regnamespace AND relkind = 'r'
      AND relname IN ('conform_events', 'conform_commits')
  UNION ALL SELECT 'sequence', relname FROM pg_class
    WHERE relnamespace = current_schema()::regnamespace AND relkind = 'S'
      AND relname = 'conform_commit_seq'
  UNION ALL SELECT 'function', proname FROM pg_proc
    WHERE pronamespace = current_schema()::regnamespace
      AND proname IN ('conform_jobs', 'conform_redrives', 'conform_record', 'conform_commit')
  UNION ALL SELECT 'trigger', tgname FROM pg_trigger
    WHERE tgname LIKE 'conform%%' AND tgrelid IN (
      SELECT oid FROM pg_class WHERE relnamespace = current_schema()::regnamespace)"""
_QUEUE_TABLES = """SELECT count(*) FROM unnest(ARRAY['jobs', 'redrives']) AS name
  WHERE to_regclass(quote_ident(current_schema()) || '.' || quote_ident(name)) IS NOT NULL"""
_LOCK = "LOCK TABLE jobs, redrives IN SHARE ROW EXCLUSIVE MODE"

_EVENTS_COLUMNS = """SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
  WHERE attrelid = to_regclass(quote_ident(current_schema()) || '.conform_events')
    AND attnum > 0 AND NOT attisdropped ORDER BY attnum"""
# The parts only an earlier version of the feed had (its commits table and functions).
_EARLIER_PARTS = {
    ("table", "conform_commits"),
    ("sequence", "conform_commit_seq"),
    ("function", "conform_record"),
    ("function", "conform_commit"),
}
# The events above the highest number read or missed below it, and (the same snapshot)
# the oldest transaction still open and the next transaction id (``Cursor``).
# Each event row read as one row per changed row, in the rows' order (a truncation's,
# with no arrays, as one row of NULLs). An event of one row is read by subscript, one of
# more by a lateral unnest, which takes each array apart once: subscripts on an array
# stored out of line (TOAST) fetch it again for each element (1.0 s for 600 events of 64
# rows and two of thousands, where this takes 0.12 s), and an unnest per event of one
# row took ten times as long as subscripts (0.39 s against 0.04 s for 12,000 events).
_HEAD_COLUMNS = ", ".join(f"e.{name}" for name, _ in _HEAD)
_ROWS = "coalesce(cardinality(e.a_seq), cardinality(e.ra_seq), 0)"
_READ_FROM = "(e.seq > %(top)s OR e.seq = ANY(%(missing)s::bigint[]))"
_SELECT_EVENTS = f"""SELECT * FROM (
  SELECT {_HEAD_COLUMNS}, {", ".join(f"e.{slot}[1]" for slot in _SLOTS)}, 1 AS n
    FROM conform_events AS e WHERE {_READ_FROM} AND {_ROWS} <= 1
  UNION ALL
  SELECT {_HEAD_COLUMNS}, {", ".join(f"r.{slot}" for slot in _SLOTS)}, r.n
    FROM conform_events AS e,
      unnest({", ".join(f"e.{slot}" for slot in _SLOTS)}) WITH ORDINALITY
        AS r({", ".join(_SLOTS)}, n)
    WHERE {_READ_FROM} AND {_ROWS} > 1) AS events
  ORDER BY 1, n"""
_SELECT_HORIZON = """SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint
  FROM pg_current_snapshot() AS s"""


def _parts(con: Any) -> set[tuple[str, str]]:
    return {(str(kind), str(name)) for kind, name in con.execute(_FOUND_PARTS).fetchall()}


def installed(con: Any) -> bool:
    """Whether the whole feed is in the connection's current schema.

    Raises:
        NotInstalled: only part of it is there, or an earlier version's feed (say which,
            and how to repair it).
    """
    parts = _parts(con)
    found = parts & set(_PARTS)
    if ("table", "conform_events") in found or parts & _EARLIER_PARTS:
        columns = tuple((str(name), str(kind)) for name, kind in con.execute(_EVENTS_COLUMNS))
        if columns != _EVENT_COLUMNS or parts & _EARLIER_PARTS:
            found_columns = ", ".join(f"{name} {kind}" for name, kind in columns)
            raise NotInstalled(EARLIER_VERSION.format(found=found_columns or "none"))
    if found and found != set(_PARTS):
        missing = ", ".join(sorted(name for _, name in set(_PARTS) - found))
        raise NotInstalled(
            f"the change feed is only partly installed (missing {missing}): "
            "run --uninstall, then --install"
        )
    return bool(found)


def install(con: Any) -> bool:
    """Add the feed to the current schema, with one baseline event per row the queue
    holds, in one transaction; ``False`` if it was there.

    The queue's tables are locked against writes for the moment it takes, so that no
    transaction commits half before and half after the triggers exist.

    Raises:
        ValueError: the current schema holds no queue.
        NotInstalled: part of a feed, or an earlier version's, is there.
    """
    with con.transaction():
        (tables,) = con.execute(_QUEUE_TABLES).fetchone()
        if tables != 2:
            raise ValueError("not a queue: no jobs and redrives tables in the current schema")
        if installed(con):
            return False
        con.execute(_LOCK)
        for statement in _CREATE:
            con.execute(statement)
    return True


def uninstall(con: Any) -> bool:
    """Remove the feed from the current schema in one transaction; ``False`` if none."""
    with con.transaction():
        had = bool(_parts(con) & set(_PARTS))
        if had:
            con.execute(_LOCK)
            for statement in _DROP:
                con.execute(statement)
    return had


# Where each table's row starts in a row of _SELECT_EVENTS.
_AT = {JOBS: 6, REDRIVES: 6 + len(COLUMNS[JOBS])}
_WIDTH = {table: len(columns) for table, columns in COLUMNS.items()}


def _event(row: tuple[Any, ...]) -> Event:
    number, _, _, table, op, at_ms = row[:6]
    start, width = _AT.get(table, 0), _WIDTH.get(table, 0)
    seq = row[start] if start else 0
    after: Row | None = row[start : start + width] if op in ("I", "U", BASELINE) else None
    return Event(number, table, op, seq or 0, after, at_ms)


@dataclass
class Cursor:
    """How far a reader has read the feed: ``top`` is the highest event number read, and
    ``missing`` the numbers below it not read yet (their transactions were still open,
    or rolled back); ``waits`` are the gaps' checkpoints: (``top`` when a number was first
    missed, the server's next transaction id then). Once the oldest open transaction is
    at or past a checkpoint's id, every number still missing up to its ``top`` belonged
    to a rolled-back transaction and is forgotten. What a read asks for is bounded by
    what is new and what is still open, not by how long something has stayed open."""

    top: int = 0
    missing: set[int] = field(default_factory=set)
    waits: list[tuple[int, int]] = field(default_factory=list)

    @property
    def position(self) -> int:
        """Every number up to here is read or belonged to a rolled-back transaction."""
        return min(self.missing) - 1 if self.missing else self.top

    def advance(self, numbers: Iterable[int], xmin: int, xmax: int) -> None:
        """Take the numbers of the events just read (in order), under a snapshot whose
        oldest open transaction is ``xmin`` and whose next transaction id is ``xmax``."""
        for number in numbers:
            if number > self.top:
                self.missing.update(range(self.top + 1, number))
                self.top = number
            else:
                self.missing.discard(number)
        settled = max((top for top, next_xid in self.waits if next_xid <= xmin), default=0)
        self.waits = [(top, next_xid) for top, next_xid in self.waits if next_xid > xmin]
        if settled:
            self.missing = {number for number in self.missing if number > settled}
        if self.missing and (not self.waits or self.waits[-1][0] < self.top):
            self.waits.append((self.top, xmax))


def blocks_from_rows(rows: list[tuple[Any, ...]]) -> list[Block]:
    """The rows of ``_SELECT_EVENTS`` as blocks, one per transaction, in the order of each
    transaction's last event (see the module's docstring)."""
    by_xid: dict[int, list[Event]] = {}
    pids: dict[int, Any] = {}
    for row in rows:
        xid = row[1]
        by_xid.setdefault(xid, []).append(_event(row))
        pids.setdefault(xid, row[2])
    found = []
    for xid, events in sorted(by_xid.items(), key=lambda item: item[1][-1].number):
        first, last = events[0].number, events[-1].number
        numbers = f"#{first}" if first == last else f"#{first}-#{last}"
        found.append(
            Block(
                label=f"xid {xid} (feed {numbers})",
                statements=_statements(events),
                exact=True,
                writer={"xid": xid, "pid": pids[xid]},
                position=last,
            )
        )
    return found


def _statements(events: list[Event]) -> tuple[tuple[Event, ...], ...]:
    """One transaction's events as statements: each statement's events share a clock
    reading and a kind (table, operation); a finer split is not needed on PostgreSQL."""
    statements: list[list[Event]] = []
    last: Event | None = None
    for event in events:
        if last is None or (last.table, last.op, last.clock_ms) != (
            event.table,
            event.op,
            event.clock_ms,
        ):
            statements.append([])
        statements[-1].append(event)
        last = event
    return tuple(tuple(s) for s in statements)


def _read(con: Any, cursor: Cursor) -> tuple[list[tuple[Any, ...]], int, int]:
    """In the open REPEATABLE READ transaction: the event rows committed since ``cursor``
    last read, and the oldest open transaction and next transaction id of its snapshot.
    The cursor moves only once the transaction has ended (``_blocks``): a connection lost
    at its ``COMMIT`` leaves it where it was, so the next read takes those rows again."""
    xmin, xmax = con.execute(_SELECT_HORIZON).fetchone()
    rows = con.execute(
        _SELECT_EVENTS, {"top": cursor.top, "missing": sorted(cursor.missing)}
    ).fetchall()
    return rows, xmin, xmax


def _blocks(cursor: Cursor, read: tuple[list[tuple[Any, ...]], int, int]) -> list[Block]:
    """The rows ``_read`` returned as blocks, the cursor moved past them."""
    rows, xmin, xmax = read
    cursor.advance((row[0] for row in rows), xmin, xmax)
    return blocks_from_rows(rows)


def read_blocks(con: Any, cursor: Cursor) -> list[Block]:
    """The transactions committed since ``cursor`` last read (see ``blocks_from_rows``)."""
    con.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        read = _read(con, cursor)
    finally:
        con.execute("COMMIT")
    return _blocks(cursor, read)


def snapshot(con: Any, cursor: Cursor) -> tuple[list[Event], list[Block]]:
    """In one REPEATABLE READ transaction: every committed transaction of the feed, its
    baseline (the rows when it was installed, written by the installing transaction,
    the first of all) apart (``cursor`` moved past them).

    Raises:
        NotInstalled: the queue has no feed (or part of one, or an earlier version's).
    """
    con.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        if not installed(con):
            raise NotInstalled("no change feed on this queue: run courier conform --install first")
        read = _read(con, cursor)
    finally:
        con.execute("COMMIT")
    blocks = _blocks(cursor, read)
    if blocks and all(event.op == BASELINE for event in blocks[0].events):
        return blocks[0].events, blocks[1:]
    return [], blocks
