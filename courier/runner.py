"""The courier: a bounded loop of ``worker.run_file`` rounds with a real clock and HTTP.

Rules this module keeps:

1. On a queue file, time is the host's wall clock in milliseconds (``clock_ms``):
   every courier and the receiver on one host share that base. On PostgreSQL it
   is the database server's clock (``courier.backend.server_clock_ms``), read on
   the courier's own connection, so couriers on many hosts judge every lease on
   one time base whatever their own clocks say. The loop's own bounds use the
   monotonic clock, so a wall-clock step cannot make it spin or stop early.
2. The send is ``courier.delivery.HttpSend`` (re-exported here with
   ``classify_status`` and ``Cause``): how an answer maps onto the worker's
   outcomes is said there, once.
3. The jitter that ``run_file`` needs comes from ``random.random()`` here; the
   worker itself has no randomness.
4. Every loop is bounded in count and time. When the queue has nothing claimable
   (``run_file`` returned ``None``) or the file is busy (``database is locked``
   after the 1 s busy timeout), the courier pauses with a capped, jittered backoff
   instead of dying or spinning. A busy error during ``finish`` leaves the job
   leased; its lease expires and it is delivered again, which the receiver's inbox
   absorbs.
5. Each round's cause is kept: ``HttpSend`` attaches a ``Cause`` (the HTTP status
   and the start of the body, a timeout, a connection error) to what it returns
   or raises, and ``run_courier`` hands every attempt to its
   ``attempts`` log (``courier.attempts``), an unexpected exception of ``send``
   included (class and message), before that exception propagates.
6. The first SIGINT or SIGTERM stops the loop after the current delivery and says
   so; with ``impatient``, a second one raises ``KeyboardInterrupt`` at once, also
   in the middle of a hung delivery (the job stays leased until its lease ends).
7. ``StallAfterAcks`` is a crash drill: after the N-th acknowledged delivery it
   writes a report (with the ticket it captured before sending) and waits to be
   killed, so a supervisor can SIGKILL it between the receiver's commit and the
   queue's ``finish`` deterministically, not by timing luck.
8. A courier keeps its connection from one round to the next (``FileRounds``,
   ``PgRounds``): opening a queue file costs more than a claim. On a file it is
   opened again when the file at the path is replaced, and a removed file ends the
   courier with run_file's ``FileNotFoundError``.
9. Couriers of one queue file take turns at writing it: a round's claim and its
   finish each wait for an exclusive ``flock`` on the file, which the kernel hands
   to a waiter as soon as it is given back. SQLite's busy handler alone is not fair
   (its sleeps grow to 100 ms while newcomers write first, so with 8 couriers one
   could wait out the 1 s busy timeout again and again). The turn is given back
   before each send, so no courier holds it while it waits for an answer. Other
   writers (the CLI, the web page, other programs) do not take turns and meet the
   couriers in SQLite's busy handler as before. A courier stopped (SIGSTOP) in the
   middle of a claim or a finish holds up the others until it goes on or dies, as
   it would by holding SQLite's write lock.
"""

from __future__ import annotations

import fcntl
import itertools
import json
import os
import random
import signal
import sqlite3
import stat
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import worker
from courier import backend
from courier.backend import Target
from courier.delivery import (
    Cause,
    HttpSend,
    cause_of,
    classify_status,
    describe_cause,
    outcome_of,
)
from courier.queueview import connect_existing, leased_ticket, unfinished_count

__all__ = [
    "Attempt",
    "AttemptSink",
    "Cause",
    "CourierReport",
    "FileRounds",
    "HttpSend",
    "Limits",
    "PgRounds",
    "StallAfterAcks",
    "Step",
    "StopSignal",
    "cause_of",
    "classify_status",
    "clock_ms",
    "is_busy",
    "is_transient",
    "pause",
    "run_courier",
    "stop_on_signals",
]

IDLE_BASE_MS = 20
IDLE_CAP_MS = 250
PAUSE_SLICE_S = 0.05
_SQLITE_BUSY_CODES = frozenset({5, 6})  # SQLITE_BUSY, SQLITE_LOCKED (the primary codes)

Log = Callable[[str], None]
Send = Callable[[dict[str, Any]], bool]
Step = Callable[[Any, str, Callable[[], int], Send, float, int], dict[str, Any] | None]
"""One round: ``worker.run_file``'s signature and result (a drill may wrap it)."""


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
    """Where ``run_courier`` puts each attempt (``courier.attempts.AttemptLog``)."""

    def record(self, attempt: Attempt) -> None: ...


