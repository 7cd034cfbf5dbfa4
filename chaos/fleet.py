"""The courier processes of a soak: started, restarted, killed, paused and resumed.

Every signal goes to a process this fleet started (never to a pid from anywhere
else), under one lock, since the receiver's handler threads act on the sender of a
delivery while the main loop reaps and restarts. A chaos courier's own
``--max-seconds`` ends with its phase plus ``CHILD_MARGIN_S``, so it stops by
itself even if the supervisor dies.

With simulated hosts (``chaos.hosts.Hosts``) courier ``cN`` (and its healthy
successor ``rN``) runs on host ``N`` (``ip netns exec``, which keeps the pid),
and a partition cuts the host of the courier that sent a delivery the receiver
just committed, so it is cut off while it holds that job's lease; the host is
healed when its time is up, and every host is healed before the recovery.
"""

from __future__ import annotations

import contextlib
import math
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from chaos.child import chaos_command, sender_pid
from chaos.hosts import Hosts
from chaos.schedule import KILL_AFTER_COMMIT, PARTITION, ChaosEvent, Config, Drill, drill_for
from chaos.tally import ChaosCounts
from courier.procs import Children

__all__ = ["CourierProcess", "Fleet", "wait_all"]

RESTART_DELAY_S = 0.2
RESUME_SHIELD_S = 1.0  # a just-resumed courier is left alone to finish (stale)
CHILD_MARGIN_S = 30.0  # a chaos courier outlives its phase by at most this, even orphaned
REAP_TIMEOUT_S = 10.0


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


def wait_all(procs: Sequence[subprocess.Popen[bytes]], timeout_s: float) -> None:
    """Wait until every process exited or ``timeout_s`` passed, whichever is first."""
    until = time.monotonic() + timeout_s
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, until - time.monotonic()))


