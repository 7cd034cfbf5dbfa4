"""lease-queue on PostgreSQL: ``worker.py``'s contract for workers on many hosts.

The same calls as ``worker.py`` (``docs/spec/CONTRACT.md``) with the same
signatures, argument rules, results, exceptions, messages, hook points and hook
order, rollback and commit rules and quarantine rules; only the connection is a
``psycopg.Connection`` (``open_queue(conninfo)``) instead of a SQLite file, and
``run_database`` stands where ``run_file`` stands. The exception classes and
``retry_delay`` are ``worker``'s own (``pgworker.Conflict is worker.Conflict``).
``docs/postgres.md`` says when to choose it. The rules this module keeps:

1. ``worker.py``'s front end is this module's too, imported, not copied: every
   argument is checked before anything changes by ``worker.py``'s own helpers,
   in its order and with its messages; the hooks of a write transaction are
   its ``_Hooks``; ``run_once`` is its round with this module's ``claim`` and
   ``finish``; each call's docstring is its text of the contract, with what
   PostgreSQL adds. This module keeps only its connection, its transactions and
   its SQL. The one decision restated here is the settlement of a finish
   (what ``worker.finish`` decides in Python): it stays inside finish's one compare-and-set
   statement (``_VERDICT``), since deciding in Python would cost a round trip
   (read the row, decide, write). ``tests/contract`` runs every example on both
   modules and the model.
2. Every write is one transaction; any error before COMMIT rolls the whole of
   it back and propagates, an error after COMMIT keeps the committed state. No
   call leaves a transaction open. A write that is one statement (``claim``,
   ``claim_many``, ``finish``, ``finish_many``, ``enqueue``, ``enqueue_many``)
   runs as its own transaction on an autocommit connection when no hook is
   given: one round trip instead of three (BEGIN, the statement, COMMIT), and
   the same statement as with a hook, where BEGIN ... COMMIT surround it so
   that the hooks run before the commit.
3. Nothing reads the wall clock: time is always a parameter (``now_ms``) or an
   injected ``clock``. Nothing sleeps and nothing draws random numbers.
4. A claim bumps the job's fencing ``token``; ``finish`` is one compare-and-set
   ``UPDATE`` on the whole ticket and both time bounds (``now_ms <
   lease_until``, ``now_ms < deadline``). Tokens never go down, not even on
   redrive.
5. Fault hooks fire only on the path that made the change they name, as in
   ``worker.py``: ``after-claim``, ``after-finish``, ``after-audit``,
   ``after-redrive`` before COMMIT and ``after-commit`` after it.

Isolation level: READ COMMITTED, which ``open_queue`` sets as the session's
default (every statement here runs at the session's level). Each write is one
statement that locks the rows it changes; when a row it wants was changed by a
transaction that committed after the statement began, PostgreSQL re-checks the
statement's conditions on the newest version before changing it, so a
``finish`` that waited for a concurrent claim sees the new token and answers
``False``, and a claim never leases a row that another claim took meanwhile.
REPEATABLE READ or SERIALIZABLE would keep every promise too, but turn each of
those races into a serialization error for the caller to retry.

Locking: a claim is one statement. Its quarantine and its three searches (fresh
pending rows, retried pending rows and expired leases, each in seq order) lock
their rows with ``FOR UPDATE SKIP LOCKED``: a row another transaction holds is
passed over, never waited for, so claimers on many hosts do not queue up
behind one another, and none of them deadlocks. The writes that do wait take
their rows in one order, so that two of them cannot wait for each other either:
an intake inserts its new rows in id order (their seqs still in list order: it
waits for a concurrent intake's uncommitted row of the same id), a
``finish_many`` locks its live rows in seq order before it changes them, and a
``redrive`` locks one row. In a single session nothing is ever locked, and the
claim order is exactly the contract's (lowest seq first).
Each search locks at most ``limit`` rows and the lowest ``limit`` of all those
are leased; the others are released at COMMIT (meanwhile another claimer
passes them over). The searches leave alone every row the quarantine takes
(``deadline > now``, budget left), since the statement's parts share one
snapshot.

Planning: a claim's statement costs more to plan than to run. PostgreSQL plans a
prepared statement for its values at its first five runs, then keeps one plan for
any values if that one is estimated no dearer. A claim is written so that it is:
it reads ``now`` and its limit through subqueries (a single ``claim`` asks for one
row, ``LIMIT 1`` written out), so no estimate depends on a value, and its plan, the
same for any values, reads each queue in seq order through its own index, the
right plan at every size (``tests/unit/test_pgworker_plans.py`` counts the pages).
psycopg prepares a statement at its sixth run, so from a connection's eleventh
claim (and eleventh ``claim_many``) on, no claim is planned. With ``now`` and the
limit as plain parameters, ``claim_many`` was planned again at every run once the
table had statistics (after ``ANALYZE`` or autovacuum): 1.25 ms a call of 10
where it takes 0.6 ms planned once. A single ``finish`` sends its ticket as plain
values, not as one-element arrays.

Seq numbers are an identity column: increasing in insert order, but a
PostgreSQL sequence is not rolled back, so a rolled-back insert (a redrive
whose hook failed, a concurrent intake of the same id) leaves a gap that
SQLite's AUTOINCREMENT would not. Only the order of seq numbers has a meaning.

Driver: psycopg 3, the sync API; the ``postgres`` extra depends on plain
``psycopg`` (the pure-Python build), as psycopg advises for a library: the
application picks how libpq is found (``psycopg[binary]`` bundles one,
``psycopg[c]`` compiles against the system's, plain ``psycopg`` loads the
system's). The test extra installs ``psycopg[binary]`` so that a fresh machine
without libpq runs every test.
"""

