"""The command line, ``python -m model.explore``: one option per bound, ``--trace`` and
``--record``; it prints the report and exits 1 if any verdict fails."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Sequence
from dataclasses import fields
from pathlib import Path
from typing import Any

import model.explore
from model.explore.bounds import BOUND_HELP, Bounds
from model.explore.search import explore
from model.explore.verdict import describe_finding, failures, record, report


def _list(kind: Callable[[str], Any]) -> Callable[[str], tuple[Any, ...]]:
    return lambda text: tuple(kind(item) for item in text.split(",") if item)


def _delay(text: str) -> int | str:
    return int(text) if text.lstrip("-").isdigit() else text


def parse_bounds(arguments: argparse.Namespace) -> Bounds:
    """``Bounds`` from the command line: each option given replaces its default."""
    given = {
        item.name: getattr(arguments, item.name)
        for item in fields(Bounds)
        if getattr(arguments, item.name) is not None
    }
    return Bounds(**given)


def main(argv: Sequence[str] | None = None) -> int:
    """Explore and print the report; exit 1 if any verdict fails (``failures``)."""
    parser = argparse.ArgumentParser(
        prog="python -m model.explore", description=model.explore.__doc__.splitlines()[0]
    )
    defaults = Bounds()
    for item in fields(Bounds):
        default = getattr(defaults, item.name)
        option = f"--{item.name.replace('_', '-')}"
        if isinstance(default, bool):
            parser.add_argument(
                option,
                dest=item.name,
                action=argparse.BooleanOptionalAction,
                default=None,
                help=f"{BOUND_HELP[item.name].replace('`', '')} (default: {default})",
            )
            continue
        if isinstance(default, int):
            kind: Callable[[str], Any] = int
        else:
            kind = _list(_delay if item.name == "delays" else type(default[0]))
        shown = default if isinstance(default, int) else ",".join(map(str, default))
        text = BOUND_HELP[item.name].replace("`", "")
        parser.add_argument(
            option, dest=item.name, type=kind, default=None, help=f"{text} (default: {shown})"
        )
    parser.add_argument(
        "--trace",
        action="append",
        default=[],
        metavar="NAME",
        help="print the shortest trace to this property's finding ('all': every one)",
    )
    parser.add_argument("--record", type=Path, help="write the run as JSON to this file")
    arguments = parser.parse_args(argv)
    found = explore(parse_bounds(arguments))
    print("\n".join(report(found)))
    names = list(found.findings) if "all" in arguments.trace else arguments.trace
    for name in names:
        print()
        print("\n".join(describe_finding(found, name)))
    if arguments.record is not None:
        arguments.record.write_text(json.dumps(record(found), indent=1) + "\n", encoding="utf-8")
    return 1 if failures(found) else 0
