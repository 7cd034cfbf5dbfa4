"""Delivery end to end: the real courier runner against the real receiver, beside run_once, and
the batched courier beside today's. See docs/benchmarks.md, ``bench.delivery``."""

from __future__ import annotations

import asyncio
import contextlib
import multiprocessing
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import worker
from bench.measure import fleet as start_fleet
from bench.measure import fleet_totals
from bench.rows import fill
from courier.attempts import sidecar_path
from courier.batch_rounds import waits
from courier.clock import clock_ms
from courier.delivery import Cause, HttpSend, HttpSends
from courier.inbox import Inbox
from courier.receiver import Receiver
from courier.run_parts import run_parts
from courier.runner import run_courier
from courier.stop_rules import StopRules
from courier.wire import READ_BYTES
from tests.stores import Store
from tests.stores.sqlite import SQLiteStore

__all__ = ["BATCH", "BUILDS_ON", "GOALS", "IN_FLIGHT", "LAYERS", "LEASE_MS", "SIDES"]
__all__ += ["breakdown", "calls_alone", "courier", "courier_run", "fleet", "http_alone", "serve"]
__all__ += ["serving", "side_by_side"]

LEASE_MS = 1000  # courier run's --lease-ms default
TIMEOUT_MS = LEASE_MS * 3 // 4  # and its --timeout-ms default
READY_TIMEOUT_S = 60.0
RESULT_GRACE_S = 30.0
JOBS_PER_SECOND_CEILING = 3_000  # prefill: more than can be delivered in the window
LAYERS = ("run_once", "run_file", "HTTP", "receiver", "runner")
BUILDS_ON = {"run_file": "run_once", "HTTP": "run_once", "receiver": "HTTP", "runner": "receiver"}
# The batched courier: `courier run --batch 64 --in-flight 16 --lease-ms 8000`, whose
# default timeout (3/4 of the lease over the 8 deliveries in a row of two batches in
# the pipeline, courier.batch_rounds.waits) is today's 750 ms a delivery.
BATCH, IN_FLIGHT, BATCH_LEASE_MS = 64, 16, 8000
BATCH_TIMEOUT_MS = BATCH_LEASE_MS * 3 // (4 * waits(BATCH, IN_FLIGHT))
# What side_by_side measures in each round, in turn: (courier's batch, its in flight, server)
SIDES = {
    "single": (1, 1, "receiver"),
    "batched": (BATCH, IN_FLIGHT, "receiver"),
    "no_commit": (BATCH, IN_FLIGHT, "HTTP"),
}
# Beside them, with no queue at all: the courier's delivery path alone (``HttpSends`` of
# IN_FLIGHT kept-alive connections, its event loop kept full without a pause) to a server
# that answers 200 at once (``http``), and to the real receiver (``inbox``): the ceiling of
# HTTP on this machine, and of the receiver's group commit, that no courier can pass.
ALONE = {"http": "HTTP", "inbox": "receiver"}
# The sides with a queue (SIDES and ``calls``) each start on a fresh queue of this many
# due jobs a second of the window: more than the batch calls take alone, so that every
# side meets a queue of one size, the calls alone included (``calls_alone``).
BATCH_JOBS_PER_SECOND_CEILING = 30_000
# Issue 33's goals: deliveries a second of the batched courier to the real receiver, by
# backend; its share of the batch calls' own rate against a receiver that does not commit.
GOALS = {"sqlite": 2_000.0, "postgres": 5_000.0, "overhead": 0.5}


@contextlib.contextmanager
def _queue_file(files: SQLiteStore, label: str, seconds: float) -> Iterator[Path]:
    """A fresh queue file with more due jobs than ``seconds`` can deliver; removed afterwards."""
    where = files.fresh(label)
    con = worker.open_queue(where)
    try:
        fill(con, int(JOBS_PER_SECOND_CEILING * seconds) + 1_000, clock_ms())
    finally:
        con.close()
    try:
        yield Path(where)
    finally:
        files.remove(where)


def _instant(_: dict[str, Any]) -> bool:
    return True


def _quiet(_: str) -> None:
    """The runner's log, discarded: printing each delivery is not what is measured."""


_ANSWER = (
    b'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 12\r\n\r\n{"ok": true}'
)


