"""What a command shows: its lines, its JSON, its times, and its exit statuses.

Every line is flushed as it is printed, so a courier's or a receiver's log reads
live through a pipe. Human output shows every time as milliseconds with the ISO
time beside it (``when``).
"""

from __future__ import annotations

import datetime
import json
from typing import Any

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE",
    "EXIT_USAGE",
    "inbox_totals",
    "out",
    "print_json",
    "when",
]

EXIT_OK = 0
EXIT_ERROR = 1  # the command ran and failed: a conflict, a busy or broken file
EXIT_USAGE = 2  # the input was wrong: a bad argument, a missing file
EXIT_INTERRUPTED = 130
EXIT_PIPE = 141  # the reader of our output went away (e.g. `| head`), as after SIGPIPE


def out(line: str = "") -> None:
    """Print one line to stdout and flush it."""
    print(line, flush=True)


def print_json(value: object) -> None:
    """Print ``value`` as one line of JSON."""
    out(json.dumps(value))


def when(ms: int | None) -> str:
    """``ms`` with its UTC ISO time beside it: ``1796009662536 (2026-11-30T...Z)``."""
    if ms is None:
        return "-"
    try:
        moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    except (OverflowError, OSError, ValueError):
        return str(ms)
    return f"{ms} ({moment.isoformat(timespec='milliseconds').replace('+00:00', 'Z')})"


def inbox_totals(summary: dict[str, Any]) -> str:
    """The totals of a receiver's inbox (``courier.inbox.Inbox.summary``), one line."""
    return (
        f"{summary['requests']} requests, {summary['effects']} effects, "
        f"{summary['inbox_rows']} inbox rows, total qty {summary['total_qty']}"
    )
