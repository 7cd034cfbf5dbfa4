"""The job-inspection commands: ``jobs`` (a filtered list), ``show`` (one job),
``dead`` (the quarantined ones with their last cause) and ``redrives`` (the audit).

They only read: each runs its reads on a connection of its own, and ``show`` reads
the job, its audit rows and the queue's clock in one snapshot, then explains the
job with the model (``model.explain``: why it is where it is, what happens next).
"""

from __future__ import annotations

import argparse
from typing import Any

from courier import backend, bulk, queueview
from courier.attempts import attempts_of, cause_text, history, last_attempts
from courier.commands.connection import now_ms, with_queue
from courier.commands.options import int_at_least, json_option, known_value, option, queue_arg
from courier.commands.output import EXIT_OK, compact_when, out, print_json, relative_when, when
from model.explain import explain, headline, lines

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
    reasons = f"only jobs with this reason ({', '.join(queueview.REASONS)}; retry: pending again)"
    option(jobs, "--reason", "R", str, reasons)
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
    known_value("--status", args.status, queueview.STATUSES)
    known_value("--reason", args.reason, queueview.REASONS)
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
    """The last row of a job's attempt log in words, with who and which token."""
    if attempt is None:
        return "no attempt recorded"
    if attempt["outcome"] == "claimed":
        return (
            f"claimed by {attempt['owner']} at {when(attempt['at_ms'])}, no outcome recorded "
            f"(token {attempt['token']})"
        )
    return f"{cause_text(attempt)} (by {attempt['owner']}, token {attempt['token']})"


def attempt_words(attempt: dict[str, Any]) -> str:
    """One attempt of ``courier.attempts.history`` in words (``show``, the web page)."""
    claimed = attempt["claimed_at_ms"]
    token, owner = attempt["token"], attempt["owner"]
    start = f"token {token if token is not None else '?'}  {owner}"
    if attempt["outcome"] is None:
        return f"{start}  claimed by {owner} at {when(claimed)}, no outcome recorded"
    took = "" if claimed is None else f"claimed at {when(claimed)}, "
    return (
        f"{start}  {took}{attempt['outcome']} at {when(attempt['at_ms'])} -> "
        f"{attempt['status']} ({cause_text(attempt)})"
    )


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
    """Show one job's row, the model's explanation of it, its attempts and its audit rows."""
    job_id = bulk.check_id("job id", args.id)

    def read(con: Any) -> tuple[dict[str, Any] | None, list[dict[str, Any]], int]:
        with queueview.snapshot(con):
            now = now_ms(con, args.queue)
            return queueview.job(con, job_id), queueview.redrives(con, job_id), now

    job, audit, now = with_queue(args.queue, read)
    if job is None:
        raise ValueError(f"no job {job_id!r} in {backend.describe(args.queue)}")
    attempts = history(attempts_of(args.queue, job_id))
    explanation = explain(job, now)
    if args.json:
        shown = {"job": job, "explanation": explanation.as_dict(), "attempts": attempts}
        print_json({**shown, "redrives": audit})
        return EXIT_OK
    out(f"job {job_id}")
    for column in queueview.JOB_COLUMNS:
        value = job[column]
        if value is None:
            value = "-"
        elif column in ("available_at", "deadline", "lease_until"):
            value = relative_when(value, now)
        out(f"  {column:<13}{value}")
    out(f"at {when(now)}: {headline(explanation, compact_when)}")
    described = lines(explanation, compact_when)
    if described:
        out(f"transitions from {job['status']} (rows and guards of docs/state-machine.md):")
    for line in described:
        out(f"  {line}")
    unfinished = sum(1 for attempt in attempts if attempt["outcome"] is None)
    without = f", {unfinished} without an outcome" if unfinished else ""
    out(f"attempts ({len(attempts)} recorded{without})")
    for attempt in attempts:
        out(f"  {attempt_words(attempt)}")
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
