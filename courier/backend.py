"""Where a queue lives: a SQLite file, or a PostgreSQL database named by a conninfo.

Every ``courier`` command that takes a queue takes either, in the same place. The
rules this module keeps:

1. A **target** is a PostgreSQL conninfo if it is a URL (``postgresql://...`` or
   ``postgres://...``) or a libpq ``key=value`` string whose first word's key is
   one of libpq's connection keywords (``host=``, ``dbname=``, ``user=``,
   ``port=``, ``service=``, ...) and which names no existing file. Anything else
   is a SQLite file's path. So ``dbname=orders`` is a database, ``q.sqlite`` and
   ``./host=1.sqlite`` are files.
2. Nothing here creates a queue unless asked (``open_queue``): ``connect_existing``
   refuses a missing file, a file that is not a queue, and a database whose
   current schema has no ``jobs`` and ``redrives`` tables, so a typo never becomes
   an empty queue or a stray schema. A queue file another process keeps locked
   past the busy timeout is ``Busy``, never "not a queue": it is one, for later.
3. A conninfo that cannot connect raises ``Unreachable``, whose message names the
   host, port, database and user and never the password (it is masked in libpq's
   message too). ``describe`` is the one way a target is shown to a user.
4. ``pgworker`` and psycopg are imported only for a conninfo: a SQLite-only
   installation (no ``postgres`` extra) runs every command on files, and a conninfo
   there is ``MissingExtra``, whose message says what to install.
5. The courier's own statements are written once, in SQLite's placeholders
   (``?`` and ``:name``); ``qmark(con)`` runs them on a psycopg connection by
   rewriting only the placeholders into psycopg's (``%s``, ``%(name)s``). The
   statements are constants; no value is ever put into SQL text.
6. On PostgreSQL, time is the database server's clock (``server_clock_ms``), so
   couriers on many hosts judge leases on one time base; on SQLite it is the
   host's wall clock (``courier.clock.clock_ms``), which all processes on the one
   host share.
"""

from __future__ import annotations

import os
import re
import sqlite3
import stat
from pathlib import Path
from types import ModuleType
from typing import Any, TypeAlias

import worker

__all__ = [
    "LIBPQ_KEYWORDS",
    "Busy",
    "Connection",
    "MissingExtra",
    "QmarkConnection",
    "Target",
    "Unreachable",
    "connect_existing",
    "describe",
    "is_busy",
    "is_conninfo",
    "open_existing",
    "open_queue",
    "qmark",
    "queue_module",
    "require_queue_file",
    "server_clock_ms",
]

Target: TypeAlias = "str | os.PathLike[str]"
Connection: TypeAlias = Any  # sqlite3.Connection or psycopg.Connection
"""A queue connection of either backend (psycopg's type is imported lazily)."""

URL_SCHEMES = ("postgresql://", "postgres://")
# libpq's connection keywords (the ones a first word of a conninfo plausibly is).
LIBPQ_KEYWORDS = frozenset(
    {
        "host",
        "hostaddr",
        "port",
        "dbname",
        "user",
        "password",
        "passfile",
        "options",
        "application_name",
        "sslmode",
        "connect_timeout",
        "service",
        "target_session_attrs",
    }
)
_FIRST_KEY = re.compile(r"\s*([a-z_]+)\s*=")
CONNECT_TIMEOUT_S = 10
_QUEUE_TABLES = "SELECT count(*) FROM sqlite_master WHERE type = 'table' AND name IN (?, ?)"
_PG_QUEUE_TABLES = """SELECT count(*) FROM unnest(ARRAY['jobs', 'redrives']) AS name
  WHERE to_regclass(quote_ident(current_schema()) || '.' || quote_ident(name)) IS NOT NULL"""
_PG_WHERE = "SELECT current_schema(), current_database(), current_setting('search_path')"
# Milliseconds since the epoch on the server's clock (clock_timestamp: the time of
# the call, not of the transaction's start).
_PG_NOW_MS = "SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint"


_PLACEHOLDER = re.compile(r"\?|:([a-z_]+)")