class _AnswerAtOnce(asyncio.BufferedProtocol):
    """One connection: each request read whole (its head, then ``Content-Length``
    bytes of body) is answered 200 with a small JSON body at once, and the
    connection kept, as the receiver keeps it; no inbox, no commit. Small on
    purpose: a server that costs a delivery little CPU, so that the courier's own
    cost shows. A buffered protocol, as the receiver's connections are: the loop
    reads into ``READ_BYTES`` of this connection's own, where a plain ``Protocol``
    gets a new bytes object of asyncio's 256 KiB read size for every read, a map
    and an unmap of memory each, whose page faults and TLB flushes also cost the
    other core, the courier's (docs/dev/2026-12-06-no-commit-courier-on-postgres.md)."""

    def __init__(self) -> None:
        self.buffer = bytearray()
        self.incoming = memoryview(bytearray(READ_BYTES))
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport

    def get_buffer(self, sizehint: int) -> memoryview:
        return self.incoming

    def buffer_updated(self, nbytes: int) -> None:
        self.data_received(self.incoming[:nbytes])

    def data_received(self, data: bytes | memoryview) -> None:
        assert self.transport is not None
        self.buffer += data
        answers = 0
        while True:  # each pass takes one whole request off the buffer, or stops
            end = self.buffer.find(b"\r\n\r\n")
            if end < 0:
                break
            head = bytes(self.buffer[:end]).lower()
            at = head.find(b"\r\ncontent-length:")
            length = 0
            if at >= 0:
                value = head[at + 17 :].split(b"\r\n", 1)[0].strip()
                length = int(value) if value.isdigit() else 0
            whole = end + 4 + length
            if len(self.buffer) < whole:
                break
            del self.buffer[:whole]
            answers += 1
        if answers:
            self.transport.write(_ANSWER * answers)


@contextlib.contextmanager
def _answer_200() -> Iterator[str]:
    """A server on 127.0.0.1 (an OS-assigned port) answering 200 at once
    (``_AnswerAtOnce``, on an asyncio loop of its own thread); its URL."""
    loop = asyncio.new_event_loop()
    server = loop.run_until_complete(loop.create_server(_AnswerAtOnce, "127.0.0.1", 0, backlog=128))
    port = server.sockets[0].getsockname()[1]
    thread = threading.Thread(target=loop.run_forever)
    thread.start()
    try:
        yield f"http://127.0.0.1:{port}/deliveries"
    finally:
        loop.call_soon_threadsafe(server.close)
        loop.call_soon_threadsafe(loop.stop)
        thread.join()
        loop.close()


def serve(kind: str, inbox: str, ready: Any, stop: Any) -> None:
    """A server process: ``kind`` ``"HTTP"`` answers 200 at once, ``"receiver"`` is the
    real receiver on ``inbox``; its URL goes to ``ready``, and it serves until ``stop``;
    then the receiver's inbox commits and the writes they held go to ``ready`` too."""
    if kind == "HTTP":
        with _answer_200() as url:
            ready.put(url)
            stop.wait(READY_TIMEOUT_S * 10)
        return
    with Receiver(Path(inbox)) as receiver:
        ready.put(receiver.url)
        stop.wait(READY_TIMEOUT_S * 10)
    ready.put({"commits": receiver.inbox.commits, "writes": receiver.inbox.writes})


@dataclass
class Served:
    """A server process's URL and, once it stopped, what its inbox says (the receiver's)."""

    url: str
    inbox: dict[str, int] = field(default_factory=dict)


@contextlib.contextmanager
def serving(kind: str, inbox: Path) -> Iterator[Served]:
    """``serve`` in a spawned process (as ``courier serve`` runs apart from couriers)."""
    context = multiprocessing.get_context("spawn")
    ready, stop = context.Queue(), context.Event()
    child = context.Process(target=serve, args=(kind, str(inbox), ready, stop), daemon=True)
    child.start()
    try:
        served = Served(ready.get(timeout=READY_TIMEOUT_S))
        yield served
        stop.set()
        if kind != "HTTP":
            served.inbox = ready.get(timeout=RESULT_GRACE_S)
    finally:
        stop.set()
        child.join(timeout=30)
        if child.is_alive():
            child.kill()
            child.join(timeout=10)


