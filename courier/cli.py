"""The operator CLI: ``python -m courier COMMAND ...``.

Every command that touches a queue takes the queue file's path first. Bad input ends
in one ``courier: error: ...`` line on stderr and a non-zero exit, never a traceback:
``ValueError``, ``worker.Conflict``, ``OSError`` (a missing file included) and SQLite
errors are caught here, at the boundary, and nowhere deeper.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NamedTuple, TypeAlias

import worker
from courier import demo, queueview
from courier.audit import Audit, audit_files
from courier.receiver import Inbox, Receiver
from courier.runner import (
    HttpSend,
    Limits,
    StallAfterAcks,
    clock_ms,
    run_courier,
    stop_on_signals,
)

__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_USAGE", "main"]

EXIT_OK = 0
EXIT_ERROR = 1  # the command ran and failed: a conflict, a busy or broken file
EXIT_USAGE = 2  # the input was wrong: a bad argument, a missing file

DEFAULT_TTL_MS = 60_000
DEFAULT_MAX_ATTEMPTS = 3
MAX_LEASE_MS = 60_000

DESCRIPTION = """\
Operate a lease-queue: a durable job queue in one SQLite file. Couriers claim jobs
under a time-limited lease carrying a fencing token, deliver them to an HTTP receiver,
and record the outcome; failed jobs retry within a budget and end up "dead" (with a
reason) when they cannot succeed, until an operator redrives them.

A first session:
  python -m courier init q.sqlite
  python -m courier enqueue q.sqlite order-1 3
  python -m courier serve inbox.sqlite            # in another terminal; prints its URL
  python -m courier run q.sqlite --owner c1 --url URL --until-drained
  python -m courier status q.sqlite
"""

EPILOG = """\
exit status: 0 success, 1 the command failed (e.g. conflict, busy database),
2 bad input (bad argument, missing file). Run 'python -m courier COMMAND --help'
for the options of one command."""


# --- Argument types -------------------------------------------------------------


def _queue_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("queue", type=Path, help="path of the queue file (SQLite)")


def _integer(text: str) -> int:
    """An int for argparse; the range is the worker's to check (one-line error)."""
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None


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


# --- The options of each command -------------------------------------------------


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


def _json_flag(what: str) -> Callable[[argparse.ArgumentParser], None]:
    """A queue file's path and ``--json`` (print ``what``)."""

    def add(parser: argparse.ArgumentParser) -> None:
        _queue_arg(parser)
        parser.add_argument("--json", action="store_true", help=f"print {what}")

    return add


def _enqueue_options(enqueue: argparse.ArgumentParser) -> None:
    _queue_arg(enqueue)
    enqueue.add_argument("id", help="job id: 1-64 ASCII letters, digits, '_' or '-'")
    enqueue.add_argument("qty", type=_integer, help="quantity, 1..1000")
    ttl = "the job must be done within this many ms or it is quarantined (1..60000, default "
    _option(enqueue, "--ttl-ms", "MS", _integer, ttl + "%(default)s)", DEFAULT_TTL_MS)
    attempts = "delivery attempts before quarantine (1..16, default %(default)s)"
    _option(enqueue, "--max-attempts", "N", _integer, attempts, DEFAULT_MAX_ATTEMPTS)


def _redrive_options(redrive: argparse.ArgumentParser) -> None:
    _queue_arg(redrive)
    redrive.add_argument("id", help="id of the dead job")
    note = "why, for the audit trail: 1-64 ASCII letters, digits, '_' or '-' (e.g. ticket-4711)"
    _option(redrive, "--note", "NOTE", str, note, required=True)
    ttl = "new deadline, ms from now (1..60000, default %(default)s)"
    _option(redrive, "--ttl-ms", "MS", _integer, ttl, DEFAULT_TTL_MS)


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


def _audit_options(audit: argparse.ArgumentParser) -> None:
    _queue_arg(audit)
    _inbox_options(audit)
    audit.add_argument(
        "--in-flight-ok",
        action="store_true",
        help="jobs still pending or leased are in flight, not lost (a queue still in use)",
    )
    audit.add_argument("--json", action="store_true", help="print one JSON object")


