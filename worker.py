"""lease-queue: a durable job queue on one local SQLite file.

Competing workers lease jobs with fencing tokens, retry within a finite budget,
quarantine what cannot succeed ("dead", with a reason) and let an operator
redrive it with an audit row. The full contract is ``docs/spec/CONTRACT.md``; the
executable specification is the ``model`` package. The rules this module keeps:

1. Every argument is validated before anything changes, and a malformed one
   raises ``ValueError``. "Exact" means ``type(x) is int`` (so ``bool`` is
   rejected), ``type(x) is str``, ``type(x) is dict``. Inputs are never mutated.
2. Every write is one ``BEGIN IMMEDIATE`` transaction (``_write_transaction``):
   any error before COMMIT rolls the whole of it back and propagates; an error
   after COMMIT keeps the committed state. No call leaves a transaction open.
3. Nothing reads the wall clock: time is always a parameter (``now_ms``) or an
   injected ``clock``. Nothing sleeps and nothing draws random numbers.
4. A claim bumps the job's fencing ``token``; ``finish`` is a compare-and-set on
   the whole ticket and on the time bounds, so a late or stale worker can never
   overwrite a newer worker's result. Tokens never go down, not even on redrive.
5. Fault hooks fire only on the path that made the change they name:
   ``after-claim``, ``after-finish``, ``after-audit``, ``after-redrive`` before
   COMMIT and ``after-commit`` after it. Paths that change nothing visible
   (``claim`` -> ``None``, ``finish`` -> ``False``) call no hook.
6. The network send in ``run_once`` happens outside any transaction. The queue
   does not close the gap between an external effect and its completion record:
   a crash in between means a re-send, which the receiver deduplicates by
   (id, qty).
7. Beyond the contract, ``enqueue_many``, ``claim_many`` and ``finish_many``
   are the single calls applied in order inside one transaction (one commit
   and a few statements for a whole batch, its rows passed as JSON; SQLite
   3.33.0 or later with the JSON functions, checked by ``_require_sqlite``;
   ``docs/batches.md``). Partial indexes over the live rows
   (``INDEXES``, created by ``open_queue``) keep a claim's cost flat however
   long the done/dead history grows.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import json
import math
import os
import re
import sqlite3
from collections.abc import Callable, Iterator
from typing import Any

# pgworker.py's __all__ is deliberately this list (run_database for run_file).
__all__ = [
    "MAX_NOW_MS",
    "SCHEMA",
    "BadAck",
    "Conflict",
    "Permanent",
    "Retryable",
    "claim",
    "claim_many",
    "classify_send",
    "enqueue",
    "enqueue_many",
    "finish",
    "finish_many",
    "is_identifier",
    "open_queue",
    "redrive",
    "retry_delay",
    "run_file",
    "run_once",
]


class Conflict(Exception):
    """The same job id was enqueued again with another qty."""


class Retryable(Exception):
    """Raised by ``send``: the delivery may succeed if tried again later."""


class Permanent(Exception):
    """Raised by ``send``: the delivery can never succeed; quarantine the job."""


class BadAck(Exception):
    """``send`` returned something other than exactly ``True``."""


Fault = Callable[[str], object]
Clock = Callable[[], int]
Send = Callable[[dict[str, Any]], object]

# --- Ranges of the contract -------------------------------------------------

MAX_NOW_MS = 10**15 - 60000
MAX_TOKEN = 10**15
MAX_LEASE_UNTIL = 10**15
MAX_QTY = 1000
MAX_ATTEMPTS = 16
MAX_DURATION_MS = 60000  # ttl_ms, lease_ms, delay_ms, base_ms and cap_ms
MAX_BATCH = 1000  # items in one enqueue_many / finish_many, claim_many's limit

EVENT_KEYS = frozenset({"id", "qty"})
TICKET_KEYS = ("id", "qty", "owner", "token", "attempt", "lease_until")
RESULT_KEYS = frozenset({"ticket", "outcome", "delay_ms"})
OUTCOMES = ("ok", "retry", "permanent")

RETRY_BASE_MS = 100
RETRY_CAP_MS = 1000

_IDENTIFIER = re.compile(r"[A-Za-z0-9_-]{1,64}")
_IN_MEMORY_PATHS = ("", ":memory:")

# --- SQL: every statement is named once --------------------------------------

# tests/unit/test_open_queue.py keeps a deliberate copy of the contract's text of this DDL
# (CONTRACT_DDL) and holds SCHEMA against it.
SCHEMA = (
    """CREATE TABLE IF NOT EXISTS jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE, qty INTEGER NOT NULL,
  status TEXT NOT NULL CHECK(status IN ('pending','leased','done','dead')),
  attempts INTEGER NOT NULL, max_attempts INTEGER NOT NULL, token INTEGER NOT NULL,
  available_at INTEGER NOT NULL, deadline INTEGER NOT NULL,
  owner TEXT, lease_until INTEGER, reason TEXT)""",
    """CREATE TABLE IF NOT EXISTS redrives (seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL, token INTEGER NOT NULL, at_ms INTEGER NOT NULL, note TEXT NOT NULL)""",
)

# Claimable rows form three queues, each read in seq order through an index of
# its own: fresh pending rows (attempts = 0: enqueued or redriven, available at
# once), retried ones (available after a backoff) and leased ones (claimable once
# the lease has expired). A pile of waiting retries or running leases never
# hides the fresh backlog.
_FRESH = "status = 'pending' AND attempts = 0"
_RETRIED = "status = 'pending' AND attempts > 0"

# Partial indexes over the live rows (pending, leased) only, so that claim costs
# the same with a million rows of done/dead history as with none. Each index
# serves the statements named above it; a file without them still works, only
# slower. A file made by an earlier open_queue may also hold
# jobs_fresh_by_available_at, which no statement reads any more; it is left as it is.
INDEXES = (
    # _FRESH_HEAD, _RETRIED_HEAD, _LEASED_HEAD: each queue in seq order ...
    f"""CREATE INDEX IF NOT EXISTS jobs_fresh_by_seq
  ON jobs(seq, available_at) WHERE {_FRESH}""",
    f"""CREATE INDEX IF NOT EXISTS jobs_retried_by_seq
  ON jobs(seq, available_at) WHERE {_RETRIED}""",
    """CREATE INDEX IF NOT EXISTS jobs_leased_by_seq
  ON jobs(seq, lease_until) WHERE status = 'leased'""",
    # ... and _CLAIMABLE_QUEUES: whether any retry or lease is due, by time.
    f"""CREATE INDEX IF NOT EXISTS jobs_retried_by_available_at
  ON jobs(available_at) WHERE {_RETRIED}""",
    """CREATE INDEX IF NOT EXISTS jobs_leased_by_lease_until
  ON jobs(lease_until) WHERE status = 'leased'""",
    # _QUARANTINE_DEADLINE (and _QUARANTINE_DUE's first question, as the next two).
    """CREATE INDEX IF NOT EXISTS jobs_live_by_deadline
  ON jobs(deadline) WHERE status IN ('pending', 'leased')""",
    # _QUARANTINE_EXHAUSTED_PENDING: empty unless a row was written by someone else.
    """CREATE INDEX IF NOT EXISTS jobs_pending_spent
  ON jobs(seq) WHERE status = 'pending' AND attempts >= max_attempts""",
    # _QUARANTINE_EXHAUSTED_LEASED: leases on their last attempt, by time.
    """CREATE INDEX IF NOT EXISTS jobs_leased_spent
  ON jobs(lease_until) WHERE status = 'leased' AND attempts >= max_attempts""",
)

_SELECT_QTY = "SELECT qty FROM jobs WHERE id = ?"

_INSERT_JOB = """INSERT INTO jobs
  (id, qty, status, attempts, max_attempts, token, available_at, deadline,
   owner, lease_until, reason)
  VALUES (?, ?, 'pending', 0, ?, 0, ?, ?, NULL, NULL, NULL)"""

# The quarantine looks at every pending row (due or not) and every expired lease.
# A passed deadline wins over a spent budget: the deadline statement runs first,
# and the exhausted ones only see what is still live.
_QUARANTINE_DEADLINE = """UPDATE jobs
  SET status = 'dead', reason = 'deadline', owner = NULL, lease_until = NULL
  WHERE status IN ('pending', 'leased') AND deadline <= :now
    AND (status = 'pending' OR lease_until <= :now)"""

_QUARANTINE_EXHAUSTED_PENDING = """UPDATE jobs
  SET status = 'dead', reason = 'exhausted', owner = NULL, lease_until = NULL
  WHERE status = 'pending' AND attempts >= max_attempts"""

_QUARANTINE_EXHAUSTED_LEASED = """UPDATE jobs
  SET status = 'dead', reason = 'exhausted', owner = NULL, lease_until = NULL
  WHERE status = 'leased' AND lease_until <= :now AND attempts >= max_attempts"""

# Whether the quarantine has anything to move: would any of the three statements
# above change a row? One index entry each. An UPDATE opens every index of the
# table even when it changes no row, so they run only when the answer is yes.
_QUARANTINE_DUE = """SELECT
  EXISTS (SELECT 1 FROM jobs WHERE status IN ('pending', 'leased') AND deadline <= :now
    AND (status = 'pending' OR lease_until <= :now))
  OR EXISTS (SELECT 1 FROM jobs WHERE status = 'pending' AND attempts >= max_attempts)
  OR EXISTS (SELECT 1 FROM jobs
    WHERE status = 'leased' AND lease_until <= :now AND attempts >= max_attempts)"""

# Claimable rows are "pending and due" or "leased with an expired lease"; the
# lowest seq wins. Each queue is read from its oldest row up to its first
# :limit claimable ones, and the lowest :limit of those are the answer, in seq
# order. With one clock, a fresh job is due from its enqueue on, so the fresh
# queue's first row is the one; the retries and the leases ahead of the first
# claimable one are the few still in their backoff or their lease. The retried
# and the leased queue are read only when one of their rows is due
# (_CLAIMABLE_QUEUES, by time, one index entry each): a pile of waiting retries
# or running leases is not read at all. ``+`` keeps the planner on the seq
# indexes.
# Which queues to read (fresh, retried, leased, as in _QUEUE_HEADS): 1 or 0 each.
_CLAIMABLE_QUEUES = f"""SELECT 1,
  EXISTS (SELECT 1 FROM jobs WHERE {_RETRIED} AND available_at <= :now),
  EXISTS (SELECT 1 FROM jobs WHERE status = 'leased' AND lease_until <= :now)"""
_FRESH_HEAD = f"""SELECT seq, id, qty, attempts, token, deadline FROM jobs
  WHERE {_FRESH} AND +available_at <= :now ORDER BY seq LIMIT :limit"""
_RETRIED_HEAD = f"""SELECT seq, id, qty, attempts, token, deadline FROM jobs
  WHERE {_RETRIED} AND +available_at <= :now ORDER BY seq LIMIT :limit"""
_LEASED_HEAD = """SELECT seq, id, qty, attempts, token, deadline FROM jobs
  WHERE status = 'leased' AND +lease_until <= :now ORDER BY seq LIMIT :limit"""
_QUEUE_HEADS = (_FRESH_HEAD, _RETRIED_HEAD, _LEASED_HEAD)


# A batch's rows travel as one JSON array, both ways: a read answers one row holding
# all of them, and a write takes all of them as one parameter, so that a batch of any
# size is one statement. Python's sqlite3 lets go of the GIL at each statement and each
# row it steps through, and in a process whose other threads are busy (a courier's
# deliveries) it waits for the GIL again at each one: a claim_many or finish_many of 64
# once waited more than 100 times (docs/dev/2026-12-05-statements-of-a-batch.md).
# Needs SQLite's JSON functions and UPDATE ... FROM (_SQLITE_NEEDED).
_HEAD_COLUMNS = "seq, id, qty, attempts, token, deadline"
_QUEUE_HEADS_AS_JSON = {
    head: f"SELECT json_group_array(json_array({_HEAD_COLUMNS})) FROM ({head})"
    for head in _QUEUE_HEADS
}

# Each lease: [seq, attempts, token, lease_until], the values of its ticket (_new_ticket).
_LEASE = """UPDATE jobs
  SET status = 'leased', attempts = json_extract(lease.value, '$[1]'),
      token = json_extract(lease.value, '$[2]'), owner = :owner,
      lease_until = json_extract(lease.value, '$[3]'), reason = NULL
  FROM json_each(:leases) AS lease WHERE jobs.seq = json_extract(lease.value, '$[0]')"""

# A ticket is live only if it matches the row in full and neither the lease nor
# the job's deadline has passed: the same owner may be an older run of itself.
# Each ticket: [n, id, qty, owner, token, attempt, lease_until], n its place in the
# batch; the answer: [n, seq, attempts, max_attempts, deadline] of each live one.
_SELECT_LIVE_LEASES = """SELECT json_group_array(json_array(n, seq, attempts, max_attempts,
    deadline)) FROM (
  SELECT json_extract(ticket.value, '$[0]') AS n, seq, attempts, max_attempts, deadline
  FROM json_each(:tickets) AS ticket
  JOIN jobs ON jobs.id = json_extract(ticket.value, '$[1]')
  WHERE status = 'leased' AND qty = json_extract(ticket.value, '$[2]')
    AND owner = json_extract(ticket.value, '$[3]')
    AND token = json_extract(ticket.value, '$[4]')
    AND attempts = json_extract(ticket.value, '$[5]')
    AND lease_until = json_extract(ticket.value, '$[6]')
    AND :now < lease_until AND :now < deadline)"""

# Each verdict: [seq, status, reason, available_at] (_settlement's).
_SETTLE = """UPDATE jobs
  SET status = json_extract(verdict.value, '$[1]'),
      reason = json_extract(verdict.value, '$[2]'),
      available_at = json_extract(verdict.value, '$[3]'), owner = NULL, lease_until = NULL
  FROM json_each(:verdicts) AS verdict WHERE jobs.seq = json_extract(verdict.value, '$[0]')"""

_SELECT_STATUS_TOKEN = "SELECT seq, status, token FROM jobs WHERE id = ?"

_INSERT_AUDIT = "INSERT INTO redrives (id, token, at_ms, note) VALUES (?, ?, ?, ?)"

_REQUEUE = """UPDATE jobs
  SET status = 'pending', attempts = 0, available_at = ?, deadline = ?,
      owner = NULL, lease_until = NULL, reason = NULL
  WHERE seq = ?"""


# --- Validation: one helper per kind of argument ------------------------------
# pgworker.py checks its arguments with these very helpers (and runs _Hooks and _round):
# the front end of both queues is this module's, and pgworker.py keeps only its
# connection, its transactions and its SQL.


def _reject(name: str, expected: str, value: object) -> ValueError:
    return ValueError(
        f"'{name}' must be {expected} (got {value!r} that is a {type(value).__name__!r})"
    )


def _exact_int(name: str, value: object, lo: int, hi: int) -> int:
    """Return ``value`` if it is an exact ``int`` in ``lo .. hi`` inclusive."""
    if type(value) is not int or not lo <= value <= hi:
        raise _reject(name, f"an int in {lo}..{hi}", value)
    return value


def _now_ms(name: str, value: object) -> int:
    """Return ``value`` if it is a valid time on the shared millisecond base."""
    return _exact_int(name, value, 0, MAX_NOW_MS)


def is_identifier(value: object) -> bool:
    """Return whether ``value`` is an identifier as the contract defines one.

    An identifier is an exact ``str`` that fully matches ``[A-Za-z0-9_-]{1,64}``:
    1-64 ASCII letters, digits, ``_`` or ``-`` (no trailing newline, no non-ASCII
    digit). Job ids, owners and redrive notes are identifiers; so are the ids and
    sender names the courier and the receiver check. Never raises.
    """
    return type(value) is str and _IDENTIFIER.fullmatch(value) is not None


def _identifier(name: str, value: object) -> str:
    """Return ``value`` if it is a str of 1-64 ASCII letters, digits, '_' or '-'."""
    if type(value) is not str or _IDENTIFIER.fullmatch(value) is None:
        raise _reject(name, "a str of 1-64 ASCII letters, digits, '_' or '-'", value)
    return value


def _exact_dict(name: str, value: object, keys: frozenset[str]) -> dict[Any, Any]:
    """Return ``value`` if it is an exact ``dict`` with exactly ``keys``."""
    if type(value) is not dict or value.keys() != keys:
        raise _reject(name, f"a dict with exactly the keys {sorted(keys)}", value)
    return value


def _exact_list(name: str, value: object) -> list[Any]:
    """Return ``value`` if it is an exact ``list`` of 0 to ``MAX_BATCH`` items."""
    if type(value) is not list or len(value) > MAX_BATCH:
        raise _reject(name, f"a list of 0..{MAX_BATCH} items", value)
    return value


def _event(name: str, value: object) -> tuple[str, int]:
    """Return ``(id, qty)`` of ``value`` if it is an event as ``enqueue`` takes it."""
    event = _exact_dict(name, value, EVENT_KEYS)
    return _identifier(f"{name}['id']", event["id"]), _exact_int(
        f"{name}['qty']", event["qty"], 1, MAX_QTY
    )


def _ticket(name: str, value: object) -> dict[str, Any]:
    """Return ``value`` if it is a well-formed ticket as ``claim`` returns it."""
    ticket = _exact_dict(name, value, frozenset(TICKET_KEYS))
    _identifier(f"{name}['id']", ticket["id"])
    _identifier(f"{name}['owner']", ticket["owner"])
    _exact_int(f"{name}['qty']", ticket["qty"], 1, MAX_QTY)
    _exact_int(f"{name}['token']", ticket["token"], 1, MAX_TOKEN)
    _exact_int(f"{name}['attempt']", ticket["attempt"], 1, MAX_ATTEMPTS)
    _exact_int(f"{name}['lease_until']", ticket["lease_until"], 1, MAX_LEASE_UNTIL)
    return ticket


def _outcome(name: str, value: object) -> str:
    """Return ``value`` if it is one of ``OUTCOMES``."""
    if type(value) is not str or value not in OUTCOMES:
        raise _reject(name, f"one of {OUTCOMES}", value)
    return value


def _result(name: str, value: object) -> tuple[dict[str, Any], str, int]:
    """Return ``(ticket, outcome, delay_ms)`` of an item of ``finish_many``."""
    result = _exact_dict(name, value, RESULT_KEYS)
    return (
        _ticket(f"{name}['ticket']", result["ticket"]),
        _outcome(f"{name}['outcome']", result["outcome"]),
        _exact_int(f"{name}['delay_ms']", result["delay_ms"], 0, MAX_DURATION_MS),
    )


def _jitter(value: object) -> float:
    """Return ``value`` if it is an exact int or float, finite, in 0..1."""
    # An int is compared as an int: math.isfinite() of a huge int would overflow.
    if type(value) is int and 0 <= value <= 1:
        return value
    if type(value) is float and math.isfinite(value) and 0 <= value <= 1:
        return value
    raise _reject("jitter", "a finite int or float in 0..1", value)


def _optional_hook(value: object) -> Fault | None:
    """Return ``value`` if it is ``None`` or callable (the fault hook)."""
    if value is not None and not callable(value):
        raise _reject("fault", "None or a callable", value)
    return value


def _callable(name: str, value: object) -> Callable[..., object]:
    if not callable(value):
        raise _reject(name, "a callable", value)
    return value


def _idle_connection(con: object) -> sqlite3.Connection:
    """Return ``con`` if it is a connection with no open transaction.

    The functions here own their transactions; committing or rolling back a
    caller's half-finished transaction would silently change its meaning.
    """
    if not isinstance(con, sqlite3.Connection):
        raise _reject("con", "a sqlite3.Connection", con)
    if con.in_transaction:
        raise ValueError("'con' has an open transaction; finish it before calling the queue")
    _require_sqlite()
    return con


# What the statements of a batch need of SQLite (see _QUEUE_HEADS_AS_JSON): UPDATE ...
# FROM from 3.33.0 on, and the JSON functions, built in from 3.38.0 on and before that in
# most builds (Python's own and the Linux distributions').
_SQLITE_NEEDED = (3, 33, 0)


def _require_sqlite() -> None:
    """Raise ``RuntimeError`` naming what is missing if this Python's SQLite cannot run
    the queue's statements (``_SQLITE_NEEDED`` and the JSON functions)."""
    problem = _sqlite_problem()
    if problem is not None:
        raise RuntimeError(problem)


