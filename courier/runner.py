"""The courier: a bounded loop of rounds against a queue, with a real clock and HTTP.

Rules this module keeps:

1. What a round is depends on where the queue lives, and is a ``Rounds`` object's
   business: ``FileRounds`` on a queue file (the host's wall clock, turns at
   writing), ``PgRounds`` on PostgreSQL (the server's clock); ``rounds_for`` picks
   one for a target. The loop only calls a ``Rounds``, so another kind of round
   (a drill's, a batch's) is another ``Rounds``, not another branch here. The
   loop's own bounds use the monotonic clock, so a wall-clock step cannot make it
   spin or stop early.
2. The send is ``courier.delivery.HttpSend`` or anything with its call: how an
   answer maps onto the worker's outcomes is said there, once.
3. The jitter that the queue's ``run_once`` needs comes from ``rng`` (by default
   ``random.random()``) here: a round draws it; the worker itself has no
   randomness.
4. Every loop is bounded in count and time (``StopRules``). When a round finds
   nothing claimable or the queue is busy or out of reach (``courier.transient``),
   the courier pauses with a capped, jittered backoff instead of dying or
   spinning.
5. Each delivery's cause is kept: ``HttpSend`` attaches a ``Cause`` (the HTTP
   status and the start of the body, a timeout, a connection error) to what it
   returns or raises, and ``run_courier`` hands every attempt to its ``attempts``
   sink (``courier.attempts``), an unexpected exception of ``send`` included
   (class and message), before that exception propagates.
6. A stop event (``courier.stop_signal``) ends the loop between rounds, and cuts
   every pause short.
7. A round's attempts go to the sink together (``record_many``), at one reading of
   the queue's clock: a batched round (``courier.batch_rounds``) is many attempts.
   The sink may hold them back for its next write (a batched courier's attempt log
   writes them with the next batch's claimed rows, ``courier.attempts``' rule 3):
   the loop flushes it after a round that claimed nothing or met a busy queue, and
   when it stops, so no outcome waits on an idle or stopped courier.
8. Rounds may hold jobs for the rounds after them (batches claimed ahead, up to
   ``HELD_ROUNDS``, ``courier.batch_rounds``): the loop tells each round how many
   more it may make (``later``: what ``--max-runs`` leaves; none once a stop rule
   holds), so that a round never holds more than the rounds left can finish; when
   another rule or a stop ends the loop while the rounds are ``holding``, more
   rounds with nothing ``later`` deliver and finish what they hold (one a batch)
   before the courier stops. So ``max-runs`` counts the rounds exactly, and no stop
   leaves a claimed job unsent but a crash.
"""

from __future__ import annotations

import itertools
import random
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import worker
from courier import backend
from courier.attempts import Attempt, AttemptSink
from courier.backend import Target
from courier.delivery import (
    Cause,
    Delivery,
    Send,
    can_start,
    cause_of,
    describe_cause,
    outcome_of,
)
from courier.file_rounds import FileRounds
from courier.pg_rounds import PgRounds
from courier.queueview import leased_ticket
from courier.stop_rules import StopRules
from courier.stop_signal import pause
from courier.transient import is_transient

__all__ = [
    "HELD_ROUNDS",
    "IDLE_BASE_MS",
    "IDLE_CAP_MS",
    "CourierReport",
    "PartlyDone",
    "Rounds",
    "rounds_for",
    "run_courier",
]

IDLE_BASE_MS = 20
IDLE_CAP_MS = 250

Log = Callable[[str], None]


# The most batches a round may hold for the rounds after it (``courier.batch_rounds``,
# rule 2): so a delivery may be made up to this many rounds before its own.
HELD_ROUNDS = 2


