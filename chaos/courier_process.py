"""One soak courier incarnation: how it is started, and what became of it.

A ``Launcher`` knows everything every incarnation is started with (the queue, the
receiver's URL, the folders, the simulated hosts) and starts one child process
(``python -m chaos courier`` or ``pgcourier``) per call; the ``CourierProcess`` it
returns is the supervisor's record of that incarnation, which the checker reads
back (``chaos.report.process_record``). A chaos courier's own ``--max-seconds``
ends with its phase plus ``CHILD_MARGIN_S``, so it stops by itself even if the
supervisor dies. With simulated hosts (``chaos.hosts.Hosts``) courier ``cN`` (and
its healthy successor ``rN``) runs on host ``N`` (``ip netns exec``, which keeps
the pid).
"""

from __future__ import annotations

import contextlib
import math
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from chaos.child import chaos_command
from chaos.hosts import Hosts
from chaos.schedule import Config, Drill
from courier.procs import Children

__all__ = ["CHILD_MARGIN_S", "CourierProcess", "Launcher", "wait_all"]

CHILD_MARGIN_S = 30.0  # a chaos courier outlives its phase by at most this, even orphaned


@dataclass
class CourierProcess:
    """One courier incarnation and what became of it.

    ``host`` is the simulated host it runs on (1 without hosts). ``stopped_until``
    (monotonic) and ``paused_for`` say it is stopped and why (``chaos.pauses``);
    ``retiring`` that it was replaced while frozen and stops after its round.
    """

    owner: str
    index: int
    incarnation: int
    proc: subprocess.Popen[bytes]
    events: Path
    log: Path
    drill: Drill | None
    healthy: bool
    host: int = 1
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


@dataclass(frozen=True)
class Launcher:
    """What every courier incarnation of a soak is started with.

    ``queue`` is the queue file or conninfo the couriers get, ``events`` and
    ``logs`` the folders for each incarnation's event log and output, ``url`` the
    receiver's delivery URL, ``child`` the ``python -m chaos`` subcommand of a
    courier (``courier`` on a file, ``pgcourier`` on PostgreSQL) and ``hosts``
    the simulated hosts, if any.
    """

    config: Config
    queue: Path | str
    events: Path
    logs: Path
    url: str
    children: Children
    child: str = "courier"
    hosts: Hosts | None = None

    def host_of(self, owner: str) -> int:
        """The simulated host (1-based) of ``owner`` (``cN`` and ``rN`` are on host ``N``)."""
        count = self.hosts.count if self.hosts is not None else 1
        return (int(owner[1:]) - 1) % count + 1

    def start(
        self,
        owner: str,
        index: int,
        incarnation: int,
        drill: Drill | None,
        healthy: bool,
        ends_at: float,
    ) -> CourierProcess:
        """Start incarnation ``incarnation`` of ``owner``, running until ``ends_at``
        (monotonic; a chaos courier ``CHILD_MARGIN_S`` longer at most, a healthy one
        until the queue is drained)."""
        name = f"{owner}-{incarnation}"
        events = self.events / f"{name}.jsonl"
        log = self.logs / f"{name}.log"
        margin = 0.0 if healthy else CHILD_MARGIN_S  # healthy ones stop on their own
        seconds = max(1.0, ends_at - time.monotonic()) + margin
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
        if self.config.batch > 1:
            options |= {"--batch": self.config.batch, "--in-flight": self.config.in_flight}
        flags = [part for pair in options.items() for part in pair]
        argv = chaos_command(self.child, self.queue, *flags)
        if healthy:
            argv.append("--until-drained")
        host = self.host_of(owner)
        if self.hosts is not None:
            argv = self.hosts.command(host, argv)
        proc = self.children.start(argv, log)
        return CourierProcess(owner, index, incarnation, proc, events, log, drill, healthy, host)
