"""Simulated hosts cut off and healed: the soak's partitions (``--postgres`` with hosts).

A partition cuts the host of a courier that holds a lease (the sender of a delivery
the receiver just committed, or a forced partition's witness) for its event's
``duration_ms``; the host is healed when its time is up and the caller agrees
(a forced partition's host waits for its witness, ``chaos.forced``), and every
host is healed before the recovery. A host is cut at most once at a time. Without
simulated hosts there are no partitions. Not thread-safe: ``chaos.fleet.Fleet``
calls it under its lock.
"""

from __future__ import annotations

from collections.abc import Callable

from chaos.courier_process import CourierProcess
from chaos.hosts import Hosts
from chaos.schedule import ChaosEvent
from chaos.tally import ChaosCounts

__all__ = ["Partitions"]


class Partitions:
    """The cut-off hosts of ``hosts`` (``None``: no simulated hosts) and when each heals."""

    def __init__(self, hosts: Hosts | None, counts: ChaosCounts) -> None:
        self.hosts = hosts
        self.counts = counts
        self._heal_at: dict[int, float] = {}

    @property
    def possible(self) -> bool:
        """There are simulated hosts to cut."""
        return self.hosts is not None

    def cut_hosts(self) -> set[int]:
        """The hosts cut off now."""
        return set(self._heal_at)

    def may_cut(self, host: int, spared: set[int]) -> bool:
        """``host`` may be cut: there are hosts, it is not cut already and not ``spared``."""
        return self.hosts is not None and host not in self._heal_at and host not in spared

    def cut(
        self,
        courier: CourierProcess,
        event: ChaosEvent,
        job: str | None,
        now: float,
        token: int | None = None,
    ) -> None:
        """Cut ``courier``'s host off for ``event.duration_ms``; count the partition
        (with the ticket's ``token`` when it is known)."""
        assert self.hosts is not None
        host = courier.host
        self.hosts.cut(host)
        self._heal_at[host] = now + event.duration_ms / 1000
        cut = {"owner": courier.owner, "host": host, "job": job, "duration_ms": event.duration_ms}
        self.counts.partitions.append(cut if token is None else cut | {"token": token})

    def heal_due(self, now: float, may_heal: Callable[[int, float, float], bool]) -> None:
        """Heal every host whose time is up and that ``may_heal(host, at, now)``."""
        self._heal(lambda host, at: now >= at and may_heal(host, at, now))

    def heal_all(self) -> None:
        """Heal every host cut off."""
        self._heal(lambda host, at: True)

    def _heal(self, due: Callable[[int, float], bool]) -> None:
        if self.hosts is None:
            return
        for host, at in list(self._heal_at.items()):
            if due(host, at):
                del self._heal_at[host]
                self.hosts.heal(host)
                self.counts.heals += 1
