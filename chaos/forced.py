"""The first round's forced events, each done to a witness and followed until it shows.

The forced drill, pause in flight and partition (``chaos.schedule``) are done to a
**witness** (``chaos.witness``): a courier followed through its event log until it
has shown the effect, shielded from the rest of the chaos meanwhile. The rules:

1. The drill's witness is the incarnation that starts with the forced drill
   (``started``).
2. A forced pause in flight or partition is asked of a courier that may be
   signalled (``force``): it freezes itself after its next delivery's answer
   (``chaos.child.FreezeOnRequest``). Until one may be asked (the roster is
   restarting, and for a partition there are hosts, and the courier's host is
   neither cut nor a witness's), the event waits, unasked.
3. Once the witness froze, the event is played on it (``follow``): the pause is
   counted (``chaos.pauses``), or its host is cut (``chaos.partitions``) if its
   job has budget and time left for another claim; otherwise it is continued and
   asked again. A witness that exited before it froze is replaced by asking
   another courier.
4. A forced partition's host stays cut until its witness lost its link and
   another host took its job over, or ``HEAL_BOUND_S`` past its time
   (``may_heal``). While a forced pause in flight is due to be resumed or is
   finishing, the soak is ``quiet``: nobody else is paused, nobody takes the
   queue's write lock.
5. The fleet is not ``at_rest`` (and the chaos phase does not end) before every
   event was asked and every witness settled; at the end, events that never got
   to be played are counted in ``forced_left`` (``give_up``).

Not thread-safe: ``chaos.fleet.Fleet`` calls it under its lock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

from chaos.child import freeze_request
from chaos.courier_process import CourierProcess
from chaos.partitions import Partitions
from chaos.pauses import CUT_OFF, RESEND_ASK, Pauses
from chaos.roster import Roster
from chaos.schedule import FORCED_DRILL, PARTITION, PAUSE_IN_FLIGHT, ChaosEvent
from chaos.tally import ChaosCounts
from chaos.witness import DRILL, HEAL_BOUND_S, EventTail, Witness

__all__ = ["ForcedEvents"]

MaySignal = Callable[[CourierProcess, float], bool]


def _withdraw(request: Path) -> bool:
    """Remove a freeze request; ``False`` if the courier had taken it already."""
    try:
        request.unlink()
    except FileNotFoundError:
        return False
    return True


class ForcedEvents:
    """The forced events of one soak: those still ``unasked`` and the ``witnesses``.

    ``can_be_taken_over(job)`` says whether a job has budget and time left for
    another claim (``chaos.store``); a forced partition needs one.
    """

    def __init__(
        self,
        roster: Roster,
        pauses: Pauses,
        partitions: Partitions,
        counts: ChaosCounts,
        can_be_taken_over: Callable[[str], bool],
    ) -> None:
        self.roster = roster
        self.pauses = pauses
        self.partitions = partitions
        self.counts = counts
        self.can_be_taken_over = can_be_taken_over
        self.witnesses: list[Witness] = []
        self._unasked: list[ChaosEvent] = []  # forced freezes waiting for a courier

    def _witness(self, kind: str, event: ChaosEvent | None, courier: CourierProcess) -> Witness:
        return Witness(
            kind, event, courier.owner, courier.incarnation, courier.host, EventTail(courier.events)
        )

    def _courier_of(self, witness: Witness) -> CourierProcess:
        return self.roster.incarnation(witness.owner, witness.incarnation)

    def started(self, courier: CourierProcess) -> None:
        """Make ``courier`` the drill's witness if it starts with the forced drill (rule 1)."""
        if courier.drill is not None and (courier.index, courier.incarnation) == FORCED_DRILL:
            self.witnesses.append(self._witness(DRILL, None, courier))
            self.counts.witnesses.append(self.witnesses[-1].record())

    def witnessing(self, courier: CourierProcess) -> bool:
        """Whether ``courier`` is an unsettled witness (the chaos leaves it alone)."""
        return any(
            (w.owner, w.incarnation) == (courier.owner, courier.incarnation) and not w.settled
            for w in self.witnesses
        )

    def witness_hosts(self) -> set[int]:
        """The hosts of the unsettled witnesses (none of them is cut again)."""
        return {w.host for w in self.witnesses if not w.settled}

    def force(self, event: ChaosEvent, may_signal: MaySignal) -> None:
        """Ask a courier to freeze for a forced pause in flight or partition, now or
        once one may be asked (rule 2)."""
        self._unasked.append(event)
        self.ask_unasked(may_signal)

    def ask_unasked(self, may_signal: MaySignal) -> None:
        """Ask a courier for each event still unasked, where one may be asked."""
        if not self.roster.restarting:
            return
        for event in list(self._unasked):
            courier = self._freezable(event, may_signal)
            if courier is None:
                continue
            self._unasked.remove(event)
            freeze_request(courier.events).touch()
            self.witnesses.append(self._witness(event.kind, event, courier))

    def _freezable(self, event: ChaosEvent, may_signal: MaySignal) -> CourierProcess | None:
        """A courier that may be asked to freeze for ``event``, or ``None``."""
        now = time.monotonic()
        # A cut-off host delivers nothing, and a witness's host is not cut again.
        spared = self.witness_hosts() if event.kind == PARTITION else set()
        busy = self.partitions.cut_hosts() | spared
        for courier in self.roster.from_target(event.target):
            if not may_signal(courier, now):
                continue
            if self.partitions.possible and courier.host in busy:
                continue
            if event.kind == PARTITION and not self.partitions.possible:
                return None
            return courier
        return None

    def follow(self, now: float) -> None:
        """Read what each unsettled witness logged, and play each event whose witness
        froze just now (rule 3)."""
        for witness, courier, was_frozen in self._followed():
            if witness.kind == DRILL:
                continue
            if witness.exited and witness.frozen_at is None:
                self._ask_again(witness, courier)  # it ended before it froze: ask another
            elif witness.job is not None and not was_frozen:
                self._frozen(witness, courier, now)

    def _followed(self) -> Iterator[tuple[Witness, CourierProcess, bool]]:
        """Each unsettled witness once it has read its new lines, with its courier and
        whether it had frozen before; the next is read only after the caller acted."""
        everyone = [(c.host, c.events) for c in self.roster.everyone]
        for witness in list(self.witnesses):
            if witness.settled:
                continue
            courier = self._courier_of(witness)
            was_frozen = witness.job is not None
            witness.follow(courier.proc.poll() is not None, everyone)
            yield witness, courier, was_frozen

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
            self.pauses.stopped(courier, event, "in flight", now)
            self.counts.witnesses.append(witness.record())
            return
        if not self.partitions.possible or not self.can_be_taken_over(witness.job):
            witness.forget_job()  # no other claim could take it over: the next one
            freeze_request(courier.events).touch()
            self.pauses.hold(courier, RESEND_ASK, now)
            return
        witness.frozen_at = now
        self.partitions.cut(courier, event, witness.job, now, witness.token)
        self.pauses.hold(courier, CUT_OFF, now)
        self.counts.witnesses.append(witness.record())

    def may_heal(self, host: int, at: float, now: float) -> bool:
        """A forced partition's host stays cut until its courier lost its link and
        another host took its job over (or ``HEAL_BOUND_S`` past its time)."""
        for witness in self.witnesses:
            if witness.kind == PARTITION and witness.host == host and not witness.settled:
                waited = witness.lost_link and witness.taken_over
                return waited or now >= at + HEAL_BOUND_S
        return True

    def quiet(self) -> bool:
        """A forced pause in flight is due to be resumed or was resumed and has not
        finished (rule 4)."""
        now = time.monotonic()
        for witness in self.witnesses:
            if witness.kind != PAUSE_IN_FLIGHT or witness.settled or witness.frozen_at is None:
                continue
            due = self._courier_of(witness).stopped_until
            if due is None or now >= due:
                return True
        return False

    def at_rest(self) -> bool:
        """Every forced event was asked for and every witness has settled (rule 5)."""
        return not self._unasked and all(witness.settled for witness in self.witnesses)

    def unsettled(self) -> bool:
        """Some witness has not settled yet."""
        return any(not witness.settled for witness in self.witnesses)

    def give_up(self) -> None:
        """Count the events never asked, and those asked of a courier that has not
        frozen yet (its request withdrawn), in ``forced_left`` (rule 5)."""
        self.counts.forced_left += [event.kind for event in self._unasked]
        self._unasked.clear()
        for witness in list(self.witnesses):
            if witness.kind != DRILL and witness.frozen_at is None:
                courier = self._courier_of(witness)
                _withdraw(freeze_request(courier.events))
                self.counts.forced_left.append(witness.kind)
                self.witnesses.remove(witness)
