"""Running a parallel program under the controlled scheduler: the same program, the
same checker, but an interleaving chosen by a schedule and replayed exactly.

``run_scheduled(program, store, policy)`` makes a new queue in ``store``, runs the
prefix alone, then each branch in a thread of its own on a connection the scheduler
controls (``tests.parallel.scheduler``); every call is recorded on the scheduler's
logical clock, so the checker's real-time order is the schedule's order. The run's
``schedule`` is the realized choices (``tests.parallel.schedule``): replaying them
(``Replay``) makes the same run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any, NoReturn

from tests.parallel.branch import Lane, Tickets, Watch
from tests.parallel.history import Run
from tests.parallel.program import PREFIX, Fault, Program
from tests.parallel.runner import Recorder
from tests.parallel.schedule import Policy
from tests.parallel.scheduler import DEAD, Branch, BranchKilled, Gate, Scheduler
from tests.stores import Store


class Alone:
    """The prefix's effects under the scheduler: the logical clock, pauses that wait
    for nothing (the prefix runs alone)."""

    def __init__(self, scheduler: Scheduler) -> None:
        self.scheduler = scheduler

    def clock(self) -> int:
        return self.scheduler.tick()

    def hook(self, fault: Fault | None) -> Callable[[str], None] | None:
        if fault is None:
            return None
        return fault.hook(pause=lambda ms: None, kill=self.refuse_kill)

    def refuse_kill(self, point: str) -> None:
        raise AssertionError(f"the prefix cannot be killed (at {point})")

    def sending(self) -> None:
        """Nothing: the prefix runs alone."""

    def pause(self, ms: int) -> None:
        """Nothing: the prefix runs alone."""

    def die(self) -> NoReturn:
        raise AssertionError("the prefix cannot die")

    def watching(self, store: Store, con: Any, verb: str) -> Watch:
        return contextlib.nullcontext()


class Turns(Alone):
    """A branch's effects under the scheduler: every hook call and every send is a step
    boundary, a pause is nothing more than that, a kill is the gate's."""

    def __init__(self, scheduler: Scheduler, gate: Gate) -> None:
        super().__init__(scheduler)
        self.gate = gate

    def hook(self, fault: Fault | None) -> Callable[[str], None] | None:
        if fault is None:
            return None
        act = fault.hook(pause=lambda ms: None, kill=lambda point: self.gate.kill())

        def at(point: str) -> None:
            self.gate.point(f"hook {point}")
            act(point)

        return at

    def sending(self) -> None:
        self.gate.point("send")

    def pause(self, ms: int) -> None:
        self.gate.point("send pause")

    def die(self) -> NoReturn:
        self.gate.kill()


def run_scheduled(program: Program, store: Store, policy: Policy) -> Run:
    """Run ``program`` once on a new queue of ``store``, its branches in the turns
    ``policy`` chooses; the records, the rows and the realized schedule."""
    target = store.fresh("program")
    try:
        scheduler = Scheduler(store, target, policy, policy.explicit)
        recorder = Recorder()
        tickets: Tickets = {}
        con = store.connect(target)
        try:
            Lane(PREFIX, store, con, tickets, recorder.emit, Alone(scheduler)).run(program.prefix)
        finally:
            con.close()
        branches = [Branch(lane, calls) for lane, calls in program.lanes()[1:]]

        def body(branch: Branch, gate: Gate) -> None:
            def emit(message: tuple[Any, ...]) -> None:
                if branch.state == DEAD:
                    raise BranchKilled(branch.lane)  # a killed branch records nothing more
                if message[0] == "call":
                    branch.call = message[2]
                recorder.emit(message)

            effects = Turns(scheduler, gate)
            Lane(branch.lane, store, branch.con, dict(tickets), emit, effects).run(branch.calls)

        if branches:
            scheduler.run(branches, body)
        for lane, index in scheduler.waits:
            recorder.records[(lane, index)].waited = True
        rows = store.rows_at(target)
        return Run(program, recorder.in_order(), rows, recorder.skipped, schedule=policy.text)
    finally:
        store.remove(target)
