"""The operator CLI: ``courier COMMAND ...`` (or ``python -m courier COMMAND ...``).

Every command that touches a queue takes the queue first: a SQLite file's path or
a PostgreSQL conninfo (``postgresql://...``, ``postgres://...`` or ``key=value``
words; ``courier.backend`` says how they are told apart). On PostgreSQL every
time a command passes to the queue is the database server's clock.

Bad input ends in one ``courier: error: ...`` line on stderr and a non-zero exit,
never a traceback: the CLI checks its arguments in its own words before the
library sees them, and ``ValueError``, ``worker.Conflict``, ``OSError`` (a
missing file included), SQLite errors and an unreachable server are caught here,
at the boundary, and nowhere deeper. Every command that reads takes ``--json``;
human output shows every time as milliseconds with the ISO time beside it.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import signal
import sqlite3
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeAlias

import worker
from courier import backend, bulk, demo, queueview
from courier.attempts import AttemptLog, attempts_of, last_attempts
from courier.audit import Audit, audit_files
from courier.backend import Target
from courier.receiver import Inbox, Receiver
from courier.runner import (
    HttpSend,
    Limits,
    StallAfterAcks,
    clock_ms,
    run_courier,
    stop_on_signals,
)

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_PIPE", "EXIT_USAGE", "main", "now_ms", "when"]

EXIT_OK = 0
EXIT_ERROR = 1  # the command ran and failed: a conflict, a busy or broken file
EXIT_USAGE = 2  # the input was wrong: a bad argument, a missing file
EXIT_INTERRUPTED = 130
EXIT_PIPE = 141  # the reader of our output went away (e.g. `| head`), as after SIGPIPE

DEFAULT_TTL_MS = 60_000
DEFAULT_MAX_ATTEMPTS = 3
MAX_LEASE_MS = 60_000
# A time option below this many ms is almost surely seconds typed where ms belong.
MIN_MS = 100
DEFAULT_CHUNK = 500

DESCRIPTION = """\
Operate a lease-queue: a durable job queue in one SQLite file or one PostgreSQL
database. Couriers claim jobs under a time-limited lease carrying a fencing token,
deliver them to an HTTP receiver, and record the outcome; failed jobs retry within
a budget and end up "dead" (with a reason) when they cannot succeed, until an
operator redrives them.

QUEUE is a file's path, or a PostgreSQL URL (postgresql://user@host/db) or libpq
conninfo (host=... dbname=...); on PostgreSQL the server's clock is the time base.

A first session:
  courier init q.sqlite
  courier enqueue q.sqlite order-1 3
  courier serve inbox.sqlite            # in another terminal; prints its URL
  courier run q.sqlite --owner c1 --url URL --until-drained
  courier status q.sqlite
