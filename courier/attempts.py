"""The attempt log: why each delivery attempt ended as it did, kept beside the queue.

The contract's two tables say what a job's state is, not why it got there: a 404,
a 409 and a refused connection all end in ``dead``. The courier keeps one row per
attempt here, outside ``jobs`` and ``redrives`` (which stay exactly the
contract's), and ``dead``, ``show`` and the web page read it. The rules it keeps:

1. **Where.** For a queue file ``q.sqlite`` the log is the sidecar file
   ``q.sqlite.attempts`` (SQLite, WAL mode): a courier writing its attempt never
   takes the queue file's write lock, so the log adds nothing to the contention
   between claims. For a PostgreSQL queue it is the table ``courier_attempts`` in
   the queue's own schema (one queue per schema keeps one log per queue).
2. **What.** Two rows per attempt. When a courier starts a delivery it writes a
   ``claimed`` row (``AttemptLog.announcing``; a batch's together,
   ``announcing_batches``): the job ``id``, the ``token`` of the
   lease it just took (a batch's from its tickets; one delivery's, which
   sees only the job's id and qty, read from the queue's row in the same
   statement), the ``owner`` and ``at_ms`` (a batch's: the time of its claim on the
   queue's time base), status ``leased``. When it knows the outcome it writes
   the outcome row: the same ``id``, ``token`` and ``owner``, ``at_ms`` (on the
   courier's time base), the ``outcome`` (``ok``, ``retry``, ``permanent``, or
   ``error`` when ``send`` raised something unexpected), the ``status`` that
   ``finish`` gave (``done``, ``pending``, ``dead``, ``stale``; ``leased`` after an
   error), and the cause: ``kind`` (``answer``, ``timeout``, ``connection``,
   ``exception``), ``http_status`` and ``detail`` (the start of the answer's
   body, or the error's text, at most 200 characters). A courier killed in
   between leaves the ``claimed`` row alone: ``history`` pairs the two and shows
   that attempt as "claimed by X at T, no outcome recorded".
3. **Best effort.** The log is diagnostics, not state: its sidecar runs with
   ``synchronous=NORMAL`` and its PostgreSQL session with ``synchronous_commit=off``
   (a power cut may lose its last rows, never the queue's), a round's attempts are
   written in one transaction (``record_many``), and a courier that cannot write
   it logs a line and goes on delivering. A queue with no log yet reads as one
   with no attempts. A batched courier's log holds a round's outcome rows back
   (``outcomes_with_claims``) and writes them with the next batch's claimed rows,
   in one statement and in that order, or on ``flush`` (the courier flushes when a
   round claims nothing, the queue is busy, and when it stops): a statement a
   batch rather than two. A courier killed meanwhile loses the rows held back (at
   most the last rounds'), and ``history`` shows those attempts as claimed with no
   outcome recorded.
4. The log is created by the first courier that writes to it, only if it is
   missing; on PostgreSQL ``courier init`` creates it too, as the queue's owner,
   so that couriers whose role may only insert into it write it
   (docs/postgres.md, roles). Readers never create it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from courier import backend
from courier.backend import Target
from courier.clock import clock_ms
from courier.delivery import Cause, Send

__all__ = [
    "ATTEMPT_COLUMNS",
    "CLAIMED",
    "NO_ATTEMPT",
    "NO_OUTCOME",
    "Attempt",
    "AttemptLog",
    "AttemptSink",
    "attempts_of",
    "cause_text",
    "count_dead",
    "create_log",
    "dead_causes",
    "dead_ids",
    "history",
    "last_attempts",
    "last_attempts_of",
    "sidecar_path",
]

ATTEMPT_COLUMNS = (
    "seq",
    "id",
    "token",
    "owner",
    "at_ms",
    "outcome",
    "status",
    "kind",
    "http_status",
    "detail",
)
TABLE = "courier_attempts"
_COLUMNS_DDL = """id TEXT NOT NULL, token BIGINT, owner TEXT NOT NULL, at_ms BIGINT NOT NULL,
  outcome TEXT NOT NULL, status TEXT NOT NULL, kind TEXT, http_status INTEGER, detail TEXT"""
_SQLITE_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (seq INTEGER PRIMARY KEY AUTOINCREMENT, {_COLUMNS_DDL})",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_by_id ON {TABLE} (id, seq)",
)
_PG_SCHEMA = (
    f"""CREATE TABLE IF NOT EXISTS {TABLE} (
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, {_COLUMNS_DDL})""",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_by_id ON {TABLE} (id, seq)",
)
# Whether the log's table is in the current schema: a courier whose role may only
# insert into it (docs/postgres.md, roles) must not run CREATE ... IF NOT EXISTS,
# which PostgreSQL refuses without the schema's CREATE privilege even when the table is
# there.
_PG_HAS_LOG = f"""SELECT to_regclass(quote_ident(current_schema()) || '.{TABLE}') IS NOT NULL"""
# The log's own session commits without waiting for the WAL flush, as the sidecar's
# synchronous=NORMAL does (rule 3); the queue's connection keeps the server's setting.
_PG_BEST_EFFORT = "SET synchronous_commit = off"
_INSERT = f"""INSERT INTO {TABLE}
  (id, token, owner, at_ms, outcome, status, kind, http_status, detail)
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"""
# A round's rows on a file: one statement of a constant text (one round trip, no
# transaction of its own to begin and commit), its rows in the order given, passed as one
# JSON array of rows. Python's sqlite3 lets go of the GIL at each statement of an
# executemany, and a courier's delivery thread holds it about 20 us before it gives it
# back: one statement spares a batch of 64 that wait 64 times
# (docs/dev/2026-12-05-statements-of-a-batch.md).
_INSERT_MANY = f"""INSERT INTO {TABLE}
  (id, token, owner, at_ms, outcome, status, kind, http_status, detail)
  SELECT json_extract(value, '$[0]'), json_extract(value, '$[1]'),
         json_extract(value, '$[2]'), json_extract(value, '$[3]'),
         json_extract(value, '$[4]'), json_extract(value, '$[5]'),
         json_extract(value, '$[6]'), json_extract(value, '$[7]'),
         json_extract(value, '$[8]')
  FROM json_each(:rows) ORDER BY key"""
# On PostgreSQL, one COPY, its rows in the order given (one round trip, its own
# transaction). Measured for 128 rows (a batch's outcome and claimed rows): 0.9 ms, where
# one INSERT of a JSON array of rows took 1.5 ms with the same client time, the rest the
# server's parsing of the JSON; for 64, a pipeline of 64 INSERTs in a transaction took
# 1.4 ms and one INSERT of 64 VALUES rows 2.5 ms. COPY takes no expressions: every row
# comes with its time.
_COPY = f"""COPY {TABLE}
  (id, token, owner, at_ms, outcome, status, kind, http_status, detail) FROM STDIN"""
CLAIMED = "claimed"  # the outcome of a row written as a delivery starts
# One delivery's claimed row: the token is the one of the lease the courier holds on the
# job (the courier's claim committed just before), the time the queue's time base (on
# PostgreSQL the server's clock as the statement runs).
_PG_NOW_MS = "CAST(extract(epoch FROM clock_timestamp()) * 1000 AS BIGINT)"
_INSERT_CLAIMED = {
    "sqlite": f"""INSERT INTO {TABLE} (id, token, owner, at_ms, outcome, status)
  VALUES (:id, (SELECT token FROM queue.jobs
                WHERE id = :id AND owner = :owner AND status = 'leased'),
          :owner, :now, '{CLAIMED}', 'leased')""",
    "postgres": f"""INSERT INTO {TABLE} (id, token, owner, at_ms, outcome, status)
  VALUES (:id, (SELECT token FROM jobs WHERE id = :id AND owner = :owner AND status = 'leased'),
          :owner, {_PG_NOW_MS}, '{CLAIMED}', 'leased')""",
}
_ATTACH_QUEUE = "ATTACH DATABASE ? AS queue"
_SELECT_OF = f"SELECT {', '.join(ATTEMPT_COLUMNS)} FROM {TABLE} WHERE id = ? ORDER BY seq"
_SELECT_LAST = f"""SELECT {", ".join(ATTEMPT_COLUMNS)} FROM {TABLE}
  WHERE seq IN (SELECT max(seq) FROM {TABLE} GROUP BY id)"""
# The cause of a dead job, by its last row in the log: what dead jobs are grouped by.
# The error class of a connection or exception cause is its detail up to the first ':'.
NO_ATTEMPT = "no attempt recorded"
NO_OUTCOME = "claimed, no outcome recorded"
_CAUSE = """CASE WHEN a.id IS NULL THEN '{none}'
     WHEN a.outcome = '{claimed}' THEN '{no_outcome}'
     WHEN a.kind = 'answer' THEN 'HTTP ' || CAST(a.http_status AS TEXT)
     WHEN a.kind IN ('connection', 'exception') THEN a.kind || ': ' || {error_class}
     ELSE COALESCE(a.kind, a.outcome) END"""
_DEAD_WITH_CAUSE = """SELECT j.seq, j.id, j.reason, {cause} AS cause
  FROM {jobs} j LEFT JOIN {log} a
    ON a.seq = (SELECT max(l.seq) FROM {log} l WHERE l.id = j.id)
  WHERE j.status = 'dead'"""
_DIALECT = {
    "sqlite": {
        "error_class": "substr(a.detail, 1, instr(a.detail || ':', ':') - 1)",
        "jobs": "main.jobs",
        "log": f"log.{TABLE}",
    },
    "postgres": {"error_class": "split_part(a.detail, ':', 1)", "jobs": "jobs", "log": TABLE},
}


def _dead_with_cause(kind: str) -> str:
    words = _DIALECT[kind]
    cause = _CAUSE.format(
        none=NO_ATTEMPT, claimed=CLAIMED, no_outcome=NO_OUTCOME, error_class=words["error_class"]
    )
    return _DEAD_WITH_CAUSE.format(cause=cause, jobs=words["jobs"], log=words["log"])


_DEAD_CAUSES = {
    kind: f"""SELECT reason, cause, count(*) FROM ({_dead_with_cause(kind)}) dead
  GROUP BY reason, cause ORDER BY count(*) DESC, reason, cause"""
    for kind in _DIALECT
}
_DEAD_MATCHING = """(CAST(:reason AS TEXT) IS NULL OR reason = :reason)
    AND (CAST(:cause AS TEXT) IS NULL OR cause = :cause)
    AND (CAST(:prefix AS TEXT) IS NULL OR substr(id, 1, length(:prefix)) = :prefix)
    AND (CAST(:after AS BIGINT) IS NULL OR seq > :after)
    AND (CAST(:before AS BIGINT) IS NULL OR seq < :before)"""
_DEAD_IDS = {
    (kind, order): f"""SELECT id FROM ({_dead_with_cause(kind)}) dead
  WHERE {_DEAD_MATCHING} ORDER BY seq {order} LIMIT :limit"""
    for kind in _DIALECT
    for order in ("ASC", "DESC")
}
_COUNT_DEAD = {
    kind: f"SELECT count(*) FROM ({_dead_with_cause(kind)}) dead WHERE {_DEAD_MATCHING}"
    for kind in _DIALECT
}
_DEAD_BY_REASON = """SELECT reason, count(*) FROM jobs WHERE status = 'dead'
  GROUP BY reason ORDER BY count(*) DESC, reason"""
# Without a log every dead job's cause is NO_ATTEMPT: the same filters on the jobs alone.
_NO_LOG = f"""(SELECT seq, id, reason, '{NO_ATTEMPT}' AS cause FROM jobs WHERE status = 'dead')"""
_DEAD_IDS_NO_LOG = {
    order: f"SELECT id FROM {_NO_LOG} dead WHERE {_DEAD_MATCHING} ORDER BY seq {order} LIMIT :limit"
    for order in ("ASC", "DESC")
}
_COUNT_DEAD_NO_LOG = f"SELECT count(*) FROM {_NO_LOG} dead WHERE {_DEAD_MATCHING}"
_SELECT_LAST_OF = f"""SELECT {", ".join(ATTEMPT_COLUMNS)} FROM {TABLE}
  WHERE seq = (SELECT max(seq) FROM {TABLE} WHERE id = ?)"""
_PG_HAS_TABLE = f"SELECT to_regclass(quote_ident(current_schema()) || '.{TABLE}') IS NOT NULL"


@dataclass(frozen=True)
class Attempt:
    """One attempt as the courier saw it: its ticket, when, the outcome and the cause.

    ``outcome`` is how the answer was classified (``ok``, ``retry``, ``permanent``)
    or ``error`` (``send`` raised something else; the job stays leased); ``status``
    is what ``finish`` made of it (``done``, ``pending``, ``dead``, ``stale``) or
    ``leased`` after an error.
    """

    id: str
    token: int | None
    owner: str
    at_ms: int
    outcome: str
    status: str
    cause: Cause | None


class AttemptSink(Protocol):
    """Where ``courier.runner.run_courier`` puts each round's attempts (``AttemptLog``
    is one): ``record_many`` may hold them back until ``flush``."""

    def record_many(self, attempts: list[Attempt]) -> None: ...

    def flush(self) -> None: ...


def sidecar_path(queue: Target) -> Path:
    """The attempt log's file beside the queue file ``queue``."""
    path = Path(queue)
    return path.with_name(path.name + ".attempts")


