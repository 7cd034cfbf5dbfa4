"""A controlled scheduler: the branches of a program take turns, one step at a time,
in the order a schedule chooses, so that any interleaving can be chosen, printed and
replayed exactly.

Each branch runs in a thread of its own, on a connection the scheduler hands it (the
store's ``scheduled_connect``: the queue modules are not changed for the scheduler).
A branch stops and waits for its turn at every *step boundary*: before each SQL
statement (``BEGIN``, ``COMMIT`` and ``ROLLBACK`` included), at each call of a fault
hook, and before the send of a ``run_once``. The scheduler lets exactly one branch run
from one boundary to its next, so the interleaving is a sequence of branch choices,
``Schedule.steps``: the same choices give the same run.

A branch whose statement would wait for a lock is seen as *blocked*, and another branch
runs; no step ever waits on a timeout:

- SQLite (a busy timeout of 0): a statement that is refused the lock comes back at once
  with "database is locked". Where SQLite's own busy handler would have waited (the
  connection held no lock yet, or it is committing), the branch is ``BUSY``: it is not
  given a turn again until another branch has made a step, and then tries the
  statement again. Where SQLite would have refused at once whatever the timeout (a
  transaction that read before it writes asks for the write lock while another
  writer holds it: SQLite's deadlock rule), the error goes to the caller, as it would
  for real. If every branch left is busy (a deadlock a busy timeout would break), the
  lowest one's statement is refused, as its timeout would.
- PostgreSQL: a statement that waits for a row lock waits in the server. The scheduler
  asks the server, as PostgreSQL's isolation tester does
  (``pg_isolation_test_session_is_blocked``), and marks the branch ``WAITING``; when
  the lock is granted the statement finishes and the branch waits at a boundary of its
  own (``resume``) for its next turn. If every branch left waits so, they wait for one
  another: the scheduler waits for the server's deadlock detector to fail one of the
  statements, as it would between couriers (``_await_deadlock_broken``).

Kills and pauses are steps too. A fault that kills, or a send that dies, closes the
branch's connection at that point as a SIGKILL would (the server or the file throws
the open transaction away) and stops its thread; a pause is a boundary and nothing
more (the schedule decides who runs meanwhile). Time in the records is a logical clock:
one tick per recorded event, in the order the schedule made them happen.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

from tests.parallel.program import Call
from tests.parallel.schedule import Policy
from tests.stores import Store

# What a branch is doing, as the scheduler sees it.
NEW = "new"  # its thread has not reached its first boundary yet
READY = "ready"  # waiting at a boundary for its turn
RUNNING = "running"  # its turn: running up to its next boundary
BUSY = "busy"  # SQLite refused its statement a lock; it tries again on a later turn
WAITING = "waiting"  # PostgreSQL: its statement waits for a lock in the server
DONE = "done"  # its calls are made
DEAD = "dead"  # killed at a fault point or right after its send

STEP_TIMEOUT_S = 20.0  # a step longer than this is a broken rig, not a verdict
SETTLE_TIMEOUT_S = 10.0
# PostgreSQL checks for a deadlock once a statement has waited deadlock_timeout (1 s by
# default); past this, a deadlock the server does not break is a broken rig.
DEADLOCK_TIMEOUT_S = 30.0
POLL_S = 0.002


class BranchKilled(BaseException):
    """Raised in a branch's thread once it is killed (or the run is abandoned): it unwinds
    whatever the branch was doing; the queue module's own error handling cannot catch it."""


class ScheduleFailed(Exception):
    """The run could not follow the schedule (not a verdict on the queue): a broken rig, a
    replayed choice of a branch that cannot run there, or a step that never ended."""


@dataclass(eq=False)
class Branch:
    """One branch of the program as the scheduler keeps it."""

    lane: str
    calls: tuple[Call, ...]
    state: str = NEW
    at: str = "start"  # the boundary it waits at (or the statement it waits in)
    granted: bool = False
    refuse: bool = False  # its next turn refuses the busy statement (a deadlock broken)
    eligible: bool = True  # a BUSY branch may have its turn again
    busy_effect: bool = False  # its last busy attempt changed something (SQLite's PENDING)
    call: int = -1  # the call it is making (for the records of waits)
    pid: int | None = None  # its server process (PostgreSQL)
    con: Any = None
    error: BaseException | None = None
    thread: threading.Thread | None = None


