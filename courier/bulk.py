"""Jobs read from a file or stdin for a bulk ``enqueue``: JSON lines or CSV.

Every record is ``{"id": ID, "qty": QTY}``: a JSON object per line (blank lines
skipped), or CSV with a header row naming the columns ``id`` and ``qty`` (other
columns are refused). Every record is checked before anything is written, and a
bad one is named by its line number, so a file either goes in whole (chunk by
chunk) or not at all.
"""

from __future__ import annotations

import csv
import io
import json
import re
from collections.abc import Iterable
from typing import Any

import worker

__all__ = ["FORMATS", "check_id", "check_int", "parse_records", "sniff_format"]

FORMATS = ("jsonl", "csv")
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


def _jsonl(lines: Iterable[str]) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except ValueError as error:
            raise ValueError(f"line {number}: not JSON ({error})") from None
        if type(value) is not dict:
            raise ValueError(f"line {number}: expected a JSON object, got {line.strip()!r}")
        records.append(_record(f"line {number}", value))
    return records


def _csv(text: str) -> list[dict[str, Any]]:
    reader = csv.DictReader(io.StringIO(text))
    if reader.fieldnames is None:
        return []
    records = []
    for row in reader:
        if None in row or None in row.values():
            raise ValueError(f"line {reader.line_num}: expected {len(reader.fieldnames)} fields")
        records.append(_record(f"line {reader.line_num}", dict(row)))
    return records


def parse_records(text: str, fmt: str) -> list[dict[str, Any]]:
    """Every record of ``text`` in format ``fmt`` (``jsonl`` or ``csv``), checked.

    Raises:
        ValueError: an unknown format, or a record that is malformed (named by line).
    """
    if fmt == "jsonl":
        return _jsonl(text.splitlines())
    if fmt == "csv":
        return _csv(text)
    raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {fmt!r}")