def create_log(con: Any) -> bool:
    """Create the attempt log's table and index in the PostgreSQL connection's current
    schema if the table is missing (``courier init`` does it as the queue's owner, so
    that couriers need only insert into it); ``False`` if it was there."""
    (there,) = con.execute(_PG_HAS_LOG).fetchone()
    if there:
        return False
    for statement in _PG_SCHEMA:
        con.execute(statement)
    return True


class AttemptLog:
    """The writer of one queue's attempt log (an ``AttemptSink``).

    Keeps its own connection: the sidecar file's, or a second connection to the
    PostgreSQL database (the courier's queue connection is never in a transaction
    of the log's). With ``outcomes_with_claims``, ``record_many`` holds the rows
    back for the next ``claimed_many`` or ``flush`` (rule 3). ``close`` it when
    done: rows still held back are dropped, so ``flush`` first.
    """

    def __init__(self, queue: Target, outcomes_with_claims: bool = False) -> None:
        self.queue = queue
        self.outcomes_with_claims = outcomes_with_claims
        self._con: Any = None
        self._held: list[tuple[Any, ...]] = []  # outcome rows held back (rule 3)
        self._lock = threading.Lock()  # the claims and the outcomes may come from two threads

    def _connection(self) -> Any:
        if self._con is not None:
            return self._con
        if backend.is_conninfo(self.queue):
            con = backend.connect_existing(self.queue)
            try:
                con.execute(_PG_BEST_EFFORT)
                create_log(con)
            except BaseException:
                con.close()
                raise
        else:
            con = sqlite3.connect(sidecar_path(self.queue), timeout=1, isolation_level=None)
            con.execute("PRAGMA journal_mode=WAL")
            con.execute("PRAGMA synchronous=NORMAL")
            for statement in _SQLITE_SCHEMA:
                con.execute(statement)
            con.execute(_ATTACH_QUEUE, (str(self.queue),))  # read for a claimed row's token
        self._con = con
        return con

    def claimed(self, job_id: str, owner: str) -> None:
        """Write the claimed row of the delivery ``owner`` starts of ``job_id`` (rule 2)."""
        kind = "postgres" if backend.is_conninfo(self.queue) else "sqlite"
        params = {"id": job_id, "owner": owner, "now": clock_ms()}
        con = self._connection()
        try:
            backend.qmark(con).execute(_INSERT_CLAIMED[kind], params)
        except Exception:
            self.close()
            raise

    def claimed_many(self, claims: list[tuple[str, int]], owner: str, at_ms: int) -> None:
        """Write the claimed rows of the deliveries ``owner`` starts, each a job's id and
        the token of its ticket, claimed at ``at_ms`` on the queue's time base, in one
        statement, after any outcome rows held back (a batch's claims are one commit;
        rules 2 and 3)."""
        if not claims:
            return
        claimed = [
            (job_id, token, owner, at_ms, CLAIMED, "leased", None, None, None)
            for job_id, token in claims
        ]
        with self._lock:
            rows, self._held = [*self._held, *claimed], []
        self._write(rows)

    def announcing_batches(
        self, owner: str, log: Callable[[str], None]
    ) -> Callable[[list[dict[str, Any]], int], None]:
        """For batched rounds (``courier.batch_rounds``), what ``announcing`` is to one
        delivery: called with a batch's tickets and the time of their claim before its
        deliveries start, it writes their claimed rows at once; rows that cannot be
        written cost ``log`` a line, never the deliveries."""

        def announce(tickets: list[dict[str, Any]], claimed_at: int) -> None:
            try:
                claims = [(ticket["id"], ticket["token"]) for ticket in tickets]
                self.claimed_many(claims, owner, claimed_at)
            except Exception as error:
                log(f"{owner}: could not record the claims ({type(error).__name__}: {error})")

        return announce

    def announcing(self, send: Send, owner: str, log: Callable[[str], None]) -> Send:
        """``send``, which first writes the claimed row of each delivery; a row that
        cannot be written costs ``log`` a line, never the delivery."""

        def announced(event: dict[str, Any]) -> bool:
            try:
                self.claimed(event["id"], owner)
            except Exception as error:
                log(f"{owner}: could not record the claim ({type(error).__name__}: {error})")
            return send(event)

        announced.send = send  # type: ignore[attr-defined]  # for the cause of its answer
        return announced

    def record(self, attempt: Attempt) -> None:
        """Append one attempt (its own transaction)."""
        self.record_many([attempt])

    def record_many(self, attempts: list[Attempt]) -> None:
        """Append ``attempts`` in one transaction (a batch's are one commit), or hold
        them back for the next claimed rows (``outcomes_with_claims``, rule 3)."""
        rows = [_row(attempt) for attempt in attempts]
        with self._lock:
            if self.outcomes_with_claims:
                self._held.extend(rows)
                return
        self._write(rows)

    def flush(self) -> None:
        """Write the outcome rows held back, if any (one statement)."""
        with self._lock:
            rows, self._held = self._held, []
        self._write(rows)

    def _write(self, rows: list[tuple[Any, ...]]) -> None:
        """Append ``rows`` in one statement; a failure closes the connection (the next
        write makes another) and is raised, the rows dropped (rule 3)."""
        if not rows:
            return
        con = self._connection()
        try:
            if len(rows) == 1:
                backend.qmark(con).execute(_INSERT, rows[0])
            elif isinstance(con, sqlite3.Connection):
                con.execute(_INSERT_MANY, {"rows": json.dumps(rows)})
            else:
                with con.cursor() as cursor, cursor.copy(_COPY) as copy:
                    for row in rows:
                        copy.write_row(row)
        except Exception:
            self.close()
            raise

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None