@functools.cache
def _sqlite_problem() -> str | None:
    """What this Python's SQLite lacks for the queue, or ``None``; asked once."""
    if sqlite3.sqlite_version_info < _SQLITE_NEEDED:
        needed = ".".join(map(str, _SQLITE_NEEDED))
        return f"worker.py needs SQLite {needed} or later; this Python has {sqlite3.sqlite_version}"
    probe = sqlite3.connect(":memory:")
    try:
        probe.execute("SELECT json_array(1)").fetchone()
    except sqlite3.OperationalError:
        version = sqlite3.sqlite_version
        return f"worker.py needs SQLite's JSON functions; this Python's SQLite {version} lacks them"
    finally:
        probe.close()
    return None


def _path(path: object) -> str:
    """Return ``path`` (an exact str or an os.PathLike) as a str."""
    if type(path) is str or isinstance(path, os.PathLike):
        with contextlib.suppress(TypeError):  # a PathLike whose __fspath__ gives no path
            return os.fsdecode(os.fspath(path))
    raise _reject("path", "a str or os.PathLike naming a local file", path)


def _queue_path(path: object) -> str:
    """Return ``path`` as a str if it names a file (not an in-memory database)."""
    name = _path(path)
    if name in _IN_MEMORY_PATHS or "\x00" in name:
        raise _reject("path", "a local file path (not in-memory, not empty)", path)
    return name


