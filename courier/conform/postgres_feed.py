"""The change feed of a PostgreSQL queue: statement triggers and a commit number.

``install`` adds to the queue's schema, in one transaction:

- ``conform_events``: one row per changed row of ``jobs`` or ``redrives``, written by
  ``AFTER ... FOR EACH STATEMENT`` triggers from the statement's transition tables (one
  ``INSERT ... SELECT`` per statement, however many rows it changed), with the writer's
  transaction id (``pg_current_xact_id()``) and the server's clock;
- ``conform_commits``: one row per transaction that changed anything, with its **commit
  number**, written by a ``DEFERRABLE INITIALLY DEFERRED`` constraint trigger, which
  runs as the transaction commits. Two transactions that changed the same row commit in
  the order of their numbers: the second had to wait for the first's row lock, so it
  reached its own commit only after the first had committed. Transactions that changed
  no row in common may commit in either order; replaying them in either order gives the
  same rows. A transaction that rolls back leaves no event and no number.

The first event of a transaction is marked by a transaction-local setting
(``lease_queue.conform_xid``), so the deferred trigger runs once per transaction, not
once per row. The functions run with the search path of the installation
(``SET search_path FROM CURRENT``), so a writer whose own search path names another
schema still records into this queue's feed. ``uninstall`` drops all of it again; the
contract's tables and rows are not touched.

Logical decoding was the other way: it costs the writers nothing, but it needs
``wal_level = logical`` (a server restart), a replication slot that holds back the WAL
while the checker is not reading, and an output plugin; triggers need none of that,
install per queue, and work the same way on SQLite.
"""

from __future__ import annotations

from typing import Any

from courier.conform.feed import COLUMNS, JOBS, REDRIVES, Block, Event, NotInstalled, Row

__all__ = ["blocks_from_rows", "install", "installed", "read_blocks", "snapshot", "uninstall"]

_SETTING = "lease_queue.conform_xid"
# The server's clock in whole milliseconds, rounded up: never below a reading a writer
# took earlier, whether it rounded (courier.backend) or floored (the soak) its own.
_CLOCK = "ceil(extract(epoch FROM clock_timestamp()) * 1000)::bigint"

_PARTS = (
    ("table", "conform_events"),
    ("table", "conform_commits"),
    ("sequence", "conform_commit_seq"),
    ("function", "conform_record"),
    ("function", "conform_commit"),
    *(("trigger", f"conform_{t}_{w}") for t in (JOBS, REDRIVES) for w in ("insert", "update")),
    *(("trigger", f"conform_{t}_{w}") for t in (JOBS, REDRIVES) for w in ("delete", "truncate")),
    ("trigger", "conform_commit"),
)