from __future__ import annotations

import contextlib
import textwrap
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import psycopg
from psycopg import errors
from psycopg.pq import TransactionStatus
from psycopg.rows import tuple_row

import worker

# The contract's ranges, importable from pgworker too.
from worker import MAX_ATTEMPTS as MAX_ATTEMPTS
from worker import MAX_BATCH as MAX_BATCH
from worker import MAX_DURATION_MS as MAX_DURATION_MS

# worker.py's front end, shared (rule 1): each call's argument checks in the contract's
# order, the hooks of a write transaction and run_once's round. worker.py's private names
# are private to the distribution: pgworker.py is its sibling module, not a user of it.
from worker import (
    TICKET_KEYS,
    BadAck,
    Conflict,
    Permanent,
    Retryable,
    _claim_args,
    _claim_many_args,
    _enqueue_args,
    _enqueue_many_args,
    _finish_args,
    _finish_many_args,
    _first_of_each_ticket,
    _Hooks,
    _redrive_args,
    _reject,
    _round,
    _validate_run,
    retry_delay,
)

# worker.py's public calls and exceptions (run_database for run_file).
__all__ = [
    "BadAck",
    "Conflict",
    "Permanent",
    "Retryable",
    "claim",
    "claim_many",
    "enqueue",
    "enqueue_many",
    "finish",
    "finish_many",
    "open_queue",
    "redrive",
    "retry_delay",
    "run_database",
    "run_once",
]

Connection = psycopg.Connection[Any]
Fault = Callable[[str], object]
Clock = Callable[[], int]
Send = Callable[[dict[str, Any]], object]
_Call = TypeVar("_Call", bound=Callable[..., Any])


def _contract(call: Callable[..., Any], on_postgres: str = "") -> Callable[[_Call], _Call]:
    """Document a call with the docstring of ``worker``'s call of the same name, the one
    text of the contract, and ``on_postgres``, what it adds on PostgreSQL (a paragraph
    before ``Raises:``)."""

    def document(function: _Call) -> _Call:
        text = call.__doc__ or ""
        if on_postgres:
            head, raises, tail = text.partition("\n\n    Raises:")
            paragraph = textwrap.fill(f"On PostgreSQL: {on_postgres}", 80, subsequent_indent="    ")
            text = f"{head}\n\n    {paragraph}{raises}{tail}"
        function.__doc__ = text
        return function

    return document


# --- SQL: every statement is named once --------------------------------------

