"""The argument types and option builders of the CLI's commands.

A type refuses bad text with ``argparse.ArgumentTypeError`` (argparse's one usage
line and exit 2); ``checked_ms`` raises ``ValueError``, which ``courier.cli.main``
turns into the same exit status. Help texts carry ``%(default)s`` where a default
is shown.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import Any, TypeAlias

import worker
from courier import bulk

__all__ = [
    "DEFAULT_CHUNK",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_TTL_MS",
    "MAX_LEASE_MS",
    "MIN_MS",
    "Options",
    "checked_ms",
    "int_at_least",
    "integer",
    "json_flag",
    "json_option",
    "known_value",
    "non_negative_float",
    "option",
    "positive_float",
    "queue_arg",
    "ttl_options",
]

DEFAULT_TTL_MS = 60_000
DEFAULT_MAX_ATTEMPTS = 3
MAX_LEASE_MS = 60_000
# A time option below this many ms is almost surely seconds typed where ms belong.
MIN_MS = 100
DEFAULT_CHUNK = 500


# --- Argument types and checks ----------------------------------------------------


def queue_arg(parser: argparse.ArgumentParser) -> None:
    """The positional ``queue``: a SQLite file's path or a PostgreSQL conninfo."""
    parser.add_argument(
        "queue", help="the queue: a SQLite file's path, or a PostgreSQL URL or conninfo"
    )


def integer(text: str) -> int:
    """A whole number in ASCII digits for argparse (``٣``, ``1_0`` and ``+7`` are not)."""
    try:
        return bulk.check_int("value", text, -(2**63), 2**63 - 1)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None


def int_at_least(lo: int) -> Callable[[str], int]:
    """An int of at least ``lo`` for argparse (for the CLI's own knobs)."""

    def parse(text: str) -> int:
        value = integer(text)
        if value < lo:
            raise argparse.ArgumentTypeError(f"must be at least {lo}, got {value}")
        return value

    return parse


def positive_float(text: str) -> float:
    """A finite number above 0 for argparse."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text!r}")
    return value


def non_negative_float(text: str) -> float:
    """A finite number of at least 0 (at most a day) for argparse."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 <= value <= 86_400:
        raise argparse.ArgumentTypeError(f"must be a number in 0..86400, got {text!r}")
    return value


def checked_ms(option: str, value: int, hi: int = worker.MAX_DURATION_MS) -> int:
    """A duration option in ms; a value below ``MIN_MS`` is refused as likely seconds.

    Raises:
        ValueError: ``value`` is not in ``MIN_MS .. hi`` (the message names that range).
    """
    if type(value) is int and 1 <= value < MIN_MS:
        raise ValueError(
            f"{option} is in milliseconds: {value} ms is too short to mean anything here "
            f"(at least {MIN_MS}; for {value} seconds write {value * 1000})"
        )
    return bulk.check_int(option, value, MIN_MS, hi, "ms")


def known_value(option: str, value: str | None, known: tuple[str, ...]) -> None:
    """Refuse a value of ``option`` that is none of ``known`` (``None``: not given).

    Raises:
        ValueError: an unknown value, with the known ones.
    """
    if value is not None and value not in known:
        raise ValueError(f"{option} must be one of {', '.join(known)}, got {value!r}")


# --- Options of each command ---------------------------------------------------------


Options: TypeAlias = "argparse.ArgumentParser | argparse._ArgumentGroup"


def option(
    parser: Options,
    flag: str,
    metavar: str,
    kind: Callable[[str], Any],
    text: str,
    default: object = None,
    required: bool = False,
) -> None:
    """``flag METAVAR`` read with ``kind``; ``%(default)s`` in ``text`` shows ``default``."""
    parser.add_argument(
        flag, metavar=metavar, type=kind, default=default, required=required, help=text
    )


def json_option(parser: argparse.ArgumentParser, what: str) -> None:
    """``--json``: print ``what`` instead of the lines for a person."""
    parser.add_argument("--json", action="store_true", help=f"print {what}")


def json_flag(what: str) -> Callable[[argparse.ArgumentParser], None]:
    """A queue and ``--json`` (print ``what``)."""

    def add(parser: argparse.ArgumentParser) -> None:
        queue_arg(parser)
        json_option(parser, what)

    return add


def ttl_options(parser: argparse.ArgumentParser, what: str) -> None:
    """``--ttl-ms``: ``what``, in ms from now (default ``DEFAULT_TTL_MS``)."""
    ttl = f"{what}, ms from now ({MIN_MS}..60000, default %(default)s)"
    option(parser, "--ttl-ms", "MS", integer, ttl, DEFAULT_TTL_MS)
