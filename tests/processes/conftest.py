"""Fixtures for the process tests: a spawn context, child processes, a live receiver.

Every fixture cleans up after itself: child processes still running at teardown are
killed and reaped, and the receiver is shut down with its threads joined.
"""

from __future__ import annotations

import multiprocessing
from collections.abc import Callable, Iterator
from multiprocessing.context import SpawnContext, SpawnProcess
from pathlib import Path

import pytest

from courier.procs import Children
from courier.receiver import Receiver

JOIN_TIMEOUT_S = 30.0


class Spawner:
    """Starts fresh-interpreter children ("spawn", never fork) and reaps them all."""

    def __init__(self) -> None:
        self.context: SpawnContext = multiprocessing.get_context("spawn")
        self.procs: list[SpawnProcess] = []

    def start(self, target: Callable[..., object], *args: object) -> SpawnProcess:
        """Start ``target(*args)`` in a new interpreter (a daemon, so it dies with us)."""
        proc = self.context.Process(target=target, args=args, daemon=True)
        proc.start()
        self.procs.append(proc)
        return proc

    def close(self) -> None:
        """Kill whatever still runs, reap everything."""
        for proc in self.procs:
            if proc.is_alive():
                proc.kill()
            proc.join(timeout=JOIN_TIMEOUT_S)
            proc.close()


@pytest.fixture
def spawner() -> Iterator[Spawner]:
    spawner = Spawner()
    yield spawner
    spawner.close()


@pytest.fixture
def children() -> Iterator[Children]:
    """``python -m courier ...`` children, killed and reaped at teardown."""
    with Children() as children:
        yield children


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    """A receiver on a free loopback port with its inbox in ``tmp_path``."""
    with Receiver(tmp_path / "inbox.sqlite", read_timeout_s=0.5) as receiver:
        yield receiver
