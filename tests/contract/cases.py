"""Malformed-argument tables, one test per argument rather than one per value.

On PostgreSQL every test costs a fresh database (a copy of the template), so
the contract suite checks all the bad values of one argument in one test, each
against the same untouched state. A failure names the value.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pytest


def by_argument(cases: Sequence[tuple[str, object]]) -> list[Any]:
    """``(argument, value)`` cases as ``pytest.param(argument, [values...], id=argument)``,
    in the order the arguments first appear."""
    grouped: dict[str, list[object]] = {}
    for argument, value in cases:
        grouped.setdefault(argument, []).append(value)
    return [pytest.param(name, values, id=name) for name, values in grouped.items()]


def each_rejected(values: Sequence[object], call: Callable[[object], object], match: str) -> None:
    """``call(value)`` raises a ``ValueError`` matching ``match`` for every value."""
    for value in values:
        with pytest.raises(ValueError, match=match):
            call(value)
            raise AssertionError(f"accepted {value!r}")