_CREATE = (
    """CREATE TABLE conform_events (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  xid bigint NOT NULL, first boolean NOT NULL, tbl text NOT NULL, op text NOT NULL,
  before json, after json, at_ms bigint NOT NULL)""",
    "CREATE INDEX conform_events_by_xid ON conform_events (xid, seq)",
    "CREATE SEQUENCE conform_commit_seq",
    """CREATE TABLE conform_commits (
  commit_seq bigint PRIMARY KEY, xid bigint NOT NULL UNIQUE, at_ms bigint NOT NULL,
  pid integer, application_name text, client_addr text)""",
    f"""CREATE FUNCTION conform_record() RETURNS trigger LANGUAGE plpgsql
  SET search_path FROM CURRENT AS $$
DECLARE
  txn bigint := pg_current_xact_id()::text::bigint;
  fresh boolean := coalesce(current_setting('{_SETTING}', true), '') <> txn::text;
  at bigint := {_CLOCK};
  written bigint;
BEGIN
  IF TG_OP = 'INSERT' THEN
    INSERT INTO conform_events (xid, first, tbl, op, before, after, at_ms)
      SELECT txn, fresh AND n = 1, TG_TABLE_NAME, 'I', NULL, image, at FROM (
        SELECT row_to_json(r) AS image, row_number() OVER (ORDER BY r.seq) AS n
        FROM new_rows r) AS given ORDER BY n;
  ELSIF TG_OP = 'UPDATE' THEN
    INSERT INTO conform_events (xid, first, tbl, op, before, after, at_ms)
      SELECT txn, fresh AND n = 1, TG_TABLE_NAME, 'U', was, now_is, at FROM (
        SELECT row_to_json(o) AS was, row_to_json(r) AS now_is,
          row_number() OVER (ORDER BY r.seq) AS n
        FROM old_rows o JOIN new_rows r ON r.seq = o.seq) AS given ORDER BY n;
  ELSIF TG_OP = 'DELETE' THEN
    INSERT INTO conform_events (xid, first, tbl, op, before, after, at_ms)
      SELECT txn, fresh AND n = 1, TG_TABLE_NAME, 'D', was, NULL, at FROM (
        SELECT row_to_json(o) AS was, row_number() OVER (ORDER BY o.seq) AS n
        FROM old_rows o) AS given ORDER BY n;
  ELSE
    INSERT INTO conform_events (xid, first, tbl, op, before, after, at_ms)
      VALUES (txn, fresh, TG_TABLE_NAME, 'T', NULL, NULL, at);
  END IF;
  GET DIAGNOSTICS written = ROW_COUNT;
  IF fresh AND written > 0 THEN
    PERFORM set_config('{_SETTING}', txn::text, true);
  END IF;
  RETURN NULL;
END $$""",
    f"""CREATE FUNCTION conform_commit() RETURNS trigger LANGUAGE plpgsql
  SET search_path FROM CURRENT AS $$
BEGIN
  INSERT INTO conform_commits (commit_seq, xid, at_ms, pid, application_name, client_addr)
    VALUES (nextval('conform_commit_seq'), NEW.xid, {_CLOCK}, pg_backend_pid(),
      current_setting('application_name'), host(inet_client_addr()));
  RETURN NULL;
END $$""",
    *(
        f"""CREATE TRIGGER conform_{table}_insert AFTER INSERT ON {table}
  REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION conform_record()"""
        for table in (JOBS, REDRIVES)
    ),
    *(
        f"""CREATE TRIGGER conform_{table}_update AFTER UPDATE ON {table}
  REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
  FOR EACH STATEMENT EXECUTE FUNCTION conform_record()"""
        for table in (JOBS, REDRIVES)
    ),
    *(
        f"""CREATE TRIGGER conform_{table}_delete AFTER DELETE ON {table}
  REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION conform_record()"""
        for table in (JOBS, REDRIVES)
    ),
    *(
        f"""CREATE TRIGGER conform_{table}_truncate AFTER TRUNCATE ON {table}
  FOR EACH STATEMENT EXECUTE FUNCTION conform_record()"""
        for table in (JOBS, REDRIVES)
    ),
    """CREATE CONSTRAINT TRIGGER conform_commit AFTER INSERT ON conform_events
  DEFERRABLE INITIALLY DEFERRED FOR EACH ROW WHEN (NEW.first)
  EXECUTE FUNCTION conform_commit()""",
)

