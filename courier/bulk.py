"""Jobs read from a file or stdin for a bulk ``enqueue``: JSON lines or CSV.

Every record is ``{"id": ID, "qty": QTY}``: a JSON object per line (blank lines
skipped), or CSV with a header row naming the columns ``id`` and ``qty`` (other
columns are refused). Every record is checked before anything is written, so a
file either goes in whole (chunk by chunk) or not at all; every bad line is named,
by the file's name and its line number (the first ``SHOWN_BAD_LINES`` of them in
full, then how many more), a line that is not UTF-8 text (a binary file) too.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable
from typing import Any

import worker

__all__ = [
    "FORMATS",
    "SHOWN_BAD_LINES",
    "BadRecords",
    "check_id",
    "check_int",
    "decode_lines",
    "parse_records",
    "sniff_format",
]

FORMATS = ("jsonl", "csv")
SHOWN_BAD_LINES = 5
_DIGITS = re.compile(r"-?[0-9]+")


def check_int(name: str, value: object, lo: int, hi: int, unit: str = "") -> int:
    """``value`` (an int, or ASCII decimal digits) if in ``lo..hi``, else ``ValueError``
    in the CLI's words (``qty must be a whole number in 1..1000, got '-1'``)."""
    number: int | None = None
    if type(value) is int:
        number = value
    elif isinstance(value, str) and _DIGITS.fullmatch(value):
        number = int(value)
    if number is None or not lo <= number <= hi:
        suffix = f" {unit}" if unit else ""
        raise ValueError(f"{name} must be a whole number in {lo}..{hi}{suffix}, got {value!r}")
    return number


def check_id(name: str, value: object) -> str:
    """``value`` if it is an identifier (1-64 ASCII letters, digits, '_' or '-')."""
    if not worker.is_identifier(value):
        raise ValueError(f"{name} must be 1-64 ASCII letters, digits, '_' or '-', got {value!r}")
    return str(value)


def _record(where: str, fields: dict[str, Any]) -> dict[str, Any]:
    if set(fields) != {"id", "qty"}:
        raise ValueError(f"{where}: expected exactly the fields id and qty, got {sorted(fields)}")
    return {
        "id": check_id(f"{where}: id", fields["id"]),
        "qty": check_int(f"{where}: qty", fields["qty"], 1, worker.MAX_QTY),
    }


def sniff_format(name: str) -> str:
    """``csv`` for a ``.csv`` file name, else ``jsonl``."""
    return "csv" if name.lower().endswith(".csv") else "jsonl"


class BadRecords(ValueError):
    """Lines of a bulk file that are not records; the message names each (``problems``)."""

    def __init__(self, source: str, problems: list[str]) -> None:
        self.problems = problems
        shown = "; ".join(problems[:SHOWN_BAD_LINES])
        more = len(problems) - SHOWN_BAD_LINES
        tail = f"; and {more} more bad line{'s' if more > 1 else ''}" if more > 0 else ""
        count = "1 bad line" if len(problems) == 1 else f"{len(problems)} bad lines"
        super().__init__(f"{source}: {count}, nothing enqueued: {shown}{tail}")


def decode_lines(data: bytes) -> tuple[str, list[str]]:
    """``data`` as text, and a problem for each line that is not UTF-8 (named by its
    number and the first bad byte); such a line is replaced by an empty one."""
    lines, problems = [], []
    for number, raw in enumerate(data.split(b"\n"), start=1):
        try:
            lines.append(raw.decode("utf-8"))
        except UnicodeDecodeError as error:
            byte = raw[error.start]
            problems.append(
                f"line {number}: not UTF-8 text (byte 0x{byte:02x} at column {error.start + 1})"
            )
            lines.append("")
    return "\n".join(lines), problems


def _checked(where: str, fields: dict[str, Any], problems: list[str]) -> dict[str, Any] | None:
    """``_record(where, fields)``, or ``None`` with its problem kept."""
    try:
        return _record(where, fields)
    except ValueError as error:
        problems.append(str(error))
        return None


def _jsonl(lines: Iterable[str], problems: list[str]) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            value = json.loads(line)
        except ValueError as error:
            problems.append(f"{where}: not JSON ({error})")
            continue
        if type(value) is not dict:
            problems.append(f"{where}: expected a JSON object, got {line.strip()[:60]!r}")
            continue
        record = _checked(where, value, problems)
        if record is not None:
            records.append(record)
    return records


def _csv(text: str, problems: list[str]) -> list[dict[str, Any]]:
    if "\0" in text:
        number = text[: text.index("\0")].count("\n") + 1
        problems.append(f"line {number}: a NUL byte (not a CSV text file)")
        return []
    reader = csv.DictReader(io.StringIO(text))
    try:
        if reader.fieldnames is None:
            return []
        records = []
        for row in reader:
            where = f"line {reader.line_num}"
            if None in row or None in row.values():
                problems.append(f"{where}: expected {len(reader.fieldnames)} fields")
                continue
            record = _checked(where, dict(row), problems)
            if record is not None:
                records.append(record)
    except csv.Error as error:
        problems.append(f"line {reader.line_num}: not CSV ({error})")
        return []
    return records


def parse_records(
    text: str, fmt: str, source: str = "input", problems: list[str] | None = None
) -> list[dict[str, Any]]:
    """Every record of ``text`` (read from ``source``, a file's name or ``stdin``) in
    format ``fmt`` (``jsonl`` or ``csv``), checked.

    ``problems`` are lines already found bad (``decode_lines``'s); every bad line is
    reported together with them.

    Raises:
        ValueError: an unknown format.
        BadRecords: any line is not a record (each one named by its number).
    """
    found = list(problems or [])
    if fmt == "jsonl":
        records = _jsonl(text.splitlines(), found)
    elif fmt == "csv":
        records = _csv(text, found)
    else:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
    if found:
        found.sort(key=_line_number)
        raise BadRecords(source, found)
    return records


def _line_number(problem: str) -> int:
    words = problem.split(":", 1)[0].split()
    return int(words[1]) if len(words) == 2 and words[1].isdigit() else 0
