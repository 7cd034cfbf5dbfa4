"""EXPLAIN QUERY PLAN for every SQL statement worker.py names, as markdown.

    python -m bench.plans            # markdown on stdout, for docs/performance.md

The statements are found by introspection: every module attribute of ``worker`` whose
value is a ``str`` starting with SELECT, UPDATE, INSERT, DELETE or WITH, in the order
the module defines them. Each is planned on a fresh queue file made by
``worker.open_queue`` (so with whatever indexes it creates), with dummy parameters: a
dict for ``:named`` ones, a tuple for ``?`` ones. The plan is the one SQLite picks
without ``ANALYZE`` statistics, as on every queue file (worker.py never runs ANALYZE).

A step ``SCAN jobs`` (no index) reads the whole table: its cost grows with the file,
history included. ``SCAN jobs USING ... INDEX`` reads a whole index (cheap only if the
index is small, for example a partial one over live rows).
"""

from __future__ import annotations

import argparse
import re
import sqlite3
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import worker

__all__ = ["Plan", "explain", "main", "render_markdown", "statements"]

_STATEMENT = re.compile(r"\s*(SELECT|UPDATE|INSERT|DELETE|WITH)\b", re.IGNORECASE)
_NAMED = re.compile(r"(?<![:\w]):([A-Za-z_]\w*)")
_FULL_SCAN = re.compile(r"^SCAN (jobs|redrives)$")  # a table's, not a subquery's

Plan = dict[str, Any]


def statements() -> list[tuple[str, str]]:
    """``(name, sql)`` of every SQL statement worker.py holds as a module constant
    (``NAME[key]`` for each statement of a dict of them, one per pending queue)."""
    found = []
    for name, value in vars(worker).items():
        texts = value.items() if isinstance(value, dict) else [(None, value)]
        for key, sql in texts:
            if isinstance(sql, str) and _STATEMENT.match(sql):
                found.append((name if key is None else f"{name}[{key}]", sql))
    return found


def dummy_parameters(sql: str) -> dict[str, int] | tuple[int, ...]:
    """Zeros for every parameter of ``sql``: a dict for ``:named``, a tuple for ``?``."""
    named = _NAMED.findall(sql)
    if named:
        return dict.fromkeys(named, 0)
    return (0,) * sql.count("?")


def _tree(rows: list[tuple[int, int, int, str]]) -> list[str]:
    """EXPLAIN QUERY PLAN rows as indented lines (two spaces per level)."""
    depth: dict[int, int] = {0: -1}
    lines = []
    for node, parent, _, detail in rows:
        depth[node] = depth.get(parent, -1) + 1
        lines.append("  " * depth[node] + detail)
    return lines


def explain(con: sqlite3.Connection, name: str, sql: str) -> Plan:
    """The plan of ``sql`` on ``con``, with the steps that scan a whole table flagged."""
    rows = con.execute(f"EXPLAIN QUERY PLAN {sql}", dummy_parameters(sql)).fetchall()
    lines = _tree([(int(a), int(b), int(c), str(d)) for a, b, c, d in rows])
    scans = [line.strip() for line in lines if _FULL_SCAN.match(line.strip())]
    return {"name": name, "sql": sql, "plan": lines, "full_scans": scans}


def explain_all(folder: Path) -> list[Plan]:
    """Plan every statement of worker.py on a fresh queue file in ``folder``."""
    path = folder / "plans.sqlite"
    con = worker.open_queue(path)
    try:
        return [explain(con, name, sql) for name, sql in statements()]
    finally:
        con.close()
        path.unlink(missing_ok=True)


def render_markdown(plans: list[Plan]) -> str:
    """The plans as markdown: one heading, the SQL and the plan tree per statement."""
    out = [
        f"SQLite {sqlite3.sqlite_version}, a fresh file from `worker.open_queue`, "
        "no ANALYZE statistics.",
        "",
    ]
    for plan in plans:
        verdict = (
            "**full table scan: " + ", ".join(plan["full_scans"]) + "**"
            if plan["full_scans"]
            else "no full table scan"
        )
        out += [f"#### `{plan['name']}` ({verdict})", "", "```sql", plan["sql"].strip(), "```"]
        steps = plan["plan"] or ["(no steps: a plain INSERT ... VALUES)"]
        out += ["", "```text", "QUERY PLAN", *steps, "```", ""]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the markdown of every statement's plan."""
    parser = argparse.ArgumentParser(prog="python -m bench.plans", description=__doc__)
    parser.add_argument("--dir", type=Path, default=None, help="folder for the scratch file")
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        print(render_markdown(explain_all(Path(tmp))))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