def _run_options(run: argparse.ArgumentParser) -> None:
    _queue_arg(run)
    _option(run, "--url", "URL", str, "e.g. http://127.0.0.1:PORT/deliveries", required=True)
    _option(run, "--owner", "NAME", str, "this courier's name (an identifier)", required=True)
    lease = "lease per claim; after it another courier may take the job (default %(default)s)"
    _option(run, "--lease-ms", "MS", _integer, lease, 1000)
    timeout = "HTTP timeout (default: 3/4 of the lease, so the answer comes while it holds)"
    _option(run, "--timeout-ms", "MS", _integer, timeout)
    limits = run.add_argument_group("limits", "the courier stops at the first limit reached")
    rounds = "rounds (claim, deliver, finish; or one empty look) (default %(default)s)"
    _option(limits, "--max-runs", "N", _int_at_least(1), rounds, 10_000)
    seconds = "seconds of running (default %(default)s)"
    _option(limits, "--max-seconds", "S", _positive_float, seconds, 60.0)
    idle = "nothing was due for this long (default: no idle limit)"
    _option(limits, "--max-idle-ms", "MS", _int_at_least(0), idle)
    limits.add_argument(
        "--until-drained", action="store_true", help="no job is pending or leased any more"
    )
    drill = run.add_argument_group(
        "crash drill", "stall after an acknowledged delivery, so a supervisor can kill it"
    )
    _option(drill, "--stall-after-acks", "N", _int_at_least(1), "after the N-th 2xx answer")
    report = "JSON file written when stalling, with the captured ticket (required)"
    _option(drill, "--stall-report", "PATH", Path, report)
    stall = "then carry on as a late courier (default %(default)s)"
    _option(drill, "--stall-seconds", "S", _positive_float, stall, 30.0)


def _demo_options(demo_parser: argparse.ArgumentParser) -> None:
    orders, lease = "(default %(default)s)", "(default %(default)s)"
    _option(demo_parser, "--orders", "N", _integer, orders, demo.ORDERS)
    _option(demo_parser, "--lease-ms", "MS", _integer, lease, demo.LEASE_MS)
    kill = "kill courier c1 right after its N-th acknowledged delivery (default %(default)s)"
    _option(demo_parser, "--kill-after", "N", _integer, kill, demo.KILL_AFTER)


# --- Commands -------------------------------------------------------------------------


def _out(line: str = "") -> None:
    print(line, flush=True)


def cmd_init(args: argparse.Namespace) -> int:
    path: Path = args.queue
    if path.exists():
        con = queueview.connect_existing(path)
        try:
            jobs = sum(queueview.status_counts(con).values())
        finally:
            con.close()
        _out(f"queue {path} already exists: kept its {jobs} jobs")
        return EXIT_OK
    worker.open_queue(path).close()
    _out(f"created queue {path}")
    return EXIT_OK


def _open_existing_queue(path: Path) -> sqlite3.Connection:
    """``worker.open_queue`` on a file that must already be a queue (never create one)."""
    queueview.connect_existing(path).close()
    return worker.open_queue(path)


def cmd_enqueue(args: argparse.Namespace) -> int:
    con = _open_existing_queue(args.queue)
    try:
        event = {"id": args.id, "qty": args.qty}
        added = worker.enqueue(con, event, clock_ms(), args.ttl_ms, args.max_attempts)
    finally:
        con.close()
    if added:
        _out(
            f"enqueued {args.id} qty={args.qty} (True: new job, ttl {args.ttl_ms} ms, "
            f"{args.max_attempts} attempts)"
        )
    else:
        _out(f"already queued {args.id} qty={args.qty} (False: intake retry, job kept as it was)")
    return EXIT_OK


def _with_queue(path: Path, read: Callable[[sqlite3.Connection], Any]) -> Any:
    con = queueview.connect_existing(path)
    try:
        return read(con)
    finally:
        con.close()


def cmd_status(args: argparse.Namespace) -> int:
    now = clock_ms()
    view: dict[str, Any] = _with_queue(args.queue, lambda con: queueview.overview(con, now))
    if args.json:
        _out(json.dumps(view))
        return EXIT_OK
    _out(f"queue {args.queue}")
    for status, count in view["counts"].items():
        _out(f"  {status:<8}{count:>6}")
    _out(f"  {'due now':<8}{view['due']:>6}")
    _out(f"  {'audit':<8}{view['redrives']:>6} redrive rows")
    job = view["next_due"]
    if job is None:
        _out("next due: none")
    else:
        since = job["available_at"] if job["status"] == "pending" else job["lease_until"]
        _out(
            f"next due: {job['id']} ({job['status']}, qty {job['qty']}, token {job['token']}, "
            f"attempts {job['attempts']}/{job['max_attempts']}, due for {now - since} ms)"
        )
    return EXIT_OK