def _rounds(step: Callable[[], dict[str, Any] | None], seconds: float) -> dict[str, Any]:
    """Call ``step`` (one round, a ``run_once`` result) for ``seconds``; count them."""
    done = stale = 0
    start = time.perf_counter()
    while time.perf_counter() < start + seconds:
        result = step()
        if result is None:
            raise RuntimeError("nothing was claimable: the queue file ran dry")
        done += result["status"] == "done"
        stale += result["status"] != "done"
    spent = time.perf_counter() - start
    return {"deliveries": done, "stale": stale, "seconds": round(spent, 3), "per_s": done / spent}


def _run_courier(path: Path, owner: str, send: HttpSend, seconds: float) -> dict[str, Any]:
    """``run_courier`` with ``courier run``'s defaults for ``seconds``: what it delivered."""
    rules = StopRules(max_runs=10**7, max_seconds=seconds)
    start = time.monotonic()
    report = run_courier(path, owner, send, lease_ms=LEASE_MS, stop_rules=rules, log=_quiet)
    spent = time.monotonic() - start
    done = sum(1 for result in report.results if result["status"] == "done")
    return {
        "deliveries": done,
        "stale": len(report.results) - done,
        "lock_timeouts": report.busy,
        "idle": report.idle,
        "seconds": round(spent, 3),
        "per_s": done / spent,
        "stop_reason": report.stop_reason,
    }


def _layer(name: str, path: Path, folder: Path, seconds: float) -> dict[str, Any]:
    owner = "bench"
    if name == "run_file":
        return _rounds(
            lambda: worker.run_file(path, owner, clock_ms, _instant, 0.5, LEASE_MS), seconds
        )
    with contextlib.ExitStack() as stack:
        send: Callable[[dict[str, Any]], bool] = _instant
        if name != "run_once":
            kind = "HTTP" if name == "HTTP" else "receiver"
            url = stack.enter_context(serving(kind, folder / f"inbox-{name}.sqlite")).url
            send = stack.enter_context(HttpSend(url, owner, TIMEOUT_MS))
        if name == "runner":
            assert isinstance(send, HttpSend)
            return _run_courier(path, owner, send, seconds)
        con = stack.enter_context(contextlib.closing(worker.open_queue(path)))
        return _rounds(lambda: worker.run_once(con, owner, clock_ms, send, 0.5, LEASE_MS), seconds)


