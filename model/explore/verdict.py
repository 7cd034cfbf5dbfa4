"""A run's verdicts: each property's (``verdicts``), those that fail the run
(``failures``), the printed report (``report``, ``describe_finding``) and the JSON
record ``docs/state-machine.md`` is rendered from (``record``, ``load_record``)."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

from model.explore.search import Exploration
from model.properties import ALWAYS, BY_NAME, SOMETIMES


def verdicts(found: Exploration) -> dict[str, dict[str, dict[str, Any]]]:
    """Each property's verdict and, when found, the length of its shortest trace."""

    def steps_to(name: str) -> int | None:
        finding = found.findings.get(name)
        return None if finding is None else finding.depth + 1

    return {
        "always": {
            p.name: {
                "summary": p.summary,
                "scope": p.scope,
                "holds": p.name not in found.findings,
                "steps": steps_to(p.name),
            }
            for p in ALWAYS
        },
        "sometimes": {
            p.name: {
                "summary": p.summary,
                "witnessed": p.name in found.findings,
                "expected": p.expected,
                "steps": steps_to(p.name),
            }
            for p in SOMETIMES
        },
    }


def failures(found: Exploration) -> list[str]:
    """The properties whose verdict fails the run: each ``always`` broken, each
    ``sometimes`` not witnessed, and each goal expected never to be witnessed that was."""
    judged = verdicts(found)
    return [
        *(name for name, v in judged["always"].items() if not v["holds"]),
        *(name for name, v in judged["sometimes"].items() if v["witnessed"] != v["expected"]),
    ]


def record(found: Exploration) -> dict[str, Any]:
    """The run as JSON data: bounds, numbers, verdicts and the reachable combinations
    (no wall time: the record must be the same on every machine)."""
    return {
        "command": "python -m model.explore --record docs/state-machine.json",
        "bounds": {
            name: list(v) if isinstance(v, tuple) else v for name, v in asdict(found.bounds).items()
        },
        "generated": found.generated,
        "distinct": found.distinct,
        "depth": found.depth,
        "unexpanded": found.unexpanded,
        **verdicts(found),
        "reachable": [list(combo) for combo in sorted(found.reachable)],
    }


def report(found: Exploration) -> list[str]:
    """TLC's summary and each property with its verdict, as the command prints them."""
    lines = [
        f"bounds: {found.bounds.describe()}",
        f"{found.generated:,} states generated, {found.distinct:,} distinct states found,"
        f" depth {found.depth}, {found.unexpanded:,} states left at the depth bound,"
        f" in {found.seconds:.1f} s",
        "always:",
    ]
    judged = verdicts(found)
    for name, verdict in judged["always"].items():
        mark = "holds   " if verdict["holds"] else f"BROKEN in {verdict['steps']} steps:"
        lines.append(f"  {mark} {name}: {verdict['summary']}")
    lines.append("sometimes:")
    for name, verdict in judged["sometimes"].items():
        if verdict["witnessed"]:
            mark = (
                f"seen in {verdict['steps']:>2}" if verdict["expected"] else "SEEN, NOT EXPECTED:"
            )
        else:
            mark = "never     " if not verdict["expected"] else "NEVER SEEN:"
        lines.append(f"  {mark} {name}: {verdict['summary']}")
    lines.append(
        f"coverage: {len(found.reachable)} (source, trigger, guard outcome) combinations tried"
    )
    return lines


def describe_finding(found: Exploration, name: str) -> list[str]:
    """The shortest trace to ``name``'s finding as a regression test of tests/stateful,
    with the last step's answer and the jobs before and after it."""
    if name not in found.findings:
        return [f"# {name}: nothing found"]
    prop = BY_NAME[name]
    trace = found.trace(name)
    last = trace.edges[-1]
    return [
        f"# {prop.kind} {name}: {prop.summary}",
        trace.regression_test(name, prop.summary),
        f"# the last step answered {last.result!r} at now={last.before.now}",
        f"# jobs before it: {last.before.rows['jobs']}",
        f"# jobs after it:  {last.after.rows['jobs']}",
    ]


RECORD_PATH = Path(__file__).resolve().parents[2] / "docs" / "state-machine.json"
"""Where ``--record`` writes the run of the default bounds (``docs/state-machine.md`` is
rendered from it; a test checks it against a fresh run)."""


def load_record(path: Path = RECORD_PATH) -> dict[str, Any]:
    """The recorded run (``record``'s data), read back."""
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    return data