def cmd_dead(args: argparse.Namespace) -> int:
    jobs: list[dict[str, Any]] = _with_queue(args.queue, queueview.dead_jobs)
    if args.json:
        _out(json.dumps(jobs))
        return EXIT_OK
    if not jobs:
        _out("no dead jobs")
        return EXIT_OK
    _out(f"{'id':<24} {'qty':>4}  {'reason':<10} {'token':>5}  {'attempts':>8}  {'redrives':>8}")
    for job in jobs:
        attempts = f"{job['attempts']}/{job['max_attempts']}"
        _out(
            f"{job['id']:<24} {job['qty']:>4}  {job['reason']:<10} {job['token']:>5}  "
            f"{attempts:>8}  {job['redrives']:>8}"
        )
    _out(f"{len(jobs)} dead; re-queue one with: redrive QUEUE ID --note WHY")
    return EXIT_OK


def cmd_redrive(args: argparse.Namespace) -> int:
    con = _open_existing_queue(args.queue)
    audit_seq: list[int] = []

    def remember_audit_row(point: str) -> None:
        # Read inside the redrive's own transaction: exactly the row this call wrote,
        # even if another operator redrives at the same moment.
        if point == "after-audit":
            audit_seq.append(con.execute("SELECT last_insert_rowid()").fetchone()[0])

    try:
        worker.redrive(con, args.id, clock_ms(), args.ttl_ms, args.note, remember_audit_row)
        row = queueview.redrive_row(con, audit_seq[0])
    finally:
        con.close()
    _out(f"redriven {args.id}: pending again with a fresh budget, deadline in {args.ttl_ms} ms")
    _out(f"audit row: {json.dumps(row)}")
    return EXIT_OK


def cmd_serve(args: argparse.Namespace) -> int:
    receiver = Receiver(
        args.inbox, host=args.host, port=args.port, reply_delay_ms=args.reply_delay_ms, log=_out
    )
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
    _out(f"inbox {args.inbox}: {_totals(summary)}")
    for row in summary["rows"]:
        _out(
            f"  {row['id']:<24} qty {row['qty']:>4}  requests {row['requests']:>3}  "
            f"effects {row['effects']}  first from {row['sender']}"
        )
    return EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    audit = audit_files(args.queue, args.inbox, in_flight_ok=args.in_flight_ok)
    if args.json:
        _out(json.dumps(audit.as_dict()))
    else:
        _print_audit(args.queue, args.inbox, audit)
    return EXIT_OK if audit.ok else EXIT_ERROR


def _print_audit(queue: Path, inbox: Path, audit: Audit) -> None:
    dead = ", ".join(f"{reason} {n}" for reason, n in audit.dead.items()) or "none"
    answers = ", ".join(f"{status} {n}" for status, n in audit.answers.items()) or "none"
    _out(f"audit of queue {queue} against inbox {inbox}")
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


def cmd_run(args: argparse.Namespace) -> int:
    queueview.require_queue_file(args.queue)
    if not 1 <= args.lease_ms <= MAX_LEASE_MS:
        raise ValueError(f"--lease-ms must be in 1..{MAX_LEASE_MS}, got {args.lease_ms}")
    timeout_ms = (
        args.timeout_ms if args.timeout_ms is not None else default_timeout_ms(args.lease_ms)
    )
    send: Callable[[dict[str, Any]], bool] = HttpSend(args.url, args.owner, timeout_ms)
    if args.stall_after_acks is not None:
        if args.stall_report is None:
            raise ValueError("--stall-after-acks needs --stall-report PATH")
        send = StallAfterAcks(
            send,
            args.queue,
            args.owner,
            args.stall_after_acks,
            args.stall_report,
            args.stall_seconds,
        )
    limits = Limits(
        max_runs=args.max_runs,
        max_seconds=args.max_seconds,
        max_idle_ms=args.max_idle_ms,
        until_drained=args.until_drained,
    )
    stop = stop_on_signals()
    _out(
        f"{args.owner}: started, queue {args.queue}, receiver {args.url}, lease {args.lease_ms} ms"
    )
    report = run_courier(
        args.queue, args.owner, send, lease_ms=args.lease_ms, limits=limits, stop=stop, log=_out
    )
    statuses: dict[str, int] = {}
    for result in report.results:
        statuses[result["status"]] = statuses.get(result["status"], 0) + 1
    _out(
        f"{args.owner}: stopped ({report.stop_reason}) after {report.runs} rounds: "
        f"{json.dumps(statuses, sort_keys=True)}, idle {report.idle}, busy {report.busy}"
    )
    return EXIT_OK