# --- Each call's arguments, checked in the contract's order -------------------
# One home for the order (pgworker.py calls these too): the connection is checked
# first, by each module's own _idle_connection, then these, then the transaction.


def _enqueue_args(
    event: object, now_ms: object, ttl_ms: object, max_attempts: object
) -> tuple[str, int, int, int, int]:
    job_id, qty = _event("event", event)
    return (
        job_id,
        qty,
        _now_ms("now_ms", now_ms),
        _exact_int("ttl_ms", ttl_ms, 1, MAX_DURATION_MS),
        _exact_int("max_attempts", max_attempts, 1, MAX_ATTEMPTS),
    )


def _enqueue_many_args(
    events: object, now_ms: object, ttl_ms: object, max_attempts: object
) -> tuple[list[tuple[str, int]], int, int, int]:
    return (
        [_event(f"events[{i}]", event) for i, event in enumerate(_exact_list("events", events))],
        _now_ms("now_ms", now_ms),
        _exact_int("ttl_ms", ttl_ms, 1, MAX_DURATION_MS),
        _exact_int("max_attempts", max_attempts, 1, MAX_ATTEMPTS),
    )


def _claim_args(
    owner: object, now_ms: object, lease_ms: object, fault: object
) -> tuple[str, int, int, Fault | None]:
    return (
        _identifier("owner", owner),
        _now_ms("now_ms", now_ms),
        _exact_int("lease_ms", lease_ms, 1, MAX_DURATION_MS),
        _optional_hook(fault),
    )


