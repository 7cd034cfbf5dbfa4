"""One whole soak: the chaos phase, the recovery, then the checker.

``run_soak`` starts the receiver (with ``chaos.receiver.ReceiverChaos`` plugged
in) and the fleet, feeds the intake and follows the schedule until every planned
job was enqueued and none is pending or leased and every forced event has been
played and shown (``chaos.witness``), or ``config.seconds`` have passed; a forced
event that finds nothing to act on waits for it instead of being skipped. Then it
stops the chaos (receiver faults off, frozen couriers resumed, every courier
asked to stop and killed if it has not), lets healthy couriers drain the queue
within ``config.recovery_seconds``, and hands both files and every event log to
``chaos.report.check``. Every loop is bounded in count and time, and every child is
killed and reaped (``courier.procs.Children``) even on failure.

The queue is a file in the run's folder, or (``config.backend == "postgres"``) a
database on a throwaway PostgreSQL server (``chaos.pgserver``) that the couriers
reach over TCP: on loopback, or with ``config.hosts`` each from a simulated host
of its own (``chaos.hosts``), where the receiver listens on the hosts' hub too.
The server is stopped and every namespace and link deleted however the run ends.
"""

from __future__ import annotations

import contextlib
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from chaos.conformance import add_conformance
from chaos.courier_process import Launcher
from chaos.fleet import Fleet
from chaos.hosts import Hosts, remove_leftovers
from chaos.intake import Intake
from chaos.operator import LockHolder, Operator
from chaos.pgserver import Database, pg_server
from chaos.receiver import ReceiverChaos
from chaos.report import ONE_HOST, Observed, check, process_record
from chaos.schedule import (
    HOLD_LOCK,
    KILL,
    KILL_AFTER_COMMIT,
    OUTAGE,
    PARTITION,
    PAUSE,
    PAUSE_IN_FLIGHT,
    ChaosEvent,
    Config,
    chaos_kinds,
    plan_chaos,
    plan_intake,
)
from chaos.store import DatabaseQueue, FileQueue, Store
from chaos.tally import ChaosCounts
from courier.procs import Children
from courier.receiver import Receiver

__all__ = ["Paths", "run_soak"]

LOOPBACK = "127.0.0.1"
TICK_S = 0.02
PROGRESS_S = 10.0

Out = Callable[[str], None]


@dataclass(frozen=True)
class Paths:
    """Where one run keeps its files: all under one directory (``Paths.under``)."""

    queue: Path
    inbox: Path
    events: Path  # one event log per courier incarnation
    logs: Path  # one output log per process

    @staticmethod
    def under(root: Path) -> Paths:
        """The files of a run in ``root``, with the two folders created."""
        paths = Paths(root / "queue.sqlite", root / "inbox.sqlite", root / "events", root / "logs")
        for folder in (paths.events, paths.logs):
            folder.mkdir(parents=True, exist_ok=True)
        return paths


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


def apply_chaos(event: ChaosEvent, rig: Rig) -> bool:
    """Do one scheduled chaos event; ``False`` if it found nothing to act on.

    A forced pause in flight or partition is asked of a courier (``Fleet.force``);
    the others are armed at the receiver. While a forced pause in flight is due or
    finishing (``Fleet.quiet``) nobody is paused and the write lock is not taken.
    """
    if event.kind == KILL:
        return rig.fleet.kill_target(event.target)
    if event.kind == PAUSE:
        return rig.fleet.pause_target(event)
    if event.forced and event.kind in (PAUSE_IN_FLIGHT, PARTITION):
        return rig.fleet.force(event)
    if event.kind in (KILL_AFTER_COMMIT, PAUSE_IN_FLIGHT, PARTITION):
        return rig.receiver_chaos.arm(event)
    if event.kind == HOLD_LOCK:
        return not rig.fleet.quiet and rig.lock.hold(event.duration_ms)
    if event.kind == OUTAGE:
        return rig.receiver_chaos.outage(event.duration_ms, event.forced)
    return rig.operator.redrive(event.target, rig.intake)