class QmarkConnection:
    """A psycopg connection that takes SQLite's placeholders (rule 5)."""

    def __init__(self, con: Connection) -> None:
        self.con = con

    def execute(self, statement: str, params: Any = ()) -> Any:
        """``con.execute`` with ``?`` -> ``%s`` and ``:name`` -> ``%(name)s``."""
        return self.con.execute(_PLACEHOLDER.sub(_psycopg_placeholder, statement), params or None)

    def executemany(self, statement: str, params: list[Any]) -> None:
        """``cursor().executemany``, with the placeholders rewritten as ``execute`` does."""
        self.con.cursor().executemany(_PLACEHOLDER.sub(_psycopg_placeholder, statement), params)

    def close(self) -> None:
        self.con.close()


def _psycopg_placeholder(match: re.Match[str]) -> str:
    return "%s" if match.group(1) is None else f"%({match.group(1)})s"


def qmark(con: Connection) -> Connection:
    """``con`` if it is SQLite's, else the same psycopg connection taking SQLite's placeholders."""
    if isinstance(con, sqlite3.Connection | QmarkConnection):
        return con
    return QmarkConnection(con)


class Unreachable(Exception):
    """The PostgreSQL server of a conninfo cannot be reached or refused the login."""


class Busy(Exception):
    """The queue file stayed locked by another process past the busy timeout."""


class MissingExtra(Exception):
    """A PostgreSQL queue was named where psycopg is not installed (the ``postgres`` extra)."""


POSTGRES_EXTRA = "a PostgreSQL queue needs psycopg 3: pip install 'lease-queue[postgres]'"

_SQLITE_BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED (the primary codes)