def _claim_many_args(
    owner: object, now_ms: object, limit: object, lease_ms: object, fault: object
) -> tuple[str, int, int, int, Fault | None]:
    return (
        _identifier("owner", owner),
        _now_ms("now_ms", now_ms),
        _exact_int("limit", limit, 1, MAX_BATCH),
        _exact_int("lease_ms", lease_ms, 1, MAX_DURATION_MS),
        _optional_hook(fault),
    )


def _finish_args(
    ticket: object, outcome: object, now_ms: object, delay_ms: object, fault: object
) -> tuple[dict[str, Any], str, int, int, Fault | None]:
    return (
        _ticket("ticket", ticket),
        _outcome("outcome", outcome),
        _now_ms("now_ms", now_ms),
        _exact_int("delay_ms", delay_ms, 0, MAX_DURATION_MS),
        _optional_hook(fault),
    )


def _finish_many_args(
    results: object, now_ms: object, fault: object
) -> tuple[list[tuple[dict[str, Any], str, int]], int, Fault | None]:
    return (
        [
            _result(f"results[{i}]", result)
            for i, result in enumerate(_exact_list("results", results))
        ],
        _now_ms("now_ms", now_ms),
        _optional_hook(fault),
    )


def _redrive_args(
    job_id: object, now_ms: object, ttl_ms: object, note: object, fault: object
) -> tuple[str, int, int, str, Fault | None]:
    return (
        _identifier("job_id", job_id),
        _now_ms("now_ms", now_ms),
        _exact_int("ttl_ms", ttl_ms, 1, MAX_DURATION_MS),
        _identifier("note", note),
        _optional_hook(fault),
    )


# --- Transactions and hooks -------------------------------------------------


# model/queue.py keeps a deliberate copy of _Hooks: the model imports nothing it checks.
class _Hooks:
    """The fault hooks of one write transaction.

    ``reached(point)`` calls the hook for a change this path made and arms
    ``after-commit``; a path that never reaches a change point calls no hook.
    """

    def __init__(self, fault: Fault | None) -> None:
        self._fault = fault
        self.armed = False

    def reached(self, point: str) -> None:
        self.armed = True
        if self._fault is not None:
            self._fault(point)

    def committed(self) -> None:
        if self.armed and self._fault is not None:
            self._fault("after-commit")


