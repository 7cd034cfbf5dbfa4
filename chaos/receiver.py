"""The receiver's side of the chaos: per-delivery faults, outages, armed sender actions.

``ReceiverChaos.fault_for`` and ``ReceiverChaos.on_commit`` are plugged into
``courier.receiver.Receiver`` by ``interference()`` (a ``chaos.faults.FaultInjector``);
they run on its event loop and its ``after_commit`` threads, under one lock. The
n-th well-formed delivery gets ``chaos.schedule.receiver_fault(seed, n)``. An armed
event (a kill, a pause or a partition after commit) waits for the next delivery
that commits, from any courier that may be signalled, and is then fired at that
delivery's sender. A forced outage (the first round's) lasts its time and at
least until it has refused one delivery, so that every run has a delivery
refused by the receiver; ``forced_pending`` says whether a forced event still
waits for its delivery.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, deque

from chaos.faults import Fault, FaultInjector
from chaos.fleet import Fleet
from chaos.schedule import OUTAGE, ChaosEvent, Config, receiver_fault
from chaos.tally import ChaosCounts
from courier.inbox import Verdict

__all__ = ["ReceiverChaos"]


class ReceiverChaos:
    """What the receiver does to the deliveries of one run (``disable`` stops it all)."""

    def __init__(self, config: Config, counts: ChaosCounts) -> None:
        self.config = config
        self.counts = counts
        self.faults: Counter[str] = Counter()
        self.fleet: Fleet | None = None
        self._lock = threading.Lock()
        self._enabled = True
        self._ordinal = 0
        self._outage_until = 0.0
        self._outage_must_refuse = False
        self._armed: deque[ChaosEvent] = deque()

    def disable(self) -> None:
        """Stop injecting anything; armed events that never fired are counted, and
        so are forced events that never found their delivery."""
        with self._lock:
            self._enabled = False
            self.counts.armed_left = len(self._armed)
            self.counts.forced_left += [event.kind for event in self._armed if event.forced]
            if self._outage_must_refuse:
                self.counts.forced_left.append(OUTAGE)
            self._armed.clear()

    def forced_pending(self) -> bool:
        """A forced event is armed, or a forced outage has refused nothing yet."""
        with self._lock:
            return self._outage_must_refuse or any(event.forced for event in self._armed)

    def arm(self, event: ChaosEvent) -> bool:
        """Fire ``event`` (kill, pause, partition) at the sender of the next committed delivery."""
        with self._lock:
            self._armed.append(event)
        return True

    def outage(self, duration_ms: int, forced: bool = False) -> bool:
        """Answer 503 to every delivery for ``duration_ms`` (and, if ``forced``, until
        one delivery was refused)."""
        with self._lock:
            self._outage_until = time.monotonic() + duration_ms / 1000
            self._outage_must_refuse = self._outage_must_refuse or forced
            self.counts.outages += 1
        return True

    def interference(self) -> FaultInjector:
        """What the receiver is given: this chaos's faults and commit hook."""
        return FaultInjector(self.fault_for, self.on_commit)

    def fault_for(self, delivery_id: str, sender: str | None) -> Fault | None:
        """The injector's ``faults``: an outage's 503, the seed's fault, or none."""
        with self._lock:
            if not self._enabled:
                return None
            if time.monotonic() < self._outage_until or self._outage_must_refuse:
                self._outage_must_refuse = False
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
        """The injector's ``on_commit``: fire the oldest armed event at this sender."""
        with self._lock:
            if not self._enabled or not self._armed or self.fleet is None:
                return
            event = self._armed.popleft()
        if not self.fleet.act_on_sender(sender, event, delivery_id):
            with self._lock:
                self._armed.appendleft(event)