def _row(attempt: Attempt) -> tuple[Any, ...]:
    cause = attempt.cause
    return (
        attempt.id,
        attempt.token,
        attempt.owner,
        attempt.at_ms,
        attempt.outcome,
        attempt.status,
        None if cause is None else cause.kind,
        None if cause is None else cause.http_status,
        None if cause is None else cause.detail,
    )


def _reader(queue: Target) -> Any | None:
    """A connection to the existing log of ``queue``, or ``None`` if it has none yet."""
    if backend.is_conninfo(queue):
        con = backend.connect_existing(queue)
        (exists,) = con.execute(_PG_HAS_TABLE).fetchone()
        if exists:
            return con
        con.close()
        return None
    path = sidecar_path(queue)
    if not path.is_file():
        return None
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True, timeout=1)
    try:
        con.execute(f"SELECT 1 FROM {TABLE} LIMIT 1")
    except sqlite3.Error:
        con.close()
        return None
    return con


def _read(queue: Target, statement: str, params: tuple[Any, ...]) -> list[dict[str, Any]]:
    con = _reader(queue)
    if con is None:
        return []
    try:
        rows = backend.qmark(con).execute(statement, params).fetchall()
    finally:
        con.close()
    return [dict(zip(ATTEMPT_COLUMNS, row, strict=True)) for row in rows]


