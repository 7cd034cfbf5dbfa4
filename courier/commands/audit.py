"""The commands that check deliveries end to end: ``inbox`` (a receiver's totals),
``audit`` (a queue against an inbox: exit 1 if a check fails) and ``demo`` (the
story of two couriers, one killed mid-delivery, that ends in an audit).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from courier import backend, demo
from courier.audit import Audit, audit_files
from courier.backend import Target
from courier.commands.options import integer, json_option, option, queue_arg
from courier.commands.output import EXIT_ERROR, EXIT_OK, inbox_totals, out, print_json, when
from courier.inbox import Inbox

__all__ = ["audit_options", "cmd_audit", "cmd_demo", "cmd_inbox", "demo_options", "inbox_options"]


def audit_options(audit: argparse.ArgumentParser) -> None:
    """``audit QUEUE INBOX`` and ``--in-flight-ok``."""
    queue_arg(audit)
    _inbox_arg(audit)
    audit.add_argument(
        "--in-flight-ok",
        action="store_true",
        help="jobs still pending or leased are in flight, not lost (a queue still in use)",
    )
    json_option(audit, "one JSON object")


def inbox_options(inbox: argparse.ArgumentParser) -> None:
    """``inbox INBOX``."""
    _inbox_arg(inbox)
    json_option(inbox, "one JSON object")


def _inbox_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("inbox", type=Path, help="path of the receiver's inbox file")


def demo_options(demo_parser: argparse.ArgumentParser) -> None:
    """The demo's sizes, its kill point and its backend."""
    orders, lease = "(default %(default)s)", "(default %(default)s)"
    option(demo_parser, "--orders", "N", integer, orders, demo.ORDERS)
    option(demo_parser, "--lease-ms", "MS", integer, lease, demo.LEASE_MS)
    kill = "kill courier c1 right after its N-th acknowledged delivery (default %(default)s)"
    option(demo_parser, "--kill-after", "N", integer, kill, demo.KILL_AFTER)
    backends = "sqlite (a temporary file) or postgres (an embedded server) (default %(default)s)"
    demo_parser.add_argument(
        "--backend", choices=("sqlite", "postgres"), default="sqlite", help=backends
    )


def cmd_inbox(args: argparse.Namespace) -> int:
    """Show an inbox file's totals and its rows."""
    summary = Inbox(args.inbox, create=False).summary()
    if args.json:
        print_json(summary)
        return EXIT_OK
    out(f"inbox {args.inbox}: {inbox_totals(summary)}")
    for row in summary["rows"]:
        out(
            f"  {row['id']:<24} qty {row['qty']:>4}  requests {row['requests']:>3}  "
            f"effects {row['effects']}  first from {row['sender'] or 'an unnamed sender'}  "
            f"at {when(row['received_at_ms'])}"
        )
    return EXIT_OK


def cmd_audit(args: argparse.Namespace) -> int:
    """Audit the queue against the inbox (``courier.audit``); exit 1 if a check fails."""
    audit = audit_files(args.queue, args.inbox, in_flight_ok=args.in_flight_ok)
    if args.json:
        print_json(audit.as_dict())
    else:
        _print_audit(args.queue, args.inbox, audit)
    return EXIT_OK if audit.ok else EXIT_ERROR


def _print_audit(queue: Target, inbox: Path, audit: Audit) -> None:
    dead = ", ".join(f"{reason} {n}" for reason, n in audit.dead.items()) or "none"
    answers = ", ".join(f"{status} {n}" for status, n in audit.answers.items()) or "none"
    out(f"audit of queue {backend.describe(queue)} against inbox {inbox}")
    out(
        f"  jobs {audit.jobs}: done {audit.done}, dead {sum(audit.dead.values())} ({dead}), "
        f"unfinished {len(audit.unfinished)}; largest token {audit.largest_token}"
    )
    out(f"  effects {audit.effects}; delivery requests {audit.deliveries} ({answers})")
    for rule, count in audit.must_be_zero().items():
        out(f"  {rule:<38}{count:>6}  (must be 0)")
    out(f"  {'dead jobs with an effect':<38}{len(audit.dead_with_effect):>6}  (allowed)")
    for failure in audit.failures():
        out(f"FAILED: {failure}")
    out("OK: every check holds" if audit.ok else "FAILED: see above")


def cmd_demo(args: argparse.Namespace) -> int:
    """Run the demo (``courier.demo``); its exit status."""
    return demo.run_demo(
        orders=args.orders, lease_ms=args.lease_ms, kill_after=args.kill_after, backend=args.backend
    )