def _play(events: list[ChaosEvent], rig: Rig) -> list[ChaosEvent]:
    """Apply ``events``; return the forced ones that must wait (the others are skipped)."""
    waiting = []
    for event in events:
        if apply_chaos(event, rig):
            continue
        if event.forced:
            waiting.append(event)
        else:
            rig.counts.skipped[event.kind] += 1
    return waiting


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

    It ends ``drained`` once every planned enqueue was made, no job is pending or
    leased, every forced event was played and the fleet is at rest (every
    witness settled, no restart due), or ``time`` after ``config.seconds``; forced
    events still waiting then are counted in ``forced_left``.
    """
    schedule = deque(plan_chaos(rig.config))
    first_round_ms = max(
        (event.at_ms for event in list(schedule)[: len(chaos_kinds(rig.config)[0])]), default=0
    )
    started = time.monotonic()
    ends_at = started + rig.config.seconds
    rig.fleet.start_all(ends_at)
    next_progress = started + PROGRESS_S
    waiting: list[ChaosEvent] = []  # forced events that found nothing to act on yet
    for _ in range(int(rig.config.seconds / TICK_S) + 1):
        now = time.monotonic()
        if now >= ends_at:
            break
        rig.fleet.tick(now)
        rig.lock.tick(now)
        rig.operator.tick()
        # The intake waits while the lock is held, and while a forced pause in flight
        # must find the write lock free (a burst of enqueues could hold it too long).
        unfinished = None if rig.lock.held or rig.fleet.quiet else rig.intake.feed()
        if rig.intake.done and unfinished == 0 and _forced_done(rig, waiting):
            return "drained"
        elapsed_ms = (now - started) * 1000
        due = []
        while schedule and schedule[0].at_ms <= elapsed_ms:
            due.append(schedule.popleft())
        waiting = _play(waiting + due, rig)
        if elapsed_ms > first_round_ms:
            rig.intake.release()
        if now >= next_progress:
            _progress(rig, now - started, out)
            next_progress = now + PROGRESS_S
        time.sleep(TICK_S)
    rig.counts.forced_left += [event.kind for event in waiting]
    return "time"


def _forced_done(rig: Rig, waiting: list[ChaosEvent]) -> bool:
    """Every forced event was played and has shown its effect."""
    return not waiting and not rig.receiver_chaos.forced_pending() and rig.fleet.at_rest()


def _observe(
    rig: Rig,
    site: Site,
    paths: Paths,
    ended: str,
    timings: dict[str, float],
    receiver_faults: dict[str, int],
) -> Observed:
    """Read the queue, the inbox and every event log, once every process has stopped."""
    return Observed(
        config=rig.config,
        ended=ended,
        timings=timings,
        files=site.store.read_files(paths.inbox),
        accepted=dict(rig.intake.accepted),
        intake_outcomes=dict(rig.intake.outcomes),
        intake_surprises=list(rig.intake.surprises),
        intake_busy=rig.intake.busy,
        planned_new=sum(1 for op in rig.intake.ops if op.expect == "new"),
        processes=[process_record(courier) for courier in rig.fleet.everyone],
        counts=rig.counts,
        receiver_faults=dict(receiver_faults),
        hosts=site.describe(),
    )


@dataclass
class Site:
    """Where a run's queue lives and how its couriers reach it and the receiver."""

    store: Store
    target: Path | str  # what a courier child is given: the file, or a conninfo
    child: str  # its ``python -m chaos`` subcommand
    receiver_host: str
    hosts: Hosts | None = None
    skipped: str | None = None  # why there are no simulated hosts, if they were wanted

    def describe(self) -> dict[str, Any]:
        """The report's ``hosts`` section: how the couriers reached the queue."""
        if isinstance(self.store, FileQueue):
            return dict(ONE_HOST)
        hosts = self.hosts
        count = 0 if hosts is None else hosts.count
        return {
            "backend": self.store.kind,
            "simulated_hosts": count,
            "addresses": [] if hosts is None else [hosts.address(n) for n in range(1, count + 1)],
            "server": f"PostgreSQL over TCP at {self.receiver_host}",
            "skipped": self.skipped,
        }


@contextlib.contextmanager
def open_site(config: Config, paths: Paths, skipped: str | None, out: Out) -> Iterator[Site]:
    """The run's queue: a file, or a PostgreSQL server (with its hosts), torn down after."""
    if config.backend == "sqlite":
        queue_file = FileQueue(paths.queue)
        queue_file.create()
        yield Site(queue_file, paths.queue, "courier", LOOPBACK)
        return
    with contextlib.ExitStack() as stack:
        hosts = None
        if config.hosts:
            removed = remove_leftovers()
            if removed:
                out(f"removed {len(removed)} leftovers of earlier runs: {', '.join(removed)}")
            hosts = stack.enter_context(Hosts(config.couriers))
        listen = [hosts.hub] if hosts is not None else []
        subnets = [hosts.subnet] if hosts is not None else []
        admin = stack.enter_context(pg_server(listen, subnets))
        database = Database(admin, "lease_queue_soak")
        stack.callback(database.drop)
        store = DatabaseQueue(database.conninfo())
        store.create()
        address = hosts.hub if hosts is not None else LOOPBACK
        yield Site(store, database.conninfo(host=address), "pgcourier", address, hosts, skipped)


def run_soak(
    config: Config, root: Path, out: Out, hosts_skipped: str | None = None
) -> dict[str, Any]:
    """Run the chaos phase and the recovery in ``root``; return the checker's report.

    ``hosts_skipped`` says why a PostgreSQL run has no simulated hosts, if it
    should have had them (it goes into the report).
    """
    paths = Paths.under(root)
    with open_site(config, paths, hosts_skipped, out) as site:
        return _run(config, site, paths, out)


def _run(config: Config, site: Site, paths: Paths, out: Out) -> dict[str, Any]:
    counts = ChaosCounts()
    receiver_chaos = ReceiverChaos(config, counts)
    started = time.monotonic()
    with Children() as children:
        receiver = Receiver(
            paths.inbox,
            host=site.receiver_host,
            interference=receiver_chaos.interference(),
        )
        with receiver:
            lock = LockHolder(site.store, counts)
            launcher = Launcher(
                config=config,
                queue=site.target,
                events=paths.events,
                logs=paths.logs,
                url=receiver.url,
                children=children,
                child=site.child,
                hosts=site.hosts,
            )
            fleet = Fleet(
                launcher,
                counts,
                lock_held=lambda: lock.held,
                can_be_taken_over=site.store.can_be_taken_over,
            )
            receiver_chaos.fleet = fleet
            ops = plan_intake(config.seed, config.jobs)
            intake = Intake(site.store, ops, config.couriers, config.jobs_per_s)
            rig = Rig(
                config,
                fleet,
                receiver_chaos,
                intake,
                lock,
                Operator(children, site.store, paths.logs, counts),
                counts,
            )
            out(f"receiver on {receiver.url}; files in {paths.events.parent}")
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
    report = check(_observe(rig, site, paths, ended, timings, receiver_chaos.faults))
    return add_conformance(report, site.store.target)