class Rounds(Protocol):
    """How a courier works one kind of queue, round after round (rule 1).

    ``round`` claims, sends and finishes on the queue's time base with ``jitter()``
    drawn for each delivery, and returns the ``run_once``-shaped result of each
    (``{"id", "token", "status"}``), or ``[]`` if nothing was claimable. A busy or
    unreachable queue (``courier.transient``) is raised, for the loop to wait out;
    anything else raised ends the courier. A round that fails after it finished
    some of its jobs raises ``PartlyDone`` with their results. The loop calls one
    ``Rounds`` from one thread, and the one who made it closes it.
    """

    def now_ms(self) -> int:
        """The time on the queue's time base, in milliseconds."""
        ...

    def round(
        self,
        owner: str,
        send: Send,
        jitter: Callable[[], float],
        lease_ms: int,
        later: int | None = None,
    ) -> list[dict[str, Any]]:
        """One round; see the class. ``later``: how many more rounds the loop may make
        after this one (``0``: none, ``None``: no bound known); the round holds no more
        batches than that for them, and never more than ``HELD_ROUNDS`` (rule 8)."""
        ...

    def holding(self) -> bool:
        """True if jobs claimed by a round wait for the next one (rule 8)."""
        ...

    def drained(self) -> bool:
        """True if no job is pending or leased."""
        ...

    def close(self) -> None:
        """Release what the rounds keep (a connection, a descriptor)."""
        ...


class PartlyDone(Exception):
    """A round failed with ``error`` after it had finished the jobs of ``results``
    (``run_once``-shaped): the loop keeps those, then treats ``error`` as the round's."""

    def __init__(self, error: Exception, results: list[dict[str, Any]]) -> None:
        super().__init__(f"{error} (after {len(results)} jobs were finished)")
        self.error = error
        self.results = results


def rounds_for(target: Target) -> FileRounds | PgRounds:
    """The rounds of the queue at ``target``: ``PgRounds`` for a conninfo, else
    ``FileRounds`` (``courier.backend`` tells them apart)."""
    return PgRounds(str(target)) if backend.is_conninfo(target) else FileRounds(target)


@dataclass
class CourierReport:
    """What one courier did: every ``run_once`` result, idle and busy rounds, why it stopped."""

    owner: str
    results: list[dict[str, Any]] = field(default_factory=list)
    runs: int = 0
    idle: int = 0
    busy: int = 0
    stop_reason: str = ""


def _print(line: str) -> None:
    print(line, flush=True)


def _backoff_ms(streak: int, rng: Callable[[], float]) -> int:
    """A capped, jittered pause after ``streak`` empty or busy rounds (never zero)."""
    return worker.retry_delay(min(streak, 16), IDLE_BASE_MS, IDLE_CAP_MS, 0.5 + rng() / 2)


@dataclass
class _Call:
    """One call of ``send``: the event it was given, the cause it ended with, the round
    it was made in, and whether its result was kept (recorded) already."""

    event: dict[str, Any]
    round: int
    cause: Cause | None = None
    kept: bool = False


class _Watched:
    """``send`` with each call kept (its cause from ``HttpSend`` or from an exception)
    until its result is, or for the round it was made in and the ``HELD_ROUNDS``
    after it: a job claimed ahead (rule 8) may be sent during one round and finished
    by the second after it. Calls come from several delivery threads at once."""

    def __init__(self, send: Send) -> None:
        self.send = send
        self.round = 0
        self._calls: list[_Call] = []
        self._by_id: dict[Any, list[_Call]] = {}  # the same calls by job id, in order
        self._lock = threading.Lock()

    def new_round(self) -> None:
        with self._lock:
            self.round += 1
            oldest = self.round - HELD_ROUNDS
            self._calls = [c for c in self._calls if not c.kept and c.round >= oldest]
            self._by_id = {}
            for call in self._calls:
                self._by_id.setdefault(call.event.get("id"), []).append(call)

    def _made(self, event: dict[str, Any]) -> _Call:
        call = _Call(dict(event), self.round)
        with self._lock:
            self._calls.append(call)
            self._by_id.setdefault(call.event.get("id"), []).append(call)
        return call

    def __call__(self, event: dict[str, Any]) -> bool:
        call = self._made(event)
        try:
            acked = self.send(event)
        except BaseException as error:
            call.cause = cause_of(error)
            raise
        call.cause = _last_cause(self.send)
        return acked

    @property
    def starts(self) -> bool:
        """``send``'s: deliveries may be handed over (``courier.delivery``, rule 5)."""
        return can_start(self.send)

    def start(self, delivery: Delivery) -> None:
        """Hand ``delivery`` to ``send``, each call kept as ``__call__`` keeps it."""
        self.send.start(_WatchedDelivery(self, delivery))  # type: ignore[attr-defined]

    def call_of(self, job_id: str) -> _Call | None:
        """The last call not kept yet that delivered ``job_id``, if any."""
        with self._lock:
            return next((c for c in reversed(self._by_id.get(job_id, ())) if not c.kept), None)

    def unkept(self) -> list[_Call]:
        """The calls that ended and whose result was not kept."""
        with self._lock:
            return [c for c in self._calls if c.cause is not None and not c.kept]