def attempts_of(queue: Target, job_id: str) -> list[dict[str, Any]]:
    """Every recorded attempt of ``job_id``, oldest first (``[]`` if none or no log)."""
    return _read(queue, _SELECT_OF, (job_id,))


def last_attempts(queue: Target) -> dict[str, dict[str, Any]]:
    """The latest row of each job's log, by job id: an outcome, or the claimed row of an
    attempt that left none (``outcome`` ``claimed``)."""
    return {row["id"]: row for row in _read(queue, _SELECT_LAST, ())}


def cause_text(attempt: dict[str, Any]) -> str:
    """The cause of one recorded outcome in words: ``HTTP 409 {...}``, ``timeout: ...``."""
    if attempt["kind"] == "answer":
        return f"HTTP {attempt['http_status']} {attempt['detail'] or ''}".strip()
    if attempt["kind"] is None:
        return str(attempt["outcome"])
    return f"{attempt['kind']}: {attempt['detail']}"


def history(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A job's attempts, one each (rule 2): each claimed row paired with the outcome
    row of the same token and owner, oldest first.

    Each attempt has the outcome row's keys (``outcome`` and ``status`` ``None`` when
    no outcome was recorded) and ``claimed_at_ms`` (``None`` for an outcome written
    without its claimed row, by an older courier). ``words`` says it for a person.
    """
    attempts: list[dict[str, Any]] = []
    open_claims: dict[tuple[Any, str], dict[str, Any]] = {}
    for row in rows:
        key = (row["token"], row["owner"])
        if row["outcome"] == CLAIMED:
            attempt = {**row, "claimed_at_ms": row["at_ms"], "outcome": None, "status": None}
            attempts.append(attempt)
            open_claims[key] = attempt
            continue
        claim = open_claims.pop(key, None)
        if claim is None:
            attempts.append({**row, "claimed_at_ms": None})
        else:
            claim.update({**row, "claimed_at_ms": claim["claimed_at_ms"]})
    return attempts


def last_attempts_of(queue: Target, job_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The latest row of the log of each of ``job_ids`` that has one, by job id."""
    con = _reader(queue) if job_ids else None
    if con is None:
        return {}
    try:
        found = {}
        for job_id in job_ids:
            row = backend.qmark(con).execute(_SELECT_LAST_OF, (job_id,)).fetchone()
            if row is not None:
                found[job_id] = dict(zip(ATTEMPT_COLUMNS, row, strict=True))
    finally:
        con.close()
    return found


