"""The ``conform`` command: install or remove a queue's change feed, and check that every
transaction committed since is one step of the model (``courier.conform``).

``courier conform QUEUE`` reads the whole feed and exits 1 if any transaction is
unexplained; ``--follow`` keeps reading what commits next until Ctrl-C or SIGTERM (or
``--max-seconds``), printing each unexplained transaction as it is found and a progress
line with how far behind the commits the check runs (its lag). A queue lost while it
follows (a server restarting, a connection cut: ``courier.transient``) is said once and
tried again at every interval; once it is back, the feed is read on from where it
stopped, so nothing committed meanwhile goes unchecked.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from courier import backend
from courier.backend import Target
from courier.clock import clock_ms
from courier.commands.options import (
    int_at_least,
    json_option,
    option,
    positive_float,
    queue_arg,
)
from courier.commands.output import EXIT_ERROR, EXIT_OK, out, print_json
from courier.stop_signal import StopSignal, pause, stop_on_signals
from courier.transient import is_transient

__all__ = ["cmd_conform", "conform_options", "install_feed", "uninstall_feed"]

FOLLOW_INTERVAL_S = 0.1
PROGRESS_S = 5.0


def conform_options(parser: argparse.ArgumentParser) -> None:
    """``conform QUEUE``, ``--install``/``--uninstall``, ``--follow`` and the time base."""
    queue_arg(parser)
    change = parser.add_mutually_exclusive_group()
    change.add_argument(
        "--install",
        action="store_true",
        help="add the change feed (an events table and triggers) and exit",
    )
    change.add_argument("--uninstall", action="store_true", help="remove the change feed and exit")
    parser.add_argument(
        "--follow",
        action="store_true",
        help="keep checking as transactions commit, until Ctrl-C or SIGTERM",
    )
    option(parser, "--max-seconds", "S", positive_float, "with --follow: stop after this long")
    interval = "with --follow: seconds between two reads of the feed (default %(default)s)"
    option(parser, "--interval", "S", positive_float, interval, FOLLOW_INTERVAL_S)
    parser.add_argument(
        "--time-base",
        choices=("clock", "simulated"),
        default="clock",
        help="clock: the writers read the clock the feed reads (this host's for a file, the "
        "server's on PostgreSQL), so no now lies after the write; simulated: the writers "
        "passed times of their own (default %(default)s)",
    )
    skew = "with --time-base clock: how far a now may lie after the clock read at the write"
    option(parser, "--skew-ms", "MS", int_at_least(0), f"{skew} (default %(default)s)", 0)
    json_option(parser, "one JSON object (one per line with --follow)")


def _feed_module(target: Target) -> Any:
    from courier.conform import postgres_feed, sqlite_feed

    return postgres_feed if backend.is_conninfo(target) else sqlite_feed


def install_feed(target: Target) -> bool:
    """Add the change feed to the queue at ``target``; ``False`` if it was there."""
    con = backend.connect_existing(target)
    try:
        return bool(_feed_module(target).install(con))
    finally:
        con.close()


def uninstall_feed(target: Target) -> bool:
    """Remove the change feed from the queue at ``target``; ``False`` if there was none."""
    con = backend.connect_existing(target)
    try:
        return bool(_feed_module(target).uninstall(con))
    finally:
        con.close()


def cmd_conform(args: argparse.Namespace) -> int:
    """Install, uninstall, or check (once or following) the queue's change feed."""
    shown = backend.describe(args.queue)
    if args.install or args.uninstall:
        if args.follow:
            raise ValueError("--follow goes with a check, not with --install or --uninstall")
        return _change_feed(args, shown)
    if args.max_seconds is not None and not args.follow:
        raise ValueError("--max-seconds goes with --follow")
    try:
        from courier.conform.checker import Feed, rules_for
    except ImportError as error:  # the model needs the transitions package
        raise ValueError(
            f"courier conform needs the model's packages: pip install 'lease-queue[conform]' "
            f"({error})"
        ) from None
    rules = rules_for(args.queue, args.time_base == "simulated", args.skew_ms)
    feed = Feed(args.queue, rules)
    try:
        return _check(args, shown, feed)
    finally:
        feed.close()


def _change_feed(args: argparse.Namespace, shown: str) -> int:
    if args.install:
        done = install_feed(args.queue)
        what = "installed" if done else "already installed (nothing changed)"
        detail = "every change of jobs and redrives is recorded from now on"
    else:
        done = uninstall_feed(args.queue)
        what = "removed" if done else "not installed (nothing changed)"
        detail = "the queue's tables are as the contract specifies them"
    if args.json:
        print_json(
            {"queue": shown, "action": "install" if args.install else "uninstall", "changed": done}
        )
    else:
        out(f"change feed {what} on {shown}" + (f": {detail}" if done else ""))
    return EXIT_OK