@contextlib.contextmanager
def _write_transaction(con: sqlite3.Connection, fault: Fault | None = None) -> Iterator[_Hooks]:
    """Run the body in one ``BEGIN IMMEDIATE`` transaction.

    Any exception (``BaseException`` included) before COMMIT, or from COMMIT
    itself, rolls everything back and propagates unchanged. After COMMIT the
    ``after-commit`` hook runs if the body reached a change point; its error
    propagates and the committed state stays.
    """
    hooks = _Hooks(fault)
    con.execute("BEGIN IMMEDIATE")
    try:
        yield hooks
        con.execute("COMMIT")
    except BaseException:
        con.rollback()
        raise
    hooks.committed()


def _row(con: sqlite3.Connection, sql: str, params: Any) -> tuple[Any, ...] | None:
    """Fetch one row as a plain tuple, whatever ``row_factory`` the caller set."""
    cursor = con.cursor()
    cursor.row_factory = None
    row: tuple[Any, ...] | None = cursor.execute(sql, params).fetchone()
    cursor.close()
    return row


# --- 1. retry_delay ------------------------------------------------------------


def retry_delay(attempt: int, base_ms: int, cap_ms: int, jitter: float) -> int:
    """Return ``floor(min(cap_ms, base_ms * 2**(attempt-1)) * jitter)``.

    ``attempt`` is 1-16, ``base_ms`` 1-60000, ``cap_ms`` base_ms-60000 (exact
    ints); ``jitter`` is the caller's random ratio, a finite int or float in
    0-1. The cap applies before the ratio. Raises ``ValueError`` on bad input.
    """
    _exact_int("attempt", attempt, 1, MAX_ATTEMPTS)
    _exact_int("base_ms", base_ms, 1, MAX_DURATION_MS)
    _exact_int("cap_ms", cap_ms, base_ms, MAX_DURATION_MS)
    _jitter(jitter)
    capped: int = min(cap_ms, base_ms * 2 ** (attempt - 1))
    return math.floor(capped * jitter)


# --- 2. open_queue -------------------------------------------------------------


def open_queue(path: str | os.PathLike[str]) -> sqlite3.Connection:
    """Open (creating if needed) the queue file at ``path`` and return a connection.

    The connection has ``isolation_level=None``, a 1 s busy timeout,
    ``journal_mode=DELETE`` and ``synchronous=FULL``. The ``jobs`` and
    ``redrives`` tables are created in one transaction only if missing;
    existing rows are kept. Raises ``ValueError`` for a path that is not a str
    or PathLike, or that names an in-memory database (``""``, ``":memory:"``), and
    ``RuntimeError`` if this Python's SQLite is older than 3.33.0 or
    lacks the JSON functions (nothing is created).
    If initialisation fails the connection is closed and the error propagates.
    """
    name = _queue_path(path)
    _require_sqlite()
    con = sqlite3.connect(name, timeout=1, isolation_level=None)
    try:
        con.execute("PRAGMA journal_mode=DELETE").fetchall()
        con.execute("PRAGMA synchronous=FULL")
        with _write_transaction(con):
            for statement in SCHEMA + INDEXES:
                con.execute(statement)
    except BaseException:
        con.close()
        raise
    return con


# --- 3. enqueue ----------------------------------------------------------------

# The calls read alike on purpose, a single call and its batch as much as claim and
# finish: the arguments' checks in the contract's order, then one _write_transaction
# whose body names its change point. tests/parallel/planted.py quotes these bodies.
# pgworker.py restates every call's signature, checks and docstring on purpose, and
# model/queue.py claim_many's signature (tests/contract runs the examples on all three).


def enqueue(
    con: sqlite3.Connection,
    event: dict[str, Any],
    now_ms: int,
    ttl_ms: int,
    max_attempts: int = 3,
) -> bool:
    """Add the job ``event`` (exactly ``{"id", "qty"}``) as pending.

    Returns ``True`` for a new job (attempts 0, token 0, available now, due by
    ``now_ms + ttl_ms``) and ``False`` for an intake retry of the same id and
    qty, which keeps the whole existing row (its ttl and budget included).

    Raises:
        Conflict: the id exists with another qty.
        ValueError: a malformed argument; nothing was changed.
    """
    con = _idle_connection(con)
    job_id, qty, now_ms, ttl_ms, max_attempts = _enqueue_args(event, now_ms, ttl_ms, max_attempts)
    with _write_transaction(con):
        return _intake(con, job_id, qty, now_ms, now_ms + ttl_ms, max_attempts)


def enqueue_many(
    con: sqlite3.Connection,
    events: list[dict[str, Any]],
    now_ms: int,
    ttl_ms: int,
    max_attempts: int = 3,
) -> list[bool | Conflict]:
    """``enqueue`` each event of the list, in order, in one transaction.

    Returns one result per event: ``True`` (new job), ``False`` (intake retry,
    also of an id earlier in the same batch) or the ``Conflict`` that
    ``enqueue`` would raise, returned, not raised: that event writes nothing
    and the others still apply. See ``docs/batches.md``.

    Raises:
        ValueError: a malformed argument or event; nothing was changed.
    """
    con = _idle_connection(con)
    jobs, now_ms, ttl_ms, max_attempts = _enqueue_many_args(events, now_ms, ttl_ms, max_attempts)
    results: list[bool | Conflict] = []
    with _write_transaction(con):
        for job_id, qty in jobs:
            try:
                results.append(_intake(con, job_id, qty, now_ms, now_ms + ttl_ms, max_attempts))
            except Conflict as conflict:
                results.append(conflict)
    return results


def _intake(
    con: sqlite3.Connection, job_id: str, qty: int, now_ms: int, deadline: int, max_attempts: int
) -> bool:
    """Insert a new pending job, or recognise an intake retry (inside a transaction)."""
    existing = _row(con, _SELECT_QTY, (job_id,))
    if existing is None:
        con.execute(_INSERT_JOB, (job_id, qty, max_attempts, now_ms, deadline))
        return True
    if existing[0] == qty:
        return False
    raise Conflict(f"job {job_id!r} exists with qty {existing[0]}, not {qty}")


