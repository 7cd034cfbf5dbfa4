"""Who runs in a soak: one courier incarnation per owner, reaped and restarted.

The chaos couriers are ``c1..cN``; for the recovery, healthy ``r1..rN``. An owner's
incarnations are numbered from 0, and each chaos incarnation gets its drill from
the seed (``chaos.schedule.drill_for``). A courier that exits is reaped, and while
the roster is ``restarting`` its owner is started again ``RESTART_DELAY_S`` later.
Every signal goes to a process this roster started, never to a pid from anywhere
else. Not thread-safe: ``chaos.fleet.Fleet`` calls it under its lock.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from collections.abc import Iterator

from chaos.courier_process import CourierProcess, Launcher
from chaos.schedule import drill_for
from chaos.tally import ChaosCounts

__all__ = ["RESTART_DELAY_S", "Roster"]

RESTART_DELAY_S = 0.2


class Roster:
    """The courier incarnations of one soak: ``everyone`` ever started, the ``live``
    ones (not reaped yet) and the ``active`` one of each owner."""

    def __init__(self, launcher: Launcher, counts: ChaosCounts) -> None:
        self.launcher = launcher
        self.counts = counts
        self.owners = [f"c{n}" for n in range(1, launcher.config.couriers + 1)]
        self.everyone: list[CourierProcess] = []
        self.live: list[CourierProcess] = []
        self.active: dict[str, CourierProcess] = {}
        self.restarting = True
        self.ends_at = time.monotonic()  # when the couriers started now are to stop
        self._restart_at: dict[str, float] = {}
        self._incarnations: Counter[str] = Counter()

    def start(self, owner: str, healthy: bool) -> CourierProcess:
        """Start the next incarnation of ``owner`` (with its drill, unless healthy)."""
        index = self.owners.index(owner) if owner in self.owners else 0
        incarnation = self._incarnations[owner]
        self._incarnations[owner] += 1
        drill = None if healthy else drill_for(self.launcher.config.seed, index, incarnation)
        courier = self.launcher.start(owner, index, incarnation, drill, healthy, self.ends_at)
        self.everyone.append(courier)
        self.live.append(courier)
        self.active[owner] = courier
        return courier

    def reap(self, now: float) -> None:
        """Note every exit; an active courier that exited is due to restart, if restarting."""
        for courier in list(self.live):
            code = courier.proc.poll()
            if code is None:
                continue
            courier.exit_code = code
            self.live.remove(courier)
            if self.active.get(courier.owner) is courier:
                del self.active[courier.owner]
                if self.restarting:
                    self._restart_at[courier.owner] = now + RESTART_DELAY_S

    def restart_due(self, now: float) -> list[CourierProcess]:
        """Start every owner whose restart is due; return the couriers started."""
        if not self.restarting:
            return []
        started = []
        for owner, at in list(self._restart_at.items()):
            if now >= at and owner not in self.active:
                del self._restart_at[owner]
                started.append(self.start(owner, healthy=False))
                self.counts.restarts += 1
        return started

    @property
    def restart_pending(self) -> bool:
        """Some owner waits to be started again."""
        return bool(self._restart_at)

    def stop_restarting(self) -> None:
        """Restart nobody any more (the chaos phase is over)."""
        self.restarting = False
        self._restart_at.clear()

    def retire(self, courier: CourierProcess, now: float) -> None:
        """Replace ``courier`` (frozen) by a new incarnation now; it stops once resumed."""
        courier.retiring = True
        self.active.pop(courier.owner, None)
        self._restart_at[courier.owner] = now

    def from_target(self, target: int) -> Iterator[CourierProcess]:
        """The active couriers, starting with the owner ``target`` names, then the next."""
        count = len(self.owners)
        for step in range(count):
            courier = self.active.get(self.owners[(target + step) % count])
            if courier is not None:
                yield courier

    def by_pid(self, pid: int | None) -> CourierProcess | None:
        """The live courier whose process is ``pid``, if any."""
        return next((c for c in self.live if c.proc.pid == pid), None)

    def incarnation(self, owner: str, incarnation: int) -> CourierProcess:
        """The courier incarnation ``incarnation`` of ``owner`` (it was started)."""
        key = (owner, incarnation)
        return next(c for c in self.everyone if (c.owner, c.incarnation) == key)

    def terminate_live(self) -> None:
        """SIGTERM every live courier still running (it stops after its round)."""
        for courier in self.live:
            if courier.proc.poll() is None:
                courier.proc.send_signal(signal.SIGTERM)
                courier.terminated = True

    def kill(self, courier: CourierProcess, why: str) -> None:
        """SIGKILL ``courier`` and count it as killed ``why``."""
        courier.killed_for = why
        courier.proc.send_signal(signal.SIGKILL)
        self.counts.kills[why] += 1