def is_busy(error: sqlite3.Error) -> bool:
    """True if ``error`` is SQLite's "database is locked/busy" (worth retrying later)."""
    code = getattr(error, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _SQLITE_BUSY_CODES
    return "locked" in str(error) or "busy" in str(error)


def _busy(path: Path, error: sqlite3.Error) -> Busy:
    return Busy(
        f"{str(path)!r} is busy: another process has held its lock for over a second "
        f"({str(error).strip()}); try again, or find the long transaction"
    )


def is_conninfo(target: Target) -> bool:
    """True if ``target`` names a PostgreSQL database rather than a file (rule 1)."""
    if not isinstance(target, str):
        return False
    if target.startswith(URL_SCHEMES):
        return True
    match = _FIRST_KEY.match(target)
    return bool(match and match.group(1) in LIBPQ_KEYWORDS and not os.path.lexists(target))


def _conninfo_params(conninfo: str) -> dict[str, Any]:
    try:
        from psycopg import ProgrammingError
        from psycopg import conninfo as libpq
    except ImportError as error:
        raise MissingExtra(f"{POSTGRES_EXTRA} ({error})") from None

    try:
        return dict(libpq.conninfo_to_dict(conninfo))
    except ProgrammingError:
        return {}


def describe(target: Target) -> str:
    """``target`` as shown to a user: a file's path, or a database without its password."""
    if not is_conninfo(target):
        return str(target)
    params = _conninfo_params(str(target))
    if not params:
        return "PostgreSQL (an unparsable conninfo)"
    shown = {key: params.get(key) for key in ("host", "port", "dbname", "user")}
    where = ", ".join(f"{key} {value!r}" for key, value in shown.items() if value)
    return f"PostgreSQL ({where or 'libpq defaults'})"


def _masked(message: str, conninfo: str) -> str:
    password = _conninfo_params(conninfo).get("password") or os.environ.get("PGPASSWORD")
    return message.replace(str(password), "***") if password else message


def _pgworker() -> ModuleType:
    try:
        import pgworker
    except ImportError as error:
        raise MissingExtra(f"{POSTGRES_EXTRA} ({error})") from None
    return pgworker


def queue_module(target: Target) -> ModuleType:
    """``pgworker`` for a conninfo, else ``worker``: the module whose calls the queue takes."""
    return _pgworker() if is_conninfo(target) else worker


def _pg_connect(conninfo: str, create: bool) -> Connection:
    """A queue connection (``pgworker``'s settings, for ``create``; else a reading one);
    ``Unreachable`` if none can be made, ``ValueError`` if there is no queue (or, for
    ``create``, no schema to make it in)."""
    pgworker = _pgworker()  # first: without psycopg, MissingExtra says what to install
    import psycopg

    timed = conninfo
    if "connect_timeout" not in _conninfo_params(conninfo):
        timed = psycopg.conninfo.make_conninfo(conninfo, connect_timeout=CONNECT_TIMEOUT_S)
    try:
        con: Connection = psycopg.connect(timed, autocommit=True)
        try:
            con.execute("SET default_transaction_isolation = 'read committed'")
            schema, database, search_path = con.execute(_PG_WHERE).fetchone()
            if schema is None:
                raise ValueError(
                    f"{describe(conninfo)} has no schema to hold a queue: the search_path "
                    f"({search_path}) names no schema that exists in database {database!r} "
                    "(create the schema, or set search_path in the conninfo's options)"
                )
            if create:
                con.close()
                return pgworker.open_queue(timed)
            (tables,) = con.execute(_PG_QUEUE_TABLES).fetchone()
            if tables != 2:
                raise ValueError(
                    f"{describe(conninfo)} holds no queue in schema {schema!r} of database "
                    f"{database!r} (no jobs/redrives tables; create one with 'init')"
                )
        except BaseException:
            con.close()
            raise
    except psycopg.OperationalError as error:
        reason = _masked(" ".join(str(error).split()), conninfo)
        raise Unreachable(f"cannot connect to {describe(conninfo)}: {reason}") from None
    return con


def require_queue_file(path: Target) -> Path:
    """Return ``path`` if it is an existing regular file, else raise ``FileNotFoundError``."""
    file = Path(path)
    if file.is_dir():
        raise IsADirectoryError(f"{str(file)!r} is a directory, not a queue file")
    try:
        is_file = stat.S_ISREG(file.stat().st_mode)
    except FileNotFoundError:
        is_file = False
    if not is_file:
        raise FileNotFoundError(f"no queue file at {str(file)!r} (create one with 'init')")
    return file


def _sqlite_existing(path: Target) -> sqlite3.Connection:
    file = require_queue_file(path)
    con = sqlite3.connect(file, timeout=1, isolation_level=None)
    try:
        try:
            (tables,) = con.execute(_QUEUE_TABLES, ("jobs", "redrives")).fetchone()
        except sqlite3.DatabaseError as error:
            if is_busy(error):
                raise _busy(file, error) from None
            raise ValueError(f"{str(file)!r} is not a queue file ({error})") from None
        if tables != 2:
            raise ValueError(f"{str(file)!r} is not a queue file (no jobs/redrives tables)")
    except BaseException:
        con.close()
        raise
    return con


def connect_existing(target: Target) -> Connection:
    """A connection to the existing queue at ``target``, for reading; never creates one.

    SQLite: a 1 s busy timeout, autocommit (it may write only to roll back a hot
    journal a killed writer left). PostgreSQL: autocommit, READ COMMITTED.

    Raises:
        FileNotFoundError: no file at the path. IsADirectoryError: a directory.
        ValueError: a file or database that holds no queue.
        Busy: the file stayed locked past the busy timeout.
        Unreachable: the PostgreSQL server cannot be reached.
        MissingExtra: a conninfo, and psycopg is not installed.
    """
    if is_conninfo(target):
        return _pg_connect(str(target), create=False)
    return _sqlite_existing(target)


def open_queue(target: Target) -> Connection:
    """``open_queue`` of the target's module: creates the tables if missing (for ``init``).

    Raises:
        ValueError: a path whose folder is missing, a directory, or a file that is
            not a SQLite database (the message names the path).
        Busy: the file stayed locked past the busy timeout.
        Unreachable: the PostgreSQL server cannot be reached.
        MissingExtra: a conninfo, and psycopg is not installed.
    """
    if is_conninfo(target):
        return _pg_connect(str(target), create=True)
    path = Path(target)
    if path.is_dir():
        raise IsADirectoryError(f"{str(path)!r} is a directory, not a queue file")
    if not path.parent.is_dir():
        raise FileNotFoundError(f"cannot create {str(path)!r}: no folder {str(path.parent)!r}")
    try:
        return worker.open_queue(path)
    except sqlite3.DatabaseError as error:
        if is_busy(error):
            raise _busy(path, error) from None
        raise ValueError(f"{str(path)!r} is not a queue file ({error})") from None


def open_existing(target: Target) -> Connection:
    """The queue module's own connection to an existing queue (for writes)."""
    connect_existing(target).close()
    return open_queue(target)


def server_clock_ms(con: Connection) -> int:
    """The PostgreSQL server's clock in whole milliseconds since the epoch."""
    (now,) = con.execute(_PG_NOW_MS).fetchone()
    return int(now)
