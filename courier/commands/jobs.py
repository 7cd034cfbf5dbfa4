"""The job-inspection commands: ``jobs`` (a filtered list), ``show`` (one job),
``dead`` (the quarantined ones with their last cause) and ``redrives`` (the audit).

They only read: each runs its reads on a connection of its own, and ``show`` reads
the job and its audit rows in one snapshot.
"""

from __future__ import annotations

import argparse
from typing import Any

from courier import backend, bulk, queueview
from courier.attempts import attempts_of, last_attempts
from courier.commands.connection import with_queue
from courier.commands.options import int_at_least, json_option, option, queue_arg
from courier.commands.output import EXIT_OK, out, print_json, when

__all__ = [
    "cmd_dead",
    "cmd_jobs",
    "cmd_redrives",
    "cmd_show",
    "jobs_options",
    "redrives_options",
    "show_options",
]


def jobs_options(jobs: argparse.ArgumentParser) -> None:
    """``jobs QUEUE`` and its filters."""
    queue_arg(jobs)
    option(jobs, "--status", "S", str, f"only this status ({', '.join(queueview.STATUSES)})")
    option(jobs, "--reason", "R", str, "only dead jobs with this reason")
    option(jobs, "--owner", "NAME", str, "only jobs leased to this courier")
    option(jobs, "--prefix", "P", str, "only ids starting with P")
    option(jobs, "--limit", "N", int_at_least(1), "at most N rows (default %(default)s)", 100)
    json_option(jobs, "a JSON list")


def show_options(show: argparse.ArgumentParser) -> None:
    """``show QUEUE ID``."""
    queue_arg(show)
    show.add_argument("id", help="the job's id")
    json_option(show, "one JSON object: job, attempts, redrives")


def redrives_options(redrives: argparse.ArgumentParser) -> None:
    """``redrives QUEUE``, of one job or of all."""
    queue_arg(redrives)
    option(redrives, "--id", "ID", str, "only the audit rows of this job")
    option(redrives, "--limit", "N", int_at_least(1), "at most N rows (default %(default)s)", 1000)
    json_option(redrives, "a JSON list")


def _job_line(job: dict[str, Any]) -> str:
    attempts = f"{job['attempts']}/{job['max_attempts']}"
    return (
        f"{job['id']:<24} {job['qty']:>4}  {job['status']:<8}{job['reason'] or '':<10} "
        f"{job['token']:>5}  {attempts:>8}  {job['owner'] or '-':<12} {when(job['deadline'])}"
    )


def cmd_jobs(args: argparse.Namespace) -> int:
    """List the jobs that pass the filters, up to ``--limit``."""
    if args.status is not None and args.status not in queueview.STATUSES:
        raise ValueError(f"--status must be one of {', '.join(queueview.STATUSES)}")
    jobs: list[dict[str, Any]] = with_queue(
        args.queue,
        lambda con: queueview.find_jobs(
            con, args.status, args.reason, args.owner, args.prefix, args.limit
        ),
    )
    if args.json:
        print_json(jobs)
        return EXIT_OK
    header = f"{'id':<24} {'qty':>4}  {'status':<8}{'reason':<10} {'token':>5}  {'attempts':>8}"
    out(f"{header}  {'owner':<12} deadline")
    for job in jobs:
        out(_job_line(job))
    more = " (the limit; --limit N for more)" if len(jobs) == args.limit else ""
    out(f"{len(jobs)} jobs{more}")
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
    """List the dead jobs with their reason, redrives and last recorded cause."""
    jobs: list[dict[str, Any]] = with_queue(args.queue, queueview.dead_jobs)
    last = last_attempts(args.queue) if jobs else {}
    for job in jobs:
        job["last_attempt"] = last.get(job["id"])
    if args.json:
        print_json(jobs)
        return EXIT_OK
    if not jobs:
        out("no dead jobs")
        return EXIT_OK
    out(
        f"{'id':<24} {'qty':>4}  {'reason':<10} {'token':>5}  {'attempts':>8}  {'redrives':>8}"
        "  last cause"
    )
    for job in jobs:
        attempts = f"{job['attempts']}/{job['max_attempts']}"
        out(
            f"{job['id']:<24} {job['qty']:>4}  {job['reason']:<10} {job['token']:>5}  "
            f"{attempts:>8}  {job['redrives']:>8}  {_cause_text(job['last_attempt'])}"
        )
    out(
        f"{len(jobs)} dead; see one with: show QUEUE ID; re-queue with: redrive QUEUE ID --note WHY"
    )
    return EXIT_OK


def cmd_show(args: argparse.Namespace) -> int:
    """Show one job's row, its attempt history and its redrive audit rows."""
    job_id = bulk.check_id("job id", args.id)

    def read(con: Any) -> tuple[dict[str, Any] | None, list[dict[str, Any]]]:
        with queueview.snapshot(con):
            return queueview.job(con, job_id), queueview.redrives(con, job_id)

    job, audit = with_queue(args.queue, read)
    if job is None:
        raise ValueError(f"no job {job_id!r} in {backend.describe(args.queue)}")
    history = attempts_of(args.queue, job_id)
    if args.json:
        print_json({"job": job, "attempts": history, "redrives": audit})
        return EXIT_OK
    out(f"job {job_id}")
    for column in queueview.JOB_COLUMNS:
        value = job[column]
        is_time = column in ("available_at", "deadline", "lease_until")
        out(f"  {column:<13}{when(value) if is_time else value}")
    out(f"attempts ({len(history)} recorded)")
    for row in history:
        out(
            f"  {when(row['at_ms'])}  token {row['token']}  {row['owner']:<10} "
            f"{row['outcome']:<9} -> {row['status']:<8} {_cause_text(row).split(' (by ')[0]}"
        )
    out(f"redrives ({len(audit)})")
    for row in audit:
        out(f"  #{row['seq']} {when(row['at_ms'])}  token {row['token']}  note {row['note']}")
    return EXIT_OK


def cmd_redrives(args: argparse.Namespace) -> int:
    """List the redrive audit rows, of one job (``--id``) or of all."""
    job_id = None if args.id is None else bulk.check_id("--id", args.id)
    rows: list[dict[str, Any]] = with_queue(
        args.queue, lambda con: queueview.redrives(con, job_id, args.limit)
    )
    if args.json:
        print_json(rows)
        return EXIT_OK
    for row in rows:
        out(
            f"#{row['seq']:<5} {row['id']:<24} token {row['token']:>4}  {when(row['at_ms'])}  "
            f"{row['note']}"
        )
    out(f"{len(rows)} redrive audit rows")
    return EXIT_OK