# The contract's two tables in PostgreSQL types: bigint where a value can pass
# 2**31 (seq, token and every time), integer elsewhere; the same CHECK on status.
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS jobs (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id text NOT NULL UNIQUE, qty integer NOT NULL,
  status text NOT NULL CHECK (status IN ('pending', 'leased', 'done', 'dead')),
  attempts integer NOT NULL, max_attempts integer NOT NULL, token bigint NOT NULL,
  available_at bigint NOT NULL, deadline bigint NOT NULL,
  owner text, lease_until bigint, reason text)""",
    """CREATE TABLE IF NOT EXISTS redrives (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  id text NOT NULL, token bigint NOT NULL, at_ms bigint NOT NULL, note text NOT NULL)""",
)

# Pending rows form two queues, each in seq order, as in worker.py: fresh ones
# (attempts = 0) and retried ones (available after a backoff), so that a pile
# of waiting retries never hides the fresh backlog.
_FRESH = "status = 'pending' AND attempts = 0"
_RETRIED = "status = 'pending' AND attempts > 0"
_EXPIRED = "status = 'leased' AND lease_until <= %(now)s"

# Partial indexes over the live rows only, so that a claim costs the same with
# a long done/dead history as with none. Each serves the statement named above it.
# A database made before an index was added gets it at the next open_queue.
INDEXES = (
    # _CLAIM: each claimable queue in seq order ...
    f"CREATE INDEX IF NOT EXISTS jobs_fresh_by_seq ON jobs (seq) WHERE {_FRESH}",
    f"CREATE INDEX IF NOT EXISTS jobs_retried_by_seq ON jobs (seq) WHERE {_RETRIED}",
    "CREATE INDEX IF NOT EXISTS jobs_leased_by_seq ON jobs (seq) WHERE status = 'leased'",
    # ... whether any retry or lease is due at all, by time (one entry each) ...
    f"""CREATE INDEX IF NOT EXISTS jobs_retried_by_available_at
  ON jobs (available_at) WHERE {_RETRIED}""",
    """CREATE INDEX IF NOT EXISTS jobs_leased_by_lease_until
  ON jobs (lease_until) WHERE status = 'leased'""",
    # ... and the quarantine's three arms: passed deadlines, spent pending rows, and
    # expired leases on their last attempt (not every expired lease).
    """CREATE INDEX IF NOT EXISTS jobs_live_by_deadline
  ON jobs (deadline) WHERE status IN ('pending', 'leased')""",
    """CREATE INDEX IF NOT EXISTS jobs_pending_spent
  ON jobs (seq) WHERE status = 'pending' AND attempts >= max_attempts""",
    """CREATE INDEX IF NOT EXISTS jobs_leased_spent
  ON jobs (lease_until) WHERE status = 'leased' AND attempts >= max_attempts""",
)
_INDEX_NAMES = tuple(statement.split()[5] for statement in INDEXES)

# Which of the queue's relations exist in the connection's current schema.
# (With no current schema every name is missing, and CREATE says why.)
_SELECT_MISSING = """SELECT name FROM unnest(%(names)s::text[]) AS name
  WHERE to_regclass(quote_ident(current_schema()) || '.' || quote_ident(name)) IS NULL"""

# Two sessions creating the same tables at once could both pass IF NOT EXISTS;
# one lock per schema makes the second wait and then find them.
_LOCK_SCHEMA = "SELECT pg_advisory_xact_lock(hashtext('lease-queue:' || current_schema()))"

_SET_READ_COMMITTED = "SET default_transaction_isolation = 'read committed'"

# enqueue and enqueue_many: one statement reads the ids already there and
# inserts the first event of each id that is not (``DISTINCT ON``: a list of
# 1,000 events costs about ten times a list of 100, not a hundred times); a
# concurrent intake of the same id makes ON CONFLICT skip it (_SELECT_QTYS then
# reads it). The new jobs take their seqs in list order (the claim order), but
# the rows go in in id order: an insert waits for a concurrent intake's
# uncommitted row of the same id, so two intakes of the same ids in other orders
# would each wait for the other (a deadlock the server ends by failing one); in
# one order, the later one waits.
_INTAKE = """WITH given AS (
    SELECT id, qty, n
    FROM unnest(%(ids)s::text[], %(qtys)s::integer[]) WITH ORDINALITY AS g(id, qty, n)),
  existing AS (SELECT jobs.id, jobs.qty FROM jobs WHERE jobs.id = ANY(%(ids)s::text[])),
  fresh AS (
    SELECT DISTINCT ON (given.id) given.id, given.qty, given.n FROM given
    WHERE NOT EXISTS (SELECT 1 FROM existing WHERE existing.id = given.id)
    ORDER BY given.id, given.n),
  numbered AS (
    SELECT listed.id, listed.qty,
      nextval((SELECT pg_get_serial_sequence('jobs', 'seq')::regclass)) AS seq
    FROM (SELECT * FROM fresh ORDER BY fresh.n) AS listed),
  inserted AS (
    INSERT INTO jobs
      (seq, id, qty, status, attempts, max_attempts, token, available_at, deadline)
    OVERRIDING SYSTEM VALUE
    SELECT numbered.seq, numbered.id, numbered.qty, 'pending', 0, %(max_attempts)s::integer,
      0, %(now)s::bigint, %(deadline)s::bigint
    FROM numbered
    ORDER BY numbered.id
    ON CONFLICT (id) DO NOTHING
    RETURNING id, qty)