def default_timeout_ms(lease_ms: int) -> int:
    """An HTTP timeout that leaves a quarter of the lease to record the outcome."""
    return max(1, lease_ms * 3 // 4)


def cmd_demo(args: argparse.Namespace) -> int:
    return demo.run_demo(orders=args.orders, lease_ms=args.lease_ms, kill_after=args.kill_after)


# --- The parser: one row per command ---------------------------------------------


class Command(NamedTuple):
    """One sub-command: its name, one-line help, options, handler and longer description."""

    name: str
    help: str
    options: Callable[[argparse.ArgumentParser], None]
    handler: Callable[[argparse.Namespace], int]
    description: str | None = None


# In the order ``--help`` lists them.
COMMANDS = (
    Command("init", "create a queue file (an existing one is kept)", _queue_arg, cmd_init),
    Command(
        "enqueue",
        "add a delivery job",
        _enqueue_options,
        cmd_enqueue,
        "Add the job {id, qty}. Enqueueing the same id and qty again is a harmless intake "
        "retry (the existing job is kept); the same id with another qty is a conflict "
        "(exit 1).",
    ),
    Command(
        "status",
        "count jobs per status and show the next due job",
        _json_flag("one JSON object"),
        cmd_status,
    ),
    Command(
        "dead",
        "list quarantined (dead) jobs with their reason",
        _json_flag("a JSON list"),
        cmd_dead,
        "List dead jobs: reason is 'deadline' (ttl passed), 'exhausted' (no attempts left) "
        "or 'permanent' (the receiver refused it).",
    ),
    Command(
        "redrive",
        "re-queue a dead job, with an audit note",
        _redrive_options,
        cmd_redrive,
        "Put a dead job back to pending with a fresh attempt budget and deadline. An audit "
        "row (id, token, time, note) is written in the same transaction and printed. The "
        "fencing token is kept, so no old ticket revives.",
    ),
    Command(
        "serve",
        "run the HTTP receiver (prints its URL and port)",
        _serve_options,
        cmd_serve,
        "Run the receiver: POST /deliveries applies each (id, qty) once, recorded in its "
        "own inbox file; GET / shows the inbox totals. Stops on Ctrl-C or SIGTERM, or after "
        "--max-seconds.",
    ),
    Command("inbox", "show a receiver inbox file's totals", _inbox_options, cmd_inbox),
    Command(
        "audit",
        "check a queue file against the receiver's inbox: nothing lost, no effect twice",
        _audit_options,
        cmd_audit,
        "Read the queue file and the receiver's inbox file (changing neither) and check that "
        "every job is done or dead, no effect was applied twice, every done job has its "
        "effect, every effect belongs to a job with its qty, and no token went down. Run it "
        "once the couriers have stopped. Exit 1 if a check fails.",
    ),
    Command(
        "run",
        "run a courier that delivers jobs to a receiver",
        _run_options,
        cmd_run,
        "Claim, deliver and finish jobs one at a time until a limit is reached. It pauses "
        "briefly when nothing is due or the file is busy. Ctrl-C or SIGTERM stops it after "
        "the current delivery.",
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


def build_parser() -> argparse.ArgumentParser:
    """The whole CLI: one sub-parser per row of ``COMMANDS``, each with its own --help."""
    parser = argparse.ArgumentParser(
        prog="python -m courier",
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


# --- The boundary ------------------------------------------------------------------


def _fail(code: int, message: str) -> int:
    print(f"courier: error: {message}", file=sys.stderr, flush=True)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; return its exit status (see ``EPILOG``)."""
    args = build_parser().parse_args(argv)
    handler: Callable[[argparse.Namespace], int] = args.handler
    try:
        return handler(args)
    except worker.Conflict as error:
        return _fail(EXIT_ERROR, f"conflict: {error}")
    except (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError) as error:
        return _fail(EXIT_USAGE, str(error))
    except sqlite3.Error as error:
        return _fail(EXIT_ERROR, f"database: {error}")
    except OSError as error:
        return _fail(EXIT_ERROR, str(error))
    except KeyboardInterrupt:
        return _fail(130, "interrupted")
