"""One soak courier, a child process: ``python -m chaos courier QUEUE ...``.

It is ``courier.runner.run_courier`` with an HTTP send, as ``courier run`` is, and
two additions the checker needs, both in its rounds (``RecordedRounds``; with
``--batch``, ``chaos.batches``):

1. An event log (``EventLog``): one JSON line per ``run_once`` result, busy error
   and drill, each flushed before the action it announces, so a SIGKILL loses at
   most the action, never half a line. The checker reads it for what the files
   cannot show (stale finishes, lock timeouts, the hook a courier died at).
2. A drill, if it was given one (``chaos.schedule.Drill``): from round K on, its
   rounds pass a fault hook to ``claim`` and ``finish`` that SIGKILLs the process at
   one hook point (``drill_round``).

The ``X-Courier`` header of each delivery is ``sender_name(owner, pid)``, so the
receiver's chaos can act on the very process that sent a delivery it committed.
Its send also freezes the process on request (``FreezeOnRequest``), right after
a delivery's answer and before the queue's ``finish``: the moment a forced pause
in flight or partition needs, reached by construction rather than by timing.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import random
import signal
import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

import worker
from chaos.batches import RecordedCalls
from chaos.schedule import Drill, parse_drill
from courier import queueview
from courier.batch_rounds import BatchRounds, QueueCalls
from courier.clock import clock_ms
from courier.delivery import Cause, Delivery, HttpSend, HttpSends, Send, can_start
from courier.file_rounds import FileRounds
from courier.procs import module_command
from courier.runner import CourierReport, Rounds, run_courier
from courier.stop_rules import StopRules
from courier.stop_signal import StopSignal, stop_on_signals
from courier.transient import is_busy

__all__ = [
    "CourierStart",
    "DrillHook",
    "EventLog",
    "FreezeOnRequest",
    "RecordedRounds",
    "add_courier_options",
    "chaos_command",
    "courier_main",
    "drill_round",
    "freeze_request",
    "sender_name",
    "sender_pid",
]


def chaos_command(*args: object) -> list[str]:
    """The argv of ``python -m chaos ARGS...`` with this interpreter."""
    return module_command("chaos", *args)


def sender_name(owner: str, pid: int) -> str:
    """The ``X-Courier`` header of one courier process: its owner name and its pid."""
    return f"{owner}-p{pid}"


def sender_pid(sender: str | None) -> int | None:
    """The pid in a ``sender_name``, or ``None`` if ``sender`` is not one."""
    owner, separator, pid = (sender or "").rpartition("-p")
    return int(pid) if owner and separator and pid.isascii() and pid.isdigit() else None


def freeze_request(events: Path) -> Path:
    """The file whose existence asks the courier with the event log ``events`` to freeze."""
    return events.with_suffix(".freeze")


class EventLog:
    """A courier's own record: one JSON object per line, flushed as it is written (whole
    lines, from any of its threads)."""

    def __init__(self, path: Path) -> None:
        self._file: TextIO = path.open("a", encoding="utf-8")
        self._lock = threading.Lock()

    def write(self, event: str, **fields: object) -> None:
        """Write one line with ``event``, this pid, the time and ``fields``, then flush."""
        line = json.dumps({"event": event, "pid": os.getpid(), "at_ms": clock_ms(), **fields})
        with self._lock:
            self._file.write(line + "\n")
            self._file.flush()

    def close(self) -> None:
        self._file.close()


class FreezeOnRequest:
    """A ``send`` that stops its own process after a delivery, when asked to.

    The supervisor asks by creating ``request`` (``freeze_request``). After the
    next call of ``send`` returns or raises (or the next delivery handed over with
    ``start`` ends, before it is handed back to be finished), this courier takes
    the request (it removes the file; one removed by the supervisor first is
    withdrawn), logs a ``frozen`` line with the job's id and SIGSTOPs itself,
    still holding its ticket: its ``finish`` reads the clock only once the
    supervisor's SIGCONT has come. A courier that is stopping (``stop``) takes no
    request.
    """

    def __init__(self, send: Send, events: EventLog, request: Path, stop: StopSignal) -> None:
        self.send = send
        self.events = events
        self.request = request
        self.stop = stop

    def __call__(self, event: dict[str, Any]) -> bool:
        try:
            return self.send(event)
        finally:
            self._freeze_if_asked(str(event.get("id")))

    @property
    def starts(self) -> bool:
        """``send``'s: deliveries may be handed over (``courier.delivery``, rule 5)."""
        return can_start(self.send)

    def start(self, delivery: Delivery) -> None:
        """Hand ``delivery`` to ``send``; it freezes as a call does, after the answer
        and before the delivery's ``end`` hands it back to be finished."""
        self.send.start(_FreezingDelivery(self, delivery))  # type: ignore[attr-defined]

    def _freeze_if_asked(self, job: str) -> None:
        if self.stop.is_set():
            return
        try:
            self.request.unlink()
        except FileNotFoundError:
            return
        self.events.write("frozen", id=job)
        os.kill(os.getpid(), signal.SIGSTOP)