def _joined(queue: Target) -> tuple[Any, str | None]:
    """A reading connection to the queue, and the dialect of its log joined to it
    (``None``: no log yet). On a file the sidecar is attached read-only as ``log``."""
    con = backend.connect_existing(queue)
    if backend.is_conninfo(queue):
        (exists,) = con.execute(_PG_HAS_TABLE).fetchone()
        return con, "postgres" if exists else None
    path = sidecar_path(queue)
    if not path.is_file():
        return con, None
    try:
        con.execute(_ATTACH_LOG, (f"{path.resolve().as_uri()}?mode=ro",))
        con.execute(f"SELECT 1 FROM log.{TABLE} LIMIT 1")
    except sqlite3.Error:
        return con, None
    return con, "sqlite"


_ATTACH_LOG = "ATTACH DATABASE ? AS log"


def dead_causes(queue: Target) -> list[dict[str, Any]]:
    """The dead jobs grouped by reason and cause (their last row in the log: ``HTTP 409``,
    ``timeout``, ``connection: ConnectionRefusedError``, ``NO_OUTCOME``, ``NO_ATTEMPT``),
    largest group first: ``{"reason", "cause", "jobs"}`` each."""
    con, kind = _joined(queue)
    try:
        q = backend.qmark(con)
        if kind is None:
            rows = [(reason, NO_ATTEMPT, n) for reason, n in q.execute(_DEAD_BY_REASON).fetchall()]
        else:
            rows = q.execute(_DEAD_CAUSES[kind]).fetchall()
    finally:
        con.close()
    return [{"reason": reason, "cause": cause, "jobs": int(n)} for reason, cause, n in rows]