"""

EPILOG = """\
exit status: 0 success, 1 the command failed (e.g. conflict, busy database,
unreachable server), 2 bad input (bad argument, missing file), 130 interrupted.
Run 'courier COMMAND --help' for the options of one command."""


# --- Argument types and checks ----------------------------------------------------


def _queue_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "queue", help="the queue: a SQLite file's path, or a PostgreSQL URL or conninfo"
    )


def _integer(text: str) -> int:
    """A whole number in ASCII digits for argparse (``٣``, ``1_0`` and ``+7`` are not)."""
    try:
        return bulk.check_int("value", text, -(2**63), 2**63 - 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def _int_at_least(lo: int) -> Callable[[str], int]:
    """An int of at least ``lo`` for argparse (for the CLI's own knobs)."""

    def parse(text: str) -> int:
        value = _integer(text)
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be at least {lo}, got {value}")
        return value

    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def _ms(option: str, value: int, hi: int = worker.MAX_DURATION_MS) -> int:
    """A duration option in ms; a value below ``MIN_MS`` is refused as likely seconds."""
    bulk.check_int(option, value, 1, hi, "ms")
    if value < MIN_MS:
        raise ValueError(
            f"{option} is in milliseconds: {value} ms is too short to mean anything here "
            f"(at least {MIN_MS}; for {value} seconds write {value * 1000})"
        )
    return value


# --- Options of each command ---------------------------------------------------------


Options: TypeAlias = "argparse.ArgumentParser | argparse._ArgumentGroup"


def _option(
    parser: Options,
    flag: str,
    metavar: str,
    kind: Callable[[str], Any],
    text: str,
    default: object = None,
    required: bool = False,
) -> None:
    """``flag METAVAR`` read with ``kind``; ``%(default)s`` in ``text`` shows ``default``."""
    parser.add_argument(
        flag, metavar=metavar, type=kind, default=default, required=required, help=text
    )


def _json_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--json", action="store_true", help=f"print {what}")


def _json_flag(what: str) -> Callable[[argparse.ArgumentParser], None]:
    """A queue and ``--json`` (print ``what``)."""

    def add(parser: argparse.ArgumentParser) -> None:
        _queue_arg(parser)
        _json_option(parser, what)

    return add


def _ttl_options(parser: argparse.ArgumentParser, what: str) -> None:
    ttl = f"{what}, ms from now ({MIN_MS}..60000, default %(default)s)"
    _option(parser, "--ttl-ms", "MS", _integer, ttl, DEFAULT_TTL_MS)


def _enqueue_options(enqueue: argparse.ArgumentParser) -> None:
    _queue_arg(enqueue)
    enqueue.add_argument("id", nargs="?", help="job id: 1-64 ASCII letters, digits, '_' or '-'")
    enqueue.add_argument("qty", nargs="?", type=_integer, help="quantity, 1..1000")
    _ttl_options(enqueue, "the job must be done within this time or it is quarantined")
    attempts = "delivery attempts before quarantine (1..16, default %(default)s)"
    _option(enqueue, "--max-attempts", "N", _integer, attempts, DEFAULT_MAX_ATTEMPTS)
    many = enqueue.add_argument_group("bulk", "many jobs from a file or stdin, instead of ID QTY")
    _option(many, "--file", "PATH", str, "JSON lines or CSV (id,qty header); '-' is stdin")
    fmt = "jsonl or csv (default: csv for a .csv file, else jsonl)"
    _option(many, "--format", "FMT", str, fmt)
    chunk = "jobs per transaction, 1..1000 (default %(default)s): one commit each"
    _option(many, "--chunk", "N", _integer, chunk, DEFAULT_CHUNK)


def _status_options(status: argparse.ArgumentParser) -> None:
    _queue_arg(status)
    _json_option(status, "one JSON object (one per line with --watch)")
    watch = "redraw every S seconds until Ctrl-C (default 1 when given alone)"
    status.add_argument(
        "--watch", metavar="S", type=_positive_float, nargs="?", const=1.0, help=watch
    )
    _option(status, "--times", "N", _int_at_least(1), "with --watch: stop after N views")


def _jobs_options(jobs: argparse.ArgumentParser) -> None:
    _queue_arg(jobs)
    _option(jobs, "--status", "S", str, f"only this status ({', '.join(queueview.STATUSES)})")
    _option(jobs, "--reason", "R", str, "only dead jobs with this reason")
    _option(jobs, "--owner", "NAME", str, "only jobs leased to this courier")
    _option(jobs, "--prefix", "P", str, "only ids starting with P")
    _option(jobs, "--limit", "N", _int_at_least(1), "at most N rows (default %(default)s)", 100)
    _json_option(jobs, "a JSON list")


def _show_options(show: argparse.ArgumentParser) -> None:
    _queue_arg(show)
    show.add_argument("id", help="the job's id")
    _json_option(show, "one JSON object: job, attempts, redrives")


def _redrives_options(redrives: argparse.ArgumentParser) -> None:
    _queue_arg(redrives)
    _option(redrives, "--id", "ID", str, "only the audit rows of this job")
    _option(
        redrives, "--limit", "N", _int_at_least(1), "at most N rows (default %(default)s)", 1000
    )
    _json_option(redrives, "a JSON list")


def _redrive_options(redrive: argparse.ArgumentParser) -> None:
    _queue_arg(redrive)
    redrive.add_argument("id", nargs="?", help="id of the dead job (or --all)")
    note = "why, for the audit trail: 1-64 ASCII letters, digits, '_' or '-' (e.g. ticket-4711)"
    _option(redrive, "--note", "NOTE", str, note, required=True)
    _ttl_options(redrive, "new deadline")
    redrive.add_argument(
        "--all", action="store_true", help="every dead job (with --reason: of that reason)"
    )
    _option(redrive, "--reason", "R", str, "with --all: deadline, exhausted or permanent")


def _serve_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument("inbox", type=Path, help="path of the receiver's inbox file (SQLite)")
    _option(serve, "--host", "ADDR", str, "address to bind (default %(default)s)", "127.0.0.1")
    _option(serve, "--port", "PORT", _integer, "port (default 0: any free port)", 0)
    _option(serve, "--port-file", "PATH", Path, "also write the port here, for scripts")
    delay = "chaos knob: wait this long after committing, before answering (0..10000)"
    _option(serve, "--reply-delay-ms", "MS", _integer, delay, 0)
    _option(serve, "--max-seconds", "S", _positive_float, "stop after this long")


def _inbox_options(inbox: argparse.ArgumentParser) -> None:
    inbox.add_argument("inbox", type=Path, help="path of the receiver's inbox file")


def _inbox_command_options(inbox: argparse.ArgumentParser) -> None:
    _inbox_options(inbox)
    _json_option(inbox, "one JSON object")


def _audit_options(audit: argparse.ArgumentParser) -> None:
    _queue_arg(audit)
    _inbox_options(audit)
    audit.add_argument(
        "--in-flight-ok",
        action="store_true",
        help="jobs still pending or leased are in flight, not lost (a queue still in use)",
    )
    _json_option(audit, "one JSON object")


def _run_options(run: argparse.ArgumentParser) -> None:
    _queue_arg(run)
    _option(run, "--url", "URL", str, "e.g. http://127.0.0.1:PORT/deliveries", required=True)
    _option(run, "--owner", "NAME", str, "this courier's name (an identifier)", required=True)
    lease = "lease per claim; after it another courier may take the job (default %(default)s)"
    _option(run, "--lease-ms", "MS", _integer, lease, 1000)
    timeout = "HTTP timeout, below the lease (default: 3/4 of the lease)"
    _option(run, "--timeout-ms", "MS", _integer, timeout)
    limits = run.add_argument_group("limits", "the courier stops at the first limit reached")
    rounds = "rounds (claim, deliver, finish; or one empty look) (default 10000)"
    _option(limits, "--max-runs", "N", _int_at_least(1), rounds)
    seconds = "seconds of running (default 60)"
    _option(limits, "--max-seconds", "S", _positive_float, seconds)
    idle = "nothing was due for this long (default: no idle limit)"
    _option(limits, "--max-idle-ms", "MS", _int_at_least(0), idle)
    limits.add_argument(
        "--until-drained", action="store_true", help="no job is pending or leased any more"
    )
    limits.add_argument(
        "--forever",
        action="store_true",
        help="no round or time limit: run until Ctrl-C or SIGTERM (for a service manager)",
    )
    drill = run.add_argument_group(
        "crash drill", "stall after an acknowledged delivery, so a supervisor can kill it"
    )
    _option(drill, "--stall-after-acks", "N", _int_at_least(1), "after the N-th 2xx answer")
    report = "JSON file written when stalling, with the captured ticket (required)"
    _option(drill, "--stall-report", "PATH", Path, report)
    stall = "then carry on as a late courier (default %(default)s)"
    _option(drill, "--stall-seconds", "S", _positive_float, stall, 30.0)


def _web_options(web: argparse.ArgumentParser) -> None:
    _queue_arg(web)
    _option(web, "--host", "ADDR", str, "address to bind (default %(default)s)", "127.0.0.1")
    _option(web, "--port", "PORT", _integer, "port (default 0: any free port)", 0)
    web.add_argument(
        "--allow-redrive", action="store_true", help="let the page redrive dead jobs (with a note)"
    )
    web.add_argument(
        "--allow-remote",
        action="store_true",
        help="allow --host to be an address other than loopback (anyone who can reach it "
        "sees the queue, and with --allow-redrive may redrive)",
    )
    _option(web, "--port-file", "PATH", Path, "also write the port here, for scripts")
    _option(web, "--max-seconds", "S", _positive_float, "stop after this long")


def _demo_options(demo_parser: argparse.ArgumentParser) -> None:
    orders, lease = "(default %(default)s)", "(default %(default)s)"
    _option(demo_parser, "--orders", "N", _integer, orders, demo.ORDERS)
    _option(demo_parser, "--lease-ms", "MS", _integer, lease, demo.LEASE_MS)
    kill = "kill courier c1 right after its N-th acknowledged delivery (default %(default)s)"
    _option(demo_parser, "--kill-after", "N", _integer, kill, demo.KILL_AFTER)
    backends = "sqlite (a temporary file) or postgres (an embedded server) (default %(default)s)"
    demo_parser.add_argument(
        "--backend", choices=("sqlite", "postgres"), default="sqlite", help=backends
    )


# --- Output ----------------------------------------------------------------------------


def _out(line: str = "") -> None:
    print(line, flush=True)


def _json(value: object) -> None:
    _out(json.dumps(value))


def when(ms: int | None) -> str:
    """``ms`` with its UTC ISO time beside it: ``1796009662536 (2026-11-30T...Z)``."""
    if ms is None:
        return "-"
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return f"{ms} ({moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')})"


def now_ms(con: backend.Connection, target: Target) -> int:
    """The queue's time base now: the server's clock on PostgreSQL, else this host's."""
    return backend.server_clock_ms(con) if backend.is_conninfo(target) else clock_ms()


def _with_queue(target: Target, read: Callable[[Any], Any]) -> Any:
    con = backend.connect_existing(target)
    try:
        return read(con)
    finally:
        con.close()


def _open_existing_queue(target: Target) -> Any:
    """The queue module's own connection to a queue that must already exist."""
    return backend.open_existing(target)


# --- Commands ----------------------------------------------------------------------------


def cmd_init(args: argparse.Namespace) -> int:
    target, shown = args.queue, backend.describe(args.queue)
    if backend.is_conninfo(target):
        con = backend.open_queue(target)
        try:
            jobs = sum(queueview.status_counts(con).values())
        finally:
            con.close()
        _out(f"queue {shown} ready: {jobs} jobs")
        return EXIT_OK
    if Path(target).exists() and not Path(target).is_dir():
        jobs = sum(_with_queue(target, queueview.status_counts).values())
        _out(f"queue {shown} already exists: kept its {jobs} jobs")
        return EXIT_OK
    backend.open_queue(target).close()
    _out(f"created queue {shown}")
    return EXIT_OK


def _known_status(con: Any, job_id: str) -> str:
    row = queueview.job(con, job_id)
    return "unknown" if row is None else str(row["status"])


def cmd_enqueue(args: argparse.Namespace) -> int:
    ttl_ms = _ms("--ttl-ms", args.ttl_ms)
    attempts = bulk.check_int("--max-attempts", args.max_attempts, 1, worker.MAX_ATTEMPTS)
    if args.file is not None:
        if args.id is not None:
            raise ValueError("give either ID QTY or --file, not both")
        return _enqueue_file(args, ttl_ms, attempts)
    if args.id is None or args.qty is None:
        raise ValueError("give ID QTY, or --file PATH for many jobs")
    job_id = bulk.check_id("job id", args.id)
    qty = bulk.check_int("qty", args.qty, 1, worker.MAX_QTY)
    module = backend.queue_module(args.queue)
    con = _open_existing_queue(args.queue)
    try:
        event = {"id": job_id, "qty": qty}
        added = module.enqueue(con, event, now_ms(con, args.queue), ttl_ms, attempts)
        status = "pending" if added else _known_status(con, job_id)
    finally:
        con.close()
    if added:
        _out(f"enqueued {job_id} qty={qty} (True: new job, ttl {ttl_ms} ms, {attempts} attempts)")
    elif status in ("pending", "leased"):
        _out(f"already queued {job_id} qty={qty} (False: intake retry, job kept as it was)")
    else:
        _out(
            f"already known {job_id} qty={qty}: the job is {status} (False: intake retry, "
            f"nothing changed{'; redrive it to send it again' if status == 'dead' else ''})"
        )
    return EXIT_OK


class _Progress:
    """A one-line progress bar on stderr, drawn only on a terminal."""

    WIDTH = 30

    def __init__(self, total: int) -> None:
        self.total = total
        self.shown = sys.stderr.isatty() and total > 0

    def update(self, done: int) -> None:
        if not self.shown:
            return
        filled = self.WIDTH * done // self.total
        bar = "#" * filled + "." * (self.WIDTH - filled)
        sys.stderr.write(f"\r[{bar}] {done}/{self.total}")
        if done == self.total:
            sys.stderr.write("\n")
        sys.stderr.flush()


def _enqueue_file(args: argparse.Namespace, ttl_ms: int, attempts: int) -> int:
    chunk = bulk.check_int("--chunk", args.chunk, 1, worker.MAX_BATCH)
    if args.file == "-":
        text, fmt = sys.stdin.read(), args.format or "jsonl"
    else:
        text = Path(args.file).read_text(encoding="utf-8")
        fmt = args.format or bulk.sniff_format(args.file)
    records = bulk.parse_records(text, fmt)
    module = backend.queue_module(args.queue)
    con = _open_existing_queue(args.queue)
    new = known = commits = 0
    conflicts: list[str] = []
    progress = _Progress(len(records))
    try:
        for start in range(0, len(records), chunk):
            part = records[start : start + chunk]
            results = module.enqueue_many(con, part, now_ms(con, args.queue), ttl_ms, attempts)
            commits += 1
            for record, result in zip(part, results, strict=True):
                if result is True:
                    new += 1
                elif result is False:
                    known += 1
                else:
                    conflicts.append(record["id"])
            progress.update(start + len(part))
    finally:
        con.close()
    _out(
        f"read {len(records)} jobs: {new} enqueued, {known} already there (intake retries), "
        f"{len(conflicts)} conflicts; {commits} commits of up to {chunk}"
    )
    if conflicts:
        shown = ", ".join(conflicts[:10]) + (" ..." if len(conflicts) > 10 else "")
        _out(f"conflicts (the id is there with another qty; nothing written for them): {shown}")
        return EXIT_ERROR
    return EXIT_OK


def _status_view(target: Target) -> dict[str, Any]:
    return dict(_with_queue(target, lambda con: queueview.overview(con, now_ms(con, target))))


def _print_status(target: Target, view: dict[str, Any]) -> None:
    now = view["now_ms"]
    _out(f"queue {backend.describe(target)} at {when(now)}")
    for status, count in view["counts"].items():
        _out(f"  {status:<8}{count:>6}")
    _out(f"  {'due now':<8}{view['due']:>6}")
    _out(f"  {'audit':<8}{view['redrives']:>6} redrive rows")
    if view["seconds_suspects"]:
        _out(
            f"warning: {view['seconds_suspects']} jobs have a deadline before 1973: their "
            "times were given in seconds; every time is in milliseconds (time.time_ns() // 10**6)"
        )
    job = view["next_due"]
    if job is None:
        _out("next due: none")
        return
    since = job["available_at"] if job["status"] == "pending" else job["lease_until"]
    _out(
        f"next due: {job['id']} ({job['status']}, qty {job['qty']}, token {job['token']}, "
        f"attempts {job['attempts']}/{job['max_attempts']}, due since {when(since)}, "
        f"for {now - since} ms)"
    )


def cmd_status(args: argparse.Namespace) -> int:
    if args.watch is None:
        view = _status_view(args.queue)
        _json(view) if args.json else _print_status(args.queue, view)
        return EXIT_OK
    clear = sys.stdout.isatty() and not args.json
    shown = 0
    try:
        while args.times is None or shown < args.times:
            view = _status_view(args.queue)
            if clear:
                sys.stdout.write("\x1b[H\x1b[2J")
            _json(view) if args.json else _print_status(args.queue, view)
            shown += 1
            if args.times is not None and shown >= args.times:
                break
            if not args.json:
                _out(f"(every {args.watch:g} s; Ctrl-C to stop)")
            time.sleep(args.watch)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a watch ends
    return EXIT_OK


def _job_line(job: dict[str, Any]) -> str:
    attempts = f"{job['attempts']}/{job['max_attempts']}"
    return (
        f"{job['id']:<24} {job['qty']:>4}  {job['status']:<8}{job['reason'] or '':<10} "
        f"{job['token']:>5}  {attempts:>8}  {job['owner'] or '-':<12} {when(job['deadline'])}"
    )


def cmd_jobs(args: argparse.Namespace) -> int:
    if args.status is not None and args.status not in queueview.STATUSES:
        raise ValueError(f"--status must be one of {', '.join(queueview.STATUSES)}")
    jobs: list[dict[str, Any]] = _with_queue(
        args.queue,
        lambda con: queueview.find_jobs(
            con, args.status, args.reason, args.owner, args.prefix, args.limit
        ),
    )
    if args.json:
        _json(jobs)
        return EXIT_OK
    header = f"{'id':<24} {'qty':>4}  {'status':<8}{'reason':<10} {'token':>5}  {'attempts':>8}"
    _out(f"{header}  {'owner':<12} deadline")
    for job in jobs:
        _out(_job_line(job))
    more = " (the limit; --limit N for more)" if len(jobs) == args.limit else ""
    _out(f"{len(jobs)} jobs{more}")
    return EXIT_OK


def _cause_text(attempt: dict[str, Any] | None) -> str:
    if attempt is None:
        return "no attempt recorded"
    if attempt["kind"] == "answer":
        cause = f"HTTP {attempt['http_status']}"
        cause += f" {attempt['detail']}" if attempt["detail"] else ""
    elif attempt["kind"] is None:
        cause = attempt["outcome"]
    else:
        cause = f"{attempt['kind']}: {attempt['detail']}"
    return f"{cause} (by {attempt['owner']}, token {attempt['token']})"


def cmd_dead(args: argparse.Namespace) -> int:
    jobs: list[dict[str, Any]] = _with_queue(args.queue, queueview.dead_jobs)
    last = last_attempts(args.queue) if jobs else {}
    for job in jobs:
        job["last_attempt"] = last.get(job["id"])
    if args.json:
        _json(jobs)
        return EXIT_OK
    if not jobs:
        _out("no dead jobs")
        return EXIT_OK
    _out(
        f"{'id':<24} {'qty':>4}  {'reason':<10} {'token':>5}  {'attempts':>8}  {'redrives':>8}"
        "  last cause"
    )
    for job in jobs:
        attempts = f"{job['attempts']}/{job['max_attempts']}"
        _out(
            f"{job['id']:<24} {job['qty']:>4}  {job['reason']:<10} {job['token']:>5}  "
            f"{attempts:>8}  {job['redrives']:>8}  {_cause_text(job['last_attempt'])}"
        )
    _out(
        f"{len(jobs)} dead; see one with: show QUEUE ID; re-queue with: redrive QUEUE ID --note WHY"
    )
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    job_id = bulk.check_id("job id", args.id)

    def read(con: Any) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        with queueview.snapshot(con):
            return queueview.job(con, job_id), queueview.redrives(con, job_id)

    job, audit = _with_queue(args.queue, read)
    if job is None:
        raise ValueError(f"no job {job_id!r} in {backend.describe(args.queue)}")
    history = attempts_of(args.queue, job_id)
    if args.json:
        _json({"job": job, "attempts": history, "redrives": audit})
        return EXIT_OK
    _out(f"job {job_id}")
    for column in queueview.JOB_COLUMNS:
        value = job[column]
        is_time = column in ("available_at", "deadline", "lease_until")
        _out(f"  {column:<13}{when(value) if is_time else value}")
    _out(f"attempts ({len(history)} recorded)")
    for row in history:
        _out(
            f"  {when(row['at_ms'])}  token {row['token']}  {row['owner']:<10} "
            f"{row['outcome']:<9} -> {row['status']:<8} {_cause_text(row).split(' (by ')[0]}"
        )
    _out(f"redrives ({len(audit)})")
    for row in audit:
        _out(f"  #{row['seq']} {when(row['at_ms'])}  token {row['token']}  note {row['note']}")
    return EXIT_OK


def cmd_redrives(args: argparse.Namespace) -> int:
    job_id = None if args.id is None else bulk.check_id("--id", args.id)
    rows: list[dict[str, Any]] = _with_queue(
        args.queue, lambda con: queueview.redrives(con, job_id, args.limit)
    )
    if args.json:
        _json(rows)
        return EXIT_OK
    for row in rows:
        _out(
            f"#{row['seq']:<5} {row['id']:<24} token {row['token']:>4}  {when(row['at_ms'])}  "
            f"{row['note']}"
        )
    _out(f"{len(rows)} redrive audit rows")
    return EXIT_OK


_LAST_AUDIT_SEQ = {"sqlite": "SELECT last_insert_rowid()", "postgres": "SELECT lastval()"}


def redrive_one(con: Any, target: Target, job_id: str, ttl_ms: int, note: str) -> dict[str, Any]:
    """Redrive one dead job; return the audit row that this very call wrote.

    Raises:
        ValueError: no such job, or it is not dead (nothing changed).
    """
    module = backend.queue_module(target)
    kind = "postgres" if backend.is_conninfo(target) else "sqlite"
    audit_seq: list[int] = []

    def remember_audit_row(point: str) -> None:
        # Read inside the redrive's own transaction: exactly the row this call wrote,
        # even if another operator redrives at the same moment.
        if point == "after-audit":
            audit_seq.append(int(con.execute(_LAST_AUDIT_SEQ[kind]).fetchone()[0]))

    module.redrive(con, job_id, now_ms(con, target), ttl_ms, note, remember_audit_row)
    row = queueview.redrive_row(con, audit_seq[0])
    assert row is not None
    return row


def cmd_redrive(args: argparse.Namespace) -> int:
    note = bulk.check_id("--note", args.note)
    ttl_ms = _ms("--ttl-ms", args.ttl_ms)
    if args.all == (args.id is not None):
        raise ValueError("give either the ID of one dead job or --all")
    if args.reason is not None and not args.all:
        raise ValueError("--reason goes with --all")
    con = _open_existing_queue(args.queue)
    try:
        if not args.all:
            job_id = bulk.check_id("job id", args.id)
            status = _known_status(con, job_id)
            if status == "unknown":
                raise ValueError(f"no job {job_id!r} in {backend.describe(args.queue)}")
            if status != "dead":
                raise ValueError(f"{job_id} is {status}: only a dead job can be redriven")
            row = redrive_one(con, args.queue, job_id, ttl_ms, note)
            _out(f"redriven {job_id}: pending again with a fresh budget, deadline in {ttl_ms} ms")
            _out(f"audit row: {json.dumps(row)}")
            return EXIT_OK
        dead = queueview.find_jobs(con, "dead", args.reason, limit=10**9)
        rows = []
        for job in dead:
            try:
                rows.append(redrive_one(con, args.queue, job["id"], ttl_ms, note))
            except ValueError:
                continue  # no longer dead: someone else redrove it meanwhile
    finally:
        con.close()
    which = f"dead jobs with reason {args.reason}" if args.reason else "dead jobs"
    _out(f"redriven {len(rows)} of {len(dead)} {which}, one audit row each (note {note})")
    if rows:
        _out(f"audit rows: #{rows[0]['seq']} .. #{rows[-1]['seq']}")
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    try:
        receiver = Receiver(
            args.inbox, host=args.host, port=args.port, reply_delay_ms=args.reply_delay_ms, log=_out
        )
    except OSError as error:
        if isinstance(error, FileNotFoundError | IsADirectoryError | NotADirectoryError):
            raise
        raise OSError(f"cannot listen on {args.host} port {args.port}: {error.strerror}") from None
    stop = stop_on_signals()
    _out(f"receiver listening on {receiver.url} (port {receiver.port}), inbox {args.inbox}")
    if args.port_file is not None:
        args.port_file.write_text(f"{receiver.port}\n", encoding="utf-8")
    receiver.serve_until(stop, args.max_seconds)
    _out(f"receiver stopped: {_totals(receiver.inbox.summary())}")
    return EXIT_OK


def _totals(summary: dict[str, Any]) -> str:
    return (
        f"{summary['requests']} requests, {summary['effects']} effects, "
        f"{summary['inbox_rows']} inbox rows, total qty {summary['total_qty']}"
    )


def cmd_inbox(args: argparse.Namespace) -> int:
    summary = Inbox(args.inbox, create=False).summary()
    if args.json:
        _json(summary)
        return EXIT_OK
    _out(f"inbox {args.inbox}: {_totals(summary)}")
    for row in summary["rows"]:
        _out(
            f"  {row['id']:<24} qty {row['qty']:>4}  requests {row['requests']:>3}  "
            f"effects {row['effects']}  first from {row['sender'] or 'an unnamed sender'}  "
            f"at {when(row['received_at_ms'])}"
        )
    return EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    audit = audit_files(args.queue, args.inbox, in_flight_ok=args.in_flight_ok)
    if args.json:
        _json(audit.as_dict())
    else:
        _print_audit(args.queue, args.inbox, audit)
    return EXIT_OK if audit.ok else EXIT_ERROR


def _print_audit(queue: Target, inbox: Path, audit: Audit) -> None:
    dead = ", ".join(f"{reason} {n}" for reason, n in audit.dead.items()) or "none"
    answers = ", ".join(f"{status} {n}" for status, n in audit.answers.items()) or "none"
    _out(f"audit of queue {backend.describe(queue)} against inbox {inbox}")
    _out(
        f"  jobs {audit.jobs}: done {audit.done}, dead {sum(audit.dead.values())} ({dead}), "
        f"unfinished {len(audit.unfinished)}; largest token {audit.largest_token}"
    )
    _out(f"  effects {audit.effects}; delivery requests {audit.deliveries} ({answers})")
    for rule, count in audit.must_be_zero().items():
        _out(f"  {rule:<38}{count:>6}  (must be 0)")
    _out(f"  {'dead jobs with an effect':<38}{len(audit.dead_with_effect):>6}  (allowed)")
    for failure in audit.failures():
        _out(f"FAILED: {failure}")
    _out("OK: every check holds" if audit.ok else "FAILED: see above")


def default_timeout_ms(lease_ms: int) -> int:
    """An HTTP timeout that leaves a quarter of the lease to record the outcome."""
    return max(1, lease_ms * 3 // 4)


def _run_limits(args: argparse.Namespace) -> Limits:
    if args.forever and (args.max_runs is not None or args.max_seconds is not None):
        raise ValueError("--forever has no round or time limit: drop --max-runs/--max-seconds")
    if args.forever:
        return Limits(
            max_runs=None,
            max_seconds=None,
            max_idle_ms=args.max_idle_ms,
            until_drained=args.until_drained,
        )
    return Limits(
        max_runs=10_000 if args.max_runs is None else args.max_runs,
        max_seconds=60.0 if args.max_seconds is None else args.max_seconds,
        max_idle_ms=args.max_idle_ms,
        until_drained=args.until_drained,
    )


def _timeout_ms(args: argparse.Namespace) -> int:
    """The send timeout, refused unless it ends while the lease still holds."""
    lease_ms = args.lease_ms
    if args.timeout_ms is None:
        return default_timeout_ms(lease_ms)
    timeout_ms = bulk.check_int("--timeout-ms", args.timeout_ms, 1, MAX_LEASE_MS, "ms")
    if timeout_ms >= lease_ms:
        raise ValueError(
            f"unsafe: --timeout-ms {timeout_ms} is not below --lease-ms {lease_ms}. A delivery "
            "could outlast its lease: another courier would claim the job and send it again "
            "while this one still waits, and this one's outcome could never be recorded. "
            f"Raise --lease-ms above {timeout_ms}, or lower --timeout-ms "
            f"(default: 3/4 of the lease, {default_timeout_ms(lease_ms)})"
        )
    return timeout_ms


def cmd_run(args: argparse.Namespace) -> int:
    lease_ms = _ms("--lease-ms", args.lease_ms, MAX_LEASE_MS)
    timeout_ms = _timeout_ms(args)
    owner = bulk.check_id("--owner", args.owner)
    limits = _run_limits(args)
    backend.connect_existing(args.queue).close()  # never a queue made from a typo
    send: Callable[[dict[str, Any]], bool] = HttpSend(args.url, owner, timeout_ms)
    if args.stall_after_acks is not None:
        if args.stall_report is None:
            raise ValueError("--stall-after-acks needs --stall-report PATH")
        send = StallAfterAcks(
            send, args.queue, owner, args.stall_after_acks, args.stall_report, args.stall_seconds
        )
    stop = stop_on_signals(log=_out, impatient=True)
    shown = backend.describe(args.queue)
    clock = "the server's clock" if backend.is_conninfo(args.queue) else "this host's clock"
    _out(f"{owner}: started, queue {shown} ({clock}), receiver {args.url}, lease {lease_ms} ms")
    attempts = AttemptLog(args.queue)
    try:
        report = run_courier(
            args.queue,
            owner,
            send,
            lease_ms=lease_ms,
            limits=limits,
            stop=stop,
            log=_out,
            attempts=attempts,
        )
    finally:
        attempts.close()
    statuses: dict[str, int] = {}
    for result in report.results:
        statuses[result["status"]] = statuses.get(result["status"], 0) + 1
    _out(
        f"{owner}: stopped ({report.stop_reason}) after {report.runs} rounds: "
        f"{json.dumps(statuses, sort_keys=True)}, idle {report.idle}, busy {report.busy}"
    )
    return EXIT_INTERRUPTED if stop.signum == signal.SIGINT else EXIT_OK


def cmd_web(args: argparse.Namespace) -> int:
    from courier.web import serve_web

    return serve_web(args, _out)


def cmd_demo(args: argparse.Namespace) -> int:
    return demo.run_demo(
        orders=args.orders, lease_ms=args.lease_ms, kill_after=args.kill_after, backend=args.backend
    )


# --- The parser: one row per command -------------------------------------------------


class Command(NamedTuple):
    """One sub-command: its name, one-line help, options, handler and longer description."""

    name: str
    help: str
    options: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]
    description: str | None = None


# In the order ``--help`` lists them.
COMMANDS = (
    Command("init", "create a queue (an existing one is kept)", _queue_arg, cmd_init),
    Command(
        "enqueue",
        "add a delivery job, or many from a file or stdin",
        _enqueue_options,
        cmd_enqueue,
        "Add the job {id, qty}, or with --file every job of a JSON-lines or CSV file "
        "('-': stdin), one transaction per --chunk jobs. Enqueueing the same id and qty "
        "again is a harmless intake retry (the existing job is kept); the same id with "
        "another qty is a conflict (exit 1).",
    ),
    Command(
        "status",
        "count jobs per status and show the next due job",
        _status_options,
        cmd_status,
    ),
    Command(
        "jobs",
        "list jobs, filtered by status, reason, owner or id prefix",
        _jobs_options,
        cmd_jobs,
    ),
    Command(
        "show",
        "one job: its row, its attempt history and its redrive audit rows",
        _show_options,
        cmd_show,
    ),
    Command(
        "dead",
        "list quarantined (dead) jobs with their reason and last cause",
        _json_flag("a JSON list"),
        cmd_dead,
        "List dead jobs: reason is 'deadline' (ttl passed), 'exhausted' (no attempts left) "
        "or 'permanent' (the receiver refused it), with the last recorded attempt's cause "
        "(HTTP status and body, timeout, connection error).",
    ),
    Command(
        "redrives",
        "list the redrive audit table",
        _redrives_options,
        cmd_redrives,
    ),
    Command(
        "redrive",
        "re-queue a dead job (or --all of them), with an audit note",
        _redrive_options,
        cmd_redrive,
        "Put a dead job back to pending with a fresh attempt budget and deadline. An audit "
        "row (id, token, time, note) is written in the same transaction and printed. The "
        "fencing token is kept, so no old ticket revives. With --all (and --reason), every "
        "such dead job, one transaction and one audit row each.",
    ),
    Command(
        "serve",
        "run the HTTP receiver (prints its URL and port)",
        _serve_options,
        cmd_serve,
        "Run the receiver: POST /deliveries applies each (id, qty) once, recorded in its "
        "own inbox file (never a queue file); GET / shows the inbox totals. Stops on Ctrl-C "
        "or SIGTERM, or after --max-seconds.",
    ),
    Command("inbox", "show a receiver inbox file's totals", _inbox_command_options, cmd_inbox),
    Command(
        "audit",
        "check a queue against the receiver's inbox: nothing lost, no effect twice",
        _audit_options,
        cmd_audit,
        "Read the queue and the receiver's inbox file (changing neither) and check that "
        "every job is done or dead, no effect was applied twice, every done job has its "
        "effect, every effect belongs to a job with its qty, and no token went down. Run it "
        "once the couriers have stopped. Exit 1 if a check fails.",
    ),
    Command(
        "run",
        "run a courier that delivers jobs to a receiver",
        _run_options,
        cmd_run,
        "Claim, deliver and finish jobs one at a time until a limit is reached, recording "
        "each attempt's cause in the attempt log. It pauses briefly when nothing is due or "
        "the queue is busy. Ctrl-C or SIGTERM stops it after the current delivery; a second "
        "Ctrl-C stops it at once (exit 130).",
    ),
    Command(
        "web",
        "serve a web page for operators (127.0.0.1, read-only unless --allow-redrive)",
        _web_options,
        cmd_web,
        "Serve a page with the counts by status, the oldest due job, and the dead jobs by "
        "reason with their attempt history; with --allow-redrive, a form redrives a dead "
        "job with a required note. Binds 127.0.0.1 on a free port unless told otherwise.",
    ),
    Command(
        "demo",
        "two couriers, one killed mid-delivery, the other recovers",
        _demo_options,
        cmd_demo,
        demo.__doc__,
    ),
)
# Descriptions with their own line breaks (the demo's docstring) are printed as written.
_RAW_DESCRIPTIONS = frozenset({"demo"})


def _prog() -> str:
    """``courier`` when run as the console script, else ``python -m courier``."""
    return "courier" if Path(sys.argv[0]).name == "courier" else "python -m courier"


def build_parser() -> argparse.ArgumentParser:
    """The whole CLI: one sub-parser per row of ``COMMANDS``, each with its own --help."""
    parser = argparse.ArgumentParser(
        prog=_prog(),
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for command in COMMANDS:
        raw = command.name in _RAW_DESCRIPTIONS
        sub = commands.add_parser(
            command.name,
            help=command.help,
            description=command.description,
            formatter_class=argparse.RawDescriptionHelpFormatter if raw else argparse.HelpFormatter,
        )
        command.options(sub)
        sub.set_defaults(handler=command.handler)
    return parser


# --- The boundary --------------------------------------------------------------------


def _fail(code: int, message: str) -> int:
    print(f"courier: error: {message}", file=sys.stderr, flush=True)
    return code


def _database_error(error: Exception) -> str:
    return f"database: {str(error).strip()}"


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit status (see ``EPILOG``)."""
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except BrokenPipeError:
        # The reader went away (`courier inbox I | head -1`): stop quietly.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_PIPE
    except worker.Conflict as error:
        return _fail(EXIT_ERROR, f"conflict: {error}")
    except backend.Unreachable as error:
        return _fail(EXIT_ERROR, str(error))
    except (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError) as error:
        return _fail(EXIT_USAGE, str(error))
    except sqlite3.Error as error:
        return _fail(EXIT_ERROR, _database_error(error))
    except OSError as error:
        return _fail(EXIT_ERROR, str(error))
    except KeyboardInterrupt:
        return _fail(EXIT_INTERRUPTED, "interrupted")
    except Exception as error:
        psycopg = sys.modules.get("psycopg")
        if psycopg is not None and isinstance(error, psycopg.Error):
            return _fail(EXIT_ERROR, _database_error(error))
        raise
