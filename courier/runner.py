"""The courier: a bounded loop around ``worker.run_file`` with a real clock and HTTP.

Rules this module keeps:

1. Time is the host's wall clock in milliseconds (``clock_ms``): every courier and
   the receiver on one host share that base. The loop's own bounds use the
   monotonic clock, so a wall-clock step cannot make it spin or stop early.
2. ``HttpSend`` maps the receiver's answer onto the worker's outcomes: any 2xx is
   ``True``; a timeout, a refused or broken connection, 408, 429 or 5xx raises
   ``worker.Retryable`` (the effect may or may not have happened: the receiver
   deduplicates the re-send); any other status (4xx, an unexpected 3xx) raises
   ``worker.Permanent``.
3. The jitter that ``run_file`` needs comes from ``random.random()`` here; the
   worker itself has no randomness.
4. Every loop is bounded in count and time. When the queue has nothing claimable
   (``run_file`` returned ``None``) or the file is busy (``database is locked``
   after the 1 s busy timeout), the courier pauses with a capped, jittered backoff
   instead of dying or spinning. A busy error during ``finish`` leaves the job
   leased; its lease expires and it is delivered again, which the receiver's inbox
   absorbs.
5. ``StallAfterAcks`` is a crash drill: after the N-th acknowledged delivery it
   writes a report (with the ticket it captured before sending) and waits to be
   killed, so a supervisor can SIGKILL it between the receiver's commit and the
   queue's ``finish`` deterministically, not by timing luck.
"""

from __future__ import annotations

import http.client
import json
import os
import random
import signal
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import worker
from courier.queueview import connect_existing, leased_ticket, unfinished_count

__all__ = [
    "CourierReport",
    "HttpSend",
    "Limits",
    "StallAfterAcks",
    "Step",
    "classify_status",
    "clock_ms",
    "is_busy",
    "run_courier",
    "stop_on_signals",
]

DEFAULT_TIMEOUT_MS = 5000
MAX_RESPONSE_BYTES = 65536
IDLE_BASE_MS = 20
IDLE_CAP_MS = 250
PAUSE_SLICE_S = 0.05
RETRYABLE_4XX = frozenset({408, 429})
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6

Log = Callable[[str], None]
Send = Callable[[dict[str, Any]], bool]
Step = Callable[[Path, str, Callable[[], int], Send, float, int], dict[str, Any] | None]
"""One round: ``worker.run_file``'s signature and result (a drill may wrap it)."""


def clock_ms() -> int:
    """The host's wall clock in whole milliseconds: the queue's shared time base."""
    return time.time_ns() // 1_000_000


def _print(line: str) -> None:
    print(line, flush=True)


def stop_on_signals() -> threading.Event:
    """An event that SIGINT and SIGTERM set, so that a loop stops between its steps.

    Installs the handlers for this process (call it from the main thread); the
    signal no longer raises ``KeyboardInterrupt`` or ends the process at once.
    """
    stop = threading.Event()

    def handle(signum: int, frame: object) -> None:
        stop.set()

    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGTERM, handle)
    return stop


# --- Sending over HTTP --------------------------------------------------------------