# --- 4. claim ------------------------------------------------------------------


def claim(
    con: sqlite3.Connection,
    owner: str,
    now_ms: int,
    lease_ms: int = 1000,
    fault: Fault | None = None,
) -> dict[str, Any] | None:
    """Lease the oldest claimable job to ``owner`` and return its ticket.

    In one transaction: first quarantine (``dead``) every pending or
    expired-leased job whose deadline has passed (reason ``deadline``) or
    whose budget is spent (``exhausted``); then take the lowest-seq job that is
    pending and due, or leased with ``lease_until <= now_ms``. Its attempts and
    fencing token go up by one and it is leased until
    ``min(now_ms + lease_ms, deadline)``.

    Returns the ticket ``{id, qty, owner, token, attempt, lease_until}``, or
    ``None`` when nothing is claimable (the quarantine is still committed, and
    no hook is called). Hooks: ``after-claim``, then ``after-commit``.

    Raises:
        ValueError: a malformed argument; nothing was changed.
    """
    con = _idle_connection(con)
    owner, now_ms, lease_ms, fault = _claim_args(owner, now_ms, lease_ms, fault)
    # The same shape as finish's, deliberately: the change, "nothing changed" with no
    # hook, then the hook point (rule 5 read as code, once per call).
    with _write_transaction(con, fault) as hooks:
        _quarantine(con, now_ms)
        ticket = _lease_next(con, owner, now_ms, lease_ms)
        if ticket is None:
            return None
        hooks.reached("after-claim")
    return ticket


def claim_many(
    con: sqlite3.Connection,
    owner: str,
    now_ms: int,
    limit: int,
    lease_ms: int = 1000,
    fault: Fault | None = None,
) -> list[dict[str, Any]]:
    """Lease up to ``limit`` (1-1000) jobs to ``owner`` in one transaction.

    The same as ``claim`` called ``limit`` times at ``now_ms``, stopping at the
    first ``None``: the quarantine runs once, then the lowest-seq claimable
    jobs are leased one by one. Returns the tickets in claim order; an empty
    list when nothing was claimable (the quarantine is still committed, no
    hook is called). Hooks: ``after-claim`` once after the last lease, then
    ``after-commit``. See ``docs/batches.md``.

    Raises:
        ValueError: a malformed argument; nothing was changed.
    """
    con = _idle_connection(con)
    owner, now_ms, limit, lease_ms, fault = _claim_many_args(owner, now_ms, limit, lease_ms, fault)
    with _write_transaction(con, fault) as hooks:
        _quarantine(con, now_ms)
        tickets = _lease_all(con, owner, now_ms, lease_ms, _claimable(con, now_ms, limit))
        if tickets:
            hooks.reached("after-claim")
    return tickets


def _quarantine(con: sqlite3.Connection, now_ms: int) -> None:
    """Step 1 of a claim: move every pending or expired-leased job whose deadline
    passed (``deadline``) or whose budget is spent (``exhausted``) to dead."""
    if _row(con, _QUARANTINE_DUE, {"now": now_ms}) == (1,):
        con.execute(_QUARANTINE_DEADLINE, {"now": now_ms})
        con.execute(_QUARANTINE_EXHAUSTED_PENDING)
        con.execute(_QUARANTINE_EXHAUSTED_LEASED, {"now": now_ms})


def _lease_next(
    con: sqlite3.Connection, owner: str, now_ms: int, lease_ms: int
) -> dict[str, Any] | None:
    """Steps 2-3 of a claim: lease the lowest-seq claimable job; its ticket or ``None``."""
    jobs = _claimable(con, now_ms, 1)
    return _lease(con, owner, now_ms, lease_ms, jobs[0]) if jobs else None


def _claimable(con: sqlite3.Connection, now_ms: int, limit: int) -> list[tuple[Any, ...]]:
    """The rows (seq, id, qty, attempts, token, deadline) of the ``limit`` lowest-seq
    jobs that are pending with ``available_at <= now_ms`` or leased with
    ``lease_until <= now_ms``, in seq order.

    Leasing them in turn is claiming ``limit`` times at ``now_ms``: after the
    quarantine every claimable job's deadline is later than ``now_ms``, so a lease
    takes its job out of the claimable ones and changes no other row.
    """
    cursor = con.cursor()
    cursor.row_factory = None
    arguments = {"now": now_ms, "limit": limit}
    answers = cursor.execute(_CLAIMABLE_QUEUES, arguments).fetchone()
    due = dict(zip(_QUEUE_HEADS, answers, strict=True))
    rows: list[tuple[Any, ...]] = []
    for head in _QUEUE_HEADS:
        if due[head]:
            (found,) = cursor.execute(_QUEUE_HEADS_AS_JSON[head], arguments).fetchone()
            rows += map(tuple, json.loads(found))
    cursor.close()
    rows.sort()  # by seq, which is unique: no two rows compare further
    return rows[:limit]


def _lease(
    con: sqlite3.Connection, owner: str, now_ms: int, lease_ms: int, job: tuple[Any, ...]
) -> dict[str, Any]:
    """Step 3 of a claim: lease the claimable ``job`` (a row of ``_claimable``) to
    ``owner``; its ticket."""
    (ticket,) = _lease_all(con, owner, now_ms, lease_ms, [job])
    return ticket


def _lease_all(
    con: sqlite3.Connection, owner: str, now_ms: int, lease_ms: int, jobs: list[tuple[Any, ...]]
) -> list[dict[str, Any]]:
    """Step 3 of a claim for each of the claimable ``jobs`` (rows of ``_claimable``), in
    one statement: lease them to ``owner``; their tickets, in the order of ``jobs``."""
    tickets = [_new_ticket(owner, now_ms, lease_ms, job) for job in jobs]
    if tickets:
        leases = [
            [job[0], ticket["attempt"], ticket["token"], ticket["lease_until"]]
            for job, ticket in zip(jobs, tickets, strict=True)
        ]
        con.execute(_LEASE, {"owner": owner, "leases": json.dumps(leases)})
    return tickets


def _new_ticket(owner: str, now_ms: int, lease_ms: int, job: tuple[Any, ...]) -> dict[str, Any]:
    """The ticket a lease of the claimable ``job`` gives ``owner``: the next token and
    attempt, the lease cut at the job's deadline."""
    _, job_id, qty, attempts, token, deadline = job
    return {
        "id": job_id,
        "qty": qty,
        "owner": owner,
        "token": token + 1,
        "attempt": attempts + 1,
        "lease_until": min(now_ms + lease_ms, deadline),
    }


