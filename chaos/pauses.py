"""Couriers stopped and continued: the soak's pauses (SIGSTOP, then SIGCONT).

A courier is paused by the supervisor (``pause``: SIGSTOP now) or counted as
paused once it has stopped itself (``stopped``: a forced pause in flight, which
froze on request), for its event's ``duration_ms``; if the event says so, it is
replaced by a new incarnation while frozen and stops once it has finished its
round (stale). A courier held for a moment, not paused (``HOLDS``: its host was
cut off, or it is to be asked again), is continued as soon as it has stopped.

A forced pause in flight's witness (``chaos.witness``) is resumed only once nobody
else is paused and nobody holds the queue's write lock, so that its finish meets
no busy timeout, or ``RESUME_BOUND_S`` past its time whatever it waits for.
The state of each pause is on its ``CourierProcess`` (``stopped_until``,
``paused_for``, ``resumed_at``). Not thread-safe: ``chaos.fleet.Fleet`` calls it
under its lock.
"""

from __future__ import annotations

import signal
from collections.abc import Callable

from chaos.courier_process import CourierProcess
from chaos.roster import Roster
from chaos.schedule import ChaosEvent
from chaos.tally import ChaosCounts
from chaos.witness import RESUME_BOUND_S, is_stopped

__all__ = ["CUT_OFF", "HOLDS", "RESEND_ASK", "Pauses"]

CUT_OFF = "cut off"
RESEND_ASK = "asked again"
HOLDS = (CUT_OFF, RESEND_ASK)  # a moment's freeze, not a pause


class Pauses:
    """The pauses of the couriers of ``roster``; ``lock_held`` says whether someone
    holds the queue's write lock."""

    def __init__(self, roster: Roster, counts: ChaosCounts, lock_held: Callable[[], bool]) -> None:
        self.roster = roster
        self.counts = counts
        self.lock_held = lock_held

    def pause(self, courier: CourierProcess, event: ChaosEvent, why: str, now: float) -> None:
        """SIGSTOP ``courier`` now for ``event``, counted as paused ``why``."""
        courier.proc.send_signal(signal.SIGSTOP)
        self.stopped(courier, event, why, now)

    def stopped(self, courier: CourierProcess, event: ChaosEvent, why: str, now: float) -> None:
        """Count ``courier`` as paused by ``event`` from ``now`` (it is stopped)."""
        courier.stopped_until = now + event.duration_ms / 1000
        courier.paused_for = why
        self.counts.pauses[why] += 1
        if event.replace:
            self.roster.retire(courier, now)
            self.counts.pauses["replaced while frozen"] += 1

    def hold(self, courier: CourierProcess, why: str, now: float) -> None:
        """Note that ``courier`` froze itself for one of ``HOLDS``: continue it once stopped."""
        courier.stopped_until, courier.paused_for = now, why

    def resume_due(self, now: float, witnessing: Callable[[CourierProcess], bool]) -> None:
        """Continue every courier whose pause or hold is over and that has stopped;
        a ``witnessing`` one only as the module docstring says."""
        for courier in self.roster.live:
            due = courier.stopped_until
            if due is None or now < due or is_stopped(courier.proc.pid) is False:
                continue  # a courier that froze itself is resumed once it has stopped
            if courier.paused_for in HOLDS:
                courier.proc.send_signal(signal.SIGCONT)  # not a pause: a moment's freeze
                courier.stopped_until = courier.paused_for = None
            elif not witnessing(courier) or self._may_resume(courier, due, now):
                self.resume(courier, now)

    def _may_resume(self, witness: CourierProcess, due: float, now: float) -> bool:
        """A forced pause in flight is resumed once nobody else is paused and nobody
        holds the write lock, so that its finish meets no busy timeout."""
        live = self.roster.live
        others = any(c.stopped_until is not None for c in live if c is not witness)
        return not (others or self.lock_held()) or now >= due + RESUME_BOUND_S

    def resume(self, courier: CourierProcess, now: float) -> None:
        """SIGCONT ``courier`` and count the pause as over (a retiring one is stopped)."""
        courier.proc.send_signal(signal.SIGCONT)
        courier.stopped_until = courier.paused_for = None
        courier.resumed_at = now
        self.counts.pauses["resumed"] += 1
        if courier.retiring:  # replaced while frozen: finish the round (stale), then stop
            courier.proc.send_signal(signal.SIGTERM)
            courier.terminated = True

    def resume_all(self, now: float) -> None:
        """Resume every paused courier now (the holds are left to ``resume_due``)."""
        for courier in self.roster.live:
            if courier.stopped_until is not None and courier.paused_for not in HOLDS:
                self.resume(courier, now)

    def continue_self_frozen(self) -> None:
        """SIGCONT every courier still stopped once every pause was resumed: one that
        froze itself for a request withdrawn too late, or was to be resumed anyway."""
        for courier in self.roster.live:
            if courier.paused_for not in (None, *HOLDS):
                continue
            if is_stopped(courier.proc.pid):
                courier.proc.send_signal(signal.SIGCONT)
                courier.stopped_until = courier.paused_for = None