@dataclasses.dataclass
class _FreezingDelivery:
    """A delivery handed to ``FreezeOnRequest.start``."""

    freeze: FreezeOnRequest
    delivery: Delivery
    job: str = ""

    def begin(self) -> dict[str, Any] | None:
        event = self.delivery.begin()
        if event is not None:
            self.job = str(event.get("id"))
        return event

    def end(self, outcome: bool | BaseException, cause: Cause) -> None:
        self.freeze._freeze_if_asked(self.job)
        self.delivery.end(outcome, cause)


class DrillHook:
    """The fault hook of a drill: logs it and SIGKILLs this process at its point.

    One hook serves a whole round: ``claim`` gets ``self.claim`` and ``finish`` gets
    ``self.finish``, and each kills only at the drill's own operation and point.
    """

    def __init__(self, drill: Drill, events: EventLog) -> None:
        self.drill = drill
        self.events = events

    def _at(self, operation: str, point: str) -> None:
        if (operation, point) == (self.drill.operation, self.drill.point):
            self.events.write("die", point=self.drill.name)
            os.kill(os.getpid(), signal.SIGKILL)

    def claim(self, point: str) -> None:
        self._at("claim", point)

    def finish(self, point: str) -> None:
        self._at("finish", point)


def drill_round(
    hook: DrillHook,
    path: Path,
    owner: str,
    clock: Callable[[], int],
    send: Send,
    jitter: float,
    lease_ms: int,
) -> dict[str, Any] | None:
    """One ``run_file`` round with the drill's hook passed to ``claim`` and ``finish``.

    ``run_once`` takes no fault hook (contract section 7), so this is its sequence
    in public calls: claim at the first clock reading, ``worker.classify_send`` (the
    classification ``run_once`` itself uses) outside any transaction, finish at the
    second reading. A hook fires only on a path that changed something, so a drill
    may take several rounds to die.
    """
    con = worker.open_queue(queueview.require_queue_file(path))
    try:
        ticket = worker.claim(con, owner, clock(), lease_ms, hook.claim)
        if ticket is None:
            return None
        outcome, delay_ms = worker.classify_send(send, ticket, jitter)
        status = worker.finish(con, ticket, outcome, clock(), delay_ms, hook.finish)
    finally:
        con.close()
    return {"id": ticket["id"], "token": ticket["token"], "status": status or "stale"}


class RecordedRounds:
    """A soak courier's rounds on the queue file ``queue`` (``courier.runner.Rounds``):
    ``worker.run_file``, or once armed the drill, each recorded.

    Each round opens the file anew and takes no turns (``courier.file_rounds``'
    kept connection is not what the drill's hooks run on). Every result (``stale``
    included) and every busy database error goes to the event log; a busy error is
    then raised again, so that ``run_courier`` backs off as it always does.
    """

    def __init__(self, queue: Path, events: EventLog, drill: Drill | None) -> None:
        self.queue = queue
        self.events = events
        self.drill = drill
        self.rounds = 0

    def now_ms(self) -> int:
        """The host's wall clock, the queue file's time base."""
        return clock_ms()

    def round(
        self,
        owner: str,
        send: Send,
        jitter: Callable[[], float],
        lease_ms: int,
        later: int | None = None,
    ) -> list[dict[str, Any]]:
        """One round with one ``jitter()``: its result, or ``[]`` if nothing was claimable."""
        drawn = jitter()
        self.rounds += 1
        arguments = (self.queue, owner, clock_ms, send, drawn, lease_ms)
        try:
            if self.drill is not None and self.rounds >= self.drill.round:
                hook = DrillHook(self.drill, self.events)
                result = drill_round(hook, *arguments)
            else:
                result = worker.run_file(*arguments)
        except sqlite3.OperationalError as error:
            if is_busy(error):
                self.events.write("busy", detail=str(error))
            raise
        if result is None:
            return []
        self.events.write("result", **result)
        return [result]

    def holding(self) -> bool:
        """False: a round of one job holds nothing for the next (``later`` changes nothing)."""
        return False

    def drained(self) -> bool:
        """True if no job is pending or leased."""
        return queueview.is_drained(self.queue)

    def close(self) -> None:
        """Nothing to release: each round opened and closed its own connection."""


