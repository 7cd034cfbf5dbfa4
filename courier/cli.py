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

This module is the parser (``COMMANDS``, one row per command) and that boundary
(``main``); the commands themselves live in ``courier.commands``, one command group
per module.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import worker
from courier import backend, demo
from courier.commands.audit import (
    audit_options,
    cmd_audit,
    cmd_demo,
    cmd_inbox,
    demo_options,
    inbox_options,
)
from courier.commands.conform import cmd_conform, conform_options
from courier.commands.connection import now_ms
from courier.commands.jobs import (
    cmd_dead,
    cmd_jobs,
    cmd_redrives,
    cmd_show,
    jobs_options,
    redrives_options,
    show_options,
)
from courier.commands.options import json_flag, queue_arg
from courier.commands.output import (
    EXIT_ERROR,
    EXIT_INTERRUPTED,
    EXIT_OK,
    EXIT_PIPE,
    EXIT_USAGE,
    when,
)
from courier.commands.queue import (
    cmd_enqueue,
    cmd_init,
    cmd_status,
    enqueue_options,
    status_options,
)
from courier.commands.redrive import cmd_redrive, redrive_options
from courier.commands.services import (
    cmd_run,
    cmd_serve,
    cmd_web,
    run_options,
    serve_options,
    web_options,
)
from courier.printable import printable

# now_ms and when are courier.commands'; they are named here too, where callers found
# them before the split.
__all__ = ["EXIT_ERROR", "EXIT_OK", "EXIT_PIPE", "EXIT_USAGE", "main", "now_ms", "when"]

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
unreachable server, a missing extra), 2 bad input (bad argument, missing file),
130 interrupted. Run 'courier COMMAND --help' for the options of one command."""


DISTRIBUTION = "lease-queue"

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
    Command("init", "create a queue (an existing one is kept)", queue_arg, cmd_init),
    Command(
        "enqueue",
        "add a delivery job, or many from a file or stdin",
        enqueue_options,
        cmd_enqueue,
        "Add the job {id, qty}, or with --file every job of a JSON-lines or CSV file "
        "('-': stdin), one transaction per --chunk jobs. Enqueueing the same id and qty "
        "again is a harmless intake retry (the existing job is kept); the same id with "
        "another qty is a conflict (exit 1).",
    ),
    Command(
        "status",
        "count jobs per status and show the next due job",
        status_options,
        cmd_status,
    ),
    Command(
        "jobs",
        "list jobs, filtered by status, reason, owner or id prefix",
        jobs_options,
        cmd_jobs,
    ),
    Command(
        "show",
        "one job: its row, its attempt history and its redrive audit rows",
        show_options,
        cmd_show,
    ),
    Command(
        "dead",
        "list quarantined (dead) jobs with their reason and last cause",
        json_flag("a JSON list"),
        cmd_dead,
        "List dead jobs: reason is 'deadline' (ttl passed), 'exhausted' (no attempts left) "
        "or 'permanent' (the receiver refused it), with the last recorded attempt's cause "
        "(HTTP status and body, timeout, connection error).",
    ),
    Command(
        "redrives",
        "list the redrive audit table",
        redrives_options,
        cmd_redrives,
    ),
    Command(
        "redrive",
        "re-queue a dead job (or --all of them), with an audit note",
        redrive_options,
        cmd_redrive,
        "Put a dead job back to pending with a fresh attempt budget and deadline. An audit "
        "row (id, token, time, note) is written in the same transaction and printed. The "
        "fencing token is kept, so no old ticket revives. With --all (and --reason), every "
        "such dead job, one transaction and one audit row each.",
    ),
    Command(
        "serve",
        "run the HTTP receiver (prints its URL and port)",
        serve_options,
        cmd_serve,
        "Run the receiver: POST /deliveries applies each (id, qty) once, recorded in its "
        "own inbox file (never a queue file); GET / shows the inbox totals. Stops on Ctrl-C "
        "or SIGTERM, or after --max-seconds.",
    ),
    Command("inbox", "show a receiver inbox file's totals", inbox_options, cmd_inbox),
    Command(
        "audit",
        "check a queue against the receiver's inbox: nothing lost, no effect twice",
        audit_options,
        cmd_audit,
        "Read the queue and the receiver's inbox file (changing neither) and check that "
        "every job is done or dead, no effect was applied twice, every done job has its "
        "effect, every effect belongs to a job with its qty, and no token went down. Run it "
        "once the couriers have stopped. Exit 1 if a check fails.",
    ),
    Command(
        "run",
        "run a courier that delivers jobs to a receiver",
        run_options,
        cmd_run,
        "Claim, deliver and finish jobs one at a time until a stop rule holds, recording "
        "each attempt's cause in the attempt log. It pauses briefly when nothing is due or "
        "the queue is busy. Ctrl-C or SIGTERM stops it after the current delivery; a second "
        "Ctrl-C stops it at once (exit 130).",
    ),
    Command(
        "web",
        "serve a web page for operators (127.0.0.1, read-only unless --allow-redrive)",
        web_options,
        cmd_web,
        "Serve a page with the counts by status, the oldest due job, and the dead jobs by "
        "reason with their attempt history; with --allow-redrive, a form redrives a dead "
        "job with a required note. Binds 127.0.0.1 on a free port unless told otherwise.",
    ),
    Command(
        "conform",
        "check that every committed change of the queue is one step of the model",
        conform_options,
        cmd_conform,
        "With --install, add a change feed to the queue (an events table and triggers that "
        "record every change of jobs and redrives in the writer's own transaction); then "
        "check that each transaction committed since is the effect of one operation of the "
        "executable specification (model/) for some arguments, or --follow as they commit. "
        "Exit 1 if any transaction is unexplained. --uninstall removes the feed.",
    ),
    Command(
        "demo",
        "two couriers, one killed mid-delivery, the other recovers",
        demo_options,
        cmd_demo,
        demo.__doc__,
    ),
)
# Descriptions with their own line breaks (the demo's docstring) are printed as written.
_RAW_DESCRIPTIONS = frozenset({"demo"})


def version() -> str:
    """The installed distribution's version (``pyproject.toml``'s), or why there is none."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return f"unknown ({DISTRIBUTION} is not installed: pip install .)"


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
    parser.add_argument(
        "--version", action="version", version=f"%(prog)s {version()}", help="print the version"
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
    """One ``courier: error:`` line (a server's message may hold line breaks and
    anything else: shown escaped, on one line)."""
    print(f"courier: error: {printable(message, newlines=False)}", file=sys.stderr, flush=True)
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
    except (backend.Unreachable, backend.Busy, backend.MissingExtra) as error:
        return _fail(EXIT_ERROR, str(error))
    except (ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError) as error:
        return _fail(EXIT_USAGE, str(error))
    except sqlite3.Error as error:
        if backend.is_busy(error):
            return _fail(EXIT_ERROR, f"the queue is busy: {_database_error(error)}; try again")
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
