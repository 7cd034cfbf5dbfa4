"""What a command shows: its lines, its JSON, its times, and its exit statuses.

Every line is flushed as it is printed, so a courier's or a receiver's log reads
live through a pipe, and shown with its control and bidirectional characters
escaped (``courier.printable``): a receiver's answer or a request line can neither
act on the terminal nor reorder what it shows. Human output shows every time as
milliseconds with the ISO time beside it (``when``).
"""

from __future__ import annotations

import datetime
import json
from typing import Any

from courier.printable import printable

__all__ = [
    "EXIT_ERROR",
    "EXIT_INTERRUPTED",
    "EXIT_OK",
    "EXIT_PIPE",
    "EXIT_USAGE",
    "compact_when",
    "distance",
    "in_words",
    "inbox_totals",
    "out",
    "print_json",
    "relative_when",
    "when",
]

EXIT_OK = 0
EXIT_ERROR = 1  # the command ran and failed: a conflict, a busy or broken file
EXIT_USAGE = 2  # the input was wrong: a bad argument, a missing file
EXIT_INTERRUPTED = 130
EXIT_PIPE = 141  # the reader of our output went away (e.g. `| head`), as after SIGPIPE


def out(line: str = "") -> None:
    """Print one line to stdout, control and bidirectional characters escaped, and flush it."""
    print(printable(line), flush=True)


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


def in_words(ms: int) -> str:
    """A duration in words, to two units: ``850 ms``, ``3.2 s``, ``4 min 5 s``,
    ``2 h 10 min``, ``3 d 4 h``."""
    ms = abs(ms)
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms // 100 / 10:.1f} s".replace(".0 s", " s")
    units = (("d", 86_400_000), ("h", 3_600_000), ("min", 60_000), ("s", 1000))
    for index, (name, size) in enumerate(units[:-1]):
        if ms >= size:
            small_name, small_size = units[index + 1]
            big, rest = divmod(ms, size)
            small = rest // small_size
            return f"{big} {name}" + (f" {small} {small_name}" if small else "")
    return f"{ms // 1000} s"


def distance(ms: int, now_ms: int) -> str:
    """How far ``ms`` is from ``now_ms``, in words: ``in 3.2 s``, ``4 min 5 s ago``, ``now``."""
    if ms == now_ms:
        return "now"
    return f"in {in_words(ms - now_ms)}" if ms > now_ms else f"{in_words(now_ms - ms)} ago"


def relative_when(ms: int, now_ms: int) -> str:
    """``ms`` as ``when`` shows it, with its ``distance`` from ``now_ms``:
    ``1796009662536 (2026-11-30T...Z, in 3.2 s)``."""
    shown = when(ms)
    far = distance(ms, now_ms)
    return shown[:-1] + f", {far})" if shown.endswith(")") else f"{shown} ({far})"


def compact_when(ms: int, now_ms: int) -> str:
    """``ms`` with its ``distance`` from ``now_ms`` alone: ``1796009662536 (in 3.2 s)``."""
    return f"{ms} ({distance(ms, now_ms)})"
