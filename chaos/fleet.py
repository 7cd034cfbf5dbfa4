"""The courier processes of a soak: started, restarted, killed, paused, cut off and resumed.

The fleet is the one face the soak's driver (``chaos.run``) and the receiver's
chaos (``chaos.receiver``) act through; it holds four parts, each with its own
state, and one lock over all of them, since the receiver's ``after_commit`` threads act on
the sender of a delivery while the main loop reaps and restarts:

- ``roster`` (``chaos.roster``): who runs, reaped and restarted, and every kill;
- ``pauses`` (``chaos.pauses``): SIGSTOP and SIGCONT;
- ``partitions`` (``chaos.partitions``): simulated hosts cut off and healed;
- ``forced`` (``chaos.forced``): the first round's forced events and their
  witnesses, which the fleet is not ``at_rest`` before they have shown.

The fleet's own rules: a courier the chaos may act on is running, not stopped,
not retiring, not healthy, not resumed within ``RESUME_SHIELD_S`` and no unsettled
witness (``signalable``). A chaos event aimed at a courier that may not be acted
on goes to the next one that may. While the soak is ``quiet`` nobody is paused.
Every signal goes to a process this fleet started (never to a pid from anywhere
else), and every wait is bounded.
"""

from __future__ import annotations

import subprocess
import threading
import time
from collections.abc import Callable

from chaos.child import sender_pid
from chaos.courier_process import CourierProcess, Launcher, wait_all
from chaos.forced import ForcedEvents
from chaos.partitions import Partitions
from chaos.pauses import Pauses
from chaos.roster import Roster
from chaos.schedule import KILL_AFTER_COMMIT, PARTITION, ChaosEvent
from chaos.tally import ChaosCounts

__all__ = ["Fleet"]

RESUME_SHIELD_S = 1.0  # a just-resumed courier is left alone to finish (stale)
REAP_TIMEOUT_S = 10.0
WITNESS_GRACE_S = 15.0  # at a time-bound end: how long frozen or cut-off witnesses may settle
WAIT_SLICE_S = 0.05


