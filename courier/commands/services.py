"""The long-running commands: ``serve`` (the HTTP receiver), ``run`` (a courier) and
``web`` (the operators' page).

Each runs until its limit, Ctrl-C or SIGTERM and logs one flushed line per event,
timestamped, an unchanged failure folded into a count (``courier.log_lines``).
``run`` refuses a send timeout that could outlast the lease, counting the
deliveries that may run one after another on one connection between a job's claim
and the end of its own delivery, a batch claimed ahead's wait included
(``send_timeout_ms``), and waits for a busy or unreachable queue at its start as it
does later.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from courier import backend, bulk
from courier.batch_rounds import MAX_BATCH, lease_covers, waits
from courier.commands.connection import transient_trouble, wait_for_queue
from courier.commands.options import (
    MAX_LEASE_MS,
    checked_ms,
    int_at_least,
    integer,
    non_negative_float,
    option,
    positive_float,
    queue_arg,
)
from courier.commands.output import EXIT_INTERRUPTED, EXIT_OK, inbox_totals
from courier.crash_drill import StallAfterAcks
from courier.delivery import HttpSend, HttpSends
from courier.interference import ReplyDelay
from courier.log_lines import LogLines
from courier.receiver import Receiver
from courier.run_parts import run_parts
from courier.runner import run_courier
from courier.stop_rules import StopRules
from courier.stop_signal import stop_on_signals

__all__ = [
    "batch_settings",
    "cmd_run",
    "cmd_serve",
    "cmd_web",
    "default_timeout_ms",
    "run_options",
    "run_stop_rules",
    "send_timeout_ms",
    "serve_options",
    "web_options",
]


def serve_options(serve: argparse.ArgumentParser) -> None:
    """``serve INBOX``, where to listen, and the chaos knob."""
    serve.add_argument("inbox", type=Path, help="path of the receiver's inbox file (SQLite)")
    option(serve, "--host", "ADDR", str, "address to bind (default %(default)s)", "127.0.0.1")
    option(serve, "--port", "PORT", integer, "port (default 0: any free port)", 0)
    option(serve, "--port-file", "PATH", Path, "also write the port here, for scripts")
    delay = "chaos knob: wait this long after committing, before answering (0..10000)"
    option(serve, "--reply-delay-ms", "MS", integer, delay, 0)
    option(serve, "--max-seconds", "S", positive_float, "stop after this long")


def run_options(run: argparse.ArgumentParser) -> None:
    """``run QUEUE --url URL --owner NAME``, the lease, the stop rules and the crash drill."""
    queue_arg(run)
    option(run, "--url", "URL", str, "e.g. http://127.0.0.1:PORT/deliveries", required=True)
    option(run, "--owner", "NAME", str, "this courier's name (an identifier)", required=True)
    lease = "lease per claim; after it another courier may take the job (default %(default)s)"
    option(run, "--lease-ms", "MS", integer, lease, 1000)
    timeout = (
        "HTTP timeout, below the lease (default: 3/4 of the lease, shared by the deliveries "
        "of two batches in a row on one connection, with --batch)"
    )
    option(run, "--timeout-ms", "MS", integer, timeout)
    batch = f"jobs a round claims at once with claim_many, 1..{MAX_BATCH} (default %(default)s)"
    option(run, "--batch", "N", integer, batch, 1)
    flight = "deliveries of a batch in flight at once, 1..N (default %(default)s)"
    option(run, "--in-flight", "M", integer, flight, 1)
    stops = run.add_argument_group("stop rules", "the courier stops at the first rule that holds")
    rounds = "rounds (claim, deliver, finish; or one empty look) (default 10000)"
    option(stops, "--max-runs", "N", int_at_least(1), rounds)
    seconds = "seconds of running (default 60)"
    option(stops, "--max-seconds", "S", positive_float, seconds)
    idle = "nothing was due for this long (default: no idle rule)"
    option(stops, "--max-idle-ms", "MS", int_at_least(0), idle)
    stops.add_argument(
        "--until-drained", action="store_true", help="no job is pending or leased any more"
    )
    stops.add_argument(
        "--forever",
        action="store_true",
        help="no round or time rule: run until Ctrl-C or SIGTERM (for a service manager)",
    )
    drill = run.add_argument_group(
        "crash drill", "stall after an acknowledged delivery, so a supervisor can kill it"
    )
    option(drill, "--stall-after-acks", "N", int_at_least(1), "after the N-th 2xx answer")
    report = "JSON file written when stalling, with the captured ticket (required)"
    option(drill, "--stall-report", "PATH", Path, report)
    stall = "then carry on as a late courier (default %(default)s)"
    option(drill, "--stall-seconds", "S", positive_float, stall, 30.0)


def web_options(web: argparse.ArgumentParser) -> None:
    """``web QUEUE``, where to listen, and what the page may do."""
    queue_arg(web)
    option(web, "--host", "ADDR", str, "address to bind (default %(default)s)", "127.0.0.1")
    option(web, "--port", "PORT", integer, "port (default 0: any free port)", 0)
    web.add_argument(
        "--allow-redrive", action="store_true", help="let the page redrive dead jobs (with a note)"
    )
    web.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow --host to be an address other than loopback (anyone who can reach it "
        "sees the queue, and with --allow-redrive may redrive)",
    )
    option(web, "--port-file", "PATH", Path, "also write the port here, for scripts")
    refresh = "the page refreshes itself this often while shown, 0: never (default %(default)s)"
    option(web, "--refresh-s", "S", non_negative_float, refresh, 5.0)
    option(web, "--max-seconds", "S", positive_float, "stop after this long")


def cmd_serve(args: argparse.Namespace) -> int:
    """Run the receiver until Ctrl-C, SIGTERM or ``--max-seconds``; print its totals."""
    log = LogLines()
    try:
        receiver = Receiver(
            args.inbox,
            host=args.host,
            port=args.port,
            log=log,
            interference=ReplyDelay(args.reply_delay_ms),
        )
    except OSError as error:
        if isinstance(error, FileNotFoundError | IsADirectoryError | NotADirectoryError):
            raise
        raise OSError(f"cannot listen on {args.host} port {args.port}: {error.strerror}") from None
    stop = stop_on_signals()
    log(f"receiver listening on {receiver.url} (port {receiver.port}), inbox {args.inbox}")
    if args.port_file is not None:
        args.port_file.write_text(f"{receiver.port}\n", encoding="utf-8")
    receiver.serve_until(stop, args.max_seconds)
    log(f"receiver stopped: {inbox_totals(receiver.inbox.summary())}")
    log.close()
    return EXIT_OK


def default_timeout_ms(lease_ms: int, in_a_row: int = 1) -> int:
    """An HTTP timeout that leaves a quarter of the lease to record the outcome, once a
    connection has carried ``in_a_row`` deliveries one after another
    (``courier.batch_rounds.waits``)."""
    return max(1, lease_ms * 3 // (4 * in_a_row))


def batch_settings(args: argparse.Namespace) -> tuple[int, int]:
    """``(--batch, --in-flight)``, checked.

    Raises:
        ValueError: ``--batch`` not in 1..MAX_BATCH, ``--in-flight`` not in 1..batch,
            or ``--stall-after-acks`` with more than one delivery in flight.
    """
    batch = bulk.check_int("--batch", args.batch, 1, MAX_BATCH)
    in_flight = bulk.check_int("--in-flight", args.in_flight, 1, MAX_BATCH)
    if in_flight > batch:
        raise ValueError(
            f"--in-flight {in_flight} is more than --batch {batch}: a round has at most "
            f"--batch deliveries to make (raise --batch to {in_flight}, or lower --in-flight)"
        )
    if in_flight > 1 and getattr(args, "stall_after_acks", None) is not None:
        raise ValueError("--stall-after-acks stalls one delivery at a time: use --in-flight 1")
    return batch, in_flight


def run_stop_rules(args: argparse.Namespace) -> StopRules:
    """The courier's stop rules from ``run``'s "stop rules" options (``--forever``: no round
    or time limit).

    Raises:
        ValueError: ``--forever`` with ``--max-runs`` or ``--max-seconds``.
    """
    if args.forever and (args.max_runs is not None or args.max_seconds is not None):
        raise ValueError("--forever has no round or time limit: drop --max-runs/--max-seconds")
    if args.forever:
        return StopRules(
            max_runs=None,
            max_seconds=None,
            max_idle_ms=args.max_idle_ms,
            until_drained=args.until_drained,
        )
    return StopRules(
        max_runs=10_000 if args.max_runs is None else args.max_runs,
        max_seconds=60.0 if args.max_seconds is None else args.max_seconds,
        max_idle_ms=args.max_idle_ms,
        until_drained=args.until_drained,
    )


def send_timeout_ms(args: argparse.Namespace) -> int:
    """The send timeout, refused unless a batch's last delivery ends while its lease
    still holds: between a job's claim and the end of its own delivery, a delivery
    thread may make ``waits(batch, in_flight)`` deliveries one after another (a batch
    claimed ahead waits for the one before it), each up to the timeout, all under the
    lease taken at the claim."""
    lease_ms = args.lease_ms
    batch, in_flight = batch_settings(args)
    rows = waits(batch, in_flight)
    if args.timeout_ms is None:
        if not lease_covers(lease_ms, default_timeout_ms(lease_ms, rows), batch, in_flight):
            raise ValueError(
                f"--lease-ms {lease_ms} cannot cover {rows} deliveries in a row "
                f"(--batch {batch}, --in-flight {in_flight}, a batch claimed ahead waiting "
                "for the one before it): raise --lease-ms or --in-flight"
            )
        return default_timeout_ms(lease_ms, rows)
    timeout_ms = bulk.check_int("--timeout-ms", args.timeout_ms, 1, MAX_LEASE_MS, "ms")
    if rows == 1 and timeout_ms >= lease_ms:
        raise ValueError(
            f"unsafe: --timeout-ms {timeout_ms} is not below --lease-ms {lease_ms}. A delivery "
            "could outlast its lease: another courier would claim the job and send it again "
            "while this one still waits, and this one's outcome could never be recorded. "
            f"Raise --lease-ms above {timeout_ms}, or lower --timeout-ms "
            f"(default: 3/4 of the lease, {default_timeout_ms(lease_ms)})"
        )
    if not lease_covers(lease_ms, timeout_ms, batch, in_flight):
        raise ValueError(
            f"unsafe: --batch {batch} with --in-flight {in_flight} claims the next batch while "
            "one is delivered, and the next one's deliveries wait behind this one's: up to "
            f"{rows} deliveries in a row on one connection after a claim, {rows} x "
            f"--timeout-ms {timeout_ms} = {rows * timeout_ms} ms, which is not below --lease-ms "
            f"{lease_ms}. A batch's last deliveries could outlast their leases: another courier "
            "would claim those jobs and send them again while this one still waits, and their "
            f"outcomes could never be recorded. Raise --lease-ms above {rows * timeout_ms}, "
            f"raise --in-flight, or lower --timeout-ms (default: 3/4 of the lease over {rows}, "
            f"{default_timeout_ms(lease_ms, rows)})"
        )
    return timeout_ms


def cmd_run(args: argparse.Namespace) -> int:
    """Run one courier until a limit; exit 130 after Ctrl-C, else 0."""
    lease_ms = checked_ms("--lease-ms", args.lease_ms, MAX_LEASE_MS)
    batch, in_flight = batch_settings(args)
    timeout_ms = send_timeout_ms(args)
    owner = bulk.check_id("--owner", args.owner)
    rules = run_stop_rules(args)
    # Never a queue made from a typo; a busy or unreachable one is waited for, as later.
    ready = transient_trouble(args.queue) is None
    http: HttpSend | HttpSends = (
        HttpSend(args.url, owner, timeout_ms)
        if in_flight == 1
        else HttpSends(args.url, owner, timeout_ms, in_flight)
    )
    send: Callable[[dict[str, Any]], bool] = http
    if args.stall_after_acks is not None:
        if args.stall_report is None:
            raise ValueError("--stall-after-acks needs --stall-report PATH")
        send = StallAfterAcks(
            send, args.queue, owner, args.stall_after_acks, args.stall_report, args.stall_seconds
        )
    log = LogLines()
    stop = stop_on_signals(log=log, impatient=True)
    shown = backend.describe(args.queue)
    clock = "the server's clock" if backend.is_conninfo(args.queue) else "this host's clock"
    batched = f", batches of {batch} with {in_flight} in flight" if batch > 1 else ""
    log(
        f"{owner}: started, queue {shown} ({clock}), receiver {args.url}, lease {lease_ms} ms"
        f"{batched}"
    )
    started = time.monotonic()
    if not ready and not wait_for_queue(args.queue, stop, log, owner, rules.max_seconds):
        reason = "stopped" if stop.is_set() else "max-seconds"
        log(f"{owner}: stopped ({reason}) before the queue could be read")
        log.close()
        return EXIT_INTERRUPTED if stop.signum == signal.SIGINT else EXIT_OK
    if rules.max_seconds is not None:
        left = max(rules.max_seconds - (time.monotonic() - started), 0.001)
        rules = dataclasses.replace(rules, max_seconds=left)
    parts = run_parts(args.queue, send, owner, batch, in_flight, timeout_ms, log)
    try:
        report = run_courier(
            args.queue,
            owner,
            parts.send,
            lease_ms=lease_ms,
            stop_rules=rules,
            stop=stop,
            log=log,
            attempts=parts.attempts,
            rounds=parts.rounds,
        )
    finally:
        parts.close()
        http.close()
    statuses: dict[str, int] = {}
    for result in report.results:
        statuses[result["status"]] = statuses.get(result["status"], 0) + 1
    log(
        f"{owner}: stopped ({report.stop_reason}) after {report.runs} rounds: "
        f"{json.dumps(statuses, sort_keys=True)}, idle {report.idle}, busy {report.busy}"
    )
    log.close()
    return EXIT_INTERRUPTED if stop.signum == signal.SIGINT else EXIT_OK


def cmd_web(args: argparse.Namespace) -> int:
    """Serve the operators' page (``courier.web``)."""
    from courier.web import serve_web

    return serve_web(args)