@dataclass
class Step:
    """One step of a run: who ran, and what the step ended in."""

    lane: str
    at: str  # the boundary it started from
    ended: str  # READY, BUSY, WAITING, DONE or DEAD
    effective: bool = True  # False: a busy attempt that changed nothing (left out)


class Gate:
    """The scheduler as one branch's code sees it (its connection and hooks call this)."""

    def __init__(self, scheduler: Scheduler, branch: Branch) -> None:
        self.scheduler = scheduler
        self.branch = branch

    @property
    def dead(self) -> bool:
        return self.branch.state == DEAD or self.scheduler.abandoned

    def point(self, where: str) -> None:
        """A step boundary: wait here for this branch's next turn."""
        self.scheduler.wait_turn(self.branch, READY, where)

    def busy(self, where: str, effect: bool) -> None:
        """SQLite refused the statement ``where`` its lock and a busy handler would wait:
        wait for a later turn (``effect``: the attempt kept a lock, as a COMMIT that waits
        for readers keeps SQLite's PENDING lock). Raises the refusal itself when the
        scheduler breaks a deadlock on this branch."""
        self.branch.busy_effect = effect
        self.scheduler.record_wait(self.branch)
        self.scheduler.wait_turn(self.branch, BUSY, where)

    def refused(self) -> bool:
        """Whether this turn refuses the statement the branch was busy on (and clears it)."""
        refuse, self.branch.refuse = self.branch.refuse, False
        return refuse

    def after_statement(self) -> None:
        """A statement came back; if it had waited for a lock in the server, wait for a
        turn before going on (the boundary ``resume``)."""
        self.scheduler.resumed(self.branch)

    def kill(self) -> NoReturn:
        """Die here, as SIGKILL would: the connection goes, and the open transaction with it."""
        self.scheduler.kill(self.branch)
        raise BranchKilled(self.branch.lane)