def classify_status(status: int) -> bool:
    """Return ``True`` for a 2xx status, else raise the worker's classification.

    Raises:
        worker.Retryable: 408, 429 or 5xx: trying again later may succeed.
        worker.Permanent: any other status: the receiver refused this delivery.
    """
    if 200 <= status <= 299:
        return True
    if status in RETRYABLE_4XX or 500 <= status <= 599:
        raise worker.Retryable(f"receiver answered {status}")
    raise worker.Permanent(f"receiver answered {status}")


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Never follow a redirect: urllib would turn a POST into a GET."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class HttpSend:
    """``send`` for ``run_file``: POST one delivery as JSON to the receiver.

    Each call makes one request with ``X-Courier: <owner>``, no proxy and no
    redirects, bounded by ``timeout_ms``; see ``classify_status`` for the answer.
    Connection errors and timeouts raise ``worker.Retryable``: a timeout does not
    mean the work was not done, only that the answer was lost.
    """

    def __init__(self, url: str, owner: str, timeout_ms: int = DEFAULT_TIMEOUT_MS) -> None:
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"'url' must be an http:// or https:// URL, got {url!r}")
        if not worker.is_identifier(owner):
            raise ValueError(
                f"'owner' must be 1-64 ASCII letters, digits, '_' or '-', got {owner!r}"
            )
        if type(timeout_ms) is not int or not 1 <= timeout_ms <= 60_000:
            raise ValueError(f"'timeout_ms' must be an int in 1..60000, got {timeout_ms!r}")
        self.url = url
        self.owner = owner
        self.timeout_s = timeout_ms / 1000
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirects)

    def __call__(self, event: dict[str, Any]) -> bool:
        request = urllib.request.Request(
            self.url,
            data=json.dumps(event).encode("utf-8"),
            method="POST",
            headers={"Content-Type": "application/json", "X-Courier": self.owner},
        )
        try:
            with self._opener.open(request, timeout=self.timeout_s) as response:
                response.read(MAX_RESPONSE_BYTES)
                status: int = response.status
        except urllib.error.HTTPError as error:
            status = error.code
            error.close()
        except (urllib.error.URLError, OSError, http.client.HTTPException) as error:
            raise worker.Retryable(f"no answer from {self.url}: {error}") from error
        return classify_status(status)


# --- The crash drill ----------------------------------------------------------------


