"""Chaos soak: many couriers, random kills and failures; nothing lost, no effect twice.

    python -m bench.soak                        # the full run: 6 couriers, 3000 jobs
    python -m bench.soak --jobs 300 --couriers 4 --seconds 40 --seed 7 --json report.json

One receiver (``courier.receiver``, in this process) and N courier processes share
one queue file. An intake feeds M jobs (with intake retries and conflicting
enqueues among them) while a chaos driver, following a schedule drawn from the
seed, SIGKILLs couriers at random moments, right after the receiver committed
their delivery (before the queue's ``finish``) and inside every fault hook of
``claim`` and ``finish``; restarts them; pauses couriers (SIGSTOP/SIGCONT) past
their lease, sometimes starting a replacement with the same owner name while the
old one is frozen; makes the receiver answer slowly, time out, fail with 5xx or
4xx, drop the connection after its commit, or go down for a moment; holds the
queue's write lock past the couriers' busy timeout; and redrives dead jobs as an
operator would (``python -m courier redrive``). Then chaos stops, healthy couriers
drain the queue, and a checker reads the queue file and the receiver's inbox.

The rules of the run:

1. It always stops by itself. The chaos phase ends once every planned job was
   enqueued and none is pending or leased, or after ``--seconds``; the recovery
   phase after ``--recovery-seconds``. Every loop is bounded in count and time.
   Every child is killed and reaped and every temporary file removed, even on
   failure or Ctrl-C (``--workdir`` keeps the files for a post-mortem).
2. Real processes, real signals, real HTTP on loopback (port 0), real
   milliseconds of this host's wall clock, the queue's shared time base. No mocks.
3. The chaos schedule is a pure function of ``--seed`` and the sizes:
   ``plan_intake``, ``plan_chaos``, ``drill_for`` and ``receiver_fault`` give the
   same jobs, the same chaos events at the same offsets, the same drill for each
   courier incarnation and the same fault for the n-th delivery. What the real
   processes are doing at each moment is the scheduler's business, so two runs
   with one seed are alike, not identical.
4. The checker trusts files, not reports: lost jobs, double effects and done jobs
   without an effect come from the queue file and the inbox file. The couriers'
   event logs (JSON lines, flushed before each action) add only what the files
   cannot show: stale finishes, lock timeouts, and the hook a courier died at.
5. A job quarantined as ``dead`` may still have had its effect applied (the send
   succeeded, the finish was lost or stale): that is the gap the contract does
   not claim to close, reported as an informative figure, never as a failure.

Exit status: 0 if every must-be-zero figure is zero (and stale finishes were seen
in a run that paused a courier), 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import random
import re
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict, deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import worker
from courier import queueview
from courier.procs import Children, courier_command
from courier.receiver import MAX_REPLY_DELAY_MS, Fault, Receiver, Verdict
from courier.runner import HttpSend, Limits, Send, clock_ms, is_busy, run_courier

__all__ = [
    "ChaosEvent",
    "Config",
    "Drill",
    "IntakeOp",
    "check",
    "drill_for",
    "main",
    "plan_chaos",
    "plan_intake",
    "receiver_fault",
    "render_table",
    "run_soak",
]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

MAX_QTY = 1000
MAX_JOBS = 99_999  # job ids are job-00001 .. job-99999
MAX_COURIERS = 32

# --- Intake: what the jobs look like ---------------------------------------------

LONG_TTL_MS = (20_000, 60_000)
SHORT_TTL_MS = (2_000, 15_000)  # about the backlog's wait: some make it, some die 'deadline'
SHORT_TTL_SHARE = 0.06
DUPLICATE_SHARE = 0.03  # same id, same qty: an intake retry (enqueue returns False)
CONFLICT_SHARE = 0.02  # same id, another qty: enqueue raises Conflict
INTAKE_BATCH = 50
BACKLOG_PER_COURIER = 40
RESERVE_SHARE = 0.1  # held back until the first round of chaos has been played

# --- Chaos: what the driver does and how often -------------------------------------

KILL = "kill"
KILL_AFTER_COMMIT = "kill-after-commit"
PAUSE = "pause"
PAUSE_IN_FLIGHT = "pause-in-flight"
HOLD_LOCK = "hold-lock"
OUTAGE = "outage"
REDRIVE = "redrive"
CHAOS_KINDS = (KILL, KILL_AFTER_COMMIT, PAUSE, PAUSE_IN_FLIGHT, HOLD_LOCK, OUTAGE, REDRIVE)
CHAOS_WEIGHTS = (5, 3, 2, 3, 1, 1, 2)
FIRST_CHAOS_MS = 3_000  # let the first couriers start before anything happens
FIRST_CHAOS_GAP_MS = 700
MAX_CHAOS_EVENTS = 100_000
REPLACE_SHARE = 0.5  # a paused courier gets a same-named replacement while frozen
BUSY_TIMEOUT_MS = 1_000  # worker.open_queue's busy timeout
HOLD_LOCK_MS = (BUSY_TIMEOUT_MS + 200, BUSY_TIMEOUT_MS + 1_000)
OUTAGE_MS = (200, 1_000)

# Each courier incarnation may carry a drill: SIGKILL itself inside one fault hook.
HOOK_POINTS: tuple[tuple[str, str], ...] = (
    ("claim", "after-claim"),
    ("claim", "after-commit"),
    ("finish", "after-finish"),
    ("finish", "after-commit"),
)
DRILL_SHARE = 0.35  # of restarted incarnations; every first incarnation has one
DRILL_ROUNDS = (3, 40)

# Per delivery, in this order; the rest is delivered normally.
RECEIVER_FAULT_SHARES: tuple[tuple[str, float], ...] = (
    ("5xx", 0.03),
    ("4xx", 0.004),
    ("drop-after-commit", 0.02),
    ("timeout", 0.02),
    ("slow", 0.04),
)
STATUS_5XX = (500, 502, 503, 504)
STATUS_4XX = (400, 403, 404, 422)

# --- Supervision -------------------------------------------------------------------

TICK_S = 0.02
RESTART_DELAY_S = 0.2
RESUME_SHIELD_S = 1.0  # a just-resumed courier is left alone to finish (stale)
PROGRESS_S = 10.0
CHILD_MARGIN_S = 30.0  # a chaos courier outlives its phase by at most this, even orphaned
REAP_TIMEOUT_S = 10.0
OPERATOR_TIMEOUT_S = 20.0
REDRIVE_TTL_MS = 30_000
LOG_TAIL_LINES = 15

_SENDER = re.compile(r"(?P<owner>[A-Za-z0-9_]+)-p(?P<pid>[0-9]+)")
_SELECT_AUDIT = "SELECT id, token FROM redrives ORDER BY seq"
_SELECT_EFFECTS = "SELECT id, qty FROM effects ORDER BY seq"
_SELECT_REQUESTS = "SELECT method, path, status FROM requests ORDER BY seq"

Out = Callable[[str], None]


def _print(line: str = "") -> None:
    print(line, flush=True)


# --- Settings ----------------------------------------------------------------------


@dataclass(frozen=True)
class Config:
    """The sizes and bounds of one run. ``seed`` fixes every chaos decision."""

    couriers: int = 6
    jobs: int = 3000
    seconds: float = 300.0
    recovery_seconds: float = 60.0
    seed: int = 1
    lease_ms: int = 1000
    chaos_per_s: float = 0.6
    jobs_per_s: float = 30.0

    def __post_init__(self) -> None:
        _within("couriers", self.couriers, 1, MAX_COURIERS)
        _within("jobs", self.jobs, 1, MAX_JOBS)
        _within("lease_ms", self.lease_ms, 200, 60_000)
        _within("seed", self.seed, 0, 2**63)
        if not 1 <= self.seconds <= 86_400:
            raise ValueError(f"'seconds' must be in 1..86400, got {self.seconds!r}")
        if not 1 <= self.recovery_seconds <= 3_600:
            raise ValueError(
                f"'recovery_seconds' must be in 1..3600, got {self.recovery_seconds!r}"
            )
        if not 0 < self.chaos_per_s <= 50:
            raise ValueError(f"'chaos_per_s' must be in (0, 50], got {self.chaos_per_s!r}")
        if not 0 < self.jobs_per_s <= 100_000:
            raise ValueError(f"'jobs_per_s' must be in (0, 100000], got {self.jobs_per_s!r}")

    @property
    def http_timeout_ms(self) -> int:
        """The couriers' HTTP timeout: 3/4 of the lease, as ``courier run`` defaults to."""
        return self.lease_ms * 3 // 4

    @property
    def backlog(self) -> int:
        """How many unfinished jobs the intake keeps in the queue at most."""
        return self.couriers * BACKLOG_PER_COURIER

    @property
    def stop_grace_s(self) -> float:
        """How long a courier gets to stop after SIGTERM: its current round at most.

        A round is a claim, a send bounded by the HTTP timeout (plus a delayed
        answer, which is shorter than the lease), and a finish.
        """
        return 2 * self.lease_ms / 1000 + 3