SELECT id, qty, false FROM existing UNION ALL SELECT id, qty, true FROM inserted"""

_SELECT_QTYS = "SELECT id, qty FROM jobs WHERE id = ANY(%(ids)s::text[])"

# claim and claim_many: step 1, the quarantine, looks at every pending row (due
# or not) and every expired lease; a passed deadline wins over a spent budget.
# Each arm of the OR matches one partial index.
_QUARANTINABLE = """(status IN ('pending', 'leased') AND deadline <= %(now)s
      AND (status = 'pending' OR lease_until <= %(now)s))
    OR (status = 'leased' AND lease_until <= %(now)s AND attempts >= max_attempts)
    OR (status = 'pending' AND attempts >= max_attempts)"""
# A claimable row the quarantine leaves alone (the statement's parts share one
# snapshot: the searches do not see what the quarantine changes).
_STILL_ALIVE = "deadline > %(now)s AND attempts < max_attempts"
# Each queue's search, in seq order. The retried and the expired queue are read only
# when one of their rows is due: the queue's earliest time (min() reads one entry of
# its index by time, whatever the planner estimates) is asked once, a one-time filter
# before the search reads a row. So a pile of waiting retries or running leases is
# never read, and a dead fleet's expired leases are read from the lowest seq on, not
# sorted. (An empty queue's min() is NULL: not due.)
_RETRY_DUE = f"(SELECT min(available_at) FROM jobs WHERE {_RETRIED}) <= %(now)s"
_LEASE_DUE = "(SELECT min(lease_until) FROM jobs WHERE status = 'leased') <= %(now)s"
_SEARCHES = (
    ("fresh", f"{_FRESH} AND available_at <= %(now)s"),
    ("retried", f"{_RETRIED} AND available_at <= %(now)s AND {_RETRY_DUE}"),
    ("expired", f"{_EXPIRED} AND {_LEASE_DUE}"),
)
_SEARCH = {
    queue: f"""SELECT seq FROM jobs WHERE {where} AND {_STILL_ALIVE}
    ORDER BY seq LIMIT %(limit)s FOR UPDATE SKIP LOCKED"""
    for queue, where in _SEARCHES
}
# psycopg sends a small int as a smallint: every sum of two parameters is cast to
# bigint first (20000 + 20000 would overflow a smallint).
# The quarantine updates the very row versions its search locked (by ctid: a TID
# scan, never a join with the whole table, whatever the planner guesses of how
# many rows are due for quarantine). Steps 2 and 3: the lowest :limit claimable
# seqs of the three searches, leased.
_CLAIM = f"""WITH quarantined AS (
    UPDATE jobs SET status = 'dead',
      reason = CASE WHEN deadline <= %(now)s THEN 'deadline' ELSE 'exhausted' END,
      owner = NULL, lease_until = NULL
    WHERE ctid = ANY(ARRAY(SELECT ctid FROM jobs WHERE {_QUARANTINABLE} FOR UPDATE SKIP LOCKED))),
  fresh AS ({_SEARCH["fresh"]}),
  retried AS ({_SEARCH["retried"]}),
  expired AS ({_SEARCH["expired"]}),
  picked AS (
    SELECT seq FROM fresh UNION ALL SELECT seq FROM retried UNION ALL SELECT seq FROM expired
    ORDER BY seq LIMIT %(limit)s)
