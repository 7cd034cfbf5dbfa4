"""The log of a long-running command (``run``, ``serve``, ``web``): one line per event.

The rules it keeps:

1. **One line per event, timestamped.** Each line starts with the UTC time it was
   written, to the millisecond (``2026-01-02T03:04:05.678Z``), is flushed at once
   (a pipe reads it live), and is one line: line breaks inside a message (a
   PostgreSQL error's hint) become `` / ``, and control and bidirectional
   characters from outside are escaped (``courier.printable``).
2. **An unchanged failure is not a flood.** A line equal to the one before is held
   back; it is written again, with how many times it came, once every
   ``REPEAT_EVERY_S`` at most while it keeps coming, and when another line (or
   ``close``) ends the run, what was held back is counted in one line. So a
   courier that backs off five times a second through an outage writes a line
   every few seconds, not thousands.
"""

from __future__ import annotations

import datetime
import threading
import time
from collections.abc import Callable

from courier.printable import printable

__all__ = ["REPEAT_EVERY_S", "LogLines", "stamp"]

REPEAT_EVERY_S = 5.0

Write = Callable[[str], None]


def _print(line: str) -> None:
    print(line, flush=True)


def stamp(ms: int) -> str:
    """``ms`` since the epoch as the UTC ISO time a log line starts with."""
    moment = datetime.datetime.fromtimestamp(ms / 1000, tz=datetime.UTC)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _one_line(message: str) -> str:
    parts = [" ".join(part.split()) for part in message.splitlines()]
    return printable(" / ".join(part for part in parts if part), newlines=False)


class LogLines:
    """A log (rule 1 and 2): call it with each message; ``close`` it at the end.

    ``write`` gets each finished line; ``wall_ms`` and ``monotonic`` are the clocks
    (the wall clock for the stamp, the monotonic one for the repeats). Safe to call
    from several threads (the receiver's handlers).
    """

    def __init__(
        self,
        write: Write = _print,
        wall_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        monotonic: Callable[[], float] = time.monotonic,
        repeat_every_s: float = REPEAT_EVERY_S,
    ) -> None:
        self._write = write
        self._wall_ms = wall_ms
        self._monotonic = monotonic
        self._every = repeat_every_s
        self._lock = threading.Lock()
        self._last: str | None = None
        self._held = 0  # repeats of the last line not yet counted in a line
        self._shown_at = 0.0  # when the last line (or its count) was written

    def __call__(self, message: str) -> None:
        line = _one_line(message)
        with self._lock:
            now = self._monotonic()
            if line == self._last:
                self._held += 1
                if now - self._shown_at >= self._every:
                    seconds = now - self._shown_at
                    self._emit(f"{line} (again: {self._held} times in {seconds:.0f} s)")
                    self._held, self._shown_at = 0, now
                return
            self._count_held(now)
            self._emit(line)
            self._last, self._shown_at = line, now

    def _count_held(self, now: float) -> None:
        if self._held:
            times = "once more" if self._held == 1 else f"{self._held} more times"
            self._emit(f"(the line before came {times} in {now - self._shown_at:.0f} s)")
            self._held = 0

    def _emit(self, line: str) -> None:
        self._write(f"{stamp(self._wall_ms())} {line}")

    def close(self) -> None:
        """Count what was held back, if anything."""
        with self._lock:
            self._count_held(self._monotonic())