def _within(name: str, value: object, lo: int, hi: int) -> None:
    if type(value) is not int or not lo <= value <= hi:
        raise ValueError(f"'{name}' must be an int in {lo}..{hi}, got {value!r}")


@dataclass(frozen=True)
class Paths:
    """Where one run keeps its files: all under one directory."""

    root: Path

    @property
    def queue(self) -> Path:
        return self.root / "queue.sqlite"

    @property
    def inbox(self) -> Path:
        return self.root / "inbox.sqlite"

    @property
    def events(self) -> Path:
        return self.root / "events"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def create(self) -> Paths:
        self.events.mkdir(parents=True, exist_ok=True)
        self.logs.mkdir(parents=True, exist_ok=True)
        return self


# --- The schedule: pure functions of the seed ------------------------------------------


@dataclass(frozen=True)
class IntakeOp:
    """One enqueue call and what it must answer: ``new``, ``retry`` or ``conflict``."""

    job_id: str
    qty: int
    ttl_ms: int
    max_attempts: int
    expect: str


@dataclass(frozen=True)
class ChaosEvent:
    """One thing the chaos driver does ``at_ms`` after the chaos phase started.

    ``target`` picks a courier (modulo their number); ``duration_ms`` is how long a
    pause, a held lock or an outage lasts; ``replace`` starts a same-named
    replacement while a paused courier is frozen.
    """

    at_ms: int
    kind: str
    target: int
    duration_ms: int = 0
    replace: bool = False


@dataclass(frozen=True)
class Drill:
    """SIGKILL this courier inside ``operation``'s fault hook ``point``, armed at ``round``."""

    operation: str
    point: str
    round: int

    @property
    def name(self) -> str:
        return f"{self.operation}:{self.point}"


def _ttl_ms(rng: random.Random) -> int:
    low, high = SHORT_TTL_MS if rng.random() < SHORT_TTL_SHARE else LONG_TTL_MS
    return rng.randint(low, high)


def _budget(rng: random.Random) -> int:
    roll = rng.random()
    if roll < 0.15:
        return rng.randint(1, 2)
    if roll < 0.30:
        return rng.randint(4, 6)
    return 3


def plan_intake(seed: int, jobs: int) -> list[IntakeOp]:
    """The enqueue calls of a run: ``jobs`` new jobs, with intake retries and conflicts.

    After a new job, an earlier job may be enqueued again: with the same qty (an
    intake retry, whatever its ttl and budget: ``False``) or with another qty
    (``Conflict``). Retries and conflicts are extra calls, not extra jobs.
    """
    rng = random.Random(f"intake:{seed}")
    ops: list[IntakeOp] = []
    accepted: list[IntakeOp] = []
    for number in range(1, jobs + 1):
        op = IntakeOp(
            f"job-{number:05d}", rng.randint(1, MAX_QTY), _ttl_ms(rng), _budget(rng), "new"
        )
        ops.append(op)
        accepted.append(op)
        roll = rng.random()
        if roll < DUPLICATE_SHARE + CONFLICT_SHARE:
            earlier = rng.choice(accepted)
            same = roll < DUPLICATE_SHARE
            qty = earlier.qty if same else earlier.qty % MAX_QTY + 1
            expect = "retry" if same else "conflict"
            ops.append(IntakeOp(earlier.job_id, qty, _ttl_ms(rng), _budget(rng), expect))
    return ops


