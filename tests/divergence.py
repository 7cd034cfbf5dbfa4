"""How a disagreement between two sides is printed: what differs first, by name, then
both sides whole, abbreviated.

The lockstep machine (``tests/stateful/lockstep.py``) compares ``worker.py`` (or
``pgworker.py``) with the model after every call: what each returned or raised, the rows
of ``jobs`` and ``redrives``, the rows a fault hook sees. When they differ, the reader
wants the difference, not two 12-field tuples to compare by eye. Each message built here
starts with one line naming what differs, by column or field name, each side's value
beside the other's::

    rows differ: job 'a' deadline: worker.py 1, model 2
    finish returned 'done' on worker.py, False on the model

and only then prints both values whole. The functions take plain values and ``Rows``
(``tests.support``), so any suite that compares two sides can use them.

Every value printed goes through ``abbreviated``, one rule everywhere: a list, tuple, set
or dict of more than ``MAX_ITEMS`` items keeps its first ``KEEP_ITEMS`` and says how many
more (``[True, True, False, ... 997 more]``); a str longer than ``MAX_CHARS`` keeps its
head and tail; a value still wider than ``WIDTH`` is printed one item a line; and
``clipped`` cuts any line wider than ``WIDTH``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tests.support import JOB_COLUMNS, REDRIVE_COLUMNS, Rows

__all__ = [
    "KEEP_ITEMS",
    "MAX_CHARS",
    "MAX_ITEMS",
    "WIDTH",
    "abbreviated",
    "clipped",
    "clipped_lines",
    "differences",
    "listed",
    "outcome_text",
    "result_divergence",
    "row_differences",
    "rows_divergence",
    "short_repr",
    "value_differences",
]

MAX_ITEMS = 12  # a collection of more items is cut (a row of jobs, 12 columns, is not) ...
KEEP_ITEMS = 3  # ... to its first three and a count of the rest
MAX_CHARS = 160  # a longer str keeps its first HEAD_CHARS and last TAIL_CHARS characters
HEAD_CHARS = 100
TAIL_CHARS = 40
WIDTH = 300  # no line printed is wider
HEADLINE_ITEMS = 3  # differences named on the first line; the others on the lines below
COLUMNS = {"jobs": JOB_COLUMNS, "redrives": REDRIVE_COLUMNS}


class _Missing:
    """What one side has where the other has an item (a longer list, one more key)."""

    def __repr__(self) -> str:
        return "nothing"


MISSING: Any = _Missing()


# --- abbreviation ----------------------------------------------------------------


def short_repr(value: object) -> str:
    """``repr(value)`` on one line, each collection and str in it cut by the rule above."""
    if type(value) is str:
        text = repr(value)
        if len(value) <= MAX_CHARS:
            return text
        cut = len(value) - HEAD_CHARS - TAIL_CHARS
        return f"{value[:HEAD_CHARS]!r} ... {cut} more characters ... {value[-TAIL_CHARS:]!r}"
    if type(value) is dict:
        pairs = _kept(list(value.items()))  # only the items printed are repr'd
        shown = [f"{short_repr(k)}: {short_repr(v)}" for k, v in pairs]
        return "{" + ", ".join(_counted(shown, len(value))) + "}"
    if type(value) is list or type(value) is tuple:
        shown = [short_repr(item) for item in _kept(value)]
        if type(value) is list:
            return "[" + ", ".join(_counted(shown, len(value))) + "]"
        if len(value) == 1:
            return f"({shown[0]},)"
        return "(" + ", ".join(_counted(shown, len(value))) + ")"
    if type(value) is set or type(value) is frozenset:
        shown = sorted(short_repr(item) for item in value)
        return "{" + ", ".join(_counted(_kept(shown), len(value))) + "}"
    return repr(value)


def _kept(items: Sequence[Any]) -> Sequence[Any]:
    """All of ``items``, or the first ``KEEP_ITEMS`` if there are more than ``MAX_ITEMS``."""
    return items[:KEEP_ITEMS] if len(items) > MAX_ITEMS else items


def _counted(shown: Sequence[str], total: int) -> list[str]:
    """``shown``, and how many more there are, if some were left out."""
    return [*shown] if len(shown) == total else [*shown, f"... {total - len(shown)} more"]


def abbreviated(value: object, indent: str = "  ") -> str:
    """``short_repr(value)``; if that is wider than ``WIDTH``, a list, tuple or dict is
    printed one item a line (each indented by ``indent``), and anything else is clipped."""
    line = short_repr(value)
    if len(line) <= WIDTH:
        return line
    if type(value) is list or type(value) is tuple:
        items = [short_repr(item) for item in _kept(value)]
        opening, closing = ("[", "]") if type(value) is list else ("(", ")")
    elif type(value) is dict:
        items = [f"{short_repr(k)}: {short_repr(v)}" for k, v in _kept(list(value.items()))]
        opening, closing = "{", "}"
    else:
        return clipped(line)
    body = [clipped(f"{indent}{item},") for item in items]
    if len(items) < len(value):
        body.append(f"{indent}... {len(value) - len(items)} more")
    return "\n".join([opening, *body, closing])


def clipped(line: str) -> str:
    """``line`` cut to ``WIDTH`` characters, saying how many were left out."""
    if len(line) <= WIDTH:
        return line
    tail = f" ... {len(line) - (WIDTH - 40)} more characters"
    return line[: WIDTH - 40] + tail


def clipped_lines(text: str) -> str:
    """Each line of ``text`` clipped."""
    return "\n".join(clipped(line) for line in text.splitlines())


# --- values ----------------------------------------------------------------------


def differences(real: object, spec: object, path: str = "") -> list[tuple[str, object, object]]:
    """Where ``real`` and ``spec`` differ: ``(path, real part, spec part)`` for each leaf.

    Dicts are matched by key (``token``), lists and tuples by place (``[2]``), named
    tuples by field (``[1].message``); a part one side lacks is ``MISSING``. Values of
    different types, or of the same type that are not containers, are leaves.
    """
    if real == spec:
        return []
    if type(real) is not type(spec):
        return [(path, real, spec)]
    if isinstance(real, dict) and isinstance(spec, dict):
        keys = [*real, *(key for key in spec if key not in real)]
        found: list[tuple[str, object, object]] = []
        for key in keys:
            where = f"{path}.{key}" if path else str(key)
            found += differences(real.get(key, MISSING), spec.get(key, MISSING), where)
        return found
    if isinstance(real, tuple) and hasattr(real, "_fields"):  # a NamedTuple: by field
        found = []
        for field in real._fields:
            where = f"{path}.{field}" if path else field
            found += differences(getattr(real, field), getattr(spec, field), where)
        return found
    if isinstance(real, list | tuple) and isinstance(spec, list | tuple):
        found = []
        for index in range(max(len(real), len(spec))):
            mine = real[index] if index < len(real) else MISSING
            theirs = spec[index] if index < len(spec) else MISSING
            found += differences(mine, theirs, f"{path}[{index}]")
        return found
    return [(path, real, spec)]


def _pair(real: object, spec: object, real_name: str, spec_name: str) -> str:
    """``worker.py 1, model 2``; two long strs are shown around their first difference."""
    if type(real) is str and type(spec) is str and max(len(real), len(spec)) > 60:
        at = next(
            (i for i, (a, b) in enumerate(zip(real, spec, strict=False)) if a != b),
            min(len(real), len(spec)),
        )
        start = max(at - 20, 0)
        mine, theirs = real[start : at + 40], spec[start : at + 40]
        dots = "..." if start else ""
        return (
            f"from character {at}: {real_name} {dots}{mine!r}..., {spec_name} {dots}{theirs!r}..."
        )
    return f"{real_name} {short_repr(real)}, {spec_name} {short_repr(spec)}"


def _listed(items: Sequence[str]) -> str:
    """The first few items joined; the count of the rest after them."""
    shown = "; ".join(items[:HEADLINE_ITEMS])
    if len(items) > HEADLINE_ITEMS:
        shown += f"; and {len(items) - HEADLINE_ITEMS} more"
    return shown


def result_divergence(
    verb: str,
    real: tuple[Any, ...],
    spec: tuple[Any, ...],
    real_name: str = "worker.py",
    spec_name: str = "model",
) -> str:
    """The message for two results of ``outcome_of`` that differ: ``("returned", value)``
    or ``("raised", type name[, message])``. The first line names the difference::

        finish returned 'done' on worker.py, False on the model
        claim returned different values: token: worker.py 2, model 1
        enqueue raised ValueError on both, with other messages: from character 1: ...
        redrive raised ValueError on worker.py, returned True on the model

    then each side's whole result, abbreviated.
    """
    the_spec = f"the {spec_name}"
    if real[0] != spec[0] or (real[0] == "raised" and real[1] != spec[1]):
        headline = f"{verb} {_outcome(real)} on {real_name}, {_outcome(spec)} on {the_spec}"
    elif real[0] == "raised":
        mine, theirs = (result[2] if len(result) > 2 else "" for result in (real, spec))
        pair = _pair(mine, theirs, real_name, spec_name)
        headline = f"{verb} raised {real[1]} on both, with other messages: {pair}"
    else:
        found = differences(real[1], spec[1])
        if len(found) <= 1 and (not found or found[0][0] == ""):  # none: equal, not the same
            headline = (
                f"{verb} returned {short_repr(real[1])} on {real_name}, "
                f"{short_repr(spec[1])} on {the_spec}"
            )
        else:
            named = value_differences(real[1], spec[1], real_name, spec_name)
            headline = f"{verb} returned different values: {_listed(named)}"
    width = max(len(real_name), len(spec_name)) + 1
    return "\n".join(
        [
            clipped(headline),
            clipped_lines(f"  {real_name + ':':<{width}} {abbreviated(real, '    ')}"),
            clipped_lines(f"  {spec_name + ':':<{width}} {abbreviated(spec, '    ')}"),
        ]
    )


def _outcome(result: tuple[Any, ...]) -> str:
    if result[0] == "raised":
        return f"raised {result[1]}"
    return f"returned {short_repr(result[1])}"


def outcome_text(result: tuple[Any, ...]) -> str:
    """A result of ``outcome_of`` in words: ``returned 'done'``, ``raised InjectedFault``,
    ``raised ValueError: 'now_ms' must be ...``."""
    if result[0] == "raised" and len(result) > 2:
        return f"raised {result[1]}: {short_repr(result[2])}"
    return _outcome(result)


def value_differences(
    real: object, spec: object, real_name: str = "worker.py", spec_name: str = "model"
) -> list[str]:
    """Each difference of ``differences`` in words: ``token: worker.py 2, model 1``."""
    found = differences(real, spec)
    return [f"{where or 'the value'}: {_pair(a, b, real_name, spec_name)}" for where, a, b in found]


def listed(items: Sequence[str]) -> str:
    """The first few items joined by ``; ``, then how many more there are."""
    return _listed(items)


# --- rows ------------------------------------------------------------------------


def _keyed(table: str, rows: Sequence[tuple[Any, ...]]) -> dict[object, tuple[Any, ...]]:
    """Rows by what they stand for: a job by its id, an audit row by its seq; a row whose
    key is taken (or a table without known columns) by its place in the table."""
    keyed: dict[object, tuple[Any, ...]] = {}
    for place, row in enumerate(rows):
        key: object = ("place", place)
        if table == "jobs" and len(row) > 1:
            key = row[1]
        elif table == "redrives" and row:
            key = row[0]
        keyed[key if key not in keyed else ("place", place)] = row
    return keyed


def _label(table: str, key: object, row: tuple[Any, ...]) -> str:
    if isinstance(key, tuple) and key[:1] == ("place",):
        return f"{table} row {key[1]}"
    if table == "jobs":
        return f"job {key!r}"
    if table == "redrives":
        job = f" (job {row[1]!r})" if len(row) > 1 else ""
        return f"redrive seq {key!r}{job}"
    return f"{table} {key!r}"


def _named(table: str, row: tuple[Any, ...]) -> str:
    columns = COLUMNS.get(table)
    if columns is None or len(columns) != len(row):
        return short_repr(row)
    pairs = zip(columns, row, strict=True)
    return " ".join(f"{column}={short_repr(value)}" for column, value in pairs)


def row_differences(
    real: Rows, spec: Rows, real_name: str = "worker.py", spec_name: str = "model"
) -> list[tuple[str, str]]:
    """Each difference between two sets of rows, by row and column name, as a short form
    for the first line and a whole one for the lines below it::

    ("job 'a' deadline: worker.py 1, model 2", the same)
    ("job 'c' only on the model", "job 'c' only on the model: seq=3 id='c' qty=1 ...")
    """
    found: list[tuple[str, str]] = []
    the_spec = f"the {spec_name}"
    for table in [*real, *(name for name in spec if name not in real)]:
        mine, theirs = _keyed(table, real.get(table, [])), _keyed(table, spec.get(table, []))
        columns = COLUMNS.get(table, ())
        for key in [*mine, *(key for key in theirs if key not in mine)]:
            if key not in theirs or key not in mine:
                row, where = (mine[key], real_name) if key in mine else (theirs[key], the_spec)
                short = f"{_label(table, key, row)} only on {where}"
                found.append((short, f"{short}: {_named(table, row)}"))
            elif mine[key] != theirs[key]:
                a, b = mine[key], theirs[key]
                if len(a) != len(b) or len(columns) != len(a):
                    both = f"{_label(table, key, a)}: {_pair(a, b, real_name, spec_name)}"
                    found.append((both, both))
                    continue
                cells = [
                    f"{column}: {_pair(x, y, real_name, spec_name)}"
                    for column, x, y in zip(columns, a, b, strict=True)
                    if x != y
                ]
                both = f"{_label(table, key, a)} " + ", ".join(cells)
                found.append((both, both))
    return found


def rows_divergence(
    real: Rows, spec: Rows, real_name: str = "worker.py", spec_name: str = "model"
) -> str:
    """The message for two sets of rows that differ: a first line naming the first few
    differences (``rows differ: job 'a' deadline: worker.py 1, model 2``), a line for
    each difference (unless the first line says them all), then both sides' tables, one
    row a line."""
    found = row_differences(real, spec, real_name, spec_name)
    lines = [clipped(f"rows differ: {_listed([short for short, _ in found])}")]
    if len(found) > HEADLINE_ITEMS or any(short != whole for short, whole in found):
        lines += [clipped(f"  {whole}") for _, whole in found]
    for name, rows in ((real_name, real), (f"the {spec_name}", spec)):
        lines.append(f"{name}'s rows:")
        lines += _table_lines(rows)
    return "\n".join(lines)


def _table_lines(rows: Rows) -> Iterable[str]:
    for table, values in rows.items():
        columns = COLUMNS.get(table)
        header = f" ({', '.join(columns)})" if columns else ""
        yield clipped(f"  {table}{header}:" + ("" if values else " none"))
        shown = [short_repr(row) for row in values]
        if len(shown) > MAX_ITEMS:
            shown = [*shown[:KEEP_ITEMS], f"... {len(shown) - KEEP_ITEMS} more"]
        yield from (clipped(f"    {row}") for row in shown)
