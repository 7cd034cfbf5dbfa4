"""One lane of a program, run on its own connection: the code of a branch process.

``Lane.run`` makes each call of a lane in order and reports every step of it through
``emit`` as it happens, before and after the call, so that a process killed in the
middle of a call still leaves the record of its invocation. The prefix runs the same
way in the parent process; each branch runs in a process of the pool
(``tests.parallel.runner``), started in a fresh interpreter (spawn) and reused from
program to program.

The fault hook and the scripted send are this module's: a hook that raises, pauses
inside the transaction or kills the process at its point, and a send that answers,
raises, pauses or kills the courier right after the delivery reached it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from multiprocessing.synchronize import Barrier
from types import ModuleType
from typing import Any

from tests.parallel.history import clock_ns, outcome_of, plain
from tests.parallel.program import Call, Fault, Send, SendCrash, TicketRef
from tests.stores import Store

Emit = Callable[[tuple[Any, ...]], None]
Tickets = dict[tuple[str, int], list[dict[str, Any]]]
"""The tickets each call received, by (lane, call index): what a ``TicketRef`` names."""

BARRIER_TIMEOUT_S = 30.0


def die() -> None:
    """SIGKILL this process: no handler runs, nothing is flushed, the transaction is lost."""
    os.kill(os.getpid(), signal.SIGKILL)


def hook(fault: Fault | None) -> Callable[[str], None] | None:
    """The fault hook a call gets (``None`` for no fault): a pause sleeps inside the
    transaction, a kill is SIGKILL of this process."""
    if fault is None:
        return None
    return fault.hook(pause=lambda ms: time.sleep(ms / 1000), kill=lambda point: die())


class Lane:
    """The calls of one lane on one connection, with the tickets they may refer to."""

    def __init__(self, lane: str, store: Store, con: Any, tickets: Tickets, emit: Emit) -> None:
        self.lane = lane
        self.store = store
        self.module: ModuleType = store.module()
        self.con = con
        self.tickets = tickets
        self.emit = emit

    def run(self, calls: tuple[Call, ...]) -> None:
        for index, call in enumerate(calls):
            args = self.resolved(call)
            if args is None:
                self.emit(("skipped", self.lane, index))
                continue
            self.emit(("call", self.lane, index, call.verb, args, clock_ns()))
            outcome = outcome_of(lambda: self.make(index, call.verb, args))  # noqa: B023
            returned = clock_ns()
            self.emit(("return", self.lane, index, returned, outcome))
            if outcome[0] == "returned":
                self.keep_tickets(index, call.verb, outcome[1])

    def resolved(self, call: Call) -> dict[str, Any] | None:
        """The call's arguments with every ticket reference replaced by the ticket;
        ``None`` if a single ticket it needs was never received. A batch keeps the items
        whose tickets were received."""
        args = call.kwargs
        if call.verb == "finish":
            ticket = self.ticket(args["ticket"])
            if ticket is None:
                return None
            args["ticket"] = ticket
        elif call.verb == "finish_many":
            results = []
            for item in args["results"]:
                ticket = self.ticket(item["ticket"])
                if ticket is not None:
                    results.append({**item, "ticket": ticket})
            args["results"] = results
        return args

    def ticket(self, ref: TicketRef) -> dict[str, Any] | None:
        received = self.tickets.get((ref.lane, ref.call), [])
        return dict(received[ref.item]) if ref.item < len(received) else None

    def keep_tickets(self, index: int, verb: str, value: Any) -> None:
        if verb == "claim" and value is not None:
            self.tickets[(self.lane, index)] = [dict(value)]
        elif verb == "claim_many":
            self.tickets[(self.lane, index)] = [dict(ticket) for ticket in value]

    def make(self, index: int, verb: str, args: dict[str, Any]) -> Any:
        """Make one call on the real module, with this module's hook and send."""
        if verb == "run_once":
            return self.courier_round(index, args)
        kwargs = {name: value for name, value in args.items() if value is not None}
        if "fault" in args:
            kwargs["fault"] = hook(args["fault"])
        with self.store.watching_waits(self.con, verb):
            return plain(getattr(self.module, verb)(self.con, **kwargs))

    def courier_round(self, index: int, args: dict[str, Any]) -> Any:
        readings = iter(args["readings"])
        lease = {"lease_ms": args["lease_ms"]} if args["lease_ms"] is not None else {}
        send = self.scripted_send(index, args["send"])
        return self.module.run_once(
            self.con, args["owner"], lambda: next(readings), send, args["jitter"], **lease
        )

    def scripted_send(self, index: int, script: Send) -> Callable[[dict[str, Any]], object]:
        module = self.module

        def send(delivery: dict[str, Any]) -> object:
            inside = self.store.in_transaction(self.con)
            self.emit(("send", self.lane, index, clock_ns(), dict(delivery), inside))
            try:
                if script.behaviour == "die":
                    die()
                if script.behaviour == "retryable":
                    raise module.Retryable("timeout")
                if script.behaviour == "permanent":
                    raise module.Permanent("rejected")
                if script.behaviour == "crash":
                    raise SendCrash("connection reset")
                if script.behaviour == "bad_ack":
                    return 1
                if script.behaviour == "pause":
                    time.sleep(script.ms / 1000)
                return True
            finally:
                self.emit(("sent", self.lane, index, clock_ns()))

        return send


def serve(conn: Connection, barriers: dict[int, Barrier]) -> None:
    """The loop of a branch process: take a branch, connect, wait at the barrier with
    the other branches, run, report; until told to stop (``None``)."""
    while True:
        task = conn.recv()
        if task is None:
            return
        store, target, lane, calls, tickets, parties = task
        con = None
        try:
            con = store.connect(target)
            conn.send(("ready", lane))
            barriers[parties].wait(timeout=BARRIER_TIMEOUT_S)
            Lane(lane, store, con, dict(tickets), conn.send).run(calls)
        except Exception as error:
            conn.send(("error", lane, f"{type(error).__name__}: {error}"))
        finally:
            if con is not None:
                con.close()
        conn.send(("done", lane))