class Fleet:
    """The soak's couriers: chaos couriers ``c1..cN`` and, for recovery, healthy ``r1..rN``.

    ``queue`` is the queue file or conninfo the couriers get, ``events`` and
    ``logs`` the folders for each incarnation's event log and output, ``url`` the
    receiver's delivery URL, ``child`` the ``python -m chaos`` subcommand of a
    courier (``courier`` on a file, ``pgcourier`` on PostgreSQL) and ``hosts``
    the simulated hosts, if any.
    """

    def __init__(
        self,
        config: Config,
        queue: Path | str,
        events: Path,
        logs: Path,
        url: str,
        children: Children,
        counts: ChaosCounts,
        child: str = "courier",
        hosts: Hosts | None = None,
    ) -> None:
        self.config = config
        self.queue = queue
        self.child = child
        self.hosts = hosts
        self.events = events
        self.logs = logs
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
        self._heal_at: dict[int, float] = {}

    # Starting ---------------------------------------------------------------------

    def start_all(self, ends_at: float) -> None:
        """Start one courier per owner; they run until ``ends_at`` (monotonic) at most."""
        self._ends_at = ends_at
        with self._lock:
            for owner in self.owners:
                self._start(owner, healthy=False)

    def _start(self, owner: str, healthy: bool) -> CourierProcess:
        """Start the next incarnation of ``owner`` (with its drill, unless healthy)."""
        index = self.owners.index(owner) if owner in self.owners else 0
        incarnation = self._incarnations[owner]
        self._incarnations[owner] += 1
        drill = None if healthy else drill_for(self.config.seed, index, incarnation)
        name = f"{owner}-{incarnation}"
        events = self.events / f"{name}.jsonl"
        log = self.logs / f"{name}.log"
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
        flags = [part for pair in options.items() for part in pair]
        argv = chaos_command(self.child, self.queue, *flags)
        if healthy:
            argv.append("--until-drained")
        if self.hosts is not None:
            argv = self.hosts.command(self.host_of(owner), argv)
        proc = self.children.start(argv, log)
        courier = CourierProcess(owner, index, incarnation, proc, events, log, drill, healthy)
        self.everyone.append(courier)
        self._live.append(courier)
        self.active[owner] = courier
        return courier

    def host_of(self, owner: str) -> int:
        """The simulated host (1-based) of ``owner`` (``cN`` and ``rN`` are on host ``N``)."""
        count = self.hosts.count if self.hosts is not None else 1
        return (int(owner[1:]) - 1) % count + 1

    # The main loop's tick -----------------------------------------------------------

    def tick(self, now: float) -> None:
        """Reap exits, resume pauses, heal hosts and restart couriers that are due."""
        with self._lock:
            self._reap(now)
            self._resume_due(now)
            self._heal_due(now)
            self._restart_due(now)

    def _heal_due(self, now: float, every: bool = False) -> None:
        if self.hosts is None:
            return
        for host, at in list(self._heal_at.items()):
            if every or now >= at:
                del self._heal_at[host]
                self.hosts.heal(host)
                self.counts.heals += 1

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

    def act_on_sender(self, sender: str | None, event: ChaosEvent, job: str | None = None) -> bool:
        """Kill, pause or cut off the courier that sent a delivery the receiver just committed.

        Called on a receiver handler thread, after the inbox commit and before the
        answer: the courier is waiting for it, so its ``finish`` has not happened.
        ``job`` is the delivery's id.
        """
        pid = sender_pid(sender)
        now = time.monotonic()
        with self._lock:
            courier = next((c for c in self._live if c.proc.pid == pid), None)
            if courier is None or not self._signalable(courier, now):
                return False
            if event.kind == KILL_AFTER_COMMIT:
                self._kill(courier, "after receiver commit")
            elif event.kind == PARTITION:
                return self._cut(courier, event, job, now)
            else:
                self._pause(courier, event, "in flight", now)
            return True

    def _cut(self, courier: CourierProcess, event: ChaosEvent, job: str | None, now: float) -> bool:
        """Cut the host of ``courier`` off for ``event.duration_ms``; ``False`` if it is already."""
        host = self.host_of(courier.owner)
        if self.hosts is None or host in self._heal_at:
            return False
        self.hosts.cut(host)
        self._heal_at[host] = now + event.duration_ms / 1000
        self.counts.partitions.append(
            {"owner": courier.owner, "host": host, "job": job, "duration_ms": event.duration_ms}
        )
        return True

    # Stopping ---------------------------------------------------------------------

    def stop_all(self, grace_s: float) -> None:
        """Resume the frozen, SIGTERM everyone, wait ``grace_s``, SIGKILL the rest, reap."""
        now = time.monotonic()
        with self._lock:
            self.restarting = False
            self._restart_at.clear()
            self._heal_due(now, every=True)
            for courier in self._live:
                if courier.stopped_until is not None:
                    self._resume(courier, now)
                if courier.proc.poll() is None:
                    courier.proc.send_signal(signal.SIGTERM)
                    courier.terminated = True
        self._end([c.proc for c in self._live], grace_s, "did not stop in time")

    def run_healthy(self, seconds: float) -> None:
        """Start one healthy courier per owner slot; wait until they drained the queue."""
        self._ends_at = time.monotonic() + seconds
        with self._lock:
            healthy = [self._start(f"r{n}", healthy=True) for n in range(1, len(self.owners) + 1)]
        grace_s = seconds + self.config.stop_grace_s
        self._end([c.proc for c in healthy], grace_s, "recovery did not finish in time")

    def _end(self, procs: list[subprocess.Popen[bytes]], grace_s: float, why: str) -> None:
        """Wait ``grace_s`` for ``procs``, SIGKILL (for ``why``) those still running, reap."""
        wait_all(procs, grace_s)
        with self._lock:
            for courier in self._live:
                if courier.proc in procs and courier.proc.poll() is None:
                    self._kill(courier, why)
        wait_all(procs, REAP_TIMEOUT_S)
        self.tick(time.monotonic())