class Fleet:
    """The soak's couriers: chaos couriers ``c1..cN`` and, for recovery, healthy ``r1..rN``.

    ``launcher`` starts each incarnation. ``lock_held`` says whether someone holds
    the queue's write lock, ``can_be_taken_over`` whether a job has budget and time
    left for another claim (``chaos.store``); the witnesses need both.
    """

    def __init__(
        self,
        launcher: Launcher,
        counts: ChaosCounts,
        *,
        lock_held: Callable[[], bool] = lambda: False,
        can_be_taken_over: Callable[[str], bool] = lambda job: True,
    ) -> None:
        self.config = launcher.config
        self.roster = Roster(launcher, counts)
        self.pauses = Pauses(self.roster, counts, lock_held)
        self.partitions = Partitions(launcher.hosts, counts)
        self.forced = ForcedEvents(
            self.roster, self.pauses, self.partitions, counts, can_be_taken_over
        )
        self._lock = threading.Lock()

    @property
    def everyone(self) -> list[CourierProcess]:
        """Every courier incarnation started, in order."""
        return self.roster.everyone

    def _start(self, owner: str, healthy: bool) -> CourierProcess:
        courier = self.roster.start(owner, healthy)
        self.forced.started(courier)
        return courier

    def start_all(self, ends_at: float) -> None:
        """Start one courier per owner; they run until ``ends_at`` (monotonic) at most."""
        self.roster.ends_at = ends_at
        with self._lock:
            for owner in self.roster.owners:
                self._start(owner, healthy=False)

    # The main loop's tick -----------------------------------------------------------

    def tick(self, now: float) -> None:
        """Reap exits, follow the witnesses, resume pauses, heal hosts and restart
        couriers that are due, and ask for the forced freezes still unasked."""
        with self._lock:
            self.roster.reap(now)
            self.forced.follow(now)
            self.pauses.resume_due(now, self.forced.witnessing)
            self.partitions.heal_due(now, self.forced.may_heal)
            for courier in self.roster.restart_due(now):
                self.forced.started(courier)
            self.forced.ask_unasked(self._signalable)

    def at_rest(self) -> bool:
        """Every forced freeze was asked for, every witness has settled and no
        restart is due: the chaos phase may end."""
        with self._lock:
            return not self.roster.restart_pending and self.forced.at_rest()

    @property
    def quiet(self) -> bool:
        """A forced pause in flight is due to be resumed or was resumed and has not
        finished: nobody else may be paused now, and nobody may take the queue's
        write lock (see ``chaos.witness``)."""
        return self.forced.quiet()

    # Chaos ------------------------------------------------------------------------

    def _signalable(self, courier: CourierProcess, now: float) -> bool:
        return (
            courier.proc.poll() is None
            and courier.stopped_until is None
            and not courier.retiring
            and not courier.healthy
            and now - courier.resumed_at >= RESUME_SHIELD_S
            and not self.forced.witnessing(courier)
        )

    def _pick(self, target: int, now: float) -> CourierProcess | None:
        """The courier ``target`` names, or the next one that may be signalled."""
        eligible = (c for c in self.roster.from_target(target) if self._signalable(c, now))
        return next(eligible, None)

    def force(self, event: ChaosEvent) -> bool:
        """Play a forced pause in flight or partition: ask a courier to freeze itself
        after its next delivery's answer (now, or once one may be asked)."""
        with self._lock:
            self.forced.force(event, self._signalable)
        return True

    def kill_target(self, target: int) -> bool:
        """SIGKILL the targeted courier now, wherever it is; ``False`` if none could be."""
        now = time.monotonic()
        with self._lock:
            courier = self._pick(target, now)
            if courier is None:
                return False
            self.roster.kill(courier, "random moment")
            return True

    def pause_target(self, event: ChaosEvent) -> bool:
        """SIGSTOP the targeted courier for ``event.duration_ms``; ``False`` if none could
        be (or the fleet must be ``quiet``)."""
        now = time.monotonic()
        with self._lock:
            courier = None if self.quiet else self._pick(event.target, now)
            if courier is None:
                return False
            self.pauses.pause(courier, event, "random moment", now)
            return True

    def act_on_sender(self, sender: str | None, event: ChaosEvent, job: str | None = None) -> bool:
        """Kill, pause or cut off the courier that sent a delivery the receiver just committed.

        Called on a receiver's ``after_commit`` thread, after the inbox commit and before the
        answer: the courier is waiting for it, so its ``finish`` has not happened.
        ``job`` is the delivery's id. ``False`` if it could not be done.
        """
        pid = sender_pid(sender)
        now = time.monotonic()
        with self._lock:
            courier = self.roster.by_pid(pid)
            if courier is None or not self._signalable(courier, now):
                return False
            if event.kind == KILL_AFTER_COMMIT:
                self.roster.kill(courier, "after receiver commit")
            elif event.kind == PARTITION:
                return self._cut(courier, event, job, now)
            elif self.quiet:
                return False
            else:
                self.pauses.pause(courier, event, "in flight", now)
            return True

    def _cut(self, courier: CourierProcess, event: ChaosEvent, job: str | None, now: float) -> bool:
        """Cut the host of ``courier`` off for ``event.duration_ms``; ``False`` if it is
        already, or a witness lives there."""
        if not self.partitions.may_cut(courier.host, self.forced.witness_hosts()):
            return False
        self.partitions.cut(courier, event, job, now)
        return True

    # Stopping ---------------------------------------------------------------------

    def stop_all(self, grace_s: float) -> None:
        """Heal every host, resume the frozen, let witnesses settle (``WITNESS_GRACE_S``
        at most), SIGTERM everyone, wait ``grace_s``, SIGKILL the rest, reap.

        Forced events that never got to be played are counted (``forced_left``).
        """
        now = time.monotonic()
        with self._lock:
            self.forced.follow(now)  # a witness that froze just now is one
            self.roster.stop_restarting()
            self.partitions.heal_all()
            self.pauses.resume_all(now)
            self.forced.give_up()
        self._settle_witnesses(WITNESS_GRACE_S)
        with self._lock:
            self.roster.terminate_live()
        self._end([c.proc for c in self.roster.live], grace_s, "did not stop in time")

    def _settle_witnesses(self, bound_s: float) -> None:
        """Follow frozen or cut-off witnesses (every host healed) until they settled."""
        until = time.monotonic() + bound_s
        for _ in range(int(bound_s / WAIT_SLICE_S) + 1):
            now = time.monotonic()
            with self._lock:
                self.roster.reap(now)
                self.forced.follow(now)
                self.pauses.resume_due(now, self.forced.witnessing)
                self.pauses.continue_self_frozen()
                unsettled = self.forced.unsettled()
            if not unsettled or now >= until:
                return
            time.sleep(WAIT_SLICE_S)

    def run_healthy(self, seconds: float) -> None:
        """Start one healthy courier per owner slot; wait until they drained the queue."""
        self.roster.ends_at = time.monotonic() + seconds
        with self._lock:
            slots = range(1, len(self.roster.owners) + 1)
            healthy = [self._start(f"r{n}", healthy=True) for n in slots]
        grace_s = seconds + self.config.stop_grace_s
        self._end([c.proc for c in healthy], grace_s, "recovery did not finish in time")

    def _end(self, procs: list[subprocess.Popen[bytes]], grace_s: float, why: str) -> None:
        """Wait ``grace_s`` for ``procs``, SIGKILL (for ``why``) those still running, reap."""
        until = time.monotonic() + grace_s
        for _ in range(int(grace_s / WAIT_SLICE_S) + 1):
            if all(proc.poll() is not None for proc in procs) or time.monotonic() >= until:
                break
            with self._lock:
                self.pauses.continue_self_frozen()
            wait_all(procs, WAIT_SLICE_S)
        with self._lock:
            for courier in self.roster.live:
                if courier.proc in procs and courier.proc.poll() is None:
                    self.roster.kill(courier, why)
        wait_all(procs, REAP_TIMEOUT_S)
        self.tick(time.monotonic())