# --- 5. finish -----------------------------------------------------------------


def _settlement(
    outcome: str, attempts: int, max_attempts: int, now_ms: int, delay_ms: int, deadline: int
) -> tuple[str, str | None, int]:
    """Decide ``(status, reason, available_at)`` for a live ticket's outcome."""
    if outcome == "ok":
        return "done", None, now_ms
    if outcome == "permanent":
        return "dead", "permanent", now_ms
    if attempts >= max_attempts:
        return "dead", "exhausted", now_ms
    if now_ms + delay_ms >= deadline:
        return "dead", "deadline", now_ms
    return "pending", "retry", now_ms + delay_ms


def finish(
    con: sqlite3.Connection,
    ticket: dict[str, Any],
    outcome: str,
    now_ms: int,
    delay_ms: int = 0,
    fault: Fault | None = None,
) -> str | bool:
    """Record the ``outcome`` (``ok``, ``retry`` or ``permanent``) of a ticket.

    The ticket must still be live: the job is ``leased`` and its qty, owner,
    token, attempts and lease_until equal the ticket's, and
    ``now_ms < lease_until`` and ``now_ms < deadline``. Otherwise nothing
    changes and the result is ``False`` (no hook is called).

    ``ok`` -> ``done``; ``permanent`` -> ``dead``/permanent; ``retry`` ->
    ``dead``/exhausted if the budget is spent, else ``dead``/deadline if
    ``now_ms + delay_ms >= deadline``, else ``pending``/retry, available at
    ``now_ms + delay_ms`` (``now_ms`` for every other status). Returns the new
    status. Hooks: ``after-finish``, then ``after-commit``.

    Raises:
        ValueError: a malformed argument; nothing was changed.
    """
    con = _idle_connection(con)
    ticket, outcome, now_ms, delay_ms, fault = _finish_args(
        ticket, outcome, now_ms, delay_ms, fault
    )
    # The same shape as claim's, deliberately (see there).
    with _write_transaction(con, fault) as hooks:
        status = _settle(con, ticket, outcome, now_ms, delay_ms)
        if status is None:
            return False
        hooks.reached("after-finish")
    return status


def finish_many(
    con: sqlite3.Connection,
    results: list[dict[str, Any]],
    now_ms: int,
    fault: Fault | None = None,
) -> list[str | bool]:
    """``finish`` each ``{"ticket", "outcome", "delay_ms"}`` of the list, in order,
    at ``now_ms``, in one transaction.

    Returns one result per item: the new status, or ``False`` for a ticket that
    is not live (also one finished earlier in the same batch). Hooks:
    ``after-finish`` once after the last update, then ``after-commit``, only if
    some item changed a job. See ``docs/batches.md``.

    Raises:
        ValueError: a malformed argument or item; nothing was changed.
    """
    con = _idle_connection(con)
    settlements, now_ms, fault = _finish_many_args(results, now_ms, fault)
    with _write_transaction(con, fault) as hooks:
        statuses = _settle_all(con, settlements, now_ms)
        if any(statuses):
            hooks.reached("after-finish")
    return statuses


def _settle(
    con: sqlite3.Connection, ticket: dict[str, Any], outcome: str, now_ms: int, delay_ms: int
) -> str | None:
    """Apply ``outcome`` to the job if ``ticket`` is live; the new status or ``None``."""
    (status,) = _settle_all(con, [(ticket, outcome, delay_ms)], now_ms)
    return status if isinstance(status, str) else None


# tests/parallel/planted.py calls _verdicts and _write_verdicts apart on purpose (a plant
# that checks the ticket before the write transaction).
def _settle_all(
    con: sqlite3.Connection, settlements: list[tuple[dict[str, Any], str, int]], now_ms: int
) -> list[str | bool]:
    """Apply each ``(ticket, outcome, delay_ms)`` to its job if its ticket is live, in
    order: one read of the live ones, one write of their verdicts. The new status of
    each, or ``False``."""
    verdicts = _verdicts(con, settlements, now_ms)
    _write_verdicts(con, verdicts)
    statuses: list[str | bool] = [False] * len(settlements)
    for n, (_, status, _, _) in verdicts.items():
        statuses[n] = status
    return statuses


def _verdicts(
    con: sqlite3.Connection, settlements: list[tuple[dict[str, Any], str, int]], now_ms: int
) -> dict[int, tuple[int, str, str | None, int]]:
    """For each settlement whose ticket is live, by its place in ``settlements``: its
    job's seq and ``_settlement``'s verdict."""
    sent = _first_of_each_ticket(settlements)
    if not sent:
        return {}
    tickets = [[n, *(settlements[n][0][key] for key in TICKET_KEYS)] for n in sent]
    arguments = {"tickets": json.dumps(tickets), "now": now_ms}
    (found,) = _row(con, _SELECT_LIVE_LEASES, arguments) or ("[]",)
    verdicts: dict[int, tuple[int, str, str | None, int]] = {}
    for n, seq, attempts, max_attempts, deadline in json.loads(found):
        _, outcome, delay_ms = settlements[n]
        verdicts[n] = (
            seq,
            *_settlement(outcome, attempts, max_attempts, now_ms, delay_ms, deadline),
        )
    return verdicts


def _write_verdicts(
    con: sqlite3.Connection, verdicts: dict[int, tuple[int, str, str | None, int]]
) -> None:
    """Write each verdict of ``_verdicts`` to its job's row, in one statement."""
    if verdicts:
        con.execute(_SETTLE, {"verdicts": json.dumps([[*v] for v in verdicts.values()])})


def _first_of_each_ticket(settlements: list[tuple[dict[str, Any], str, int]]) -> list[int]:
    """The places in ``settlements`` of the first settlement of each ticket, in order.

    Only these can find their ticket live: equal tickets match their row alike, and a
    settlement moves its row out of ``leased``, so a ticket given again later finds its
    job settled, or as unmatched as the first time (``False``). And no settlement makes
    a row match another ticket. So judging these alone, all against the rows as they
    were, is applying every settlement in order (pgworker.py's settle too).
    """
    firsts: dict[tuple[Any, ...], int] = {}
    for n, (ticket, _, _) in enumerate(settlements):
        firsts.setdefault(tuple(ticket[key] for key in TICKET_KEYS), n)
    return sorted(firsts.values())


# --- 6. redrive ----------------------------------------------------------------


