"""One soak courier on PostgreSQL, a child process: ``python -m chaos pgcourier CONNINFO ...``.

It may run on a simulated host (``chaos.hosts``), reaching the server over TCP
through a link that the chaos driver cuts and heals. What it does, and what it
writes to its event log (``chaos.child.EventLog``, one flushed JSON line each):

1. Each round is ``pgworker``'s ``run_once`` in public calls: ``claim``, then
   ``worker.classify_send`` outside any transaction, then ``finish``, each at the
   database server's clock (``chaos.store.server_now_ms``: every host reads one
   time base). A ``claimed`` line holds the ticket; a ``result`` line holds the
   finish's answer (``stale`` when it was refused), the ``now_ms`` it was given
   and the ticket's ``lease_until``, so the checker can tell a late finish that
   was accepted (a stale overwrite) from one that was refused.
2. The connection (``Link``) bounds how long a cut-off host is stuck: libpq's
   ``connect_timeout``, TCP keepalives and ``tcp_user_timeout`` turn a dead link
   into ``psycopg.OperationalError`` within a few seconds. Then it writes
   ``disconnect``, reconnects with a capped backoff (each try bounded by
   ``connect_timeout``) and writes ``reconnect`` once it is through.
3. A finish that failed on a lost connection is tried again, with the same
   ticket, once reconnected: a real courier does not forget the job it was
   delivering. By then the lease has usually expired and another host has
   taken the job over, so the late finish comes back ``stale``. (If the lost
   finish had committed, the retry is refused too, and the line says so with
   ``retried``.) A claim that failed on a lost connection is not retried: if it
   committed, its lease expires unused.
4. A drill (``chaos.schedule.Drill``) SIGKILLs the process inside one fault hook
   of ``claim`` or ``finish``, as on SQLite (``chaos.child.DrillHook``).
5. With ``--batch``, the rounds are ``courier.batch_rounds.BatchRounds`` on the
   link (``LinkCalls``), their claims ahead on a second link as ``courier run``
   makes them, recorded as ``chaos.batches`` says; a finish that met a lost
   connection is tried again with the next group, or at the end of the round
   once the link is back.
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import psycopg

import pgworker
import worker
from chaos.batches import ClaimsApart
from chaos.child import CourierStart, DrillHook, EventLog, add_courier_options
from chaos.store import PG_STATUS_COUNTS, server_now_ms
from courier.batch_rounds import BatchRounds
from courier.stop_signal import pause

__all__ = ["LIBPQ_TIMEOUTS", "Link", "LinkCalls", "pg_round", "pgcourier_main"]

T = TypeVar("T")

# How long a dead link can hold a courier: connect 2 s, unacknowledged data 1 s
# (less than the shortest partition, so a cut-off finish fails and is retried),
# an idle connection 1 s + 2 probes of 1 s.
LIBPQ_TIMEOUTS = {
    "connect_timeout": "2",
    "keepalives": "1",
    "keepalives_idle": "1",
    "keepalives_interval": "1",
    "keepalives_count": "2",
    "tcp_user_timeout": "1000",
}
RECONNECT_BASE_MS = 50
RECONNECT_CAP_MS = 500
IDLE_BASE_MS = 20
IDLE_CAP_MS = 250
MAX_FINISH_TRIES = 50

Lost = psycopg.OperationalError  # a connection that broke or could not be made


class Link:
    """This courier's connection to the queue: made when needed, remade when lost.

    ``conninfo`` is extended with ``LIBPQ_TIMEOUTS``. ``deadline`` (monotonic)
    and ``stop`` bound every wait for a connection.
    """

    def __init__(
        self,
        conninfo: str,
        events: EventLog,
        stop: threading.Event,
        deadline: float,
        rng: Callable[[], float],
    ) -> None:
        self.conninfo = psycopg.conninfo.make_conninfo(conninfo, **LIBPQ_TIMEOUTS)
        self.events = events
        self.stop = stop
        self.deadline = deadline
        self.rng = rng
        self.con: Any = None
        self.lost_at: float | None = None
        self.reconnects = 0

    def get(self) -> Any:
        """The connection, (re)made if needed; ``None`` once ``stop`` or the deadline came."""
        streak = 0
        while self.con is None:
            if self.stop.is_set() or time.monotonic() >= self.deadline:
                return None
            try:
                self.con = pgworker.open_queue(self.conninfo)
            except Lost as error:
                streak += 1
                if streak == 1:
                    self.events.write("connect-failed", detail=str(error).strip()[:200])
                pause_ms = worker.retry_delay(
                    min(streak, 16), RECONNECT_BASE_MS, RECONNECT_CAP_MS, 0.5 + self.rng() / 2
                )
                pause(pause_ms / 1000, self.stop)
                continue
            if self.lost_at is not None:
                self.reconnects += 1
                down_ms = int((time.monotonic() - self.lost_at) * 1000)
                self.events.write("reconnect", after_ms=down_ms, tries=streak + 1)
                self.lost_at = None
        return self.con

    def lost(self, error: BaseException, during: str) -> None:
        """Drop the broken connection and note it (``disconnect``)."""
        self.events.write("disconnect", during=during, detail=str(error).strip()[:200])
        if self.lost_at is None:
            self.lost_at = time.monotonic()
        con, self.con = self.con, None
        if con is not None:
            try:
                con.close()
            except Exception as close_error:  # a broken socket may fail to close cleanly
                self.events.write("close-failed", detail=str(close_error)[:200])

    def close(self) -> None:
        if self.con is not None:
            self.con.close()
            self.con = None


def _finish(
    link: Link,
    ticket: dict[str, Any],
    outcome: str,
    delay_ms: int,
    hook: DrillHook | None,
) -> tuple[str, int, int]:
    """Finish ``ticket``, again after each lost connection; (status, now_ms, tries).

    Status ``unsent`` if the courier had to stop before any finish reached the server.
    """
    fault = hook.finish if hook is not None else None
    for tries in range(1, MAX_FINISH_TRIES + 1):
        con = link.get()
        if con is None:
            return "unsent", 0, tries - 1
        try:
            now_ms = server_now_ms(con)
            status = pgworker.finish(con, ticket, outcome, now_ms, delay_ms, fault)
        except Lost as error:
            link.lost(error, "finish")
            continue
        return str(status or "stale"), now_ms, tries
    return "unsent", 0, MAX_FINISH_TRIES


def pg_round(
    link: Link,
    owner: str,
    send: Callable[[dict[str, Any]], object],
    jitter: float,
    lease_ms: int,
    hook: DrillHook | None,
) -> dict[str, Any] | None:
    """One round: claim, send, finish (see the module docstring); ``None`` if nothing ran.

    Raises:
        psycopg.OperationalError: never (a lost connection is noted and handled).
    """
    con = link.get()
    if con is None:
        return None
    try:
        ticket = pgworker.claim(
            con, owner, server_now_ms(con), lease_ms, hook.claim if hook is not None else None
        )
    except Lost as error:
        link.lost(error, "claim")
        return None
    if ticket is None:
        return None
    link.events.write(
        "claimed", id=ticket["id"], token=ticket["token"], lease_until=ticket["lease_until"]
    )
    outcome, delay_ms = worker.classify_send(send, ticket, jitter)
    status, now_ms, tries = _finish(link, ticket, outcome, delay_ms, hook)
    result = {"id": ticket["id"], "token": ticket["token"], "status": status}
    link.events.write(
        "result",
        **result,
        outcome=outcome,
        now_ms=now_ms,
        lease_until=ticket["lease_until"],
        tries=tries,
        retried=tries > 1,
    )
    return result


def _drained(link: Link) -> bool:
    con = link.get()
    if con is None:
        return False
    try:
        counts = dict(con.execute(PG_STATUS_COUNTS).fetchall())
    except Lost as error:
        link.lost(error, "drained")
        return False
    return not counts.get("pending", 0) and not counts.get("leased", 0)


class LinkCalls:
    """The queue's calls over the courier's ``Link`` (``courier.batch_rounds.QueueCalls``),
    at the server's clock: a lost connection is noted (``Link.lost``) and raised, and
    the next call waits on the link for another (bounded by its deadline and stop)."""

    def __init__(self, link: Link) -> None:
        self.link = link

    def _connection(self, during: str) -> Any:
        con = self.link.get()
        if con is None:
            raise Lost(f"no connection for the {during}: the courier is stopping")
        return con

    def now_ms(self) -> int:
        con = self._connection("clock")
        try:
            return server_now_ms(con)
        except Lost as error:
            self.link.lost(error, "clock")
            raise

    def call(self, action: Callable[[Any, Any, int], T]) -> T:
        con = self._connection("call")
        try:
            return action(pgworker, con, server_now_ms(con))
        except Lost as error:
            self.link.lost(error, "batch")
            raise

    def drained(self) -> bool:
        return _drained(self.link)

    def close(self) -> None:
        self.link.close()


def _batched(args: argparse.Namespace, start: CourierStart, link: Link, apart: Link) -> None:
    """Run one batched soak courier (rule 5) until its time bound, drained or SIGTERM:
    its claims ahead on the link ``apart``, as ``courier run`` makes them."""
    send = start.announce(args)
    recorded = start.recorded(LinkCalls(link))
    claims = ClaimsApart(recorded, LinkCalls(apart))
    rounds = BatchRounds(recorded, args.batch, args.in_flight, args.timeout_ms, claims=claims)
    report = start.run(args, args.conninfo, send, rounds)
    start.events.write(
        "stop",
        reason=report.stop_reason,
        runs=report.runs,
        idle=report.idle,
        reconnects=link.reconnects + apart.reconnects,
    )


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m chaos pgcourier")
    parser.add_argument("conninfo")
    return add_courier_options(parser)


def pgcourier_main(argv: Sequence[str]) -> int:
    """Run one PostgreSQL soak courier until its time bound, drained or SIGTERM; exit 0."""
    args = _parser().parse_args(argv)
    start = CourierStart.from_options(args)
    stop, drill, events, rng = start.stop, start.drill, start.events, start.rng
    started = time.monotonic()
    link = Link(args.conninfo, events, stop, started + args.max_seconds, rng.random)
    rounds = idle = 0
    reason = "max-seconds"
    if args.batch > 1:
        apart = Link(args.conninfo, events, stop, started + args.max_seconds, rng.random)
        try:
            _batched(args, start, link, apart)
        finally:
            link.close()
            apart.close()
            events.close()
        return 0
    try:
        send = start.announce(args)
        streak = 0
        while time.monotonic() - started < args.max_seconds:
            if stop.is_set():
                reason = "stopped"
                break
            rounds += 1
            armed = drill is not None and rounds >= drill.round
            hook = DrillHook(drill, events) if armed and drill is not None else None
            if pg_round(link, args.owner, send, rng.random(), args.lease_ms, hook) is not None:
                streak = 0
                continue
            idle += 1
            if args.until_drained and _drained(link):
                reason = "drained"
                break
            streak += 1
            pause_ms = worker.retry_delay(
                min(streak, 16), IDLE_BASE_MS, IDLE_CAP_MS, 0.5 + rng.random() / 2
            )
            pause(pause_ms / 1000, stop)
        events.write("stop", reason=reason, runs=rounds, idle=idle, reconnects=link.reconnects)
    finally:
        link.close()
        events.close()
    return 0