def breakdown(folder: Path, seconds: float, rounds: int = 3) -> dict[str, dict[str, Any]]:
    """Each layer of one courier's round (``LAYERS``), ``seconds`` each in each of
    ``rounds`` rounds (every layer once a round, in turn, so that a burst of load from
    elsewhere hits them alike): the median round of each, and every round's rate."""
    files = SQLiteStore(str(folder))
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in LAYERS}
    for number in range(rounds):
        for name in LAYERS:
            with _queue_file(files, f"layer-{name}-{number}", seconds) as path:
                runs[name].append(_layer(name, path, folder, seconds))
    out: dict[str, dict[str, Any]] = {}
    for name, figures in runs.items():
        median = sorted(figures, key=lambda figure: float(figure["per_s"]))[(rounds - 1) // 2]
        every = [round(float(figure["per_s"]), 1) for figure in figures]
        out[name] = {**median, "per_s": round(median["per_s"], 1), "rounds_per_s": every}
    return out


# --- N courier processes -------------------------------------------------------------


def courier(path: str, url: str, owner: str, seconds: float, go: Any, results: Any) -> None:
    """One courier process: ``run_courier`` for ``seconds`` after ``go`` is set."""
    send = HttpSend(url, owner, TIMEOUT_MS)
    results.put(("ready", owner))
    if not go.wait(READY_TIMEOUT_S):
        results.put(("result", {"owner": owner, "error": "no start"}))
        return
    with send:
        results.put(("result", {"owner": owner, **_run_courier(Path(path), owner, send, seconds)}))


def fleet(folder: Path, processes: int, seconds: float) -> dict[str, Any]:
    """``processes`` couriers against one receiver for ``seconds``: the totals and shares,
    and the effects the receiver's inbox holds."""
    inbox = folder / f"inbox-fleet-{processes}.sqlite"
    queue_file = _queue_file(SQLiteStore(str(folder)), f"fleet-{processes}", seconds)
    with queue_file as path, serving("receiver", inbox) as served:
        _, reports, _ = start_fleet(
            courier,
            lambda owner: (str(path), served.url, owner, seconds),
            processes,
            seconds + RESULT_GRACE_S,
        )
    totals = fleet_totals(processes, seconds, reports, "deliveries", "lock_timeouts", "stale")
    return {**totals, "effects": Inbox(inbox, create=False).summary().get("effects")}


# --- One batched courier beside today's -----------------------------------------------


def courier_run(
    target: str, url: str, seconds: float, batch: int = 1, in_flight: int = 1
) -> dict[str, Any]:
    """What ``courier run QUEUE --batch B --in-flight M`` does for ``seconds``, in this
    process, its log discarded: ``HttpSend`` (``HttpSends`` of ``in_flight``), and the
    attempt log, rounds and send ``courier run`` makes of it (``courier.run_parts``).
    Today's courier (``batch``
    1) keeps ``courier run``'s defaults (``LEASE_MS``); a batched one has
    ``BATCH_LEASE_MS``, whose default timeout is the same 750 ms a delivery."""
    lease_ms, timeout_ms = (
        (LEASE_MS, TIMEOUT_MS) if batch == 1 else (BATCH_LEASE_MS, BATCH_TIMEOUT_MS)
    )
    owner = "bench"
    send: HttpSend | HttpSends = (
        HttpSend(url, owner, timeout_ms)
        if in_flight == 1
        else HttpSends(url, owner, timeout_ms, in_flight)
    )
    parts = run_parts(target, send, owner, batch, in_flight, timeout_ms, _quiet)  # as courier run
    rules = StopRules(max_runs=10**7, max_seconds=seconds)
    start = time.monotonic()
    try:
        report = run_courier(
            target,
            owner,
            parts.send,
            lease_ms=lease_ms,
            stop_rules=rules,
            log=_quiet,
            rounds=parts.rounds,
            attempts=parts.attempts,
        )
    finally:
        spent = time.monotonic() - start
        parts.close()
        send.close()
    done = sum(1 for result in report.results if result["status"] == "done")
    return {
        "deliveries": done,
        "not_done": len(report.results) - done,
        "rounds": report.runs,
        "busy": report.busy,
        "idle": report.idle,
        "seconds": round(spent, 3),
        "count": done,
        "per_s": round(done / spent, 1),
        "stop_reason": report.stop_reason,
    }


class _Again:
    """One of the ``in_flight`` deliveries of ``http_alone``: each that ends counts its
    outcome and hands over the next one, a fresh id, until ``until`` has passed."""

    def __init__(self, alone: _Alone) -> None:
        self.alone = alone

    def begin(self) -> dict[str, Any] | None:
        alone = self.alone
        with alone.lock:
            alone.made += 1
            return {"id": f"h{alone.made}", "qty": 1}

    def end(self, outcome: bool | BaseException, cause: Cause) -> None:
        alone = self.alone
        with alone.lock:
            alone.counts[outcome is not True] += 1
        if time.perf_counter() < alone.until:
            alone.send.start(_Again(alone))
            return
        with alone.lock:
            alone.running -= 1
            if not alone.running:
                alone.ended.set()


@dataclass
class _Alone:
    """What ``http_alone``'s deliveries share."""

    send: HttpSends
    until: float
    running: int
    made: int = 0
    counts: list[int] = field(default_factory=lambda: [0, 0])  # answered 2xx, not
    lock: threading.Lock = field(default_factory=threading.Lock)
    ended: threading.Event = field(default_factory=threading.Event)


def http_alone(url: str, seconds: float, in_flight: int = IN_FLIGHT) -> dict[str, Any]:
    """The courier's delivery path with no queue: one ``HttpSends`` of ``in_flight``
    kept-alive connections (``courier run``'s), each delivery handed to its event loop
    (``start``) and a fresh one handed over as each ends, for ``seconds``: how many
    were answered 2xx a second, and how many were not."""
    send = HttpSends(url, "bench", BATCH_TIMEOUT_MS, in_flight)
    start = time.perf_counter()
    alone = _Alone(send, start + seconds, in_flight)
    try:
        for _ in range(in_flight):
            send.start(_Again(alone))
        ended = alone.ended.wait(seconds + RESULT_GRACE_S)
        spent = time.perf_counter() - start
    finally:
        send.close()
    if not ended:
        raise RuntimeError(f"deliveries to {url} still in flight {RESULT_GRACE_S} s after the end")
    done, not_done = alone.counts
    return {
        "deliveries": done,
        "not_done": not_done,
        "seconds": round(spent, 3),
        "count": done,
        "per_s": round(done / spent, 1),
    }


def calls_alone(store: Store, where: str, seconds: float) -> dict[str, Any]:
    """``claim_many`` + ``finish_many`` of ``BATCH``, one after the other on one
    connection for ``seconds``, on the queue of ``store`` at ``where`` (filled as the
    couriers' queues are): the batch calls' own rate, in the couriers' conditions and
    over as long a window."""
    module = store.module()
    con = store.connect(where)
    done = cycles = 0
    start = time.perf_counter()
    try:
        while time.perf_counter() < start + seconds:
            now = clock_ms()
            tickets = module.claim_many(con, "bench", now, BATCH, BATCH_LEASE_MS)
            if not tickets:
                raise RuntimeError("nothing was claimable: the queue ran dry")
            items = [{"ticket": ticket, "outcome": "ok", "delay_ms": 0} for ticket in tickets]
            done += module.finish_many(con, items, now).count("done")
            cycles += 1
        spent = time.perf_counter() - start
    finally:
        con.close()
    return {
        "count": done,
        "cycles": cycles,
        "seconds": round(spent, 3),
        "per_s": round(done / spent, 1),
    }


def _side(name: str, store: Store, folder: Path, seconds: float, label: str) -> dict[str, Any]:
    """One side of a round (``SIDES``, ``ALONE``, or ``calls``) on a fresh queue of ``store``
    (no queue for ``ALONE``)."""
    if name in ALONE:
        with serving(ALONE[name], folder / f"inbox-{label}.sqlite") as served:
            figure = http_alone(served.url, seconds)
        figure["inbox"] = served.inbox
        return figure
    where = store.fresh(label)
    try:
        con = store.connect(where)
        try:
            fill(con, int(BATCH_JOBS_PER_SECOND_CEILING * seconds) + 1_000, clock_ms())
            store.settle(con)
        finally:
            con.close()
        if name == "calls":
            return calls_alone(store, where, seconds)
        batch, in_flight, server = SIDES[name]
        with serving(server, folder / f"inbox-{label}.sqlite") as served:
            figure = courier_run(where, served.url, seconds, batch, in_flight)
        figure["inbox"] = served.inbox
        return figure
    finally:
        store.remove(where)
        if store.name == "sqlite":
            sidecar_path(where).unlink(missing_ok=True)


def side_by_side(store: Store, folder: Path, seconds: float, rounds: int) -> dict[str, Any]:
    """Today's courier, the batched courier (``BATCH``, ``IN_FLIGHT``), the batched
    courier against a server that answers without committing, the batch calls
    alone (``claim_many`` + ``finish_many`` of ``BATCH``), each on a fresh queue of
    ``store``, and the delivery path alone to both servers (``ALONE``, no queue), in
    turn in each of ``rounds`` rounds: each figure's median round, every round's rate,
    and the median of each round's ratios."""
    names = (*SIDES, "calls", *ALONE)
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for number in range(rounds):
        for name in names:
            runs[name].append(_side(name, store, folder, seconds, f"{name}-{number}"))
    out: dict[str, Any] = {"batch": BATCH, "in_flight": IN_FLIGHT, "seconds": seconds}
    out |= {"lease_ms": BATCH_LEASE_MS, "timeout_ms": BATCH_TIMEOUT_MS, "rounds": rounds}
    for name, figures in runs.items():
        median = sorted(figures, key=lambda figure: float(figure["per_s"]))[(rounds - 1) // 2]
        out[name] = {**median, "rounds_per_s": [figure["per_s"] for figure in figures]}

    def ratio(top: str, bottom: str) -> float:
        each = sorted(
            float(a["per_s"]) / float(b["per_s"]) if b["per_s"] else 0.0
            for a, b in zip(runs[top], runs[bottom], strict=True)
        )
        return round(each[(rounds - 1) // 2], 2)

    out["batched_vs_single"] = ratio("batched", "single")
    out["no_commit_vs_calls"] = ratio("no_commit", "calls")
    out["no_commit_vs_http"] = ratio("no_commit", "http")
    out["batched_vs_inbox"] = ratio("batched", "inbox")
    return out