def redrive(
    con: sqlite3.Connection,
    job_id: str,
    now_ms: int,
    ttl_ms: int,
    note: str,
    fault: Fault | None = None,
) -> bool:
    """Re-queue the dead job ``job_id`` with a fresh budget; return ``True``.

    In one transaction: write the audit row (id, current token, ``now_ms``,
    ``note``) to ``redrives``, then make the job pending with attempts 0,
    available now and due by ``now_ms + ttl_ms``. qty, max_attempts and the
    fencing token are kept, so no old ticket can ever become live again.
    Hooks: ``after-audit``, ``after-redrive``, then ``after-commit``.

    Raises:
        ValueError: a malformed argument, or no such job, or the job is not
            dead; nothing was changed and no audit row was written.
    """
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


def _validate_run(
    owner: object, clock: object, send: object, jitter: object, lease_ms: object
) -> None:
    """Validate ``run_once``'s own arguments, ``jitter`` first, before any clock read."""
    _jitter(jitter)
    _identifier("owner", owner)
    _exact_int("lease_ms", lease_ms, 1, MAX_DURATION_MS)
    _callable("clock", clock)
    _callable("send", send)


# model/queue.py keeps a deliberate copy of _deliver: the model imports nothing it checks.
def _deliver(send: Send, ticket: dict[str, Any], jitter: float) -> tuple[str, int]:
    """Call ``send`` once with a fresh ``{id, qty}`` and classify the answer.

    Returns ``(outcome, delay_ms)``. Only an exact ``True`` is ``ok``;
    ``Retryable`` is ``retry`` with a capped, jittered backoff; ``Permanent``
    is ``permanent``. Any other return raises ``BadAck``, and any other
    exception propagates untouched.
    """
    try:
        ack = send({"id": ticket["id"], "qty": ticket["qty"]})
    except Retryable:
        return "retry", retry_delay(ticket["attempt"], RETRY_BASE_MS, RETRY_CAP_MS, jitter)
    except Permanent:
        return "permanent", 0
    if ack is not True:
        raise BadAck(f"send must return exactly True, got {ack!r}")
    return "ok", 0


def classify_send(send: Send, ticket: dict[str, Any], jitter: float) -> tuple[str, int]:
    """Deliver ``ticket``'s job with ``send`` and classify the answer, as ``run_once`` does.

    ``send`` is called once, with a fresh ``{"id", "qty"}`` dict. Returns
    ``(outcome, delay_ms)`` for ``finish``: ``("ok", 0)`` for an exact ``True``;
    ``("retry", retry_delay(ticket["attempt"], 100, 1000, jitter))`` for
    ``Retryable``; ``("permanent", 0)`` for ``Permanent``. This is the function
    ``run_once`` uses (contract section 7); it writes nothing.

    Raises:
        ValueError: ``send`` is not callable, ``ticket`` is not a well-formed ticket,
            or ``jitter`` is not a finite number in 0..1; ``send`` was not called.
        BadAck: ``send`` returned something other than exactly ``True``.
        Any other exception from ``send`` propagates as is.
    """
    _callable("send", send)
    _ticket("ticket", ticket)
    _jitter(jitter)
    return _deliver(send, ticket, jitter)


def run_once(
    con: sqlite3.Connection,
    owner: str,
    clock: Clock,
    send: Send,
    jitter: float,
    lease_ms: int = 1000,
) -> dict[str, Any] | None:
    """Claim one job, deliver it with ``send`` outside any transaction, finish it.

    Returns ``None`` if nothing was claimable (``send`` is not called), else
    ``{"id", "token", "status"}`` where status is ``finish``'s result, or
    ``"stale"`` if the ticket was no longer live at the second clock reading.

    Raises:
        ValueError: a malformed argument (``jitter`` is checked before the
            clock is read); or the second ``clock()`` value is invalid or
            earlier than the first (the claim stays committed).
        BadAck: ``send`` returned something other than ``True``; the job stays
            leased until its lease expires.
        Any other exception from ``send`` propagates as is; the job stays leased.
    """
    _validate_run(owner, clock, send, jitter, lease_ms)
    return _round(claim, finish, con, owner, clock, send, jitter, lease_ms)


def _round(
    claim: Callable[..., dict[str, Any] | None],
    finish: Callable[..., str | bool],
    con: Any,
    owner: str,
    clock: Clock,
    send: Send,
    jitter: float,
    lease_ms: int,
) -> dict[str, Any] | None:
    """``run_once``'s round once its arguments are checked, with the ``claim`` and
    ``finish`` of the queue it runs on (this module's, or pgworker.py's)."""
    claimed_at = clock()
    ticket = claim(con, owner, claimed_at, lease_ms)
    if ticket is None:
        return None
    outcome, delay_ms = _deliver(send, ticket, jitter)
    finished_at = _now_ms("second clock()", clock())
    if finished_at < claimed_at:
        raise ValueError(f"clock went backwards: {finished_at} after {claimed_at}")
    status = finish(con, ticket, outcome, finished_at, delay_ms)
    return {"id": ticket["id"], "token": ticket["token"], "status": status or "stale"}


# --- 8. run_file ---------------------------------------------------------------


def _existing_queue_file(path: object) -> str:
    """Return ``path`` if it names an existing regular file; never create one.

    A missing path, a directory, a dangling symlink, ``""`` and ``":memory:"``
    (no such file) are all "no queue file here".
    """
    name = _path(path)
    if not os.path.isfile(name):
        raise FileNotFoundError(errno.ENOENT, "no queue file (run open_queue to create one)", name)
    return name


# run_once's arguments with a path for the connection, deliberately the same list
# (contract section 8); pgworker.run_database takes a conninfo in its place.
def run_file(
    path: str | os.PathLike[str],
    owner: str,
    clock: Clock,
    send: Send,
    jitter: float,
    lease_ms: int = 1000,
) -> dict[str, Any] | None:
    """Open the existing queue file at ``path``, ``run_once`` on it, and close it.

    Returns ``run_once``'s result. The connection is closed on success and on
    failure.

    Raises:
        FileNotFoundError: ``path`` is not an existing regular file.
        ValueError: a malformed argument.
        Anything ``run_once`` raises.
    """
    _validate_run(owner, clock, send, jitter, lease_ms)
    con = open_queue(_existing_queue_file(path))
    try:
        return run_once(con, owner, clock, send, jitter, lease_ms)
    finally:
        con.close()