UPDATE jobs SET status = 'leased', attempts = jobs.attempts + 1, token = jobs.token + 1,
    owner = %(owner)s, reason = NULL,
    lease_until = least(%(now)s::bigint + %(lease_ms)s::bigint, jobs.deadline)
  FROM picked WHERE jobs.seq = picked.seq
  RETURNING jobs.seq, jobs.id, jobs.qty, jobs.token, jobs.attempts, jobs.lease_until"""

# The statements a claim runs: ``_CLAIM`` with ``now`` and the limit read through
# subqueries (a single claim's limit written out), so that no estimate depends on a
# parameter's value (see "Planning" above).
_CLAIM_FOR_ANY_NOW = _CLAIM.replace("%(now)s", "(SELECT %(now)s::bigint)")
_CLAIM_ONE = _CLAIM_FOR_ANY_NOW.replace("%(limit)s", "1")
_CLAIM_MANY = _CLAIM_FOR_ANY_NOW.replace("%(limit)s", "(SELECT %(limit)s::integer)")

# finish and finish_many: one compare-and-set UPDATE, whose rows are locked first
# in seq order (``locked``): two batches finishing the same live tickets in other
# orders would otherwise each hold a row the other waits for (a deadlock the
# server ends by failing one); in seq order, the later one waits, then finds the
# rows settled. A ticket is live only if it matches the row in full and neither
# the lease nor the job's deadline has passed. ``id = ANY(...)`` offers the
# planner the rows by id, so that a batch costs its own rows rather than a read
# of every live lease. The verdict is worker.py's _settlement as one SQL
# expression: ok -> done; permanent; a spent budget -> exhausted; a retry due at
# or after the deadline -> deadline; else retry (pending, available after the
# delay).
_VERDICT = """CASE WHEN given.outcome = 'ok' THEN 'done'
    WHEN given.outcome = 'permanent' THEN 'permanent'
    WHEN jobs.attempts >= jobs.max_attempts THEN 'exhausted'
    WHEN %(now)s + given.delay_ms >= jobs.deadline THEN 'deadline'
    ELSE 'retry' END"""
# The settlements: one array per field, or a single one's plain values (no arrays to unpack).
_SETTLE_FROM = {
    "many": """unnest(%(n)s::integer[], %(id)s::text[], %(qty)s::integer[], %(owner)s::text[],
      %(token)s::bigint[], %(attempt)s::integer[], %(lease_until)s::bigint[],
      %(outcome)s::text[], %(delay_ms)s::bigint[])
    AS given(n, id, qty, owner, token, attempt, lease_until, outcome, delay_ms)
  WHERE jobs.id = ANY(%(id)s::text[])""",
    "one": """(VALUES (%(n)s::integer, %(id)s::text, %(qty)s::integer, %(owner)s::text,
      %(token)s::bigint, %(attempt)s::integer, %(lease_until)s::bigint,
      %(outcome)s::text, %(delay_ms)s::bigint))
    AS given(n, id, qty, owner, token, attempt, lease_until, outcome, delay_ms)
  WHERE jobs.id = %(id)s::text""",
}
_LIVE = """jobs.id = given.id AND jobs.status = 'leased'
    AND jobs.qty = given.qty AND jobs.owner = given.owner AND jobs.token = given.token
    AND jobs.attempts = given.attempt AND jobs.lease_until = given.lease_until
    AND %(now)s < jobs.lease_until AND %(now)s < jobs.deadline"""
# What a settlement sets, from its verdict (``given``: the settlement's row).
_SETTLE_SET = f"""
    status = CASE {_VERDICT} WHEN 'done' THEN 'done' WHEN 'retry' THEN 'pending' ELSE 'dead' END,
    reason = nullif({_VERDICT}, 'done'),
    available_at = CASE {_VERDICT} WHEN 'retry' THEN %(now)s + given.delay_ms ELSE %(now)s END,
    owner = NULL, lease_until = NULL"""
_SETTLE = {
    "many": f"""WITH locked AS (
    SELECT jobs.seq, given.n, given.outcome, given.delay_ms
    FROM jobs, {_SETTLE_FROM["many"]} AND {_LIVE}
    ORDER BY jobs.seq FOR UPDATE OF jobs)
  UPDATE jobs SET{_SETTLE_SET}
  FROM locked AS given WHERE jobs.seq = given.seq
  RETURNING given.n, jobs.status""",
    # One row: nothing to order.
    "one": f"""UPDATE jobs SET{_SETTLE_SET}
  FROM {_SETTLE_FROM["one"]} AND {_LIVE}
  RETURNING given.n, jobs.status""",
}

# redrive: the job row is locked first, so nothing changes it between the check
# and the requeue.
_SELECT_STATUS_TOKEN = "SELECT seq, status, token FROM jobs WHERE id = %s FOR UPDATE"

_INSERT_AUDIT = "INSERT INTO redrives (id, token, at_ms, note) VALUES (%s, %s, %s, %s)"

_REQUEUE = """UPDATE jobs
  SET status = 'pending', attempts = 0, available_at = %s, deadline = %s,
      owner = NULL, lease_until = NULL, reason = NULL
  WHERE seq = %s"""


# --- The connection ---------------------------------------------------------


def _idle_connection(con: object) -> Connection:
    """Return ``con`` if it is a psycopg connection with no open transaction.

    The functions here own their transactions; committing or rolling back a
    caller's half-finished transaction would silently change its meaning. A
    closed connection passes here and fails at its first statement, as psycopg
    says it.
    """
    if not isinstance(con, psycopg.Connection):
        raise _reject("con", "a psycopg.Connection", con)
    if not con.closed and con.info.transaction_status != TransactionStatus.IDLE:
        raise ValueError("'con' has an open transaction; finish it before calling the queue")
    return con


def _conninfo(value: object) -> str:
    """Return ``value`` if it is a non-empty exact ``str`` (a libpq connection string)."""
    if type(value) is not str or not value:
        raise _reject("conninfo", "a non-empty str (a libpq connection string or URI)", value)
    return value


# --- Transactions and hooks -------------------------------------------------


@contextlib.contextmanager
def _write_transaction(con: Connection, fault: Fault | None = None) -> Iterator[_Hooks]:
    """Run the body in one transaction (psycopg's ``transaction()`` block).

    Any exception (``BaseException`` included) before COMMIT, or from COMMIT
    itself, rolls everything back and propagates unchanged. After COMMIT the
    ``after-commit`` hook runs if the body reached a change point; its error
    propagates and the committed state stays.
    """
    hooks = _Hooks(fault)
    with con.transaction():
        yield hooks
    hooks.committed()


def _statement_transaction(
    con: Connection, fault: Fault | None
) -> contextlib.AbstractContextManager[_Hooks]:
    """The transaction of a write that is one statement (rule 2).

    With no hook on an autocommit connection, the statement is its own
    transaction; otherwise ``_write_transaction`` surrounds it.
    """
    if fault is None and con.autocommit:
        return contextlib.nullcontext(_Hooks(None))
    return _write_transaction(con, fault)


def _rows(con: Connection, sql: str, params: Any) -> list[tuple[Any, ...]]:
    """Every row of ``sql`` as plain tuples, whatever ``row_factory`` the caller set."""
    with con.cursor(row_factory=tuple_row) as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description is not None else []


def _row(con: Connection, sql: str, params: Any) -> tuple[Any, ...] | None:
    """The first row of ``sql`` as a plain tuple, or ``None``."""
    rows = _rows(con, sql, params)
    return rows[0] if rows else None


# --- 2. open_queue -------------------------------------------------------------


def _connect(conninfo: str) -> Connection:
    """A new autocommit connection whose transactions are READ COMMITTED."""
    con = psycopg.connect(conninfo, autocommit=True)
    try:
        con.execute(_SET_READ_COMMITTED)
    except BaseException:
        con.close()
        raise
    return con


def _missing(con: Connection, names: Sequence[str]) -> list[str]:
    """Which of ``names`` no relation of the current schema has."""
    return [name for (name,) in _rows(con, _SELECT_MISSING, {"names": list(names)})]


def _create_missing(con: Connection) -> None:
    """Create the tables and indexes that are missing, in one transaction."""
    if not _missing(con, ("jobs", "redrives", *_INDEX_NAMES)):
        return
    with _write_transaction(con):
        con.execute(_LOCK_SCHEMA)
        for statement in SCHEMA + INDEXES:
            con.execute(statement)


def open_queue(conninfo: str) -> Connection:
    """Connect to the queue in the current schema of ``conninfo``'s database.

    Returns a ``psycopg.Connection`` in autocommit mode whose session default
    isolation level is READ COMMITTED. The ``jobs`` and ``redrives`` tables
    and their indexes are created in one transaction only if missing, in the
    connection's current schema (the first of its ``search_path`` that exists:
    one database can hold several queues, one per schema); existing rows are
    kept. If initialisation fails the connection is closed and the error
    propagates.

    Raises:
        ValueError: ``conninfo`` is not a non-empty str.
        psycopg.OperationalError: the server cannot be reached (libpq's
            message names the host; it never holds the password).
    """
    con = _connect(_conninfo(conninfo))
    try:
        _create_missing(con)
    except BaseException:
        con.close()
        raise
    return con


# --- 3. enqueue ----------------------------------------------------------------


@_contract(worker.enqueue)
def enqueue(
    con: Connection,
    event: dict[str, Any],
    now_ms: int,
    ttl_ms: int,
    max_attempts: int = 3,
) -> bool:
    con = _idle_connection(con)
    job_id, qty, now_ms, ttl_ms, max_attempts = _enqueue_args(event, now_ms, ttl_ms, max_attempts)
    (result,) = _intake(con, [(job_id, qty)], now_ms, now_ms + ttl_ms, max_attempts)
    if isinstance(result, Conflict):
        raise result
    return result


@_contract(worker.enqueue_many)
def enqueue_many(
    con: Connection,
    events: list[dict[str, Any]],
    now_ms: int,
    ttl_ms: int,
    max_attempts: int = 3,
) -> list[bool | Conflict]:
    con = _idle_connection(con)
    jobs, now_ms, ttl_ms, max_attempts = _enqueue_many_args(events, now_ms, ttl_ms, max_attempts)
    if not jobs:
        return []
    return _intake(con, jobs, now_ms, now_ms + ttl_ms, max_attempts)


def _intake(
    con: Connection, jobs: list[tuple[str, int]], now_ms: int, deadline: int, max_attempts: int
) -> list[bool | Conflict]:
    """Insert the new jobs of ``jobs`` in list order; judge each event as ``enqueue`` would:
    ``True`` for the first event of an id this call inserted, ``False`` for an
    event whose qty is the one stored (before or earlier in the list), else the
    ``Conflict``."""
    ids = [job_id for job_id, _ in jobs]
    params = {
        "ids": ids,
        "qtys": [qty for _, qty in jobs],
        "max_attempts": max_attempts,
        "now": now_ms,
        "deadline": deadline,
    }
    with _statement_transaction(con, None):
        found = _rows(con, _INTAKE, params)
        stored = {job_id: qty for job_id, qty, _ in found}
        raced = sorted(set(ids) - stored.keys())  # a concurrent intake took them first
        if raced:
            stored.update(_rows(con, _SELECT_QTYS, {"ids": raced}))
    inserted = {job_id for job_id, _, new in found if new}
    results: list[bool | Conflict] = []
    for job_id, qty in jobs:
        if job_id in inserted:
            inserted.discard(job_id)
            results.append(True)
        elif stored[job_id] == qty:
            results.append(False)
        else:
            results.append(Conflict(f"job {job_id!r} exists with qty {stored[job_id]}, not {qty}"))
    return results


# --- 4. claim ------------------------------------------------------------------

_SKIPS_LOCKED_ROWS = (
    "rows another transaction holds are passed over, never waited for"
    " (``FOR UPDATE SKIP LOCKED``): a claim never queues behind another."
)


@_contract(
    worker.claim,
    _SKIPS_LOCKED_ROWS,
)
def claim(
    con: Connection,
    owner: str,
    now_ms: int,
    lease_ms: int = 1000,
    fault: Fault | None = None,
) -> dict[str, Any] | None:
    con = _idle_connection(con)
    owner, now_ms, lease_ms, fault = _claim_args(owner, now_ms, lease_ms, fault)
    tickets = _lease(con, owner, now_ms, 1, lease_ms, fault)
    return tickets[0] if tickets else None


@_contract(
    worker.claim_many,
    _SKIPS_LOCKED_ROWS,
)
def claim_many(
    con: Connection,
    owner: str,
    now_ms: int,
    limit: int,
    lease_ms: int = 1000,
    fault: Fault | None = None,
) -> list[dict[str, Any]]:
    con = _idle_connection(con)
    owner, now_ms, limit, lease_ms, fault = _claim_many_args(owner, now_ms, limit, lease_ms, fault)
    return _lease(con, owner, now_ms, limit, lease_ms, fault)


def _lease(
    con: Connection, owner: str, now_ms: int, limit: int, lease_ms: int, fault: Fault | None
) -> list[dict[str, Any]]:
    """Quarantine, then lease the lowest ``limit`` claimable jobs: one statement."""
    params = {"now": now_ms, "owner": owner, "limit": limit, "lease_ms": lease_ms}
    with _statement_transaction(con, fault) as hooks:
        leased = sorted(_rows(con, _CLAIM_ONE if limit == 1 else _CLAIM_MANY, params))
        if leased:
            hooks.reached("after-claim")
    return [
        {
            "id": job_id,
            "qty": qty,
            "owner": owner,
            "token": token,
            "attempt": attempts,
            "lease_until": lease_until,
        }
        for _, job_id, qty, token, attempts, lease_until in leased
    ]


# --- 5. finish -----------------------------------------------------------------


@_contract(
    worker.finish,
    "one compare-and-set ``UPDATE``; a concurrent change of the row is waited"
    " for and the ticket judged on the row as it then is.",
)
def finish(
    con: Connection,
    ticket: dict[str, Any],
    outcome: str,
    now_ms: int,
    delay_ms: int = 0,
    fault: Fault | None = None,
) -> str | bool:
    con = _idle_connection(con)
    ticket, outcome, now_ms, delay_ms, fault = _finish_args(
        ticket, outcome, now_ms, delay_ms, fault
    )
    (status,) = _settle(con, [(ticket, outcome, delay_ms)], now_ms, fault)
    return status


@_contract(
    worker.finish_many,
    "one compare-and-set ``UPDATE`` for the whole batch, as ``finish``.",
)
def finish_many(
    con: Connection,
    results: list[dict[str, Any]],
    now_ms: int,
    fault: Fault | None = None,
) -> list[str | bool]:
    con = _idle_connection(con)
    settlements, now_ms, fault = _finish_many_args(results, now_ms, fault)
    if not settlements:
        return []
    return _settle(con, settlements, now_ms, fault)


def _settle(
    con: Connection,
    settlements: list[tuple[dict[str, Any], str, int]],
    now_ms: int,
    fault: Fault | None,
) -> list[str | bool]:
    """Apply each outcome to its job if its ticket is live, in one ``UPDATE``: only the
    first settlement of each ticket is sent (worker.py's ``_first_of_each_ticket``)."""
    sent = _first_of_each_ticket(settlements)
    size = "one" if len(sent) == 1 else "many"
    fields = {key: [settlements[n][0][key] for n in sent] for key in TICKET_KEYS}
    fields |= {"n": sent, "outcome": [settlements[n][1] for n in sent]}
    fields["delay_ms"] = [settlements[n][2] for n in sent]
    if size == "one":
        params: dict[str, Any] = {key: values[0] for key, values in fields.items()}
    else:
        params = {key: _array_text(values) for key, values in fields.items()}
    params["now"] = now_ms
    statuses: list[str | bool] = [False] * len(settlements)
    with _statement_transaction(con, fault) as hooks:
        for n, status in _rows(con, _SETTLE[size], params):
            statuses[n] = status
        if any(statuses):
            hooks.reached("after-finish")
    return statuses


def _array_text(values: list[Any]) -> str:
    """``values`` in PostgreSQL's text form of an array, for a ``%s::type[]`` parameter.

    psycopg would dump a list element by element in Python, about 4 us a job of a
    batch's ``finish_many``; this is one join. It is exact only for what a settlement
    holds once validated: ints, and strs that are identifiers or outcomes (ASCII
    letters, digits, ``_`` and ``-``: no quote, backslash, comma, brace or space).
    Each str is quoted all the same, or an identifier spelled ``NULL`` would be read
    as a null."""
    if values and type(values[0]) is str:
        return '{"' + '","'.join(values) + '"}'
    return "{" + ",".join(map(str, values)) + "}"


# --- 6. redrive ----------------------------------------------------------------


@_contract(
    worker.redrive,
    "the job's row is locked first (``FOR UPDATE``), so nothing changes it"
    " between the check and the requeue.",
)
def redrive(
    con: Connection,
    job_id: str,
    now_ms: int,
    ttl_ms: int,
    note: str,
    fault: Fault | None = None,
) -> bool:
    con = _idle_connection(con)
    job_id, now_ms, ttl_ms, note, fault = _redrive_args(job_id, now_ms, ttl_ms, note, fault)
    with _write_transaction(con, fault) as hooks:
        job = _row(con, _SELECT_STATUS_TOKEN, (job_id,))
        if job is None:
            raise ValueError(f"no job {job_id!r} to redrive")
        seq, status, token = job
        if status != "dead":
            raise ValueError(f"job {job_id!r} is {status}, only a dead job can be redriven")
        con.execute(_INSERT_AUDIT, (job_id, token, now_ms, note))
        hooks.reached("after-audit")
        con.execute(_REQUEUE, (now_ms, now_ms + ttl_ms, seq))
        hooks.reached("after-redrive")
    return True


# --- 7. run_once ---------------------------------------------------------------


@_contract(worker.run_once)
def run_once(
    con: Connection,
    owner: str,
    clock: Clock,
    send: Send,
    jitter: float,
    lease_ms: int = 1000,
) -> dict[str, Any] | None:
    _validate_run(owner, clock, send, jitter, lease_ms)
    return _round(claim, finish, con, owner, clock, send, jitter, lease_ms)


# --- 8. run_database -------------------------------------------------------------
# run_database: worker.run_file's signature and round, with a conninfo for the path.


def _existing_queue(con: Connection) -> None:
    """Refuse a database whose current schema lacks the queue's tables; never create them."""
    missing = _missing(con, ("jobs", "redrives"))
    if missing:
        where = _row(con, "SELECT current_schema(), current_database()", None)
        schema, database = where if where is not None else (None, None)
        raise errors.UndefinedTable(
            f"no queue in schema {schema!r} of database {database!r} on {con.info.host!r}: "
            f"no table {' or '.join(missing)} (run pgworker.open_queue to create them)"
        )


def run_database(
    conninfo: str,
    owner: str,
    clock: Clock,
    send: Send,
    jitter: float,
    lease_ms: int = 1000,
) -> dict[str, Any] | None:
    """Connect to the existing queue at ``conninfo``, ``run_once`` on it, and disconnect.

    The analogue of ``worker.run_file``. Returns ``run_once``'s result. The
    connection is closed on success and on failure. Indexes missing from an
    existing queue are created, as ``open_queue`` does.

    Raises:
        psycopg.errors.UndefinedTable: the current schema has no ``jobs`` or
            no ``redrives`` table; nothing was created.
        ValueError: a malformed argument.
        psycopg.OperationalError: the server cannot be reached.
        Anything ``run_once`` raises.
    """
    _validate_run(owner, clock, send, jitter, lease_ms)
    con = _connect(_conninfo(conninfo))
    try:
        _existing_queue(con)
        _create_missing(con)
        return run_once(con, owner, clock, send, jitter, lease_ms)
    finally:
        con.close()