_DROP = (
    *(
        f"DROP TRIGGER IF EXISTS conform_{t}_{w} ON {t}"
        for t in (JOBS, REDRIVES)
        for w in ("insert", "update", "delete", "truncate")
    ),
    "DROP TABLE IF EXISTS conform_events",
    "DROP TABLE IF EXISTS conform_commits",
    "DROP SEQUENCE IF EXISTS conform_commit_seq",
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
      AND proname IN ('conform_record', 'conform_commit')
  UNION ALL SELECT 'trigger', tgname FROM pg_trigger
    WHERE tgname LIKE 'conform%%' AND tgrelid IN (
      SELECT oid FROM pg_class WHERE relnamespace = current_schema()::regnamespace)"""
_QUEUE_TABLES = """SELECT count(*) FROM unnest(ARRAY['jobs', 'redrives']) AS name
  WHERE to_regclass(quote_ident(current_schema()) || '.' || quote_ident(name)) IS NOT NULL"""
_LOCK = "LOCK TABLE jobs, redrives IN SHARE ROW EXCLUSIVE MODE"

_SELECT_JOBS = f"SELECT {', '.join(COLUMNS[JOBS])} FROM jobs ORDER BY seq"
_SELECT_REDRIVES = f"SELECT {', '.join(COLUMNS[REDRIVES])} FROM redrives ORDER BY seq"
_SELECT_BLOCKS = """WITH c AS (
    SELECT commit_seq, xid, at_ms, pid, application_name, client_addr FROM conform_commits
    WHERE commit_seq > %(after)s AND NOT commit_seq = ANY(%(seen)s::bigint[])
    ORDER BY commit_seq LIMIT %(limit)s)
  SELECT c.commit_seq, c.xid, c.pid, c.application_name, c.client_addr,
    e.seq, e.tbl, e.op, e.before, e.after, e.at_ms
  FROM c JOIN conform_events e ON e.xid = c.xid ORDER BY c.commit_seq, e.seq"""


def _parts(con: Any) -> set[tuple[str, str]]:
    return {(str(kind), str(name)) for kind, name in con.execute(_FOUND_PARTS).fetchall()}


def installed(con: Any) -> bool:
    """Whether the whole feed is in the connection's current schema.

    Raises:
        NotInstalled: only part of it is there (say which, and how to repair it).
    """
    found = _parts(con) & set(_PARTS)
    if found and found != set(_PARTS):
        missing = ", ".join(sorted(name for _, name in set(_PARTS) - found))
        raise NotInstalled(
            f"the change feed is only partly installed (missing {missing}): "
            "run --uninstall, then --install"
        )
    return bool(found)


def install(con: Any) -> bool:
    """Add the feed to the current schema in one transaction; ``False`` if it was there.

    The queue's tables are locked against writes for the moment it takes, so that no
    transaction commits half before and half after the triggers exist.

    Raises:
        ValueError: the current schema holds no queue.
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


def _row(table: str, image: Any) -> Row | None:
    if image is None:
        return None
    return tuple(image.get(column) for column in COLUMNS.get(table, ()))


def blocks_from_rows(rows: list[tuple[Any, ...]]) -> list[Block]:
    """The rows of ``_SELECT_BLOCKS`` as blocks, one per transaction, in commit order."""
    found: list[Block] = []
    current: list[Event] = []
    head: tuple[Any, ...] | None = None

    def close() -> None:
        if head is None:
            return
        commit_seq, xid, pid, application, client = head
        writer = {"xid": xid, "pid": pid, "application_name": application, "client": client}
        found.append(
            Block(
                label=f"commit #{commit_seq} (xid {xid})",
                statements=_statements(current),
                exact=True,
                writer=writer,
                position=int(commit_seq),
            )
        )

    for commit_seq, xid, pid, application, client, seq, table, op, before, after, at in rows:
        if head is None or head[0] != commit_seq:
            close()
            head = (commit_seq, xid, pid, application, client)
            current = []
        event = Event(
            int(seq), str(table), str(op), _row(table, before), _row(table, after), int(at)
        )
        current.append(event)
    close()
    return found


def _statements(events: list[Event]) -> tuple[tuple[Event, ...], ...]:
    """One transaction's events as statements: each statement's events share a clock
    reading and a kind (table, operation); a finer split is not needed on PostgreSQL."""
    statements: list[list[Event]] = []
    for event in events:
        last = statements[-1][-1] if statements else None
        if last is None or (last.table, last.op, last.clock_ms) != (
            event.table,
            event.op,
            event.clock_ms,
        ):
            statements.append([])
        statements[-1].append(event)
    return tuple(tuple(s) for s in statements)


def read_blocks(con: Any, after: int, seen: list[int], limit: int) -> list[Block]:
    """The transactions committed with a number above ``after`` and not in ``seen``, at
    most ``limit``, in commit order."""
    rows = con.execute(_SELECT_BLOCKS, {"after": after, "seen": seen, "limit": limit}).fetchall()
    return blocks_from_rows(list(rows))


def snapshot(con: Any) -> tuple[dict[str, list[Row]], list[Block]]:
    """In one REPEATABLE READ transaction: both tables and every committed transaction
    of the feed.

    Raises:
        NotInstalled: the queue has no feed.
    """
    con.execute("BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY")
    try:
        if not installed(con):
            raise NotInstalled("no change feed on this queue: run courier conform --install first")
        rows = {
            JOBS: [tuple(r) for r in con.execute(_SELECT_JOBS).fetchall()],
            REDRIVES: [tuple(r) for r in con.execute(_SELECT_REDRIVES).fetchall()],
        }
        blocks = read_blocks(con, 0, [], 10**9)
    finally:
        con.execute("COMMIT")
    return rows, blocks