def clock_ms() -> int:
    """The host's wall clock in whole milliseconds: the queue's shared time base."""
    return time.time_ns() // 1_000_000


def _print(line: str) -> None:
    print(line, flush=True)


class StopSignal(threading.Event):
    """A stop event that remembers the signal that set it (``signum``), if any."""

    signum: int | None = None


def stop_on_signals(log: Log | None = None, impatient: bool = False) -> StopSignal:
    """An event that SIGINT and SIGTERM set, so that a loop stops between its steps.

    Installs the handlers for this process (call it from the main thread). The first
    signal sets the event (and ``signum``) and, with ``log``, says that the process
    stops after the current step. With ``impatient`` a second signal raises
    ``KeyboardInterrupt`` where the main thread is, a blocked socket read included;
    without it, later signals are ignored as the first was.
    """
    stop = StopSignal()

    def handle(signum: int, frame: object) -> None:
        if stop.is_set() and impatient:
            raise KeyboardInterrupt
        if stop.is_set():
            return
        stop.signum = signum
        stop.set()
        if log is not None:
            again = "; send it again to stop at once" if impatient else ""
            log(f"{signal.Signals(signum).name}: stopping after the current delivery{again}")

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
    return stop


# --- The crash drill ----------------------------------------------------------------


def write_json_atomically(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` so that a reader sees all of it or nothing."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(payload), encoding="utf-8")
    os.replace(partial, path)


@dataclass
class StallAfterAcks:
    """Wrap a ``send``: after the N-th acknowledged delivery, report and stall.

    Before each send it captures this courier's ticket from the queue file. After the
    ``after_acks``-th ``True`` it writes ``{"pid", "owner", "event", "ticket",
    "acked_at_ms"}`` to ``report_path`` (atomically) and sleeps up to
    ``stall_seconds``: the receiver has committed and the queue has not been told,
    which is the moment a supervisor kills it. If nobody does, it carries on as a
    late courier whose ``finish`` will find its lease gone (status ``stale``).
    """

    send: Send
    queue_path: Target
    owner: str
    after_acks: int
    report_path: Path
    stall_seconds: float
    acks: int = 0

    def __post_init__(self) -> None:
        if type(self.after_acks) is not int or self.after_acks < 1:
            raise ValueError(f"'after_acks' must be a positive int, got {self.after_acks!r}")
        if not 0 < self.stall_seconds <= 600:
            raise ValueError(f"'stall_seconds' must be in (0, 600], got {self.stall_seconds!r}")

    def __call__(self, event: dict[str, Any]) -> bool:
        ticket = leased_ticket(self.queue_path, event["id"], self.owner)
        acked = self.send(event)
        self.acks += 1
        if self.acks == self.after_acks:
            report = {
                "pid": os.getpid(),
                "owner": self.owner,
                "event": event,
                "ticket": ticket,
                "acked_at_ms": clock_ms(),
            }
            write_json_atomically(self.report_path, report)
            pause(self.stall_seconds, threading.Event())
        return acked


# --- The loop -------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """When a courier stops. ``max_runs`` and ``max_seconds`` bound it unless ``None``.

    ``None`` for both is a courier that runs until it is stopped (a service
    manager's SIGTERM). ``max_idle_ms``: stop once nothing was claimable for that
    long (``None``: never). ``until_drained``: stop as soon as nothing is claimable
    and no job is pending or leased any more.
    """

    max_runs: int | None = 10_000
    max_seconds: float | None = 60.0
    max_idle_ms: int | None = None
    until_drained: bool = False

    def __post_init__(self) -> None:
        runs = self.max_runs
        if runs is not None and (type(runs) is not int or not 1 <= runs <= 10**7):
            raise ValueError(f"'max_runs' must be an int in 1..10**7, got {runs!r}")
        if self.max_seconds is not None and not 0 < self.max_seconds <= 86_400:
            raise ValueError(f"'max_seconds' must be in (0, 86400], got {self.max_seconds!r}")
        if self.max_idle_ms is not None and not 0 <= self.max_idle_ms <= 86_400_000:
            raise ValueError(f"'max_idle_ms' must be in 0..86400000, got {self.max_idle_ms!r}")


@dataclass
class CourierReport:
    """What one courier did: every ``run_once`` result, idle and busy rounds, why it stopped."""

    owner: str
    results: list[dict[str, Any]] = field(default_factory=list)
    runs: int = 0
    idle: int = 0
    busy: int = 0
    stop_reason: str = ""


def is_busy(error: sqlite3.Error) -> bool:
    """True if ``error`` is SQLite's "database is locked/busy" (worth retrying later)."""
    code = getattr(error, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in _SQLITE_BUSY_CODES
    return "locked" in str(error) or "busy" in str(error)


def is_transient(error: BaseException) -> bool:
    """True for an error a courier waits out: a busy SQLite file, or a PostgreSQL
    server it lost or cannot reach for now (a restart, a failover)."""
    if isinstance(error, sqlite3.OperationalError):
        return is_busy(error)
    if isinstance(error, backend.Unreachable):
        return True
    psycopg = sys.modules.get("psycopg")
    return psycopg is not None and isinstance(error, psycopg.OperationalError)


class _Turn:
    """This courier's turn at writing the queue file: an exclusive ``flock`` on it.

    Couriers of one file wait for their turn in the kernel, which wakes a waiter as
    soon as the turn is given back, not in SQLite's busy handler, whose sleeps grow
    to 100 ms while a courier that came later writes first (rule 8). ``flock`` and
    SQLite's own POSIX locks do not interact. The descriptor is closed only after
    the connection: closing any descriptor of a file drops every POSIX lock that
    this process holds on it.
    """

    def __init__(self, fd: int) -> None:
        self.fd = fd
        self.held = False
        self.works = True  # a file system without flock: no turns, SQLite's lock alone

    def take(self) -> None:
        if self.held or not self.works:
            return
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        except OSError:  # ENOLCK, EOPNOTSUPP: this file system keeps no flocks
            self.works = False
            return
        self.held = True

    def give_back(self) -> None:
        if self.held:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            self.held = False

    def close(self) -> None:
        self.give_back()
        os.close(self.fd)


class FileRounds:
    """``run_courier``'s step on a queue file: ``worker.run_once`` on one kept connection.

    Each round does what ``worker.run_file`` does (a missing file is its
    ``FileNotFoundError``, and nothing is created) without opening the file again:
    the connection is made anew when the file at the path is no longer the one it
    opened (removed or replaced) and after a round that raised anything but a busy
    file. The claim and the finish of a round each run in this courier's turn
    (``_Turn``), taken when ``run_once`` reads the clock and given back when it
    sends, and when it returns.
    """

    def __init__(self, path: Target) -> None:
        self.path = path
        self._con: sqlite3.Connection | None = None
        self._turn: _Turn | None = None
        self._opened: tuple[int, int] | None = None  # (device, inode) of the file

    def _kept(self) -> tuple[sqlite3.Connection, _Turn] | None:
        """The kept connection to the file now at the path and its turn; ``None`` if
        there is no file."""
        try:
            now = os.stat(self.path)
        except OSError:
            now = None
        if now is None or not stat.S_ISREG(now.st_mode):
            self.close()
            return None
        if self._con is None or self._turn is None or self._opened != (now.st_dev, now.st_ino):
            self.close()
            try:
                turn = _Turn(os.open(self.path, os.O_RDONLY | os.O_CLOEXEC))
            except FileNotFoundError:
                return None
            try:
                turn.take()  # open_queue writes too (it creates what is missing)
                self._con = worker.open_queue(self.path)
                turn.give_back()
            except BaseException:
                turn.close()
                raise
            opened = os.fstat(turn.fd)
            self._turn, self._opened = turn, (opened.st_dev, opened.st_ino)
        return self._con, self._turn

    def __call__(self, target: Any, *round_args: Any) -> dict[str, Any] | None:
        """One ``Step``: ``round_args`` are run_file's after the path."""
        kept = self._kept()
        if kept is None:  # no queue file there: run_file says so, in its words
            return worker.run_file(target, *round_args)
        con, turn = kept
        owner, clock, send, jitter, lease_ms = round_args

        def clock_in_turn() -> Any:  # passed on as it came: run_once judges it
            turn.take()
            return clock()  # read once the turn is ours: the time the call is judged at

        def send_out_of_turn(event: dict[str, Any]) -> Any:
            turn.give_back()  # the claim is committed: others write while this one waits
            return send(event)

        try:
            return worker.run_once(con, owner, clock_in_turn, send_out_of_turn, jitter, lease_ms)
        except BaseException as error:
            if not (isinstance(error, sqlite3.Error) and is_busy(error)):
                self.close()
            raise
        finally:
            turn.give_back()

    def close(self) -> None:
        """Close the kept connection, then its turn's descriptor (in that order)."""
        if self._con is not None:
            self._con.close()
            self._con = None
        if self._turn is not None:
            self._turn.close()
            self._turn, self._opened = None, None


class PgRounds:
    """``run_courier``'s step on PostgreSQL: ``pgworker.run_once`` on one kept connection.

    ``now_ms`` is the server's clock read on that connection: the courier's time
    base (rule 1). A lost connection is closed and made again on the next use.
    """

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._con: Any = None

    def connection(self) -> Any:
        """The kept connection, made (and checked to hold a queue) when needed."""
        if self._con is None or self._con.closed:
            self._con = backend.connect_existing(self.conninfo)
        return self._con

    def _guarded(self, action: Callable[[Any], Any]) -> Any:
        try:
            return action(self.connection())
        except BaseException as error:
            if is_transient(error):
                self.close()
            raise

    def now_ms(self) -> int:
        """The server's clock in milliseconds (see ``backend.server_clock_ms``)."""
        now: int = self._guarded(backend.server_clock_ms)
        return now

    def __call__(self, target: Any, *round_args: Any) -> dict[str, Any] | None:
        """One ``Step``: ``round_args`` are run_file's after the path."""
        pgworker = backend.queue_module(self.conninfo)
        result: dict[str, Any] | None = self._guarded(
            lambda con: pgworker.run_once(con, *round_args)
        )
        return result

    def close(self) -> None:
        """Close the kept connection, if any."""
        if self._con is not None:
            self._con.close()
            self._con = None


def pause(seconds: float, stop: threading.Event) -> None:
    """Sleep ``seconds`` in short slices, returning early once ``stop`` is set."""
    until = time.monotonic() + seconds
    for _ in range(int(seconds / PAUSE_SLICE_S) + 2):
        left = until - time.monotonic()
        if left <= 0 or stop.is_set():
            return
        time.sleep(min(left, PAUSE_SLICE_S))


def _backoff_ms(streak: int, rng: Callable[[], float]) -> int:
    """A capped, jittered pause after ``streak`` empty or busy rounds (never zero)."""
    return worker.retry_delay(min(streak, 16), IDLE_BASE_MS, IDLE_CAP_MS, 0.5 + rng() / 2)


def _drained(target: Target, rounds: PgRounds | None) -> bool:
    """True if no job is pending or leased; a busy or unreachable queue is not drained yet."""
    try:
        if rounds is not None:
            return bool(rounds._guarded(unfinished_count) == 0)
        con = connect_existing(target)
        try:
            return unfinished_count(con) == 0
        finally:
            con.close()
    except Exception as error:
        if not is_transient(error):
            raise
        return False


class _Watched:
    """``send`` with the cause of its last call kept (from ``HttpSend`` or an exception)."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.cause: Cause | None = None
        self.event: dict[str, Any] | None = None

    def __call__(self, event: dict[str, Any]) -> bool:
        self.cause, self.event = None, dict(event)
        try:
            acked = self.send(event)
        except BaseException as error:
            self.cause = cause_of(error)
            raise
        self.cause = _last_cause(self.send)
        return acked


def _last_cause(send: Any) -> Cause | None:
    """The ``last_cause`` of ``send`` or of the send it wraps (a drill's), if any."""
    for _ in range(4):
        cause = getattr(send, "last_cause", None)
        if isinstance(cause, Cause):
            return cause
        send = getattr(send, "send", None)
        if send is None:
            return None
    return None


# The parameters name what the queue's calls name (owner, lease_ms, a send) in their
# order: a deliberate likeness to pgworker's and worker's signatures, not a copy.
def run_courier(
    path: Target,
    owner: str,
    send: Send,
    *,
    lease_ms: int = 1000,
    limits: Limits | None = None,
    stop: threading.Event | None = None,
    log: Log = _print,
    rng: Callable[[], float] = random.random,
    step: Step = worker.run_file,
    attempts: AttemptSink | None = None,
) -> CourierReport:
    """Deliver jobs from the queue at ``path`` until a limit or ``stop`` says so.

    ``path`` is a queue file's path or a PostgreSQL conninfo (``courier.backend``).
    On a file each round is one ``FileRounds`` round: what ``worker.run_file(path,
    owner, clock_ms, send, rng(), lease_ms)`` does, on a kept connection (or
    ``step`` with run_file's arguments, for drills that wrap it); on PostgreSQL one
    ``PgRounds`` round, on the server's clock. A result is
    logged and kept, and each attempt goes to ``attempts`` (if given); ``None``
    (nothing claimable) and a busy or unreachable queue lead to a jittered pause
    of at most ``IDLE_CAP_MS``. Stops with ``stop_reason`` ``max-runs``,
    ``max-seconds``, ``idle``, ``drained`` or ``stopped``.

    Raises:
        FileNotFoundError: there is no queue file at ``path``.
        ValueError: a malformed argument (from ``worker``).
        Anything else the round raises except a busy or unreachable queue (e.g. an
        unexpected error from ``send``, which leaves its job leased).
    """
    rounds = PgRounds(str(path)) if backend.is_conninfo(path) else None
    kept: FileRounds | None = None
    if step is worker.run_file and rounds is not None:
        step = rounds
    elif step is worker.run_file:
        step = kept = FileRounds(path)
    courier = _Courier(
        path,
        owner,
        _Watched(send),
        lease_ms,
        limits or Limits(),
        stop or threading.Event(),
        log,
        rng,
        step,
        clock_ms if rounds is None else rounds.now_ms,
        rounds,
        attempts,
    )
    try:
        return courier.run()
    finally:
        for kept_connection in (rounds, kept):
            if kept_connection is not None:
                kept_connection.close()


@dataclass
class _Courier:
    """One ``run_courier`` call: its settings, and the loop that applies them."""

    path: Target
    owner: str
    send: _Watched
    lease_ms: int
    limits: Limits
    stop: threading.Event
    log: Log
    rng: Callable[[], float]
    step: Step
    clock: Callable[[], int]
    rounds: PgRounds | None
    attempts: AttemptSink | None

    def run(self) -> CourierReport:
        report = CourierReport(self.owner)
        started = time.monotonic()
        last_work = started
        streak = 0
        runs = itertools.count() if self.limits.max_runs is None else range(self.limits.max_runs)
        for _ in runs:
            if self.stop.is_set():
                report.stop_reason = "stopped"
                return report
            seconds = self.limits.max_seconds
            if seconds is not None and time.monotonic() - started >= seconds:
                report.stop_reason = "max-seconds"
                return report
            report.runs += 1
            result = self._round(report)
            if result == "busy":
                streak += 1
                pause(_backoff_ms(streak, self.rng) / 1000, self.stop)
                continue
            if result is not None:
                last_work = time.monotonic()
                streak = 0
                continue
            report.idle += 1
            if self.limits.until_drained and _drained(self.path, self.rounds):
                report.stop_reason = "drained"
                return report
            idle_ms = (time.monotonic() - last_work) * 1000
            if self.limits.max_idle_ms is not None and idle_ms >= self.limits.max_idle_ms:
                report.stop_reason = "idle"
                return report
            streak += 1
            pause(_backoff_ms(streak, self.rng) / 1000, self.stop)
        report.stop_reason = "max-runs"
        return report

    def _round(self, report: CourierReport) -> dict[str, Any] | str | None:
        """One round: its result, ``None`` (nothing claimable) or ``"busy"``."""
        self.send.event = None
        try:
            result = self.step(
                self.path, self.owner, self.clock, self.send, self.rng(), self.lease_ms
            )
        except Exception as error:
            if not is_transient(error):
                if self.send.event is not None and self.send.cause is not None:
                    self._record(None)
                raise
            report.busy += 1
            what = "busy" if isinstance(error, sqlite3.Error) else "unreachable"
            self.log(f"{self.owner}: queue {what} ({str(error).strip()}); backing off")
            return "busy"
        if result is not None:
            report.results.append(result)
            self._record(result)
            self.log(_result_line(self.owner, result, self.send.cause))
        return result

    def _record(self, result: dict[str, Any] | None) -> None:
        """Hand one attempt to the log; a failing log costs a line, never the courier."""
        event = self.send.event
        if self.attempts is None or event is None:
            return
        cause = self.send.cause
        try:
            if result is not None:
                outcome = outcome_of(cause, result["status"])
                token, status = result["token"], result["status"]
            else:  # send raised something unexpected: the job stays leased
                ticket = leased_ticket(self.path, event["id"], self.owner)
                outcome, status = "error", "leased"
                token = None if ticket is None else ticket["token"]
            attempt = Attempt(event["id"], token, self.owner, self.clock(), outcome, status, cause)
            self.attempts.record(attempt)
        except Exception as error:
            self.log(
                f"{self.owner}: could not record the attempt ({type(error).__name__}: {error})"
            )


def _result_line(owner: str, result: dict[str, Any], cause: Cause | None) -> str:
    """``c1: order-1 token=1 -> pending`` and, unless it was done, why."""
    line = f"{owner}: {result['id']} token={result['token']} -> {result['status']}"
    if cause is None or result["status"] == "done":
        return line
    return f"{line} ({describe_cause(cause)})"
