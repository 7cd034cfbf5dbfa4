"""The queue commands: ``init``, ``enqueue`` (one job, or many from a file) and ``status``."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import worker
from courier import attempts, backend, bulk, queueview
from courier.backend import Target
from courier.commands.connection import known_status, now_ms, open_existing_queue, with_queue
from courier.commands.options import (
    DEFAULT_CHUNK,
    DEFAULT_MAX_ATTEMPTS,
    checked_ms,
    int_at_least,
    integer,
    json_option,
    option,
    positive_float,
    queue_arg,
    ttl_options,
)
from courier.commands.output import EXIT_ERROR, EXIT_OK, out, print_json, when

__all__ = ["cmd_enqueue", "cmd_init", "cmd_status", "enqueue_options", "status_options"]


def enqueue_options(enqueue: argparse.ArgumentParser) -> None:
    """``enqueue QUEUE [ID QTY]``, its budget, and the bulk options."""
    queue_arg(enqueue)
    enqueue.add_argument("id", nargs="?", help="job id: 1-64 ASCII letters, digits, '_' or '-'")
    enqueue.add_argument("qty", nargs="?", type=integer, help="quantity, 1..1000")
    ttl_options(enqueue, "the job must be done within this time or it is quarantined")
    attempts = "delivery attempts before quarantine (1..16, default %(default)s)"
    option(enqueue, "--max-attempts", "N", integer, attempts, DEFAULT_MAX_ATTEMPTS)
    many = enqueue.add_argument_group("bulk", "many jobs from a file or stdin, instead of ID QTY")
    option(many, "--file", "PATH", str, "JSON lines or CSV (id,qty header); '-' is stdin")
    fmt = "jsonl or csv (default: csv for a .csv file, else jsonl)"
    option(many, "--format", "FMT", str, fmt)
    chunk = "jobs per transaction, 1..1000 (default %(default)s): one commit each"
    option(many, "--chunk", "N", integer, chunk, DEFAULT_CHUNK)


def status_options(status: argparse.ArgumentParser) -> None:
    """``status QUEUE``, ``--json`` and ``--watch``."""
    queue_arg(status)
    json_option(status, "one JSON object (one per line with --watch)")
    watch = "redraw every S seconds until Ctrl-C (default 1 when given alone)"
    status.add_argument(
        "--watch", metavar="S", type=positive_float, nargs="?", const=1.0, help=watch
    )
    option(status, "--times", "N", int_at_least(1), "with --watch: stop after N views")


def cmd_init(args: argparse.Namespace) -> int:
    """Create the queue, or keep an existing one; say which."""
    target, shown = args.queue, backend.describe(args.queue)
    if backend.is_conninfo(target):
        con = backend.open_queue(target)
        try:
            attempts.create_log(con)  # as the owner: couriers need only insert into it
            jobs = sum(queueview.status_counts(con).values())
        finally:
            con.close()
        out(f"queue {shown} ready: {jobs} jobs")
        return EXIT_OK
    if Path(target).exists() and not Path(target).is_dir():
        jobs = sum(with_queue(target, queueview.status_counts).values())
        out(f"queue {shown} already exists: kept its {jobs} jobs")
        return EXIT_OK
    backend.open_queue(target).close()
    out(f"created queue {shown}")
    return EXIT_OK


def cmd_enqueue(args: argparse.Namespace) -> int:
    """Enqueue ID QTY, or every job of ``--file``; exit 1 on a conflict in a file."""
    ttl_ms = checked_ms("--ttl-ms", args.ttl_ms)
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
    con = open_existing_queue(args.queue)
    try:
        event = {"id": job_id, "qty": qty}
        added = module.enqueue(con, event, now_ms(con, args.queue), ttl_ms, attempts)
        status = "pending" if added else known_status(con, job_id)
    finally:
        con.close()
    if added:
        out(f"enqueued {job_id} qty={qty} (True: new job, ttl {ttl_ms} ms, {attempts} attempts)")
    elif status in ("pending", "leased"):
        out(f"already queued {job_id} qty={qty} (False: intake retry, job kept as it was)")
    else:
        out(
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
        stdin = getattr(sys.stdin, "buffer", None)  # a text stream without one: its text
        data = stdin.read() if stdin is not None else sys.stdin.read().encode("utf-8")
        source, fmt = "stdin", args.format or "jsonl"
    else:
        try:
            data = Path(args.file).read_bytes()
        except OSError as error:  # missing, a folder, unreadable: nothing was enqueued
            raise ValueError(
                f"cannot read --file {args.file!r} ({error.strerror or error}): nothing enqueued"
            ) from None
        source = args.file
        fmt = args.format or bulk.sniff_format(args.file)
    text, undecodable = bulk.decode_lines(data)
    records = bulk.parse_records(text, fmt, source, undecodable)
    module = backend.queue_module(args.queue)
    con = open_existing_queue(args.queue)
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
    out(
        f"read {len(records)} jobs: {new} enqueued, {known} already there (intake retries), "
        f"{len(conflicts)} conflicts; {commits} commits of up to {chunk}"
    )
    if conflicts:
        shown = ", ".join(conflicts[:10]) + (" ..." if len(conflicts) > 10 else "")
        out(f"conflicts (the id is there with another qty; nothing written for them): {shown}")
        return EXIT_ERROR
    return EXIT_OK


def _status_view(target: Target) -> dict[str, Any]:
    return dict(with_queue(target, lambda con: queueview.overview(con, now_ms(con, target))))


def _print_status(target: Target, view: dict[str, Any]) -> None:
    now = view["now_ms"]
    out(f"queue {backend.describe(target)} at {when(now)}")
    for status, count in view["counts"].items():
        out(f"  {status:<8}{count:>6}")
    out(f"  {'due now':<8}{view['due']:>6}")
    out(f"  {'audit':<8}{view['redrives']:>6} redrive rows")
    if view["seconds_suspects"]:
        out(
            f"warning: {view['seconds_suspects']} jobs have a deadline before 1973: their "
            "times were given in seconds; every time is in milliseconds (time.time_ns() // 10**6)"
        )
    job = view["next_due"]
    if job is None:
        out("next due: none")
        return
    since = job["available_at"] if job["status"] == "pending" else job["lease_until"]
    out(
        f"next due: {job['id']} ({job['status']}, qty {job['qty']}, token {job['token']}, "
        f"attempts {job['attempts']}/{job['max_attempts']}, due since {when(since)}, "
        f"for {now - since} ms)"
    )


def cmd_status(args: argparse.Namespace) -> int:
    """Show the counts and the next due job, once or every ``--watch`` seconds."""
    if args.watch is None:
        view = _status_view(args.queue)
        print_json(view) if args.json else _print_status(args.queue, view)
        return EXIT_OK
    clear = sys.stdout.isatty() and not args.json
    shown = 0
    try:
        while args.times is None or shown < args.times:
            view = _status_view(args.queue)
            if clear:
                sys.stdout.write("\x1b[H\x1b[2J")
            print_json(view) if args.json else _print_status(args.queue, view)
            shown += 1
            if args.times is not None and shown >= args.times:
                break
            if not args.json:
                out(f"(every {args.watch:g} s; Ctrl-C to stop)")
            time.sleep(args.watch)
    except KeyboardInterrupt:
        pass  # Ctrl-C is how a watch ends
    return EXIT_OK
