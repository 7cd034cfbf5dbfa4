"""Stopping a long-running command between its steps: SIGINT, SIGTERM and a cut-short sleep.

The rules this module keeps:

1. The first SIGINT or SIGTERM sets a ``StopSignal`` (remembering which signal it
   was) and, with a log, says that the process stops after the current step; a
   loop that checks the event between its steps ends cleanly.
2. With ``impatient``, a second signal raises ``KeyboardInterrupt`` at once where
   the main thread is, a blocked socket read included (a courier's hung delivery:
   its job stays leased until its lease ends). Without it, later signals are
   ignored as the first was.
3. Every wait of a loop is a ``pause``: a sleep in short slices that ends early
   once the stop event is set, so a stop never waits out a backoff.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Callable

__all__ = ["PAUSE_SLICE_S", "StopSignal", "pause", "stop_on_signals"]

PAUSE_SLICE_S = 0.05

Log = Callable[[str], None]


class StopSignal(threading.Event):
    """A stop event that remembers the signal that set it (``signum``), if any."""

    signum: int | None = None


def stop_on_signals(log: Log | None = None, impatient: bool = False) -> StopSignal:
    """An event that SIGINT and SIGTERM set, so that a loop stops between its steps.

    Installs the handlers for this process (call it from the main thread). The first
    signal sets the event (and ``signum``) and, with ``log``, says that the process
    stops after the current step. With ``impatient`` a second signal raises
    ``KeyboardInterrupt`` where the main thread is, a blocked socket read included;
    without it, later signals are ignored as the first was.
    """
    stop = StopSignal()

    def handle(signum: int, frame: object) -> None:
        if stop.is_set() and impatient:
            raise KeyboardInterrupt
        if stop.is_set():
            return
        stop.signum = signum
        stop.set()
        if log is not None:
            again = "; send it again to stop at once" if impatient else ""
            log(f"{signal.Signals(signum).name}: stopping after the current delivery{again}")

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
    return stop


def pause(seconds: float, stop: threading.Event) -> None:
    """Sleep ``seconds`` in short slices, returning early once ``stop`` is set."""
    until = time.monotonic() + seconds
    for _ in range(int(seconds / PAUSE_SLICE_S) + 2):
        left = until - time.monotonic()
        if left <= 0 or stop.is_set():
            return
        time.sleep(min(left, PAUSE_SLICE_S))
