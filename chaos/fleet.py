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

The forced drill, pause in flight and partition are done to a **witness**
(``chaos.witness``): a courier followed through its event log until it has
shown the effect, shielded from the rest of the chaos meanwhile; the fleet is
not ``at_rest`` (and the chaos phase does not end) before every one has.
"""

from __future__ import annotations

import contextlib
import math
import signal
import subprocess
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from chaos.child import chaos_command, freeze_request, sender_pid
from chaos.hosts import Hosts
from chaos.schedule import (
    FORCED_DRILL,
    KILL_AFTER_COMMIT,
    PARTITION,
    PAUSE_IN_FLIGHT,
    ChaosEvent,
    Config,
    Drill,
    drill_for,
)
from chaos.tally import ChaosCounts
from chaos.witness import DRILL, HEAL_BOUND_S, RESUME_BOUND_S, EventTail, Witness, is_stopped
from courier.procs import Children

__all__ = ["CourierProcess", "Fleet", "wait_all"]

RESTART_DELAY_S = 0.2
RESUME_SHIELD_S = 1.0  # a just-resumed courier is left alone to finish (stale)
CHILD_MARGIN_S = 30.0  # a chaos courier outlives its phase by at most this, even orphaned
REAP_TIMEOUT_S = 10.0
WITNESS_GRACE_S = 15.0  # at a time-bound end: how long frozen or cut-off witnesses may settle
WAIT_SLICE_S = 0.05


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
    paused_for: str | None = None
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


def _withdraw(request: Path) -> bool:
    """Remove a freeze request; ``False`` if the courier had taken it already."""
    try:
        request.unlink()
    except FileNotFoundError:
        return False
    return True


class Fleet:
    """The soak's couriers: chaos couriers ``c1..cN`` and, for recovery, healthy ``r1..rN``.

    ``queue`` is the queue file or conninfo the couriers get, ``events`` and
    ``logs`` the folders for each incarnation's event log and output, ``url`` the
    receiver's delivery URL, ``child`` the ``python -m chaos`` subcommand of a
    courier (``courier`` on a file, ``pgcourier`` on PostgreSQL) and ``hosts``
    the simulated hosts, if any. ``lock_held`` says whether someone holds the
    queue's write lock, ``can_be_taken_over`` whether a job has budget and time
    left for another claim (``chaos.store``); the witnesses need both.
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
        *,
        lock_held: Callable[[], bool] = lambda: False,
        can_be_taken_over: Callable[[str], bool] = lambda job: True,
    ) -> None:
        self.config = config
        self.lock_held = lock_held
        self.can_be_taken_over = can_be_taken_over
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
        self.witnesses: list[Witness] = []
        self._unasked: list[ChaosEvent] = []  # forced freezes waiting for a courier

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
        if drill is not None and (index, incarnation) == FORCED_DRILL:
            self.witnesses.append(self._witness(DRILL, None, courier))
            self.counts.witnesses.append(self.witnesses[-1].record())
        return courier

    def host_of(self, owner: str) -> int:
        """The simulated host (1-based) of ``owner`` (``cN`` and ``rN`` are on host ``N``)."""
        count = self.hosts.count if self.hosts is not None else 1
        return (int(owner[1:]) - 1) % count + 1

    # The main loop's tick -----------------------------------------------------------

    def tick(self, now: float) -> None:
        """Reap exits, follow the witnesses, resume pauses, heal hosts and restart
        couriers that are due, and ask for the forced freezes still unasked."""
        with self._lock:
            self._reap(now)
            self._follow_witnesses(now)
            self._resume_due(now)
            self._heal_due(now)
            self._restart_due(now)
            self._ask_unasked()

    def at_rest(self) -> bool:
        """Every forced freeze was asked for, every witness has settled and no
        restart is due: the chaos phase may end."""
        with self._lock:
            return not (self._unasked or self._restart_at) and all(
                witness.settled for witness in self.witnesses
            )

    @property
    def quiet(self) -> bool:
        """A forced pause in flight is due to be resumed or was resumed and has not
        finished: nobody else may be paused now, and nobody may take the queue's
        write lock (see ``chaos.witness``)."""
        now = time.monotonic()
        for witness in self.witnesses:
            if witness.kind != PAUSE_IN_FLIGHT or witness.settled or witness.frozen_at is None:
                continue
            due = self._courier_of(witness).stopped_until
            if due is None or now >= due:
                return True
        return False

    def _heal_due(self, now: float, every: bool = False) -> None:
        if self.hosts is None:
            return
        for host, at in list(self._heal_at.items()):
            if every or (now >= at and self._may_heal(host, at, now)):
                del self._heal_at[host]
                self.hosts.heal(host)
                self.counts.heals += 1

    def _may_heal(self, host: int, at: float, now: float) -> bool:
        """A forced partition's host stays cut until its courier lost its link and
        another host took its job over (or ``HEAL_BOUND_S`` past its time)."""
        for witness in self.witnesses:
            if witness.kind == PARTITION and witness.host == host and not witness.settled:
                waited = witness.lost_link and witness.taken_over
                return waited or now >= at + HEAL_BOUND_S
        return True

    # Witnesses --------------------------------------------------------------------

    def _witness(self, kind: str, event: ChaosEvent | None, courier: CourierProcess) -> Witness:
        return Witness(
            kind,
            event,
            courier.owner,
            courier.incarnation,
            self.host_of(courier.owner),
            EventTail(courier.events),
        )

    def _witnessing(self, courier: CourierProcess) -> bool:
        """Whether ``courier`` is an unsettled witness (the chaos leaves it alone)."""
        return any(
            (w.owner, w.incarnation) == (courier.owner, courier.incarnation) and not w.settled
            for w in self.witnesses
        )

    def _courier_of(self, witness: Witness) -> CourierProcess:
        key = (witness.owner, witness.incarnation)
        return next(c for c in self.everyone if (c.owner, c.incarnation) == key)

    def _witness_hosts(self) -> set[int]:
        return {w.host for w in self.witnesses if not w.settled}

    def force(self, event: ChaosEvent) -> bool:
        """Play a forced pause in flight or partition: ask a courier to freeze itself
        after its next delivery's answer (now, or once one may be asked)."""
        with self._lock:
            self._unasked.append(event)
            self._ask_unasked()
        return True

    def _ask_unasked(self) -> None:
        if not self.restarting:
            return
        for event in list(self._unasked):
            courier = self._freezable(event)
            if courier is None:
                continue
            self._unasked.remove(event)
            freeze_request(courier.events).touch()
            self.witnesses.append(self._witness(event.kind, event, courier))

    def _freezable(self, event: ChaosEvent) -> CourierProcess | None:
        """A courier that may be asked to freeze for ``event``, or ``None``."""
        now = time.monotonic()
        # A cut-off host delivers nothing, and a witness's host is not cut again.
        busy = set(self._heal_at) | (self._witness_hosts() if event.kind == PARTITION else set())
        count = len(self.owners)
        for step in range(count):
            courier = self.active.get(self.owners[(event.target + step) % count])
            if courier is None or not self._signalable(courier, now):
                continue
            if self.hosts is not None and self.host_of(courier.owner) in busy:
                continue
            if event.kind == PARTITION and self.hosts is None:
                return None
            return courier
        return None

    def _follow_witnesses(self, now: float) -> None:
        everyone = [(self.host_of(c.owner), c.events) for c in self.everyone]
        for witness in list(self.witnesses):
            if witness.settled:
                continue
            courier = self._courier_of(witness)
            was_frozen = witness.job is not None
            witness.follow(courier.proc.poll() is not None, everyone)
            if witness.kind == DRILL:
                continue
            if witness.exited and witness.frozen_at is None:
                self._ask_again(witness, courier)  # it ended before it froze: ask another
            elif witness.job is not None and not was_frozen:
                self._frozen(witness, courier, now)

    def _ask_again(self, witness: Witness, courier: CourierProcess) -> None:
        _withdraw(freeze_request(courier.events))
        self.witnesses.remove(witness)
        if witness.event is not None:
            self._unasked.append(witness.event)

    def _frozen(self, witness: Witness, courier: CourierProcess, now: float) -> None:
        """``courier`` froze itself holding ``witness.job``: play the event on it."""
        event = witness.event
        assert event is not None and witness.job is not None
        if witness.kind == PAUSE_IN_FLIGHT:
            witness.frozen_at = now
            self._stopped(courier, event, "in flight", now)
            self.counts.witnesses.append(witness.record())
            return
        if self.hosts is None or not self.can_be_taken_over(witness.job):
            witness.forget_job()  # no other claim could take it over: the next one
            freeze_request(courier.events).touch()
            courier.stopped_until, courier.paused_for = now, "asked again"
            return
        witness.frozen_at = now
        self._cut_host(courier, event, witness.job, now, witness.token)
        courier.stopped_until, courier.paused_for = now, "cut off"
        self.counts.witnesses.append(witness.record())

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
            due = courier.stopped_until
            if due is None or now < due or is_stopped(courier.proc.pid) is False:
                continue  # a courier that froze itself is resumed once it has stopped
            if courier.paused_for in ("cut off", "asked again"):
                courier.proc.send_signal(signal.SIGCONT)  # not a pause: a moment's freeze
                courier.stopped_until = courier.paused_for = None
            elif not self._witnessing(courier) or self._may_resume(courier, due, now):
                self._resume(courier, now)

    def _may_resume(self, witness: CourierProcess, due: float, now: float) -> bool:
        """A forced pause in flight is resumed once nobody else is paused and nobody
        holds the write lock, so that its finish meets no busy timeout."""
        others = any(c.stopped_until is not None for c in self._live if c is not witness)
        return not (others or self.lock_held()) or now >= due + RESUME_BOUND_S

    def _resume(self, courier: CourierProcess, now: float) -> None:
        courier.proc.send_signal(signal.SIGCONT)
        courier.stopped_until = courier.paused_for = None
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
            and not self._witnessing(courier)
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
        self._stopped(courier, event, why, now)

    def _stopped(self, courier: CourierProcess, event: ChaosEvent, why: str, now: float) -> None:
        """Count ``courier`` as paused by ``event`` from ``now`` (it is stopped)."""
        courier.stopped_until = now + event.duration_ms / 1000
        courier.paused_for = why
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
        """SIGSTOP the targeted courier for ``event.duration_ms``; ``False`` if none could
        be (or the fleet must be ``quiet``)."""
        now = time.monotonic()
        with self._lock:
            courier = None if self.quiet else self._pick(event.target, now)
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
            elif self.quiet:
                return False
            else:
                self._pause(courier, event, "in flight", now)
            return True

    def _cut(self, courier: CourierProcess, event: ChaosEvent, job: str | None, now: float) -> bool:
        """Cut the host of ``courier`` off for ``event.duration_ms``; ``False`` if it is
        already, or a witness lives there."""
        host = self.host_of(courier.owner)
        if self.hosts is None or host in self._heal_at or host in self._witness_hosts():
            return False
        self._cut_host(courier, event, job, now)
        return True

    def _cut_host(
        self,
        courier: CourierProcess,
        event: ChaosEvent,
        job: str | None,
        now: float,
        token: int | None = None,
    ) -> None:
        """Cut ``courier``'s host off; count the partition (with the ticket's ``token``
        when it is known)."""
        assert self.hosts is not None
        host = self.host_of(courier.owner)
        self.hosts.cut(host)
        self._heal_at[host] = now + event.duration_ms / 1000
        cut = {"owner": courier.owner, "host": host, "job": job, "duration_ms": event.duration_ms}
        self.counts.partitions.append(cut if token is None else cut | {"token": token})

    # Stopping ---------------------------------------------------------------------

    def stop_all(self, grace_s: float) -> None:
        """Heal every host, resume the frozen, let witnesses settle (``WITNESS_GRACE_S``
        at most), SIGTERM everyone, wait ``grace_s``, SIGKILL the rest, reap.

        Forced events that never got to be played are counted (``forced_left``).
        """
        now = time.monotonic()
        with self._lock:
            self._follow_witnesses(now)  # a witness that froze just now is one
            self.restarting = False
            self._restart_at.clear()
            self._heal_due(now, every=True)
            for courier in self._live:
                if courier.stopped_until is not None and courier.paused_for not in (
                    "cut off",
                    "asked again",
                ):
                    self._resume(courier, now)
            self.counts.forced_left += [event.kind for event in self._unasked]
            self._unasked.clear()
            for witness in list(self.witnesses):
                if witness.kind != DRILL and witness.frozen_at is None:
                    courier = self._courier_of(witness)
                    _withdraw(freeze_request(courier.events))
                    self.counts.forced_left.append(witness.kind)
                    self.witnesses.remove(witness)
        self._settle_witnesses(WITNESS_GRACE_S)
        with self._lock:
            for courier in self._live:
                if courier.proc.poll() is None:
                    courier.proc.send_signal(signal.SIGTERM)
                    courier.terminated = True
        self._end([c.proc for c in self._live], grace_s, "did not stop in time")

    def _settle_witnesses(self, bound_s: float) -> None:
        """Follow frozen or cut-off witnesses (every host healed) until they settled."""
        until = time.monotonic() + bound_s
        for _ in range(int(bound_s / WAIT_SLICE_S) + 1):
            now = time.monotonic()
            with self._lock:
                self._reap(now)
                self._follow_witnesses(now)
                self._resume_due(now)
                self._continue_self_frozen()
                unsettled = [w for w in self.witnesses if not w.settled]
            if not unsettled or now >= until:
                return
            time.sleep(WAIT_SLICE_S)

    def _continue_self_frozen(self) -> None:
        """SIGCONT every courier still stopped once every pause was resumed: one that
        froze itself for a request withdrawn too late, or was to be resumed anyway."""
        for courier in self._live:
            if courier.paused_for not in (None, "cut off", "asked again"):
                continue
            if is_stopped(courier.proc.pid):
                courier.proc.send_signal(signal.SIGCONT)
                courier.stopped_until = courier.paused_for = None

    def run_healthy(self, seconds: float) -> None:
        """Start one healthy courier per owner slot; wait until they drained the queue."""
        self._ends_at = time.monotonic() + seconds
        with self._lock:
            healthy = [self._start(f"r{n}", healthy=True) for n in range(1, len(self.owners) + 1)]
        grace_s = seconds + self.config.stop_grace_s
        self._end([c.proc for c in healthy], grace_s, "recovery did not finish in time")

    def _end(self, procs: list[subprocess.Popen[bytes]], grace_s: float, why: str) -> None:
        """Wait ``grace_s`` for ``procs``, SIGKILL (for ``why``) those still running, reap."""
        until = time.monotonic() + grace_s
        for _ in range(int(grace_s / WAIT_SLICE_S) + 1):
            if all(proc.poll() is not None for proc in procs) or time.monotonic() >= until:
                break
            with self._lock:
                self._continue_self_frozen()
            wait_all(procs, WAIT_SLICE_S)
        with self._lock:
            for courier in self._live:
                if courier.proc in procs and courier.proc.poll() is None:
                    self._kill(courier, why)
        wait_all(procs, REAP_TIMEOUT_S)
        self.tick(time.monotonic())