class Scheduler:
    """Runs branches in turns chosen by ``policy`` on connections of ``store``.

    ``connect(gate)`` opens a branch's connection (``store.scheduled_connect``);
    ``body(branch, gate)`` makes its calls; ``tick()`` is the logical clock of the records.
    """

    def __init__(self, store: Store, target: str, policy: Policy, explicit: bool = False) -> None:
        self.store = store
        self.explicit = explicit
        self.target = target
        self.policy = policy
        self.cond = threading.Condition()
        self.branches: list[Branch] = []
        self.steps: list[Step] = []
        self.clock = 0
        self.abandoned = False
        self.waits: list[tuple[str, int]] = []  # (lane, call) of every call that waited
        self.deadlocks: list[tuple[str, ...]] = []  # the branches of each deadlock the server broke
        self.monitor: Any = None

    # --- what the branches' threads call ------------------------------------------------

    def tick(self) -> int:
        """The logical clock: one tick per recorded event."""
        with self.cond:
            self.clock += 1
            return self.clock

    def wait_turn(self, branch: Branch, state: str, where: str) -> None:
        with self.cond:
            if branch.state == DEAD or self.abandoned:
                raise BranchKilled(branch.lane)
            branch.state, branch.at = state, where
            self.cond.notify_all()
            while not branch.granted:
                if self.abandoned:
                    raise BranchKilled(branch.lane)
                self.cond.wait(1.0)
            branch.granted = False
            branch.state = RUNNING

    def resumed(self, branch: Branch) -> None:
        with self.cond:
            if branch.state != WAITING:
                return
        self.wait_turn(branch, READY, "resume")

    def record_wait(self, branch: Branch) -> None:
        self.waits.append((branch.lane, branch.call))

    def kill(self, branch: Branch) -> None:
        with self.cond:
            branch.state = DEAD
        self.store.abandon(branch.con)
        with self.cond:
            self.cond.notify_all()

    # --- the run ---------------------------------------------------------------------

    def run(self, branches: list[Branch], body: Callable[[Branch, Gate], None]) -> list[Step]:
        """Run every branch to its end (or its death) in the turns ``policy`` chooses;
        the steps made."""
        self.branches = branches
        self.monitor = self.store.monitor(self.target)
        try:
            for branch in branches:
                gate = Gate(self, branch)
                branch.con = self.store.scheduled_connect(self.target, gate, self.explicit)
                branch.pid = self.store.server_pid(branch.con)
                branch.thread = threading.Thread(
                    target=self._thread, args=(branch, gate, body), daemon=True
                )
                branch.thread.start()
            self._await(lambda: all(b.state != NEW for b in branches), "every branch to start")
            # The branches start together, as behind the real-process suite's barrier:
            # each enters its first call, in lane order, before the schedule's first step.
            for branch in branches:
                self._step(branch, chosen=False)
            while True:
                self._settle()
                choice = self._next()
                if choice is None:
                    break
                self._step(choice)
            broken = [b for b in branches if b.error is not None]
            if broken:
                raise ScheduleFailed(f"{broken[0].lane}: {broken[0].error!r}") from broken[0].error
            return self.steps
        except BaseException:
            self._abandon()
            raise
        finally:
            self._join()
            if self.monitor is not None:
                self.monitor.close()

    def _thread(self, branch: Branch, gate: Gate, body: Callable[[Branch, Gate], None]) -> None:
        try:
            gate.point("start")
            body(branch, gate)
        except BranchKilled:
            pass
        except BaseException as error:  # a broken rig: reported by run()
            branch.error = error
        finally:
            if branch.state != DEAD:
                with self.cond:
                    branch.state = DONE
                self.store.abandon(branch.con)  # nothing is open: a plain close
            with self.cond:
                self.cond.notify_all()

    def _next(self) -> Branch | None:
        """The branch the policy gives the next turn; ``None`` when every branch is over."""
        live = [b for b in self.branches if b.state not in (DONE, DEAD)]
        if not live:
            return None
        runnable = [
            b
            for b in live
            if (b.state == READY and not self._must_wait(b)) or (b.state == BUSY and b.eligible)
        ]
        if not runnable:
            busy = [b for b in live if b.state == BUSY]
            if not busy:
                self._await_deadlock_broken(live)
                return self._next()
            # Every branch waits for a lock another holds: a busy timeout would refuse one.
            busy[0].refuse = True
            runnable = [busy[0]]
        if getattr(self.policy, "reduced", False):
            runnable = self._reduced(live, runnable)
        lanes = [b.lane for b in runnable]
        lane = self.policy.choose(lanes, len(self.steps))
        if lane not in lanes:
            raise ScheduleFailed(
                f"step {len(self.steps) + 1}: the schedule gives the turn to {lane}, which"
                f" cannot run here (runnable: {', '.join(lanes)})"
            )
        return next(b for b in runnable if b.lane == lane)

    def _await_deadlock_broken(self, live: list[Branch]) -> None:
        """Every branch left waits in the server for a lock that another of them holds: a
        deadlock among the branches, which the server breaks as it would between couriers
        (PostgreSQL's deadlock detector fails one of the statements once it has waited
        ``deadlock_timeout``, and the failed transaction lets go of its locks). Wait for
        that, then go on: the failed call is that branch's outcome, for the checker to
        judge. The session that began to wait first is the one whose timer ends first, so
        a replay breaks the same deadlock the same way. The cycle is kept (``deadlocks``)."""
        waiting = [b for b in live if b.state == WAITING]
        if len(waiting) < len(live):
            raise ScheduleFailed(
                "no branch can run and none waits in the server: "
                + ", ".join(f"{b.lane} at {b.at[:60]!r}" for b in live)
            )
        self.deadlocks.append(tuple(f"{b.lane} {b.at}" for b in waiting))
        deadline = time.monotonic() + DEADLOCK_TIMEOUT_S
        with self.cond:
            while all(b.state == WAITING for b in waiting):
                if time.monotonic() > deadline:
                    raise ScheduleFailed(
                        f"every branch left waits for a lock in the server, and the server"
                        f" did not break the deadlock within {DEADLOCK_TIMEOUT_S:g} s: "
                        + ", ".join(f"{b.lane} {b.at[:60]!r}" for b in waiting)
                    )
                self.cond.wait(POLL_S * 10)
        self._settle()

    def _reduced(self, live: list[Branch], runnable: list[Branch]) -> list[Branch]:
        """The choices that give different runs, for a search of every interleaving: while
        a branch holds the store's write lock, and until the statement that ends its
        transaction, its own steps record nothing and what it wrote stays unseen, so
        another branch's step (one that needs no lock: a send, a hook, a read) makes the
        same run before any of them; only before or after the end does it matter."""
        holders = [b for b in live if self.store.holds_write_lock(b.con)]
        if holders and holders[0] in runnable and not _ends_transaction(holders[0].at):
            return [holders[0]]
        return runnable

    def _must_wait(self, branch: Branch) -> bool:
        """A branch whose next statement is sure to be refused its lock is no choice: its
        turn would change nothing (the store knows, ``Store.must_wait``)."""
        others = [b.con for b in self.branches if b is not branch and b.state not in (DONE, DEAD)]
        return self.store.must_wait(branch.at, others)

    def _step(self, branch: Branch, chosen: bool = True) -> None:
        """Give ``branch`` one turn and wait until it is at its next boundary, blocked,
        done or dead (``chosen``: a step of the schedule; the start of a branch is not)."""
        at = branch.at
        with self.cond:
            branch.granted = True
            branch.state = RUNNING
            self.cond.notify_all()
        deadline = time.monotonic() + STEP_TIMEOUT_S
        pause = POLL_S
        while True:
            with self.cond:
                if branch.state != RUNNING:
                    break
                self.cond.wait(pause)
                if branch.state != RUNNING:
                    break
            if branch.pid is not None and self.store.blocked(
                self.monitor, branch.pid, self._pids()
            ):
                with self.cond:
                    if branch.state == RUNNING:
                        branch.state, branch.at = WAITING, f"waits in {branch.at[:60]!r}"
                        self.record_wait(branch)
                        break
            if time.monotonic() > deadline:
                raise ScheduleFailed(
                    f"{branch.lane} did not reach its next step within {STEP_TIMEOUT_S:g} s"
                    f" (it left {at[:80]!r})"
                )
            pause = min(pause * 2, 0.05)
        ended = branch.state
        effective = not (ended == BUSY and not branch.busy_effect)
        if ended == BUSY:
            branch.eligible = False
        if effective:
            for other in self.branches:
                if other is not branch and other.state == BUSY:
                    other.eligible = True
        if ended == DEAD:
            self._bury(branch)
        if chosen:
            self.steps.append(Step(branch.lane, at, ended, effective))
            self.policy.made(branch.lane, effective)

    def _bury(self, branch: Branch) -> None:
        """A killed branch is gone before the next step, as a killed process is: its
        thread has unwound (``Store.abandon`` let go of its locks), and a PostgreSQL
        session has ended."""
        if branch.thread is not None and branch.thread is not threading.current_thread():
            branch.thread.join(STEP_TIMEOUT_S)
        if branch.pid is not None:
            self.store.await_gone(self.monitor, branch.pid)

    def _settle(self) -> None:
        """Wait until every branch whose statement waited in the server is either still
        blocked (twice in a row, by branches that are not moving) or back at a boundary."""
        waiting = [b for b in self.branches if b.state == WAITING]
        if not waiting:
            return
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        calm = 0
        while calm < 2:
            with self.cond:
                still = [b for b in self.branches if b.state == WAITING]
            if not still:
                return
            blocked = all(
                b.pid is not None and self.store.blocked(self.monitor, b.pid, self._pids())
                for b in still
            )
            calm = calm + 1 if blocked else 0
            if time.monotonic() > deadline:
                raise ScheduleFailed(
                    "waiting statements neither finished nor stayed blocked: "
                    + ", ".join(b.lane for b in still)
                )
            with self.cond:
                self.cond.wait(POLL_S)

    def _pids(self) -> list[int]:
        return [b.pid for b in self.branches if b.pid is not None and b.state != DEAD]

    def _await(self, done: Callable[[], bool], what: str) -> None:
        deadline = time.monotonic() + STEP_TIMEOUT_S
        with self.cond:
            while not done():
                if time.monotonic() > deadline:
                    raise ScheduleFailed(f"timed out waiting for {what}")
                self.cond.wait(0.05)

    def _abandon(self) -> None:
        with self.cond:
            self.abandoned = True
            self.cond.notify_all()
        for branch in self.branches:
            if branch.state in (WAITING, RUNNING):
                self.store.abandon(branch.con)

    def _join(self) -> None:
        for branch in self.branches:
            if branch.thread is not None:
                branch.thread.join(STEP_TIMEOUT_S)


def _ends_transaction(at: str) -> bool:
    return at.split(maxsplit=1)[:1] in (["COMMIT"], ["ROLLBACK"], ["END"])


__all__ = [
    "BUSY",
    "DEAD",
    "DONE",
    "READY",
    "WAITING",
    "Branch",
    "BranchKilled",
    "Gate",
    "ScheduleFailed",
    "Scheduler",
    "Step",
]