def write_json_atomically(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` so that a reader sees all of it or nothing."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(payload), encoding="utf-8")
    os.replace(partial, path)


@dataclass
class StallAfterAcks:
    """Wrap a ``send``: after the N-th acknowledged delivery, report and stall.

    Before each send it captures this courier's ticket from the queue file. After the
    ``after_acks``-th ``True`` it writes ``{"pid", "owner", "event", "ticket",
    "acked_at_ms"}`` to ``report_path`` (atomically) and sleeps up to
    ``stall_seconds``: the receiver has committed and the queue has not been told,
    which is the moment a supervisor kills it. If nobody does, it carries on as a
    late courier whose ``finish`` will find its lease gone (status ``stale``).
    """

    send: Send
    queue_path: Path
    owner: str
    after_acks: int
    report_path: Path
    stall_seconds: float
    acks: int = 0

    def __post_init__(self) -> None:
        if type(self.after_acks) is not int or self.after_acks < 1:
            raise ValueError(f"'after_acks' must be a positive int, got {self.after_acks!r}")
        if not 0 < self.stall_seconds <= 600:
            raise ValueError(f"'stall_seconds' must be in (0, 600], got {self.stall_seconds!r}")

    def __call__(self, event: dict[str, Any]) -> bool:
        ticket = leased_ticket(self.queue_path, event["id"], self.owner)
        acked = self.send(event)
        self.acks += 1
        if self.acks == self.after_acks:
            report = {
                "pid": os.getpid(),
                "owner": self.owner,
                "event": event,
                "ticket": ticket,
                "acked_at_ms": clock_ms(),
            }
            write_json_atomically(self.report_path, report)
            _pause(self.stall_seconds, threading.Event())
        return acked


# --- The loop -------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """When a courier stops. ``max_runs`` and ``max_seconds`` always bound it.

    ``max_idle_ms``: stop once nothing was claimable for that long (``None``: never).
    ``until_drained``: stop as soon as nothing is claimable and no job is pending or
    leased any more.
    """

    max_runs: int = 10_000
    max_seconds: float = 60.0
    max_idle_ms: int | None = None
    until_drained: bool = False

    def __post_init__(self) -> None:
        if type(self.max_runs) is not int or not 1 <= self.max_runs <= 10**7:
            raise ValueError(f"'max_runs' must be an int in 1..10**7, got {self.max_runs!r}")
        if not 0 < self.max_seconds <= 86_400:
            raise ValueError(f"'max_seconds' must be in (0, 86400], got {self.max_seconds!r}")
        if self.max_idle_ms is not None and not 0 <= self.max_idle_ms <= 86_400_000:
            raise ValueError(f"'max_idle_ms' must be in 0..86400000, got {self.max_idle_ms!r}")


@dataclass
class CourierReport:
    """What one courier did: every ``run_once`` result, idle and busy rounds, why it stopped."""

    owner: str
    results: list[dict[str, Any]] = field(default_factory=list)
    runs: int = 0
    idle: int = 0
    busy: int = 0
    stop_reason: str = ""


def is_busy(error: sqlite3.Error) -> bool:
    """True if ``error`` is SQLite's "database is locked/busy" (worth retrying later)."""
    code = getattr(error, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
    return "locked" in str(error) or "busy" in str(error)


def _pause(seconds: float, stop: threading.Event) -> None:
    """Sleep ``seconds`` in short slices, returning early once ``stop`` is set."""
    until = time.monotonic() + seconds
    for _ in range(int(seconds / PAUSE_SLICE_S) + 2):
        left = until - time.monotonic()
        if left <= 0 or stop.is_set():
            return
        time.sleep(min(left, PAUSE_SLICE_S))


def _backoff_ms(streak: int, rng: Callable[[], float]) -> int:
    """A capped, jittered pause after ``streak`` empty or busy rounds (never zero)."""
    return worker.retry_delay(min(streak, 16), IDLE_BASE_MS, IDLE_CAP_MS, 0.5 + rng() / 2)


def _drained(path: Path) -> bool:
    """True if no job is pending or leased; a busy file counts as not drained yet."""
    try:
        con = connect_existing(path)
        try:
            return unfinished_count(con) == 0
        finally:
            con.close()
    except sqlite3.OperationalError as error:
        if not is_busy(error):
            raise
        return False


def run_courier(
    path: Path,
    owner: str,
    send: Send,
    *,
    lease_ms: int = 1000,
    limits: Limits | None = None,
    stop: threading.Event | None = None,
    log: Log = _print,
    rng: Callable[[], float] = random.random,
    step: Step = worker.run_file,
) -> CourierReport:
    """Deliver jobs from the queue file at ``path`` until a limit or ``stop`` says so.

    Each round is one ``worker.run_file(path, owner, clock_ms, send, rng(), lease_ms)``
    (or ``step`` with the same arguments, for drills that wrap it).
    A result is logged and kept; ``None`` (nothing claimable) and a busy database
    lead to a jittered pause of at most ``IDLE_CAP_MS``. Stops with ``stop_reason``
    ``max-runs``, ``max-seconds``, ``idle``, ``drained`` or ``stopped``.

    Raises:
        FileNotFoundError: there is no queue file at ``path``.
        ValueError: a malformed argument (from ``worker``).
        Anything else ``run_file`` raises except a busy database (e.g. an
        unexpected error from ``send``, which leaves its job leased).
    """
    limits = limits or Limits()
    stop = stop or threading.Event()
    report = CourierReport(owner)
    started = time.monotonic()
    last_work = started
    streak = 0
    for _ in range(limits.max_runs):
        if stop.is_set():
            report.stop_reason = "stopped"
            return report
        if time.monotonic() - started >= limits.max_seconds:
            report.stop_reason = "max-seconds"
            return report
        report.runs += 1
        try:
            result = step(path, owner, clock_ms, send, rng(), lease_ms)
        except sqlite3.OperationalError as error:
            if not is_busy(error):
                raise
            report.busy += 1
            log(f"{owner}: queue busy ({error}); backing off")
            streak += 1
            _pause(_backoff_ms(streak, rng) / 1000, stop)
            continue
        if result is not None:
            report.results.append(result)
            log(f"{owner}: {result['id']} token={result['token']} -> {result['status']}")
            last_work = time.monotonic()
            streak = 0
            continue
        report.idle += 1
        if limits.until_drained and _drained(path):
            report.stop_reason = "drained"
            return report
        idle_ms = (time.monotonic() - last_work) * 1000
        if limits.max_idle_ms is not None and idle_ms >= limits.max_idle_ms:
            report.stop_reason = "idle"
            return report
        streak += 1
        _pause(_backoff_ms(streak, rng) / 1000, stop)
    report.stop_reason = "max-runs"
    return report