def _check(args: argparse.Namespace, shown: str, feed: Any) -> int:
    from courier.conform import report

    # With --follow, Ctrl-C and SIGTERM stop it cleanly from the first read on.
    stop = stop_on_signals() if args.follow else None
    checker, blocks = feed.start()
    _check_blocks(args, checker, blocks)
    if not args.follow:
        if args.json:
            print_json(report.summary_dict(checker, shown, feed.rules, feed.position))
        else:
            for line in report.summary_lines(checker, shown, feed.rules):
                out(line)
        return EXIT_ERROR if checker.unexplained else EXIT_OK
    assert stop is not None
    return _follow(args, shown, feed, checker, stop)


def _check_blocks(args: argparse.Namespace, checker: Any, blocks: list[Any]) -> list[int]:
    """Check ``blocks``, printing each unexplained transaction; the lag of each (ms)."""
    from courier.conform import report

    lags = []
    for block in blocks:
        for finding in checker.check(block):
            if not finding.explained:
                if args.json:
                    if args.follow:
                        print_json({"event": "unexplained", **report.finding_dict(finding)})
                else:
                    for line in report.finding_lines(finding):
                        out(line)
        lags.append(clock_ms() - block.clock_ms)
    return lags


def _follow(args: argparse.Namespace, shown: str, feed: Any, checker: Any, stop: StopSignal) -> int:
    from courier.conform import report

    started = time.monotonic()
    if args.json:
        _progress(args, checker, [], 0)  # the first line: what was there, checked
    else:
        out(f"following the change feed of {shown} (Ctrl-C stops)")
        for line in report.summary_lines(checker, shown, feed.rules)[:2]:
            out(line)
    next_progress = started + PROGRESS_S
    window: list[int] = []
    lag_max = 0
    limit_s = args.max_seconds
    iterations = int((limit_s if limit_s is not None else 10**9) / args.interval) + 2
    lost_at: float | None = None  # when the queue was lost, while it is
    for _ in range(iterations):
        if stop.is_set() or (limit_s is not None and time.monotonic() - started >= limit_s):
            break
        pause(args.interval, stop)
        try:
            blocks = feed.poll()
        except Exception as error:  # a restart or a cut: try again at the next interval
            if not is_transient(error):
                raise
            feed.drop()
            if lost_at is None:
                lost_at = time.monotonic()
                _lost(args, error)
            continue
        if lost_at is not None:
            _back(args, time.monotonic() - lost_at)
            lost_at = None
        lags = _check_blocks(args, checker, blocks)
        window += lags
        lag_max = max([lag_max, *lags])
        if time.monotonic() >= next_progress:
            _progress(args, checker, window, lag_max)
            window = []
            next_progress = time.monotonic() + PROGRESS_S
    _progress(args, checker, window, lag_max)
    if args.json:
        summary = report.summary_dict(
            checker, shown, feed.rules, feed.position, {"lag_ms_max": lag_max}
        )
        print_json({"event": "summary", **summary})
    else:
        for line in report.summary_lines(checker, shown, feed.rules):
            out(line)
        out(f"  lag (clock at the write to checked): at most {lag_max} ms")
    return EXIT_ERROR if checker.unexplained else EXIT_OK


def _lost(args: argparse.Namespace, error: Exception) -> None:
    """Say once that the queue was lost: --follow reads on once it is back."""
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    if args.json:
        print_json({"event": "lost", "error": text, "at_ms": clock_ms()})
    else:
        out(f"lost the queue ({text}); trying again every {args.interval} s")


def _back(args: argparse.Namespace, lost_s: float) -> None:
    """Say that the queue is back, and after how long; nothing committed meanwhile is
    skipped (the feed is read on from where it stopped)."""
    if args.json:
        print_json({"event": "back", "lost_s": round(lost_s, 3), "at_ms": clock_ms()})
    else:
        out(f"the queue is back after {lost_s:.1f} s; reading on from where the feed stopped")


def _progress(args: argparse.Namespace, checker: Any, window: list[int], lag_max: int) -> None:
    last = max(window, default=0)
    if args.json:
        print_json(
            {
                "event": "progress",
                "transactions": checker.transactions,
                "changes": checker.changes,
                "unexplained": len(checker.unexplained),
                "checked_since": len(window),
                "lag_ms": {"max_since": last, "max": lag_max},
                "at_ms": clock_ms(),
            }
        )
    else:
        out(
            f"checked {checker.transactions} transactions (+{len(window)}), "
            f"unexplained {len(checker.unexplained)}, lag at most {last} ms lately "
            f"({lag_max} ms in all)"
        )
