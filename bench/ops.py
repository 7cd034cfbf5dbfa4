"""The phases every queue is timed in, and worker.py's (or pgworker.py's) calls as a queue. See
docs/benchmarks.md, ``bench.ops``."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol, TypeVar

from bench.measure import T0_MS, Timed, run_counted
from bench.rows import fill

__all__ = ["CYCLE_T0_MS", "LEASE_MS", "OWNER", "TTL_MS", "Calls", "Queue", "cycle_times"]
__all__ += ["event", "expect", "phases", "timed_phases"]

OWNER = "bench"
TTL_MS = 60_000
LEASE_MS = 60_000
CYCLE_T0_MS = T0_MS + 10  # the cycles' "now": after the phases before them


def event(i: int) -> dict[str, Any]:
    """The ``i``-th new job of a phase: id ``job-%08d`` and a qty of 1-1000."""
    return {"id": f"job-{i:08d}", "qty": 1 + i % 1000}


def expect(what: str, got: object, expected: object) -> None:
    """Raise ``RuntimeError`` unless ``got == expected``."""
    if got != expected:
        raise RuntimeError(f"{what}: expected {expected!r}, got {got!r}")


class Queue(Protocol):
    """What ``phases`` times: ``size`` jobs a call, every result checked."""

    size: int

    def put(self, i: int) -> None:
        """Enqueue the ``i``-th call's new jobs."""

    def take(self, now_ms: int) -> list[Any]:
        """Take the oldest ``size`` due jobs; what ``ack`` needs of each."""

    def ack(self, taken: list[Any], now_ms: int) -> None:
        """Acknowledge taken jobs as done."""

    def refill(self, jobs: int) -> None:
        """Add ``jobs`` due jobs, untimed, for the cycles."""


class _Figure(Protocol):
    @property
    def count(self) -> int: ...


FigureT = TypeVar("FigureT", bound=_Figure)
Steps = list[Callable[[int], int]]


def phases(
    queues: Sequence[Queue],
    calls: int,
    timer: Callable[[str, Steps, int], FigureT],
    between: Callable[[], None] = lambda: None,
) -> dict[str, FigureT]:
    """Time each phase as ``timer(phase, steps, n)``: one step per queue (``step(i)``
    makes the ``i``-th call and returns its jobs), ``n`` calls.

    Each phase runs as many calls as the one before it really did (a loop bounded in
    time may stop early); ``between()`` runs untimed before each phase after the
    first, and ``refill`` before the cycles (``calls`` calls' worth of jobs).
    """
    taken: list[list[list[Any]]] = [[] for _ in queues]

    def put(queue: Queue, _: list[list[Any]], i: int) -> int:
        queue.put(i)
        return queue.size

    def take(queue: Queue, mine: list[list[Any]], _: int) -> int:
        mine.append(queue.take(T0_MS + 1))
        return queue.size

    def ack(queue: Queue, mine: list[list[Any]], i: int) -> int:
        queue.ack(mine[i], T0_MS + 2)
        return queue.size

    def cycle(queue: Queue, _: list[list[Any]], i: int) -> int:
        queue.ack(queue.take(CYCLE_T0_MS + 2 * i), CYCLE_T0_MS + 2 * i + 1)
        return queue.size

    def each(step: Callable[[Queue, list[list[Any]], int], int]) -> Steps:
        return [functools.partial(step, q, mine) for q, mine in zip(queues, taken, strict=True)]

    size = queues[0].size
    figures = {"enqueue": timer("enqueue", each(put), calls)}
    between()
    figures["claim"] = timer("claim", each(take), figures["enqueue"].count // size)
    between()
    figures["finish"] = timer("finish", each(ack), figures["claim"].count // size)
    for queue in queues:
        queue.refill(calls * size)
    between()
    figures["cycle"] = timer("cycle", each(cycle), calls)
    return figures


def timed_phases(
    queue: Queue, calls: int, max_seconds: float, between: Callable[[], None] = lambda: None
) -> dict[str, Timed]:
    """``phases`` of one queue, each a ``Timed`` bounded by ``max_seconds``."""
    return phases(
        [queue], calls, lambda _, steps, n: run_counted(steps[0], n, max_seconds), between
    )


def cycle_times(
    queue: Queue, first: int, cycles: int, check: Callable[[list[Any]], bool]
) -> list[float]:
    """Time ``cycles`` cycles of ``queue`` one by one (ms), the ``i``-th at
    ``T0_MS + 1 + 2 * i`` (from ``first``); ``check(taken)`` must hold for each take."""
    samples = []
    for i in range(first, first + cycles):
        start = time.perf_counter()
        taken = queue.take(T0_MS + 1 + 2 * i)
        queue.ack(taken, T0_MS + 2 + 2 * i)
        samples.append((time.perf_counter() - start) * 1000)
        if not check(taken):
            raise RuntimeError(f"cycle {i} took {taken!r}")
    return samples


class Calls:
    """The calls of ``module`` (worker or pgworker) on ``con`` as a ``Queue``: single calls
    when ``size`` is 1, batches of ``size`` otherwise."""

    def __init__(self, module: Any, con: Any, size: int = 1) -> None:
        self.module, self.con, self.size = module, con, size

    def put(self, i: int) -> None:
        events = [event(i * self.size + k) for k in range(self.size)]
        if self.size == 1:
            got = [self.module.enqueue(self.con, events[0], T0_MS, TTL_MS)]
        else:
            got = self.module.enqueue_many(self.con, events, T0_MS, TTL_MS)
        expect("enqueue", got, [True] * self.size)

    def claim(self, now_ms: int, owner: str = OWNER) -> list[Any]:
        """The tickets of up to ``size`` due jobs, leased to ``owner``."""
        if self.size == 1:
            ticket = self.module.claim(self.con, owner, now_ms, LEASE_MS)
            return [] if ticket is None else [ticket]
        return list(self.module.claim_many(self.con, owner, now_ms, self.size, LEASE_MS))

    def take(self, now_ms: int) -> list[Any]:
        got = self.claim(now_ms)
        expect("jobs claimed", len(got), self.size)
        return got

    def ack(self, taken: list[Any], now_ms: int) -> None:
        if self.size == 1:
            got = [self.module.finish(self.con, taken[0], "ok", now_ms)]
        else:
            results = [{"ticket": t, "outcome": "ok", "delay_ms": 0} for t in taken]
            got = self.module.finish_many(self.con, results, now_ms)
        expect("finish", got, ["done"] * len(taken))

    def refill(self, jobs: int) -> None:
        fill(self.con, jobs, CYCLE_T0_MS, prefix="cycle-")