@dataclass
class _WatchedDelivery:
    """A delivery handed to ``_Watched.start``: its call is kept once it begins."""

    watched: _Watched
    delivery: Delivery
    call: _Call | None = None

    def begin(self) -> dict[str, Any] | None:
        event = self.delivery.begin()
        if event is not None:
            self.call = self.watched._made(event)
        return event

    def end(self, outcome: bool | BaseException, cause: Cause) -> None:
        if self.call is not None:
            self.call.cause = cause
        self.delivery.end(outcome, cause)


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
    target: Target,
    owner: str,
    send: Send,
    *,
    lease_ms: int = 1000,
    stop_rules: StopRules | None = None,
    stop: threading.Event | None = None,
    log: Log = _print,
    rng: Callable[[], float] = random.random,
    rounds: Rounds | None = None,
    attempts: AttemptSink | None = None,
) -> CourierReport:
    """Deliver jobs from the queue at ``target`` until a stop rule or ``stop`` says so.

    ``target`` is a queue file's path or a PostgreSQL conninfo (``courier.backend``).
    Each round is one round of ``rounds`` (by default ``rounds_for(target)``, made
    and closed here; rounds given are the caller's to close): what
    ``worker.run_file(target, owner, clock, send, rng(), lease_ms)`` does, on the
    queue's time base. A result is logged and kept, and each attempt goes to
    ``attempts`` (if given); no result (nothing claimable) and a busy or
    unreachable queue lead to a jittered pause of at most ``IDLE_CAP_MS``. Stops
    with ``stop_reason`` ``max-runs``, ``max-seconds``, ``idle``, ``drained`` or
    ``stopped``.

    Raises:
        FileNotFoundError: there is no queue file at ``target``.
        ValueError: a malformed argument (from ``worker``).
        Anything else a round raises except a busy or unreachable queue (e.g. an
        unexpected error from ``send``, which leaves its job leased).
    """
    used: Rounds = rounds_for(target) if rounds is None else rounds
    courier = _Courier(
        target=target,
        owner=owner,
        send=_Watched(send),
        lease_ms=lease_ms,
        rules=stop_rules or StopRules(),
        stop=stop or threading.Event(),
        log=log,
        rng=rng,
        rounds=used,
        attempts=attempts,
    )
    try:
        return courier.run()
    finally:
        if rounds is None:
            used.close()


