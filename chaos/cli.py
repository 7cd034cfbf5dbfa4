"""The soak's command line: ``python -m chaos [OPTIONS]`` (and its courier children).

Runs one soak (``chaos.run.run_soak``) in a temporary directory or ``--workdir``,
prints the table and the JSON report, and exits 0 if every check holds, 1 if one
failed, 2 for bad arguments. SIGTERM ends it as Ctrl-C does, so that every child is
killed and reaped and the temporary files removed. ``courier`` or ``pgcourier`` as
the first argument runs one of the soak's courier children instead
(``chaos.child``, ``chaos.pgchild``; internal).

``--postgres`` runs the soak on a throwaway PostgreSQL server, each courier on a
simulated host of its own (``chaos.hosts``) with partitions among the chaos.
Where simulated hosts cannot be made (not root, no iproute2) or with
``--loopback``, that part is skipped with a message saying why, and the couriers
reach the server over loopback.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import signal
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path

import chaos
from chaos import hosts
from chaos.child import courier_main
from chaos.pgchild import pgcourier_main
from chaos.report import render_table
from chaos.run import Out, run_soak
from chaos.schedule import Config

__all__ = ["build_parser", "main"]

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2

OPTIONS: tuple[tuple[str, type, str, str], ...] = (
    ("couriers", int, "N", "courier processes"),
    ("jobs", int, "M", "jobs to enqueue"),
    ("seconds", float, "S", "bound of the chaos phase"),
    ("recovery_seconds", float, "S", "bound of the recovery phase"),
    ("seed", int, "SEED", "fixes the chaos schedule"),
    ("lease_ms", int, "MS", "the couriers' lease; their HTTP timeout is 3/4 of it"),
    ("chaos_per_s", float, "RATE", "chaos events per second after the first round"),
    ("jobs_per_s", float, "RATE", "intake calls per second at most (the load's pace)"),
    ("batch", int, "N", "jobs a courier claims a round (claim_many); 1: one at a time"),
    ("in_flight", int, "M", "deliveries of a batch in flight at once"),
)


def _print(line: str = "") -> None:
    print(line, flush=True)


def build_parser() -> argparse.ArgumentParser:
    """The soak's options: one per ``Config`` field, plus where the files and JSON go."""
    parser = argparse.ArgumentParser(
        prog="python -m chaos",
        description=(chaos.__doc__ or "").split("\n\n")[1],
        epilog="Couriers run as 'python -m chaos courier ...' (internal). Exit status: "
        "0 every check holds, 1 a check failed, 2 bad arguments.",
    )
    defaults = asdict(Config())
    for name, kind, metavar, text in OPTIONS:
        parser.add_argument(
            "--" + name.replace("_", "-"),
            type=kind,
            metavar=metavar,
            default=defaults[name],
            help=f"{text} (default %(default)s)",
        )
    parser.add_argument(
        "--workdir",
        type=Path,
        metavar="DIR",
        help="keep the queue, inbox, logs and events here (default: a temporary directory)",
    )
    parser.add_argument(
        "--json",
        metavar="PATH",
        default="-",
        help="write the JSON report here (default -: print it)",
    )
    parser.add_argument(
        "--postgres",
        action="store_true",
        help="run on PostgreSQL, each courier on a simulated host that gets cut off "
        "(default: a SQLite queue file)",
    )
    parser.add_argument(
        "--loopback",
        action="store_true",
        help="with --postgres: no simulated hosts, the couriers connect over loopback",
    )
    parser.add_argument("--quiet", action="store_true", help="no progress lines")
    return parser


def hosts_plan(postgres: bool, loopback: bool) -> tuple[bool, str | None]:
    """Whether the run gets simulated hosts, and why not if it wanted them."""
    if not postgres:
        return False, None
    if loopback:
        return False, "--loopback"
    reason = hosts.unavailable()
    return reason is None, reason


def _raise_on_sigterm() -> None:
    """Turn SIGTERM into ``SystemExit`` so that children and files are cleaned up."""

    def handle(signum: int, frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, handle)


@contextlib.contextmanager
def _workdir(path: Path | None) -> Iterator[Path]:
    if path is not None:
        path.mkdir(parents=True, exist_ok=True)
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="lease-queue-soak-") as tmp:
        yield Path(tmp)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the soak (or, as ``courier``, one of its couriers); return the exit status."""
    arguments = list(sys.argv[1:] if argv is None else argv)
    if arguments[:1] == ["courier"]:
        return courier_main(arguments[1:])
    if arguments[:1] == ["pgcourier"]:
        return pgcourier_main(arguments[1:])
    args = build_parser().parse_args(arguments)
    with_hosts, skipped = hosts_plan(args.postgres, args.loopback)
    try:
        config = Config(
            **{name: getattr(args, name) for name, *_ in OPTIONS},
            backend="postgres" if args.postgres else "sqlite",
            hosts=with_hosts,
        )
    except ValueError as error:
        print(f"chaos: error: {error}", file=sys.stderr)
        return EXIT_USAGE
    out: Out = (lambda line: None) if args.quiet else _print
    _raise_on_sigterm()
    batches = (
        f", batches of {config.batch} ({config.in_flight} in flight)" if config.batch > 1 else ""
    )
    out(
        f"lease-queue chaos soak on {config.backend}: seed {config.seed}, "
        f"{config.couriers} couriers, {config.jobs} jobs, lease {config.lease_ms} ms{batches}"
    )
    if skipped is not None:
        _print(
            f"simulated hosts skipped ({skipped}): the couriers reach PostgreSQL over "
            "loopback and no host is cut off; the rest of the soak runs"
        )
    with _workdir(args.workdir) as root:
        report = run_soak(config, root, out, skipped)
    _print(render_table(report))
    text = json.dumps(report, indent=2, sort_keys=True)
    if args.json == "-":
        _print(text)
    else:
        Path(args.json).write_text(text + "\n", encoding="utf-8")
    for failure in report["failures"]:
        print(f"FAILED: {failure}", file=sys.stderr)
    _print("OK: every check holds" if report["ok"] else "FAILED: see above")
    return EXIT_OK if report["ok"] else EXIT_FAILED
