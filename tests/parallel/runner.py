"""Running a parallel program: the prefix here, then each branch in a process of its own.

``Pool`` keeps a few branch processes, started in fresh interpreters ("spawn", never
fork) and reused from program to program; a process killed by its program is replaced.
``Pool.run(program, store)`` makes a new queue in ``store``, runs the prefix
on a connection of its own, hands each branch to a process, which connects and waits at
a barrier so that the branches start together, collects every record as it comes, and
reads the rows once every branch is done or dead. Every wait is bounded.
"""

from __future__ import annotations

import multiprocessing
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from multiprocessing.connection import Connection, wait
from multiprocessing.context import SpawnProcess
from multiprocessing.synchronize import Barrier
from typing import Any

from tests.parallel.branch import BARRIER_TIMEOUT_S, Lane, Tickets, serve
from tests.parallel.history import Record, Run, SendTrace
from tests.parallel.program import PREFIX, Program
from tests.stores import Store

# A file on tmpfs is still a real SQLite file, but its fsyncs cost nothing: the suite
# measures interleavings, not the disk.
SCRATCH = "/dev/shm" if os.access("/dev/shm", os.W_OK) else None
MAX_BRANCHES = 3
RUN_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 10.0


class RunFailed(Exception):
    """A branch could not run its calls (not a verdict on the queue: a broken rig)."""


class Recorder:
    """Builds the records of a run from the messages the lanes emit."""

    def __init__(self) -> None:
        self.records: dict[tuple[str, int], Record] = {}
        self.skipped: list[str] = []

    def emit(self, message: tuple[Any, ...]) -> None:
        kind, lane, index, *rest = message
        if kind == "call":
            verb, args, invoked = rest
            self.records[(lane, index)] = Record(lane, index, verb, args, invoked)
        elif kind == "return":
            record = self.records[(lane, index)]
            record.returned, record.outcome = rest
        elif kind == "send":
            entered, delivery, inside = rest
            self.records[(lane, index)].send = SendTrace(entered, delivery, inside)
        elif kind == "sent":
            send = self.records[(lane, index)].send
            assert send is not None
            send.left = rest[0]
        elif kind == "skipped":
            self.skipped.append(f"{lane}.{index}")

    def in_order(self) -> list[Record]:
        return sorted(self.records.values(), key=lambda record: record.invoked)


class BranchProcess:
    """One process of the pool and the pipe it reports through."""

    def __init__(self, context: Any, barriers: dict[int, Barrier]) -> None:
        self.conn, child = multiprocessing.Pipe()
        self.process: SpawnProcess = context.Process(
            target=serve, args=(child, barriers), daemon=True
        )
        self.process.start()
        child.close()

    def stop(self) -> None:
        if self.process.is_alive():
            with suppress(OSError):
                self.conn.send(None)
            self.process.join(STOP_TIMEOUT_S)
        if self.process.is_alive():
            self.process.kill()
            self.process.join(STOP_TIMEOUT_S)
        self.conn.close()
        self.process.close()


class Pool:
    """Branch processes, reused from program to program (see the module docstring)."""

    def __init__(self, size: int = MAX_BRANCHES) -> None:
        self.context = multiprocessing.get_context("spawn")
        self.barriers = {parties: self.context.Barrier(parties) for parties in range(2, size + 1)}
        self.procs = [BranchProcess(self.context, self.barriers) for _ in range(size)]
        self.replaced = 0
        self.lock = threading.Lock()

    def close(self) -> None:
        for proc in self.procs:
            proc.stop()
        self.procs = []

    def run(self, program: Program, store: Store) -> Run:
        """Run ``program`` once on a new queue of ``backend``; the records and the rows."""
        with self.lock:
            target = store.fresh("program")
            try:
                recorder = Recorder()
                tickets: Tickets = {}
                con = store.connect(target)
                try:
                    Lane(PREFIX, store, con, tickets, recorder.emit).run(program.prefix)
                finally:
                    con.close()
                self.run_branches(program, store, target, tickets, recorder)
                return Run(program, recorder.in_order(), store.rows_at(target), recorder.skipped)
            finally:
                store.remove(target)

    def run_branches(
        self, program: Program, store: Store, target: str, tickets: Tickets, rec: Recorder
    ) -> None:
        lanes = program.lanes()[1:]
        if not lanes:
            return
        parties = len(lanes)
        assert 2 <= parties <= len(self.procs), f"{parties} branches, {len(self.procs)} processes"
        busy = dict(zip((lane for lane, _ in lanes), self.procs, strict=False))
        for (lane, calls), proc in zip(lanes, self.procs, strict=False):
            proc.conn.send((store, target, lane, calls, tickets, parties))
        errors: list[str] = []
        died: list[str] = []
        waiting = {lane: proc for lane, proc in busy.items()}
        while waiting:
            ready = wait(
                [proc.conn for proc in waiting.values()]
                + [proc.process.sentinel for proc in waiting.values()],
                timeout=RUN_TIMEOUT_S,
            )
            if not ready:
                raise RunFailed(f"branches {sorted(waiting)} still running after {RUN_TIMEOUT_S} s")
            for lane, proc in list(waiting.items()):
                if not drain(proc.conn, rec, errors):
                    continue
                if proc.process.is_alive() and not proc.conn.closed:
                    # "done" was read: the process is waiting for the next task.
                    del waiting[lane]
                else:
                    died.append(lane)
                    del waiting[lane]
        for lane in died:
            self.replace(busy[lane])
        if any(barrier.broken for barrier in self.barriers.values()):
            for barrier in self.barriers.values():
                barrier.reset()
        if errors:
            raise RunFailed("; ".join(errors))

    def replace(self, proc: BranchProcess) -> None:
        """A process killed by its program (SIGKILL in a hook or a send) is replaced."""
        proc.stop()
        self.procs[self.procs.index(proc)] = BranchProcess(self.context, self.barriers)
        self.replaced += 1


def drain(conn: Connection, rec: Recorder, errors: list[str]) -> bool:
    """Read every message waiting on ``conn``; whether the branch is over (it said
    "done", or its process is gone and the pipe is at its end)."""
    try:
        while conn.poll():
            message = conn.recv()
            kind = message[0]
            if kind == "done":
                return True
            if kind == "error":
                errors.append(f"{message[1]}: {message[2]}")
            elif kind != "ready":
                rec.emit(message)
    except (EOFError, OSError):
        conn.close()
        return True
    return False


@contextmanager
def scratch_folder() -> Iterator[str]:
    """A temporary folder for queue files (on tmpfs where there is one), deleted after."""
    folder = tempfile.mkdtemp(prefix="parallel-", dir=SCRATCH)
    try:
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


__all__ = ["BARRIER_TIMEOUT_S", "Pool", "Recorder", "RunFailed", "scratch_folder"]