def add_courier_options(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the options every soak courier takes, on SQLite and PostgreSQL; return ``parser``."""
    parser.add_argument("--url", required=True)
    parser.add_argument("--owner", required=True)
    parser.add_argument("--events", type=Path, required=True)
    parser.add_argument("--lease-ms", type=int, default=1000)
    parser.add_argument("--timeout-ms", type=int, required=True)
    parser.add_argument("--max-seconds", type=float, required=True)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--incarnation", type=int, default=0)
    parser.add_argument("--drill", help="OPERATION:POINT, e.g. finish:after-commit")
    parser.add_argument("--drill-round", type=int, default=1)
    parser.add_argument("--until-drained", action="store_true")
    parser.add_argument("--batch", type=int, default=1, help="jobs a round claims at once")
    parser.add_argument("--in-flight", type=int, default=1, help="deliveries of a batch at once")
    return parser


@dataclasses.dataclass(frozen=True)
class CourierStart:
    """What every soak courier, on SQLite and PostgreSQL, sets up from its options
    (``add_courier_options``): the signal handlers, its drill, its event log and the
    generator of its jitter (a pure function of the seed, the owner and the incarnation)."""

    stop: StopSignal
    drill: Drill | None
    events: EventLog
    rng: random.Random

    @classmethod
    def from_options(cls, args: argparse.Namespace) -> CourierStart:
        """Install the signal handlers, parse the drill and open the event log."""
        stop = stop_on_signals()
        drill = None if args.drill is None else parse_drill(args.drill, args.drill_round)
        events = EventLog(args.events)
        rng = random.Random(f"jitter:{args.seed}:{args.owner}:{args.incarnation}")
        return cls(stop, drill, events, rng)

    def recorded(self, calls: QueueCalls) -> RecordedCalls:
        """The queue's ``calls`` for batched rounds, recorded and drilled
        (``chaos.batches``)."""
        if self.drill is None:
            return RecordedCalls(calls, self.events)
        return RecordedCalls(
            calls, self.events, DrillHook(self.drill, self.events), self.drill.round
        )

    def announce(self, args: argparse.Namespace) -> FreezeOnRequest:
        """Write the ``start`` line; return the courier's send: an ``HttpSend``
        (``X-Courier``: ``sender_name``; ``HttpSends`` for deliveries in flight) that
        freezes on request (``FreezeOnRequest``)."""
        drill = None if self.drill is None else self.drill.name
        self.events.write("start", owner=args.owner, drill=drill, batch=args.batch)
        sender = sender_name(args.owner, os.getpid())
        send: HttpSend | HttpSends = (
            HttpSend(args.url, sender, args.timeout_ms)
            if args.in_flight == 1
            else HttpSends(args.url, sender, args.timeout_ms, args.in_flight)
        )
        return FreezeOnRequest(send, self.events, freeze_request(args.events), self.stop)

    def run(
        self, args: argparse.Namespace, target: str | Path, send: Send, rounds: Rounds
    ) -> CourierReport:
        """``run_courier`` on ``target`` with ``rounds`` until the soak courier's time
        bound, drained or a signal; the rounds are closed whatever happens."""
        rules = StopRules(
            max_runs=10**6, max_seconds=args.max_seconds, until_drained=args.until_drained
        )
        try:
            return run_courier(
                target,
                args.owner,
                send,
                lease_ms=args.lease_ms,
                stop_rules=rules,
                stop=self.stop,
                rng=self.rng.random,
                rounds=rounds,
            )
        finally:
            rounds.close()


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m chaos courier")
    parser.add_argument("queue", type=Path)
    return add_courier_options(parser)


def courier_main(argv: Sequence[str]) -> int:
    """Run one soak courier until its limits or SIGTERM; exit status 0."""
    args = _parser().parse_args(argv)
    start = CourierStart.from_options(args)
    events = start.events
    try:
        send = start.announce(args)
        rounds: Rounds = RecordedRounds(args.queue, events, start.drill)
        if args.batch > 1:
            calls = start.recorded(FileRounds(args.queue))
            rounds = BatchRounds(calls, args.batch, args.in_flight, args.timeout_ms)
        report = start.run(args, args.queue, send, rounds)
        events.write("stop", reason=report.stop_reason, runs=report.runs, busy=report.busy)
    finally:
        events.close()
    return 0