def _chaos_event(rng: random.Random, kind: str, at_ms: int, config: Config) -> ChaosEvent:
    target = rng.randrange(config.couriers)
    if kind in (PAUSE, PAUSE_IN_FLIGHT):
        duration = rng.randint(config.lease_ms * 3 // 2, config.lease_ms * 3)
        return ChaosEvent(at_ms, kind, target, duration, rng.random() < REPLACE_SHARE)
    if kind == HOLD_LOCK:
        return ChaosEvent(at_ms, kind, target, rng.randint(*HOLD_LOCK_MS))
    if kind == OUTAGE:
        return ChaosEvent(at_ms, kind, target, rng.randint(*OUTAGE_MS))
    return ChaosEvent(at_ms, kind, target)


def plan_chaos(config: Config) -> list[ChaosEvent]:
    """The chaos schedule: every kind once early (so a short run sees each), then random.

    After the first round, events come as a Poisson stream of ``chaos_per_s`` per
    second with ``CHAOS_WEIGHTS``, up to the chaos phase's time bound.
    """
    rng = random.Random(f"chaos:{config.seed}")
    horizon_ms = int(config.seconds * 1000)
    events: list[ChaosEvent] = []
    at_ms = FIRST_CHAOS_MS
    for kind in CHAOS_KINDS:
        events.append(_chaos_event(rng, kind, at_ms, config))
        at_ms += FIRST_CHAOS_GAP_MS
    for _ in range(MAX_CHAOS_EVENTS):
        at_ms += 1 + int(rng.expovariate(config.chaos_per_s) * 1000)
        if at_ms >= horizon_ms:
            break
        kind = rng.choices(CHAOS_KINDS, CHAOS_WEIGHTS)[0]
        events.append(_chaos_event(rng, kind, at_ms, config))
    return [event for event in events if event.at_ms < horizon_ms]


def drill_for(seed: int, courier_index: int, incarnation: int) -> Drill | None:
    """The drill of one courier incarnation, or ``None``.

    Every first incarnation has one and the hook points go round-robin over the
    couriers and their restarts, so a run with four couriers or more hits every
    hook point; a restarted incarnation has one with probability ``DRILL_SHARE``.
    """
    rng = random.Random(f"drill:{seed}:{courier_index}:{incarnation}")
    if incarnation > 0 and rng.random() >= DRILL_SHARE:
        return None
    operation, point = HOOK_POINTS[(courier_index + incarnation) % len(HOOK_POINTS)]
    return Drill(operation, point, rng.randint(*DRILL_ROUNDS))


def receiver_fault(seed: int, ordinal: int, http_timeout_ms: int) -> tuple[str, Fault] | None:
    """The fault the receiver injects into its ``ordinal``-th delivery, or ``None``.

    ``timeout`` answers later than the courier waits (the effect happened, the
    courier retries); ``slow`` answers late but in time; ``drop-after-commit``
    applies the effect and closes the connection without an answer.
    """
    rng = random.Random(f"fault:{seed}:{ordinal}")
    roll = rng.random()
    for kind, share in RECEIVER_FAULT_SHARES:
        if roll < share:
            return kind, _fault(kind, rng, http_timeout_ms)
        roll -= share
    return None


def _fault(kind: str, rng: random.Random, http_timeout_ms: int) -> Fault:
    if kind == "5xx":
        return Fault(status=rng.choice(STATUS_5XX))
    if kind == "4xx":
        return Fault(status=rng.choice(STATUS_4XX))
    if kind == "drop-after-commit":
        return Fault(drop=True)
    if kind == "timeout":
        return Fault(delay_ms=min(http_timeout_ms + rng.randint(100, 500), MAX_REPLY_DELAY_MS))
    return Fault(delay_ms=rng.randint(10, max(10, http_timeout_ms // 2)))


# --- The courier child: python -m bench.soak courier ... -------------------------------


class EventLog:
    """A courier's own record: one JSON object per line, flushed as it is written.

    Each line is written with a single ``write`` and flushed before the action it
    announces, so a SIGKILL loses at most the action, never half a line.
    """

    def __init__(self, path: Path) -> None:
        self._file: TextIO = path.open("a", encoding="utf-8")

    def write(self, event: str, **fields: object) -> None:
        line = json.dumps({"event": event, "pid": os.getpid(), "at_ms": clock_ms(), **fields})
        self._file.write(line + "\n")
        self._file.flush()

    def close(self) -> None:
        self._file.close()


def sender_name(owner: str, pid: int) -> str:
    """The ``X-Courier`` header of one courier process: its owner name and its pid."""
    return f"{owner}-p{pid}"


def die_at(drill: Drill, events: EventLog) -> worker.Fault:
    """A fault hook that logs the drill and SIGKILLs this process at ``drill.point``."""

    def hook(point: str) -> None:
        if point == drill.point:
            events.write("die", point=drill.name)
            os.kill(os.getpid(), signal.SIGKILL)

    return hook


def classify(send: Send, ticket: dict[str, Any], jitter: float) -> tuple[str, int]:
    """``run_once``'s classification of one send: ``(outcome, delay_ms)``.

    Only ``True`` is ``ok``; ``Retryable`` is ``retry`` with the contract's capped
    backoff; ``Permanent`` is ``permanent``; any other answer is ``BadAck``.
    """
    try:
        answer = send({"id": ticket["id"], "qty": ticket["qty"]})
    except worker.Retryable:
        delay = worker.retry_delay(
            ticket["attempt"], worker.RETRY_BASE_MS, worker.RETRY_CAP_MS, jitter
        )
        return "retry", delay
    except worker.Permanent:
        return "permanent", 0
    if answer is not True:
        raise worker.BadAck(f"send must return exactly True, got {answer!r}")
    return "ok", 0


def drill_round(
    path: Path,
    owner: str,
    clock: Callable[[], int],
    send: Send,
    jitter: float,
    lease_ms: int,
    drill: Drill,
    events: EventLog,
) -> dict[str, Any] | None:
    """One ``run_file`` round spelled out, with ``die_at`` passed to claim or finish.

    ``run_once`` takes no fault hook (contract section 7), so the drill does what it
    does, in the same order: claim at the first clock reading, send outside any
    transaction, finish at the second reading. The hook fires only on a path that
    changes something, so the drill may take several rounds to die.
    """
    hook = die_at(drill, events)
    con = worker.open_queue(queueview.require_queue_file(path))
    try:
        claimed_at = clock()
        ticket = worker.claim(
            con, owner, claimed_at, lease_ms, hook if drill.operation == "claim" else None
        )
        if ticket is None:
            return None
        outcome, delay_ms = classify(send, ticket, jitter)
        status = worker.finish(
            con, ticket, outcome, clock(), delay_ms, hook if drill.operation == "finish" else None
        )
    finally:
        con.close()
    return {"id": ticket["id"], "token": ticket["token"], "status": status or "stale"}


class SoakStep:
    """``run_courier``'s round: ``worker.run_file``, recorded; once armed, the drill.

    Every ``run_once`` result (``stale`` included) and every busy database error
    is written to the event log; a busy error is then re-raised so that
    ``run_courier`` backs off as it always does.
    """

    def __init__(self, events: EventLog, drill: Drill | None) -> None:
        self.events = events
        self.drill = drill
        self.rounds = 0

    def __call__(
        self,
        path: Path,
        owner: str,
        clock: Callable[[], int],
        send: Send,
        jitter: float,
        lease_ms: int,
    ) -> dict[str, Any] | None:
        self.rounds += 1
        try:
            if self.drill is not None and self.rounds >= self.drill.round:
                result = drill_round(
                    path, owner, clock, send, jitter, lease_ms, self.drill, self.events
                )
            else:
                result = worker.run_file(path, owner, clock, send, jitter, lease_ms)
        except sqlite3.OperationalError as error:
            if is_busy(error):
                self.events.write("busy", detail=str(error))
            raise
        if result is not None:
            self.events.write("result", **result)
        return result


def _stop_on_signals() -> threading.Event:
    """An event set by SIGTERM or SIGINT: the courier stops after its current round."""
    stop = threading.Event()

    def handle(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    return stop


def _parse_drill(text: str | None, round_number: int) -> Drill | None:
    if text is None:
        return None
    operation, _, point = text.partition(":")
    if (operation, point) not in HOOK_POINTS:
        raise ValueError(f"--drill must be one of {[f'{o}:{p}' for o, p in HOOK_POINTS]}")
    return Drill(operation, point, round_number)


def courier_main(argv: Sequence[str]) -> int:
    """Run one soak courier: ``run_courier`` with an event log and maybe a drill."""
    parser = argparse.ArgumentParser(prog="python -m bench.soak courier")
    parser.add_argument("queue", type=Path)
    parser.add_argument("--url", required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--events", type=Path, required=True)
    parser.add_argument("--lease-ms", type=int, default=1000)
    parser.add_argument("--timeout-ms", type=int, required=True)
    parser.add_argument("--max-seconds", type=float, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--incarnation", type=int, default=0)
    parser.add_argument("--drill", help="OPERATION:POINT, e.g. finish:after-commit")
    parser.add_argument("--drill-round", type=int, default=1)
    parser.add_argument("--until-drained", action="store_true")
    args = parser.parse_args(argv)
    stop = _stop_on_signals()
    drill = _parse_drill(args.drill, args.drill_round)
    events = EventLog(args.events)
    try:
        events.write("start", owner=args.owner, drill=None if drill is None else drill.name)
        send = HttpSend(args.url, sender_name(args.owner, os.getpid()), args.timeout_ms)
        rng = random.Random(f"jitter:{args.seed}:{args.owner}:{args.incarnation}")
        report = run_courier(
            args.queue,
            args.owner,
            send,
            lease_ms=args.lease_ms,
            limits=Limits(
                max_runs=10**6, max_seconds=args.max_seconds, until_drained=args.until_drained
            ),
            stop=stop,
            log=_print,
            rng=rng.random,
            step=SoakStep(events, drill),
        )
        events.write("stop", reason=report.stop_reason, runs=report.runs, busy=report.busy)
    finally:
        events.close()
    return EXIT_OK


# --- The supervisor --------------------------------------------------------------------


@dataclass
class ChaosCounts:
    """What the supervisor did, counted as it did it."""

    kills: Counter[str] = field(default_factory=Counter)
    pauses: Counter[str] = field(default_factory=Counter)
    restarts: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    lock_holds: Counter[str] = field(default_factory=Counter)
    outages: int = 0
    redrives: Counter[str] = field(default_factory=Counter)
    armed_left: int = 0


@dataclass
class CourierProcess:
    """One courier incarnation and what became of it."""

    owner: str
    index: int
    incarnation: int
    proc: subprocess.Popen[bytes]
    events: Path
    log: Path
    drill: Drill | None
    healthy: bool
    stopped_until: float | None = None
    resumed_at: float = -math.inf
    retiring: bool = False
    killed_for: str | None = None
    terminated: bool = False
    exit_code: int | None = None


class Fleet:
    """The courier processes: started, restarted, killed, paused and resumed.

    Every signal goes to a process this fleet started (never to a pid from
    anywhere else), under one lock, since the receiver's handler threads act on
    the sender of a delivery while the main loop reaps and restarts.
    """

    def __init__(
        self, config: Config, paths: Paths, url: str, children: Children, counts: ChaosCounts
    ) -> None:
        self.config = config
        self.paths = paths
        self.url = url
        self.children = children
        self.counts = counts
        self.owners = [f"c{n}" for n in range(1, config.couriers + 1)]
        self.everyone: list[CourierProcess] = []
        self.active: dict[str, CourierProcess] = {}
        self.restarting = True
        self._lock = threading.Lock()
        self._live: list[CourierProcess] = []
        self._restart_at: dict[str, float] = {}
        self._incarnations: Counter[str] = Counter()
        self._ends_at = time.monotonic()

    # Starting ---------------------------------------------------------------------

    def start_all(self, ends_at: float) -> None:
        """Start one courier per owner; they run until ``ends_at`` (monotonic) at most."""
        self._ends_at = ends_at
        with self._lock:
            for owner in self.owners:
                self._start(owner, healthy=False)

    def _start(self, owner: str, healthy: bool) -> CourierProcess:
        """Start the next incarnation of ``owner`` (with its drill, unless healthy).

        The child's own ``--max-seconds`` ends with the phase (plus a margin for a
        chaos courier), so it stops by itself even if this process dies.
        """
        index = self.owners.index(owner) if owner in self.owners else 0
        incarnation = self._incarnations[owner]
        self._incarnations[owner] += 1
        drill = None if healthy else drill_for(self.config.seed, index, incarnation)
        name = f"{owner}-{incarnation}"
        events = self.paths.events / f"{name}.jsonl"
        log = self.paths.logs / f"{name}.log"
        margin = 0.0 if healthy else CHILD_MARGIN_S  # healthy ones stop on their own
        seconds = max(1.0, self._ends_at - time.monotonic()) + margin
        options = {
            "--url": self.url,
            "--owner": owner,
            "--events": events,
            "--lease-ms": self.config.lease_ms,
            "--timeout-ms": self.config.http_timeout_ms,
            "--max-seconds": f"{seconds:.1f}",
            "--seed": self.config.seed,
            "--incarnation": incarnation,
        }
        if drill is not None:
            options |= {"--drill": drill.name, "--drill-round": drill.round}
        flags = [str(part) for pair in options.items() for part in pair]
        argv = soak_command("courier", self.paths.queue, *flags)
        if healthy:
            argv.append("--until-drained")
        proc = self.children.start(argv, log)
        courier = CourierProcess(owner, index, incarnation, proc, events, log, drill, healthy)
        self.everyone.append(courier)
        self._live.append(courier)
        self.active[owner] = courier
        return courier

    # The main loop's tick -----------------------------------------------------------

    def tick(self, now: float) -> None:
        """Reap exits, resume pauses that are due, restart couriers that are due."""
        with self._lock:
            self._reap(now)
            self._resume_due(now)
            self._restart_due(now)

    def _reap(self, now: float) -> None:
        for courier in list(self._live):
            code = courier.proc.poll()
            if code is None:
                continue
            courier.exit_code = code
            self._live.remove(courier)
            if self.active.get(courier.owner) is courier:
                del self.active[courier.owner]
                if self.restarting:
                    self._restart_at[courier.owner] = now + RESTART_DELAY_S

    def _resume_due(self, now: float) -> None:
        for courier in self._live:
            if courier.stopped_until is not None and now >= courier.stopped_until:
                self._resume(courier, now)

    def _resume(self, courier: CourierProcess, now: float) -> None:
        courier.proc.send_signal(signal.SIGCONT)
        courier.stopped_until = None
        courier.resumed_at = now
        self.counts.pauses["resumed"] += 1
        if courier.retiring:  # replaced while frozen: finish the round (stale), then stop
            courier.proc.send_signal(signal.SIGTERM)
            courier.terminated = True

    def _restart_due(self, now: float) -> None:
        if not self.restarting:
            return
        for owner, at in list(self._restart_at.items()):
            if now >= at and owner not in self.active:
                del self._restart_at[owner]
                self._start(owner, healthy=False)
                self.counts.restarts += 1

    # Chaos ------------------------------------------------------------------------

    def _signalable(self, courier: CourierProcess, now: float) -> bool:
        return (
            courier.proc.poll() is None
            and courier.stopped_until is None
            and not courier.retiring
            and not courier.healthy
            and now - courier.resumed_at >= RESUME_SHIELD_S
        )

    def _pick(self, target: int, now: float) -> CourierProcess | None:
        """The courier ``target`` names, or the next one that may be signalled."""
        count = len(self.owners)
        for step in range(count):
            courier = self.active.get(self.owners[(target + step) % count])
            if courier is not None and self._signalable(courier, now):
                return courier
        return None

    def _kill(self, courier: CourierProcess, why: str) -> None:
        courier.killed_for = why
        courier.proc.send_signal(signal.SIGKILL)
        self.counts.kills[why] += 1

    def _pause(self, courier: CourierProcess, event: ChaosEvent, why: str, now: float) -> None:
        courier.proc.send_signal(signal.SIGSTOP)
        courier.stopped_until = now + event.duration_ms / 1000
        self.counts.pauses[why] += 1
        if event.replace:
            courier.retiring = True
            self.active.pop(courier.owner, None)
            self._restart_at[courier.owner] = now
            self.counts.pauses["replaced while frozen"] += 1

    def kill_target(self, target: int) -> bool:
        """SIGKILL the targeted courier now, wherever it is; ``False`` if none could be."""
        now = time.monotonic()
        with self._lock:
            courier = self._pick(target, now)
            if courier is None:
                return False
            self._kill(courier, "random moment")
            return True

    def pause_target(self, event: ChaosEvent) -> bool:
        """SIGSTOP the targeted courier for ``event.duration_ms``; ``False`` if none could be."""
        now = time.monotonic()
        with self._lock:
            courier = self._pick(event.target, now)
            if courier is None:
                return False
            self._pause(courier, event, "random moment", now)
            return True

    def act_on_sender(self, sender: str | None, event: ChaosEvent) -> bool:
        """Kill or pause the courier process that sent a delivery the receiver just committed.

        Called on a receiver handler thread, after the inbox commit and before the
        answer: the courier is waiting for it, so its ``finish`` has not happened.
        """
        match = _SENDER.fullmatch(sender or "")
        if match is None:
            return False
        pid = int(match["pid"])
        now = time.monotonic()
        with self._lock:
            courier = next((c for c in self._live if c.proc.pid == pid), None)
            if courier is None or not self._signalable(courier, now):
                return False
            if event.kind == KILL_AFTER_COMMIT:
                self._kill(courier, "after receiver commit")
            else:
                self._pause(courier, event, "in flight", now)
            return True

    # Stopping ---------------------------------------------------------------------

    def stop_all(self, grace_s: float) -> None:
        """Resume the frozen, SIGTERM everyone, wait ``grace_s``, SIGKILL the rest, reap."""
        now = time.monotonic()
        with self._lock:
            self.restarting = False
            self._restart_at.clear()
            for courier in self._live:
                if courier.stopped_until is not None:
                    self._resume(courier, now)
                if courier.proc.poll() is None:
                    courier.proc.send_signal(signal.SIGTERM)
                    courier.terminated = True
        _wait_all([c.proc for c in self._live], grace_s)
        with self._lock:
            for courier in self._live:
                if courier.proc.poll() is None:
                    self._kill(courier, "did not stop in time")
        _wait_all([c.proc for c in self._live], REAP_TIMEOUT_S)
        self.tick(time.monotonic())

    def run_healthy(self, seconds: float) -> None:
        """Start one healthy courier per owner slot; wait until they drained the queue."""
        self._ends_at = time.monotonic() + seconds
        with self._lock:
            healthy = [self._start(f"r{n}", healthy=True) for n in range(1, len(self.owners) + 1)]
        _wait_all([c.proc for c in healthy], seconds + self.config.stop_grace_s)
        with self._lock:
            for courier in healthy:
                if courier.proc.poll() is None:
                    self._kill(courier, "recovery did not finish in time")
        _wait_all([c.proc for c in healthy], REAP_TIMEOUT_S)
        self.tick(time.monotonic())


def _wait_all(procs: Sequence[subprocess.Popen[bytes]], timeout_s: float) -> None:
    """Wait until every process exited or ``timeout_s`` passed, whichever is first."""
    until = time.monotonic() + timeout_s
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, until - time.monotonic()))


def soak_command(*args: object) -> list[str]:
    """The argv of ``python -m bench.soak ARGS...`` with this interpreter."""
    return [sys.executable, "-m", "bench.soak", *(str(arg) for arg in args)]


class ReceiverChaos:
    """The receiver's side of the chaos: per-delivery faults, outages, armed sender actions.

    ``fault_for`` and ``on_commit`` are the receiver's knobs; they run on its handler
    threads. An armed event (kill or pause after commit) waits for the next
    delivery that commits, from any courier that may be signalled.
    """

    def __init__(self, config: Config, counts: ChaosCounts) -> None:
        self.config = config
        self.counts = counts
        self.faults: Counter[str] = Counter()
        self.fleet: Fleet | None = None
        self._lock = threading.Lock()
        self._enabled = True
        self._ordinal = 0
        self._outage_until = 0.0
        self._armed: deque[ChaosEvent] = deque()

    def disable(self) -> None:
        """Stop injecting anything; armed events that never fired are counted."""
        with self._lock:
            self._enabled = False
            self.counts.armed_left = len(self._armed)
            self._armed.clear()

    def arm(self, event: ChaosEvent) -> bool:
        """Fire ``event`` (kill or pause) at the sender of the next committed delivery."""
        with self._lock:
            self._armed.append(event)
        return True

    def outage(self, duration_ms: int) -> bool:
        """Answer 503 to every delivery for ``duration_ms``."""
        with self._lock:
            self._outage_until = time.monotonic() + duration_ms / 1000
            self.counts.outages += 1
        return True

    def fault_for(self, delivery_id: str, sender: str | None) -> Fault | None:
        """The receiver's ``faults`` knob: an outage's 503, the seed's fault, or none."""
        with self._lock:
            if not self._enabled:
                return None
            if time.monotonic() < self._outage_until:
                self.faults["outage 503"] += 1
                return Fault(status=503)
            self._ordinal += 1
            ordinal = self._ordinal
        drawn = receiver_fault(self.config.seed, ordinal, self.config.http_timeout_ms)
        if drawn is None:
            return None
        kind, fault = drawn
        with self._lock:
            self.faults[kind] += 1
        return fault

    def on_commit(self, delivery_id: str, sender: str | None, verdict: Verdict) -> None:
        """The receiver's ``on_commit`` knob: fire the oldest armed event at this sender."""
        with self._lock:
            if not self._enabled or not self._armed or self.fleet is None:
                return
            event = self._armed.popleft()
        if not self.fleet.act_on_sender(sender, event):
            with self._lock:
                self._armed.appendleft(event)


class Intake:
    """Feeds the planned enqueue calls into the queue at a bounded pace and backlog.

    At most ``jobs_per_s`` calls per second (after a first batch), so that the run
    lasts about as long, and sees about as much chaos, on a fast machine as on a
    slow one, as long as the couriers keep up; and at most ``backlog`` unfinished
    jobs, so that a slow machine measures delivery, not deadlines. The last
    ``RESERVE_SHARE`` of the calls wait for ``release()``: the driver releases them
    once the first round of chaos has been played, so that deliveries are still
    flowing when each kind of chaos happens, however short the run.
    """

    def __init__(self, path: Path, ops: list[IntakeOp], backlog: int, jobs_per_s: float) -> None:
        self.ops = ops
        self.backlog = backlog
        self.jobs_per_s = jobs_per_s
        self._started = time.monotonic()
        self.accepted: dict[str, int] = {}  # id -> qty of every job the queue took
        self.outcomes: Counter[str] = Counter()
        self.surprises: list[str] = []
        self.busy = 0
        self._next = 0
        self._limit = len(ops) - int(len(ops) * RESERVE_SHARE)
        self._con = worker.open_queue(path)

    @property
    def done(self) -> bool:
        return self._next >= len(self.ops)

    def release(self) -> None:
        """Let the reserved calls in."""
        self._limit = len(self.ops)

    def feed(self) -> int | None:
        """Enqueue up to ``INTAKE_BATCH`` calls, as far as the pace and the backlog allow.

        Returns the number of unfinished jobs, the new ones included, or ``None`` if
        the file was busy (nothing is lost: the same call is tried again next time).
        """
        try:
            unfinished = queueview.unfinished_count(self._con)
            paced = int((time.monotonic() - self._started) * self.jobs_per_s) + INTAKE_BATCH
            room = min(self.backlog - unfinished, INTAKE_BATCH, paced - self._next)
            for _ in range(max(0, room)):
                if self._next >= self._limit:
                    break
                unfinished += self._enqueue(self.ops[self._next])
                self._next += 1
        except sqlite3.OperationalError as error:
            if not is_busy(error):
                raise
            self.busy += 1
            return None
        return unfinished

    def _enqueue(self, op: IntakeOp) -> bool:
        """Make one planned enqueue call and check its answer; ``True`` for a new job."""
        event = {"id": op.job_id, "qty": op.qty}
        try:
            added = worker.enqueue(self._con, event, clock_ms(), op.ttl_ms, op.max_attempts)
            got = "new" if added else "retry"
        except worker.Conflict:
            got = "conflict"
        self.outcomes[got] += 1
        if got != op.expect:
            self.surprises.append(f"{op.job_id} qty {op.qty}: expected {op.expect}, got {got}")
        if got == "new":
            self.accepted[op.job_id] = op.qty
        return got == "new"

    def status_counts(self) -> dict[str, int] | None:
        """Jobs per status, or ``None`` if the file stayed busy."""
        try:
            return queueview.status_counts(self._con)
        except sqlite3.OperationalError as error:
            if not is_busy(error):
                raise
            return None

    def dead_jobs(self) -> list[dict[str, Any]]:
        """The dead jobs, or none if the file stayed busy."""
        try:
            return queueview.dead_jobs(self._con)
        except sqlite3.OperationalError as error:
            if not is_busy(error):
                raise
            return []

    def close(self) -> None:
        self._con.close()


class LockHolder:
    """Someone (a backup, a careless script) holding the queue's write lock for a while."""

    def __init__(self, path: Path, counts: ChaosCounts) -> None:
        self.path = path
        self.counts = counts
        self._con: sqlite3.Connection | None = None
        self._until = 0.0

    @property
    def held(self) -> bool:
        return self._con is not None

    def hold(self, duration_ms: int) -> bool:
        """Take the write lock for ``duration_ms``; ``False`` if held already or busy."""
        if self._con is not None:
            return False
        con = sqlite3.connect(self.path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        try:
            con.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as error:
            con.close()
            if not is_busy(error):
                raise
            self.counts.lock_holds["could not take the lock"] += 1
            return False
        self._con = con
        self._until = time.monotonic() + duration_ms / 1000
        self.counts.lock_holds["held"] += 1
        return True

    def tick(self, now: float) -> None:
        """Release the lock once its time is up."""
        if self._con is not None and now >= self._until:
            self.release()

    def release(self) -> None:
        """Roll back and close the holding connection, if any (changes nothing)."""
        if self._con is not None:
            self._con.execute("ROLLBACK")
            self._con.close()
            self._con = None


class Operator:
    """An operator redriving dead jobs with the real CLI, one at a time.

    Each job is redriven at most once per run, so that an unlucky job does not
    bounce between dead and pending for ever.
    """

    def __init__(self, children: Children, paths: Paths, counts: ChaosCounts) -> None:
        self.children = children
        self.paths = paths
        self.counts = counts
        self.redriven: set[str] = set()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    def redrive(self, target: int, intake: Intake) -> bool:
        """Start ``python -m courier redrive`` for one dead job; ``False`` if none or busy."""
        if self._proc is not None:
            return False
        candidates = [job["id"] for job in intake.dead_jobs() if job["id"] not in self.redriven]
        if not candidates:
            return False
        job_id = candidates[target % len(candidates)]
        self.redriven.add(job_id)
        note = f"soak-redrive-{len(self.redriven)}"
        self._log = self.paths.logs / f"operator-{len(self.redriven)}.log"
        argv = courier_command(
            "redrive", self.paths.queue, job_id, "--note", note, "--ttl-ms", str(REDRIVE_TTL_MS)
        )
        self._proc = self.children.start(argv, self._log)
        return True

    def tick(self) -> None:
        """Record the redrive that just ended, if any."""
        if self._proc is None or self._proc.poll() is None:
            return
        self._record(self._proc.returncode)

    def _record(self, code: int) -> None:
        text = self._log.read_text(encoding="utf-8", errors="replace") if self._log else ""
        if code == 0:
            self.counts.redrives["redriven"] += 1
        elif "locked" in text:
            self.counts.redrives["queue busy (lock timeout)"] += 1
        else:
            self.counts.redrives[f"failed (exit {code})"] += 1
        self._proc = None

    def finish(self) -> None:
        """Wait for a redrive still running (bounded), then record it."""
        if self._proc is None:
            return
        try:
            self._record(self._proc.wait(timeout=OPERATOR_TIMEOUT_S))
        except subprocess.TimeoutExpired:
            self.children.kill(self._proc)
            self._record(-signal.SIGKILL)


@dataclass
class Rig:
    """Everything the chaos phase acts on."""

    config: Config
    fleet: Fleet
    receiver_chaos: ReceiverChaos
    intake: Intake
    lock: LockHolder
    operator: Operator
    counts: ChaosCounts


def apply_chaos(event: ChaosEvent, rig: Rig) -> None:
    """Do one scheduled chaos event; count it as skipped if it found nothing to act on."""
    if event.kind == KILL:
        done = rig.fleet.kill_target(event.target)
    elif event.kind == PAUSE:
        done = rig.fleet.pause_target(event)
    elif event.kind in (KILL_AFTER_COMMIT, PAUSE_IN_FLIGHT):
        done = rig.receiver_chaos.arm(event)
    elif event.kind == HOLD_LOCK:
        done = rig.lock.hold(event.duration_ms)
    elif event.kind == OUTAGE:
        done = rig.receiver_chaos.outage(event.duration_ms)
    else:
        done = rig.operator.redrive(event.target, rig.intake)
    if not done:
        rig.counts.skipped[event.kind] += 1


def _progress(rig: Rig, elapsed_s: float, out: Out) -> None:
    counts = rig.intake.status_counts()
    if counts is None:
        return
    kills = sum(rig.counts.kills.values())
    out(
        f"  {elapsed_s:6.1f} s: enqueued {len(rig.intake.accepted)}/{rig.config.jobs}, "
        f"done {counts['done']}, dead {counts['dead']}, "
        f"unfinished {counts['pending'] + counts['leased']}; kills {kills}, "
        f"pauses {rig.counts.pauses['resumed']}, restarts {rig.counts.restarts}"
    )


def run_chaos(rig: Rig, out: Out) -> str:
    """The chaos phase: feed jobs and follow the schedule; return why it ended.

    It ends ``drained`` once every planned enqueue was made and no job is
    pending or leased, or ``time`` after ``config.seconds``.
    """
    schedule = deque(plan_chaos(rig.config))
    first_round_ms = max((event.at_ms for event in list(schedule)[: len(CHAOS_KINDS)]), default=0)
    started = time.monotonic()
    ends_at = started + rig.config.seconds
    rig.fleet.start_all(ends_at)
    next_progress = started + PROGRESS_S
    for _ in range(int(rig.config.seconds / TICK_S) + 1):
        now = time.monotonic()
        if now >= ends_at:
            break
        rig.fleet.tick(now)
        rig.lock.tick(now)
        rig.operator.tick()
        unfinished = None if rig.lock.held else rig.intake.feed()
        if rig.intake.done and unfinished == 0:
            return "drained"
        elapsed_ms = (now - started) * 1000
        while schedule and schedule[0].at_ms <= elapsed_ms:
            apply_chaos(schedule.popleft(), rig)
        if elapsed_ms > first_round_ms:
            rig.intake.release()
        if now >= next_progress:
            _progress(rig, now - started, out)
            next_progress = now + PROGRESS_S
        time.sleep(TICK_S)
    return "time"


# --- The checker ---------------------------------------------------------------------


@dataclass
class ProcessRecord:
    """One courier incarnation as the checker sees it."""

    owner: str
    incarnation: int
    healthy: bool
    drill: str | None
    exit_code: int | None
    killed_for: str | None
    terminated: bool
    events: list[dict[str, Any]]
    unreadable_lines: int
    log_tail: str


@dataclass
class Observed:
    """Everything the checker reads after a run: both files, the event logs, the counts."""

    config: Config
    ended: str
    timings: dict[str, float]
    jobs: list[dict[str, Any]]
    audit: list[tuple[str, int]]
    effects: list[tuple[str, int]]
    requests: list[tuple[str, str, int]]
    accepted: dict[str, int]
    intake_outcomes: dict[str, int]
    intake_surprises: list[str]
    intake_busy: int
    planned_new: int
    processes: list[ProcessRecord]
    counts: ChaosCounts
    receiver_faults: dict[str, int]


def read_events(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The JSON lines of one event log, and how many lines could not be read."""
    if not path.exists():
        return [], 0
    events: list[dict[str, Any]] = []
    unreadable = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            unreadable += 1
            continue
        if isinstance(value, dict):
            events.append(value)
        else:
            unreadable += 1
    return events, unreadable


def _tail(path: Path) -> str:
    if not path.exists():
        return ""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:])


def process_record(courier: CourierProcess) -> ProcessRecord:
    """What the checker needs of one courier incarnation, its event log read back."""
    events, unreadable = read_events(courier.events)
    return ProcessRecord(
        owner=courier.owner,
        incarnation=courier.incarnation,
        healthy=courier.healthy,
        drill=None if courier.drill is None else courier.drill.name,
        exit_code=courier.exit_code,
        killed_for=courier.killed_for,
        terminated=courier.terminated,
        events=events,
        unreadable_lines=unreadable,
        log_tail=_tail(courier.log),
    )


def read_queue(path: Path) -> tuple[list[dict[str, Any]], list[tuple[str, int]]]:
    """Every job row and every audit row ``(id, token)`` of the queue file."""
    con = queueview.connect_existing(path)
    try:
        con.execute("BEGIN")
        jobs = queueview.job_rows(con)
        audit = [(str(row[0]), int(row[1])) for row in con.execute(_SELECT_AUDIT)]
        con.execute("COMMIT")
        return jobs, audit
    finally:
        con.close()


def read_inbox(path: Path) -> tuple[list[tuple[str, int]], list[tuple[str, str, int]]]:
    """Every effect ``(id, qty)`` and every logged request ``(method, path, status)``."""
    con = sqlite3.connect(path, timeout=5, isolation_level=None)
    try:
        con.execute("BEGIN")
        effects = [(str(row[0]), int(row[1])) for row in con.execute(_SELECT_EFFECTS)]
        requests = [(str(m), str(p), int(s)) for m, p, s in con.execute(_SELECT_REQUESTS)]
        con.execute("COMMIT")
        return effects, requests
    finally:
        con.close()


def _exit_kind(record: ProcessRecord) -> str:
    """How one courier process ended: the checker's classification."""
    code = record.exit_code
    if record.killed_for is not None:
        return f"killed by the supervisor ({record.killed_for})"
    if code == -signal.SIGKILL:
        dies = [event for event in record.events if event.get("event") == "die"]
        return f"died at hook {dies[-1]['point']}" if dies else "unexplained SIGKILL"
    if code == 0 or (code == -signal.SIGTERM and record.terminated):
        return "stopped"
    return "crashed"


def _results(processes: list[ProcessRecord]) -> list[dict[str, Any]]:
    return [e for p in processes for e in p.events if e.get("event") == "result"]


def fencing_figures(processes: list[ProcessRecord]) -> dict[str, Any]:
    """What the couriers saw of their finishes: stale ones, and any fenced twice.

    A ticket ``(id, token)`` belongs to exactly one claim, so it can be finished
    (not ``stale``) at most once; and ``done`` is final, so one id is done by at
    most one ticket.
    """
    results = _results(processes)
    by_status = Counter(str(e["status"]) for e in results)
    finishes = Counter((e["id"], e["token"]) for e in results if e["status"] != "stale")
    done_tokens: dict[str, set[int]] = defaultdict(set)
    for event in results:
        if event["status"] == "done":
            done_tokens[event["id"]].add(event["token"])
    return {
        "run_once_results": dict(sorted(by_status.items())),
        "stale_finishes_rejected": by_status["stale"],
        "tickets_finished_twice": sorted(f"{i}@{t}" for (i, t), n in finishes.items() if n > 1),
        "jobs_done_by_two_tickets": sorted(
            i for i, tokens in done_tokens.items() if len(tokens) > 1
        ),
        "largest_token_reported": max((int(e["token"]) for e in results), default=0),
    }


def job_figures(obs: Observed) -> dict[str, Any]:
    """The queue file against the intake: done, dead by reason, lost, strays."""
    jobs = {job["id"]: job for job in obs.jobs}
    status = Counter(job["status"] for job in obs.jobs)
    dead = Counter(str(job["reason"]) for job in obs.jobs if job["status"] == "dead")
    unfinished = sorted(j["id"] for j in obs.jobs if j["status"] in ("pending", "leased"))
    missing = sorted(job_id for job_id in obs.accepted if job_id not in jobs)
    return {
        "planned": obs.planned_new,
        "enqueued": len(obs.accepted),
        "intake_retries": obs.intake_outcomes.get("retry", 0),
        "intake_conflicts": obs.intake_outcomes.get("conflict", 0),
        "in_queue": len(obs.jobs),
        "done": status["done"],
        "dead": dict(sorted(dead.items())),
        "dead_total": status["dead"],
        "redriven": len({job_id for job_id, _ in obs.audit}),
        "unfinished": unfinished,
        "missing": missing,
        "lost": len(unfinished) + len(missing),
        "strays": sorted(job_id for job_id in jobs if job_id not in obs.accepted),
        "largest_token": max((int(job["token"]) for job in obs.jobs), default=0),
        "audit_tokens_above_job_token": sorted(
            job_id for job_id, token in obs.audit if token > int(jobs[job_id]["token"])
        ),
    }


def effect_figures(obs: Observed) -> dict[str, Any]:
    """The inbox against the queue: each done job has one effect, each effect one job."""
    jobs = {job["id"]: job for job in obs.jobs}
    per_id = Counter(job_id for job_id, _ in obs.effects)
    mismatched = sorted(
        {
            job_id
            for job_id, qty in obs.effects
            if obs.accepted.get(job_id) != qty or jobs.get(job_id, {}).get("qty") != qty
        }
    )
    return {
        "effects": len(obs.effects),
        "applied_twice": sorted(job_id for job_id, n in per_id.items() if n > 1),
        "done_without_effect": sorted(
            j["id"] for j in obs.jobs if j["status"] == "done" and per_id[j["id"]] == 0
        ),
        "not_matching_an_enqueued_job": mismatched,
        "dead_with_effect": sum(
            1 for j in obs.jobs if j["status"] == "dead" and per_id[j["id"]] > 0
        ),
    }


def http_figures(obs: Observed) -> dict[str, Any]:
    """The receiver's request log: how many requests it took to apply the effects."""
    deliveries = [status for method, path, status in obs.requests if path == "/deliveries"]
    return {
        "requests": len(obs.requests),
        "deliveries": len(deliveries),
        "by_status": {str(k): v for k, v in sorted(Counter(deliveries).items())},
        "effects": len(obs.effects),
        "requests_per_effect": round(len(deliveries) / max(1, len(obs.effects)), 3),
    }


def process_figures(processes: list[ProcessRecord]) -> dict[str, Any]:
    """How every courier process ended, and where the drills killed them."""
    kinds = Counter(_exit_kind(record) for record in processes)
    hooks = Counter(
        kind.removeprefix("died at hook ") for kind in kinds.elements() if "hook" in kind
    )
    crashed = [
        {"owner": r.owner, "incarnation": r.incarnation, "exit": r.exit_code, "log": r.log_tail}
        for r in processes
        if _exit_kind(r) == "crashed"
    ]
    busy = sum(1 for p in processes for e in p.events if e.get("event") == "busy")
    crashed_on_lock = sum(1 for c in crashed if "locked" in str(c["log"]))
    return {
        "started": len(processes),
        "endings": dict(sorted(kinds.items())),
        "killed_at_hook": {f"{o}:{p}": hooks[f"{o}:{p}"] for o, p in HOOK_POINTS},
        "crashes": crashed,
        "unexplained_kills": kinds["unexplained SIGKILL"],
        "unreadable_event_lines": sum(r.unreadable_lines for r in processes),
        "lock_timeouts_seen": busy,
        "lock_timeouts_survived": busy - crashed_on_lock,
    }


def check(obs: Observed) -> dict[str, Any]:
    """The report of one run: every figure, the must-be-zero ones, and the failures."""
    jobs = job_figures(obs)
    effects = effect_figures(obs)
    fencing = fencing_figures(obs.processes)
    processes = process_figures(obs.processes)
    must_be_zero = {
        "lost": jobs["lost"],
        "jobs nobody enqueued": len(jobs["strays"]),
        "effects applied twice": len(effects["applied_twice"]),
        "done jobs without an inbox effect": len(effects["done_without_effect"]),
        "effects not matching an enqueued job": len(effects["not_matching_an_enqueued_job"]),
        "tickets finished twice": len(fencing["tickets_finished_twice"]),
        "jobs done by two tickets": len(fencing["jobs_done_by_two_tickets"]),
        "audit tokens above the job's token": len(jobs["audit_tokens_above_job_token"]),
        "intake surprises": len(obs.intake_surprises),
        "courier crashes": len(processes["crashes"]),
        "unexplained kills": processes["unexplained_kills"],
    }
    failures = [f"{name} = {value} (must be 0)" for name, value in must_be_zero.items() if value]
    # A courier frozen in flight (after the receiver's commit, before its answer) for
    # longer than its lease must come back to a stale finish: the fencing at work.
    frozen = obs.counts.pauses["in flight"]
    if frozen and not fencing["stale_finishes_rejected"]:
        failures.append(f"stale finishes = 0 after {frozen} pauses in flight (must be > 0)")
    return {
        "config": asdict(obs.config),
        "ended": obs.ended,
        "timings_s": obs.timings,
        "jobs": jobs,
        "effects": effects,
        "http": http_figures(obs),
        "fencing": fencing,
        "processes": processes,
        "chaos": _chaos_figures(obs, processes),
        "locks": {
            "courier_lock_timeouts": processes["lock_timeouts_seen"],
            "intake_lock_timeouts": obs.intake_busy,
            "lock_holds": dict(obs.counts.lock_holds),
        },
        "intake_surprises": obs.intake_surprises,
        "must_be_zero": must_be_zero,
        "failures": failures,
        "ok": not failures,
    }


def _chaos_figures(obs: Observed, processes: dict[str, Any]) -> dict[str, Any]:
    counts = obs.counts
    return {
        "kills": dict(sorted(counts.kills.items())),
        "killed_at_hook": processes["killed_at_hook"],
        "pauses": dict(sorted(counts.pauses.items())),
        "restarts": counts.restarts,
        "receiver_faults": dict(sorted(obs.receiver_faults.items())),
        "outages": counts.outages,
        "redrives": dict(sorted(counts.redrives.items())),
        "skipped_no_target": dict(sorted(counts.skipped.items())),
        "armed_never_fired": counts.armed_left,
    }


def _pairs(mapping: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value}" for key, value in mapping.items()) or "none"


def _figure_rows(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    jobs, effects, http = report["jobs"], report["effects"], report["http"]
    fencing, procs = report["fencing"], report["processes"]
    return [
        ("jobs enqueued (planned)", f"{jobs['enqueued']} ({jobs['planned']})", ""),
        (
            "intake retries / conflicts",
            f"{jobs['intake_retries']} / {jobs['intake_conflicts']}",
            "",
        ),
        ("jobs done", str(jobs["done"]), ""),
        ("jobs dead, by reason", f"{jobs['dead_total']}: {_pairs(jobs['dead'])}", ""),
        ("dead jobs whose effect was applied", str(effects["dead_with_effect"]), "allowed"),
        ("jobs redriven by the operator", str(jobs["redriven"]), ""),
        ("stale finishes attempted and rejected", str(fencing["stale_finishes_rejected"]), "> 0"),
        ("run_once results", _pairs(fencing["run_once_results"]), ""),
        (
            "lock timeouts seen / survived",
            f"{procs['lock_timeouts_seen']} / {procs['lock_timeouts_survived']}",
            "",
        ),
        ("intake lock timeouts", str(report["locks"]["intake_lock_timeouts"]), ""),
        ("HTTP delivery requests / effects", f"{http['deliveries']} / {http['effects']}", ""),
        ("delivery answers by status", _pairs(http["by_status"]), ""),
        ("largest fencing token", str(jobs["largest_token"]), ""),
    ]


def _chaos_rows(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    chaos, procs = report["chaos"], report["processes"]
    holds = _pairs(report["locks"]["lock_holds"])
    return [
        ("courier processes started / restarts", f"{procs['started']} / {chaos['restarts']}", ""),
        ("SIGKILLs by the supervisor", _pairs(chaos["kills"]), ""),
        ("SIGKILLs inside a fault hook", _pairs(chaos["killed_at_hook"]), ""),
        ("pauses (SIGSTOP past the lease)", _pairs(chaos["pauses"]), ""),
        ("receiver faults injected", _pairs(chaos["receiver_faults"]), ""),
        ("receiver outages / write-lock holds", f"{chaos['outages']} / {holds}", ""),
        ("operator redrives", _pairs(chaos["redrives"]), ""),
    ]


def render_table(report: dict[str, Any]) -> str:
    """The report as a fixed-width table: figure, the rule it must keep, value."""
    zero = [(name, str(value), "= 0") for name, value in report["must_be_zero"].items()]
    rows = _figure_rows(report) + zero + _chaos_rows(report)
    width = max(len(label) for label, _, _ in rows)
    timings = report["timings_s"]
    lines = [
        f"chaos phase {timings['chaos']} s (ended: {report['ended']}), "
        f"recovery {timings['recovery']} s, total {timings['total']} s",
        f"{'figure':<{width}}  {'rule':<7}  value",
        f"{'-' * width}  {'-' * 7}  {'-' * 5}",
    ]
    lines += [f"{label:<{width}}  {rule:<7}  {value}" for label, value, rule in rows]
    return "\n".join(lines)


# --- One whole run --------------------------------------------------------------------


def _observe(
    rig: Rig, paths: Paths, ended: str, timings: dict[str, float], receiver_faults: dict[str, int]
) -> Observed:
    """Read both files and every event log, once every process has stopped."""
    jobs, audit = read_queue(paths.queue)
    effects, requests = read_inbox(paths.inbox)
    return Observed(
        config=rig.config,
        ended=ended,
        timings=timings,
        jobs=jobs,
        audit=audit,
        effects=effects,
        requests=requests,
        accepted=dict(rig.intake.accepted),
        intake_outcomes=dict(rig.intake.outcomes),
        intake_surprises=list(rig.intake.surprises),
        intake_busy=rig.intake.busy,
        planned_new=sum(1 for op in rig.intake.ops if op.expect == "new"),
        processes=[process_record(courier) for courier in rig.fleet.everyone],
        counts=rig.counts,
        receiver_faults=dict(receiver_faults),
    )


def run_soak(config: Config, root: Path, out: Out = _print) -> dict[str, Any]:
    """Run the chaos phase and the recovery in ``root``; return the checker's report."""
    paths = Paths(root).create()
    worker.open_queue(paths.queue).close()
    counts = ChaosCounts()
    receiver_chaos = ReceiverChaos(config, counts)
    started = time.monotonic()
    with Children() as children:
        receiver = Receiver(
            paths.inbox, faults=receiver_chaos.fault_for, on_commit=receiver_chaos.on_commit
        )
        with receiver:
            fleet = Fleet(config, paths, receiver.url, children, counts)
            receiver_chaos.fleet = fleet
            ops = plan_intake(config.seed, config.jobs)
            intake = Intake(paths.queue, ops, config.backlog, config.jobs_per_s)
            rig = Rig(
                config,
                fleet,
                receiver_chaos,
                intake,
                LockHolder(paths.queue, counts),
                Operator(children, paths, counts),
                counts,
            )
            out(f"receiver on {receiver.url}; files in {root}")
            try:
                ended = run_chaos(rig, out)
            finally:
                receiver_chaos.disable()
                rig.lock.release()
                fleet.stop_all(config.stop_grace_s)
                rig.operator.finish()
                intake.close()
            chaos_s = time.monotonic() - started
            out(f"chaos phase over ({ended}) after {chaos_s:.1f} s; recovering")
            fleet.run_healthy(config.recovery_seconds)
    total_s = time.monotonic() - started
    timings = {
        "chaos": round(chaos_s, 1),
        "recovery": round(total_s - chaos_s, 1),
        "total": round(total_s, 1),
    }
    return check(_observe(rig, paths, ended, timings, receiver_chaos.faults))


# --- The command line -----------------------------------------------------------------


OPTIONS: tuple[tuple[str, type, str, str], ...] = (
    ("couriers", int, "N", "courier processes"),
    ("jobs", int, "M", "jobs to enqueue"),
    ("seconds", float, "S", "bound of the chaos phase"),
    ("recovery_seconds", float, "S", "bound of the recovery phase"),
    ("seed", int, "SEED", "fixes the chaos schedule"),
    ("lease_ms", int, "MS", "the couriers' lease; their HTTP timeout is 3/4 of it"),
    ("chaos_per_s", float, "RATE", "chaos events per second after the first round"),
    ("jobs_per_s", float, "RATE", "intake calls per second at most (the load's pace)"),
)


def build_parser() -> argparse.ArgumentParser:
    """The soak's options: one per ``Config`` field, plus where the files and JSON go."""
    parser = argparse.ArgumentParser(
        prog="python -m bench.soak",
        description=(__doc__ or "").split("\n\n")[2],
        epilog="Couriers run as 'python -m bench.soak courier ...' (internal). Exit status: "
        "0 every check holds, 1 a check failed, 2 bad arguments.",
    )
    defaults = asdict(Config())
    for name, kind, metavar, text in OPTIONS:
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=kind,
            metavar=metavar,
            default=defaults[name],
            help=f"{text} (default %(default)s)",
        )
    parser.add_argument(
        "--workdir",
        type=Path,
        metavar="DIR",
        help="keep the queue, inbox, logs and events here (default: a temporary directory)",
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        default="-",
        help="write the JSON report here (default -: print it)",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def _raise_on_sigterm() -> None:
    """Turn SIGTERM into ``SystemExit`` so that children and files are cleaned up."""

    def handle(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handle)


@contextlib.contextmanager
def _workdir(path: Path | None) -> Iterator[Path]:
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="lease-queue-soak-") as tmp:
        yield Path(tmp)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the soak (or, as ``courier``, one of its couriers); return the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["courier"]:
        return courier_main(arguments[1:])
    args = build_parser().parse_args(arguments)
    try:
        config = Config(**{name: getattr(args, name) for name, *_ in OPTIONS})
    except ValueError as error:
        print(f"bench.soak: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    out: Out = (lambda line: None) if args.quiet else _print
    _raise_on_sigterm()
    out(
        f"lease-queue chaos soak: seed {config.seed}, {config.couriers} couriers, "
        f"{config.jobs} jobs, lease {config.lease_ms} ms"
    )
    with _workdir(args.workdir) as root:
        report = run_soak(config, root, out)
    _print(render_table(report))
    text = json.dumps(report, indent=2, sort_keys=True)
    if args.json == "-":
        _print(text)
    else:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    for failure in report["failures"]:
        print(f"FAILED: {failure}", file=sys.stderr)
    _print("OK: every check holds" if report["ok"] else "FAILED: see above")
    return EXIT_OK if report["ok"] else EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
