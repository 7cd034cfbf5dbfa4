"""The ``redrive`` command: one dead job, or ``--all`` of them (of one ``--reason``),
back to pending with a fresh budget, one audit row each.

``redrive_one`` is the one redrive of the CLI and of the web page (``courier.web``):
it returns the audit row that this very call wrote.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from courier import backend, bulk, queueview
from courier.backend import Target
from courier.commands.connection import known_status, now_ms, open_existing_queue
from courier.commands.options import checked_ms, known_value, option, queue_arg, ttl_options
from courier.commands.output import EXIT_OK, out

__all__ = ["cmd_redrive", "redrive_one", "redrive_options"]

_LAST_AUDIT_SEQ = {"sqlite": "SELECT last_insert_rowid()", "postgres": "SELECT lastval()"}


def redrive_options(redrive: argparse.ArgumentParser) -> None:
    """``redrive QUEUE [ID] --note NOTE``, ``--all`` and ``--reason``."""
    queue_arg(redrive)
    redrive.add_argument("id", nargs="?", help="id of the dead job (or --all)")
    note = "why, for the audit trail: 1-64 ASCII letters, digits, '_' or '-' (e.g. ticket-4711)"
    option(redrive, "--note", "NOTE", str, note, required=True)
    ttl_options(redrive, "new deadline")
    redrive.add_argument(
        "--all", action="store_true", help="every dead job (with --reason: of that reason)"
    )
    reasons = f"with --all: only dead jobs of this reason ({', '.join(queueview.DEAD_REASONS)})"
    option(redrive, "--reason", "R", str, reasons)


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
    """Redrive the dead job ID, or ``--all`` dead jobs; print the audit rows written."""
    note = bulk.check_id("--note", args.note)
    ttl_ms = checked_ms("--ttl-ms", args.ttl_ms)
    if args.all == (args.id is not None):
        raise ValueError("give either the ID of one dead job or --all")
    if args.reason is not None and not args.all:
        raise ValueError("--reason goes with --all")
    known_value("--reason", args.reason, queueview.DEAD_REASONS)
    con = open_existing_queue(args.queue)
    try:
        if not args.all:
            job_id = bulk.check_id("job id", args.id)
            status = known_status(con, job_id)
            if status == "unknown":
                raise ValueError(f"no job {job_id!r} in {backend.describe(args.queue)}")
            if status != "dead":
                raise ValueError(f"{job_id} is {status}: only a dead job can be redriven")
            row = redrive_one(con, args.queue, job_id, ttl_ms, note)
            out(f"redriven {job_id}: pending again with a fresh budget, deadline in {ttl_ms} ms")
            out(f"audit row: {json.dumps(row)}")
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
    out(f"redriven {len(rows)} of {len(dead)} {which}, one audit row each (note {note})")
    if rows:
        out(f"audit rows: #{rows[0]['seq']} .. #{rows[-1]['seq']}")
    return EXIT_OK