def dead_ids(
    queue: Target,
    reason: str | None = None,
    cause: str | None = None,
    prefix: str | None = None,
    limit: int = 1000,
    after: int | None = None,
    before: int | None = None,
) -> list[str]:
    """The ids of the dead jobs of ``reason``, of ``cause`` (as ``dead_causes`` names it)
    and starting with ``prefix`` (``None``: any), lowest seq first, at most ``limit``:
    the first ones, or right after seq ``after``, or right before seq ``before``."""
    params = {"reason": reason, "cause": cause, "prefix": prefix, "limit": limit}
    params |= {"after": after, "before": before}
    order = "ASC" if before is None else "DESC"
    con, kind = _joined(queue)
    try:
        statement = _DEAD_IDS_NO_LOG[order] if kind is None else _DEAD_IDS[(kind, order)]
        rows = backend.qmark(con).execute(statement, params).fetchall()
    finally:
        con.close()
    ids = [str(job_id) for (job_id,) in rows]
    return ids if before is None else ids[::-1]


def count_dead(
    queue: Target, reason: str | None = None, cause: str | None = None, prefix: str | None = None
) -> int:
    """How many dead jobs ``dead_ids`` would name without a limit."""
    params = {"reason": reason, "cause": cause, "prefix": prefix, "after": None, "before": None}
    con, kind = _joined(queue)
    try:
        statement = _COUNT_DEAD_NO_LOG if kind is None else _COUNT_DEAD[kind]
        (count,) = backend.qmark(con).execute(statement, params).fetchone()
    finally:
        con.close()
    return int(count)
