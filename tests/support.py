"""Helpers shared by the test suites: reading rows and recording fault hooks."""

from __future__ import annotations

import os
import sqlite3
from pathlib import Path
from typing import Any

import worker
from courier.queueview import JOB_COLUMNS as JOB_COLUMNS
from courier.queueview import REDRIVE_COLUMNS as REDRIVE_COLUMNS
from courier.queueview import table_rows

Rows = dict[str, list[tuple[Any, ...]]]


def read_rows(con: sqlite3.Connection) -> Rows:
    """Every row of both tables, in seq order, as plain tuples (``queueview.table_rows``)."""
    return table_rows(con)


def read_file_rows(path: str | os.PathLike[str]) -> Rows:
    """The rows of the queue file at ``path``, read through a fresh connection."""
    con = sqlite3.connect(path)
    try:
        return read_rows(con)
    finally:
        con.close()


def job(con: sqlite3.Connection, job_id: str) -> dict[str, Any]:
    """One job row as a dict keyed by column name."""
    row = con.execute(
        f"SELECT {', '.join(JOB_COLUMNS)} FROM jobs WHERE id = ?", (job_id,)
    ).fetchone()
    assert row is not None, f"no job {job_id!r}"
    return dict(zip(JOB_COLUMNS, row, strict=True))


def open_descriptors(path: str | os.PathLike[str]) -> list[str]:
    """This process's open file descriptors that point at ``path`` or its journal."""
    target = os.path.realpath(path)
    names = {target, target + "-journal", target + "-wal"}
    found = []
    for fd in os.listdir("/proc/self/fd"):
        with_link = Path("/proc/self/fd") / fd
        try:
            if os.readlink(with_link) in names:
                found.append(fd)
        except OSError:
            continue
    return found


class HookLog:
    """A fault hook that records each point it is called at and can fail at one.

    ``HookLog()`` only records; ``HookLog(fail_at="after-claim", error=exc)``
    raises ``exc`` when called at that point. ``on(point, action)`` runs an
    action (for example a query that checks the uncommitted state) at a point.
    """

    def __init__(self, fail_at: str | None = None, error: BaseException | None = None) -> None:
        self.points: list[str] = []
        self.fail_at = fail_at
        self.error = error if error is not None else RuntimeError(f"fault at {fail_at}")
        self.actions: dict[str, Any] = {}

    def on(self, point: str, action: Any) -> HookLog:
        self.actions[point] = action
        return self

    def __call__(self, point: str) -> None:
        self.points.append(point)
        if point in self.actions:
            self.actions[point]()
        if point == self.fail_at:
            raise self.error


class IntSubclass(int):
    """An int that is not an exact int: the contract rejects it."""


class StrSubclass(str):
    """A str that is not an exact str: the contract rejects it."""


class DictSubclass(dict):  # type: ignore[type-arg]
    """A dict that is not an exact dict: the contract rejects it."""


def bad_ints(lo: int, hi: int) -> list[object]:
    """Values an exact-int argument ranging over ``lo .. hi`` must reject."""
    edge = lo if lo != 0 else 1
    return [lo - 1, hi + 1, True, False, float(lo), str(lo), None, IntSubclass(edge)]


BAD_IDENTIFIERS: list[object] = [
    "",
    "a" * 65,
    "a b",
    "a.b",
    "a\n",
    "\na",
    "é",
    "\u0661",  # ARABIC-INDIC DIGIT ONE: a digit, but not ASCII
    "\uff41",  # FULLWIDTH LATIN SMALL LETTER A
    StrSubclass("abc"),
    b"abc",
    1,
    None,
]

GOOD_IDENTIFIERS = ["a", "Z", "0", "_", "-", "order-17_B", "a" * 64]

# The contract's largest now_ms; tests/unit/test_error_messages.py pins its value.
MAX_NOW = worker.MAX_NOW_MS


class ScriptedClock:
    """A clock that returns the given readings in order and counts the calls.

    Reading past the script fails the test: every clock read must be expected.
    """

    def __init__(self, *readings: object) -> None:
        self.readings = list(readings)
        self.calls = 0

    def __call__(self) -> Any:
        assert self.calls < len(self.readings), f"unexpected clock read #{self.calls + 1}"
        reading = self.readings[self.calls]
        self.calls += 1
        return reading


class RecordingSend:
    """A send that records each delivery it got and then answers or raises.

    ``answer`` is returned as is; if it is an exception instance it is raised.
    ``during`` runs inside the send with the delivery dict (to look or meddle).
    """

    def __init__(self, answer: object = True, during: Any = None) -> None:
        self.answer = answer
        self.during = during
        self.deliveries: list[dict[str, Any]] = []
        self.received: list[dict[str, Any]] = []

    def __call__(self, delivery: dict[str, Any]) -> object:
        self.received.append(delivery)
        self.deliveries.append(dict(delivery))
        if self.during is not None:
            self.during(delivery)
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer
