"""The soak's schedule: every chaos decision, as a pure function of the seed and the sizes.

``plan_intake`` gives the enqueue calls, ``plan_chaos`` the chaos events at their
offsets, ``drill_for`` the drill of each courier incarnation and ``receiver_fault``
the fault of the n-th delivery. Each draws from its own ``random.Random`` seeded
with a string naming what it plans (``"chaos:<seed>"``), so the same seed gives the
same plan whatever else a run does; what the real processes are doing at each
moment is the scheduler's business, so two runs with one seed are alike, not
identical. Nothing here starts a process or touches a file.

The first round of chaos (every kind once, the redrive aside) is **forced**
(``ChaosEvent.forced``), and so is the first courier's first drill
(``FORCED_DRILL``): the supervisor makes each of them happen and show its effect
in every run, however loaded the machine (``chaos.witness``), so that a short run
proves as much about each kind as a long one.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

import worker
from chaos.faults import Fault
from courier.batch_rounds import waits
from courier.interference import MAX_REPLY_DELAY_MS

__all__ = [
    "CHAOS_KINDS",
    "FORCED_DRILL",
    "HOOK_POINTS",
    "PARTITION",
    "RECEIVER_FAULT_SHARES",
    "ChaosEvent",
    "Config",
    "Drill",
    "IntakeOp",
    "chaos_kinds",
    "drill_for",
    "parse_drill",
    "plan_chaos",
    "plan_intake",
    "receiver_fault",
]

MAX_JOBS = 99_999  # job ids are job-00001 .. job-99999
MAX_COURIERS = 32
MAX_BATCH = 64

# --- Intake: what the jobs look like ---------------------------------------------

LONG_TTL_MS = (20_000, 60_000)
SHORT_TTL_MS = (2_000, 15_000)  # about the backlog's wait: some make it, some die 'deadline'
SHORT_TTL_SHARE = 0.06
DUPLICATE_SHARE = 0.03  # same id, same qty: an intake retry (enqueue returns False)
CONFLICT_SHARE = 0.02  # same id, another qty: enqueue raises Conflict

# --- Chaos: what the driver does and how often -------------------------------------

KILL = "kill"
KILL_AFTER_COMMIT = "kill-after-commit"
PAUSE = "pause"
PAUSE_IN_FLIGHT = "pause-in-flight"
HOLD_LOCK = "hold-lock"
OUTAGE = "outage"
REDRIVE = "redrive"
PARTITION = "partition"
# In the order of the first round: what takes longest to play out comes first.
CHAOS_KINDS = (PAUSE_IN_FLIGHT, KILL_AFTER_COMMIT, KILL, PAUSE, HOLD_LOCK, OUTAGE, REDRIVE)
CHAOS_WEIGHTS = (3, 3, 5, 2, 1, 1, 2)
# With simulated hosts (``Config.hosts``) the driver also cuts a host off while it
# holds a lease, for 2-4 leases, then heals it; in the first round, first of all.
PARTITION_WEIGHT = 5
PARTITION_LEASES = (2, 4)
FIRST_CHAOS_MS = 1_000  # let the first couriers start before anything happens
FIRST_CHAOS_GAP_MS = 300
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
# (courier index, incarnation) whose drill is forced: armed from its first round,
# at claim's after-claim point, so it dies at its first claim (``chaos.witness``).
FORCED_DRILL = (0, 0)

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


@dataclass(frozen=True)
class Config:
    """The sizes and bounds of one run. ``seed`` fixes every chaos decision.

    ``backend`` is ``sqlite`` (a queue file) or ``postgres``; ``hosts`` puts each
    courier on a simulated host of its own (``chaos.hosts``, PostgreSQL only) and
    adds partitions to the schedule.
    """

    couriers: int = 6
    jobs: int = 3000
    seconds: float = 300.0
    recovery_seconds: float = 60.0
    seed: int = 1
    lease_ms: int = 1000
    chaos_per_s: float = 0.6
    jobs_per_s: float = 30.0
    backend: str = "sqlite"
    hosts: bool = False
    batch: int = 1
    in_flight: int = 1

    def __post_init__(self) -> None:
        if self.backend not in ("sqlite", "postgres"):
            raise ValueError(f"'backend' must be 'sqlite' or 'postgres', got {self.backend!r}")
        if self.hosts and self.backend != "postgres":
            raise ValueError("simulated hosts ('hosts') need the 'postgres' backend")
        _within("couriers", self.couriers, 1, MAX_COURIERS)
        _within("jobs", self.jobs, 1, MAX_JOBS)
        _within("lease_ms", self.lease_ms, 200, 60_000)
        _within("seed", self.seed, 0, 2**63)
        _within("batch", self.batch, 1, MAX_BATCH)
        _within("in_flight", self.in_flight, 1, self.batch)
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
        """The couriers' HTTP timeout, as ``courier run`` defaults to: 3/4 of the lease,
        over the deliveries that may run in a row on a delivery thread after a claim
        (``courier.batch_rounds.waits``: two batches' in the pipeline)."""
        return self.lease_ms * 3 // (4 * waits(self.batch, self.in_flight))

    @property
    def stop_grace_s(self) -> float:
        """How long a courier gets to stop after SIGTERM: its current round at most and,
        in batches, the ones that finish the batches it claimed ahead.

        A round is a claim, a send bounded by the HTTP timeout (plus a delayed
        answer, which is shorter than the lease), and a finish; a batched courier's
        deliveries of the batches it holds all end within a lease of its last claim.
        """
        return 2 * self.lease_ms / 1000 + 3


def _within(name: str, value: object, lo: int, hi: int) -> None:
    if type(value) is not int or not lo <= value <= hi:
        raise ValueError(f"'{name}' must be an int in {lo}..{hi}, got {value!r}")


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
    replacement while a paused courier is frozen; a ``forced`` event (the first
    round's) waits for something to act on instead of being skipped, and the
    chaos phase does not end before it has been played and shown its effect.
    """

    at_ms: int
    kind: str
    target: int
    duration_ms: int = 0
    replace: bool = False
    forced: bool = False


@dataclass(frozen=True)
class Drill:
    """SIGKILL this courier inside ``operation``'s fault hook ``point``, armed at ``round``."""

    operation: str
    point: str
    round: int

    @property
    def name(self) -> str:
        return f"{self.operation}:{self.point}"


def parse_drill(name: str, round_number: int) -> Drill:
    """The drill named ``OPERATION:POINT`` (one of ``HOOK_POINTS``), armed at ``round_number``."""
    operation, _, point = name.partition(":")
    if (operation, point) not in HOOK_POINTS:
        raise ValueError(f"a drill is one of {[f'{o}:{p}' for o, p in HOOK_POINTS]}, got {name!r}")
    return Drill(operation, point, round_number)


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
        qty = rng.randint(1, worker.MAX_QTY)
        op = IntakeOp(f"job-{number:05d}", qty, _ttl_ms(rng), _budget(rng), "new")
        ops.append(op)
        accepted.append(op)
        roll = rng.random()
        if roll < DUPLICATE_SHARE + CONFLICT_SHARE:
            earlier = rng.choice(accepted)
            same = roll < DUPLICATE_SHARE
            qty = earlier.qty if same else earlier.qty % worker.MAX_QTY + 1
            expect = "retry" if same else "conflict"
            ops.append(IntakeOp(earlier.job_id, qty, _ttl_ms(rng), _budget(rng), expect))
    return ops


def _chaos_event(
    rng: random.Random, kind: str, at_ms: int, config: Config, forced: bool = False
) -> ChaosEvent:
    target = rng.randrange(config.couriers)
    duration = 0
    replace = False
    if kind in (PAUSE, PAUSE_IN_FLIGHT):
        duration = rng.randint(config.lease_ms * 3 // 2, config.lease_ms * 3)
        replace = rng.random() < REPLACE_SHARE
    elif kind == HOLD_LOCK:
        duration = rng.randint(*HOLD_LOCK_MS)
    elif kind == OUTAGE:
        duration = rng.randint(*OUTAGE_MS)
    elif kind == PARTITION:
        low, high = PARTITION_LEASES
        duration = rng.randint(low * config.lease_ms, high * config.lease_ms)
    return ChaosEvent(at_ms, kind, target, duration, replace, forced)


def chaos_kinds(config: Config) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """The kinds of chaos of a run, in the first round's order, and their weights:
    partitions only with hosts (and then first)."""
    if config.hosts:
        return (PARTITION, *CHAOS_KINDS), (PARTITION_WEIGHT, *CHAOS_WEIGHTS)
    return CHAOS_KINDS, CHAOS_WEIGHTS


def plan_chaos(config: Config) -> list[ChaosEvent]:
    """The chaos schedule: every kind once early and forced (so a short run sees
    each), then random.

    The first round starts ``FIRST_CHAOS_MS`` into the run, one kind every
    ``FIRST_CHAOS_GAP_MS`` in ``chaos_kinds`` order, each ``forced`` but the
    redrive (a run may have no dead job to redrive). After it, events
    come as a Poisson stream of ``chaos_per_s`` per second with the kinds'
    weights, up to the chaos phase's time bound.
    """
    rng = random.Random(f"chaos:{config.seed}")
    kinds, weights = chaos_kinds(config)
    horizon_ms = int(config.seconds * 1000)
    events: list[ChaosEvent] = []
    at_ms = FIRST_CHAOS_MS
    for kind in kinds:
        events.append(_chaos_event(rng, kind, at_ms, config, forced=kind != REDRIVE))
        at_ms += FIRST_CHAOS_GAP_MS
    for _ in range(MAX_CHAOS_EVENTS):
        at_ms += 1 + int(rng.expovariate(config.chaos_per_s) * 1000)
        if at_ms >= horizon_ms:
            break
        kind = rng.choices(kinds, weights)[0]
        events.append(_chaos_event(rng, kind, at_ms, config))
    return [event for event in events if event.at_ms < horizon_ms]


def drill_for(seed: int, courier_index: int, incarnation: int) -> Drill | None:
    """The drill of one courier incarnation, or ``None``.

    Every first incarnation has one and the hook points go round-robin over the
    couriers and their restarts, so a run with four couriers or more hits every
    hook point; a restarted incarnation has one with probability ``DRILL_SHARE``.
    The ``FORCED_DRILL`` is armed from round 1 (at ``claim:after-claim``).
    """
    rng = random.Random(f"drill:{seed}:{courier_index}:{incarnation}")
    if incarnation > 0 and rng.random() >= DRILL_SHARE:
        return None
    operation, point = HOOK_POINTS[(courier_index + incarnation) % len(HOOK_POINTS)]
    armed = rng.randint(*DRILL_ROUNDS)
    return Drill(operation, point, 1 if (courier_index, incarnation) == FORCED_DRILL else armed)


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