@dataclass(kw_only=True)
class _Courier:
    """One ``run_courier`` call: its settings, and the loop that applies them."""

    target: Target
    owner: str
    send: _Watched
    lease_ms: int
    rules: StopRules
    stop: threading.Event
    log: Log
    rng: Callable[[], float]
    rounds: Rounds
    attempts: AttemptSink | None

    def _stop_reason(self, runs: int, started: float) -> str | None:
        """The stop rule that holds before round ``runs + 1``, if any."""
        if self.rules.max_runs is not None and runs >= self.rules.max_runs:
            return "max-runs"
        if self.stop.is_set():
            return "stopped"
        seconds = self.rules.max_seconds
        if seconds is not None and time.monotonic() - started >= seconds:
            return "max-seconds"
        return None

    def run(self) -> CourierReport:
        report = CourierReport(self.owner)
        try:
            return self._loop(report)
        finally:
            self._flush()  # rule 7

    def _loop(self, report: CourierReport) -> CourierReport:
        started = time.monotonic()
        last_work = started
        streak = 0
        max_runs = self.rules.max_runs
        # Each pass is a round, or stops: at most max_runs rounds (the rounds never
        # hold more than the rounds left can finish, rule 8) and a last pass that
        # stops, or no bound at all (--forever).
        for _ in itertools.count() if max_runs is None else range(max_runs + 1):
            reason = self._stop_reason(report.runs, started)
            if reason is not None and not self.rounds.holding():
                report.stop_reason = reason
                return report
            later = None if max_runs is None else max(max_runs - report.runs - 1, 0)
            report.runs += 1
            results = self._round(report, 0 if reason is not None else later)
            if results is None:  # busy or unreachable
                self._flush()
                streak += 1
                pause(_backoff_ms(streak, self.rng) / 1000, self.stop)
                continue
            if results:
                last_work = time.monotonic()
                streak = 0
                continue
            report.idle += 1
            self._flush()
            if self.rules.until_drained and self._drained():
                report.stop_reason = "drained"
                return report
            idle_ms = (time.monotonic() - last_work) * 1000
            if self.rules.max_idle_ms is not None and idle_ms >= self.rules.max_idle_ms:
                report.stop_reason = "idle"
                return report
            streak += 1
            pause(_backoff_ms(streak, self.rng) / 1000, self.stop)
        report.stop_reason = self._stop_reason(report.runs, started) or "max-runs"
        return report

    def _round(self, report: CourierReport, later: int | None) -> list[dict[str, Any]] | None:
        """One round, with ``later`` rounds at most after it (rule 8): its results
        (``[]``: nothing claimable), or ``None`` if the queue was busy or out of reach."""
        self.send.new_round()
        try:
            results = self.rounds.round(self.owner, self.send, self.rng, self.lease_ms, later)
        except Exception as raised:
            error, finished = (
                (raised.error, raised.results) if isinstance(raised, PartlyDone) else (raised, [])
            )
            self._keep(report, finished)
            if not is_transient(error):
                settled = {result["id"] for result in finished}
                failed = [c for c in self.send.unkept() if c.event.get("id") not in settled]
                self._record([(call, None) for call in failed])
                if error is raised:
                    raise
                raise error from raised
            report.busy += 1
            what = "busy" if isinstance(error, sqlite3.Error) else "unreachable"
            self.log(f"{self.owner}: queue {what} ({str(error).strip()}); backing off")
            return None
        self._keep(report, results)
        return results

    def _keep(self, report: CourierReport, results: list[dict[str, Any]]) -> None:
        """Keep, record and log the results of a round."""
        calls = [self.send.call_of(result["id"]) for result in results]
        for call in calls:
            if call is not None:
                call.kept = True
        report.results.extend(results)
        self._record(list(zip(calls, results, strict=True)))
        for call, result in zip(calls, results, strict=True):
            self.log(_result_line(self.owner, result, None if call is None else call.cause))

    def _drained(self) -> bool:
        """True if no job is pending or leased; a busy or unreachable queue is not
        drained yet."""
        try:
            return self.rounds.drained()
        except Exception as error:
            if not is_transient(error):
                raise
            return False

    def _record(self, attempts: list[tuple[_Call | None, dict[str, Any] | None]]) -> None:
        """Hand a round's attempts (each a call and its result, ``None`` if ``send``
        raised) to the sink at once; a failing sink costs a line, never the courier."""
        if self.attempts is None or not any(call is not None for call, _ in attempts):
            return
        try:
            at_ms = self.rounds.now_ms()
            self.attempts.record_many(
                [
                    self._attempt(call, result, at_ms)
                    for call, result in attempts
                    if call is not None
                ]
            )
        except Exception as error:
            self.log(
                f"{self.owner}: could not record the attempt ({type(error).__name__}: {error})"
            )

    def _flush(self) -> None:
        """Have the sink write what it holds back (rule 7); a failing sink costs a line."""
        if self.attempts is None:
            return
        try:
            self.attempts.flush()
        except Exception as error:
            self.log(
                f"{self.owner}: could not record the attempts ({type(error).__name__}: {error})"
            )

    def _attempt(self, call: _Call, result: dict[str, Any] | None, at_ms: int) -> Attempt:
        event, cause = call.event, call.cause
        if result is not None:
            outcome = outcome_of(cause, result["status"])
            token, status = result["token"], result["status"]
        else:  # send raised something unexpected: the job stays leased
            ticket = leased_ticket(self.target, event["id"], self.owner)
            outcome, status = "error", "leased"
            token = None if ticket is None else ticket["token"]
        return Attempt(event["id"], token, self.owner, at_ms, outcome, status, cause)


def _result_line(owner: str, result: dict[str, Any], cause: Cause | None) -> str:
    """``c1: order-1 token=1 -> pending`` and, unless it was done, why."""
    line = f"{owner}: {result['id']} token={result['token']} -> {result['status']}"
    if cause is None or result["status"] == "done":
        return line
    return f"{line} ({describe_cause(cause)})"
