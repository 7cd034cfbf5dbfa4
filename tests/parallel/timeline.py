"""A failing run drawn as a timeline: one lane per branch, each call an interval.

``render(judgement)`` prints, in order: the prefix (it ran alone, before the branches),
then one row per event of the branches in the order the shared clock saw them (a call
opens with ``┌``, a run_once's send shows as ``┆ send``, a call closes with ``└`` and
its result; ``✝`` marks a call whose process was killed), then every call in full with
its result. ``✗`` marks the calls that no order explains: the calls that could not be
placed after the longest order the checker found. When every call could be placed but
no order ends in the rows found after the run, both sets of rows are printed instead.
"""

from __future__ import annotations

from typing import Any

from tests.parallel.history import Observed, Record
from tests.parallel.judge import Judgement
from tests.parallel.program import PREFIX

LANE_WIDTH = 30


def short(outcome: Any) -> str:
    """A result in a few characters: ``a#2`` is job a's ticket with token 2."""
    if outcome is None:
        return "✝ killed"
    if outcome[0] == "raised":
        return f"!{outcome[1]}"
    value = outcome[1]
    if isinstance(value, dict) and "token" in value:
        tail = f" {value['status']}" if "status" in value else ""
        return f"{value['id']}#{value['token']}{tail}"
    if isinstance(value, list):
        return "[" + ",".join(short(("returned", item)) for item in value) + "]"
    if isinstance(value, tuple) and len(value) == 2:  # a Caught Conflict
        return str(value[0])
    return repr(value)


def stuck_labels(judgement: Judgement) -> set[str]:
    """The labels of the calls that no order explains (see the module docstring)."""
    by_id = {op.id: op for op in judgement.ops}
    return {by_id[op_id].process for op_id in judgement.verdict.stuck}


def render(judgement: Judgement) -> str:
    run = judgement.run
    marked = stuck_labels(judgement)
    lines = ["prefix (alone, before the branches):"]
    prefix = [record for record in run.records if record.lane == PREFIX]
    lines += [f"  {record.label:<5} {record.verb} -> {short(record.outcome)}" for record in prefix]
    branches = [record for record in run.records if record.lane != PREFIX]
    lanes = sorted({record.lane for record in branches})
    scheduled = run.schedule is not None
    clock = "the scheduler's clock, one tick per event" if scheduled else "ms since the first call"
    lines += ["", f"branches (rows in the order of the shared clock; {clock}):"]
    lines.append("  " + " " * 9 + "".join(f"{lane:<{LANE_WIDTH}}" for lane in lanes))
    events: list[tuple[int, int, str, str]] = []
    for record in branches:
        tag = f"{record.label} {record.verb}"
        events.append((record.invoked, 0, record.lane, f"┌ {tag}"))
        if record.send is not None:
            events.append((record.send.entered, 1, record.lane, "┆ send"))
        if record.returned is None:
            continue
        mark = " ✗" if record.label in marked else ""
        events.append((record.returned, 2, record.lane, f"└ {short(record.outcome)}{mark}"))
    open_lanes: set[str] = set()
    start = min((event[0] for event in events), default=0)
    for at, kind, lane, text in sorted(events):
        cells = []
        for other in lanes:
            if other == lane:
                cells.append(text[: LANE_WIDTH - 1].ljust(LANE_WIDTH))
            elif other in open_lanes:
                cells.append("│".ljust(LANE_WIDTH))
            else:
                cells.append(" " * LANE_WIDTH)
        when = f"{at:8d}" if scheduled else f"{(at - start) / 1e6:8.3f}"
        lines.append(f"  {when} " + "".join(cells).rstrip())
        if kind == 0:
            open_lanes.add(lane)
        elif kind == 2:
            open_lanes.discard(lane)
    for lane in sorted(open_lanes):
        lines.append(f"  {'':8} {lane}: ✝ killed during its last call")
    lines += ["", "calls:"]
    lines += [call_line(record, marked) for record in run.records]
    lines += ["", verdict_lines(judgement)]
    return "\n".join(lines)


def call_line(record: Record, marked: set[str]) -> str:
    shown = ", ".join(
        f"{name}={value!r}" for name, value in record.args.items() if value is not None
    )
    result = "never returned (its process was killed)"
    if record.outcome is not None and record.outcome[0] == "returned":
        result = repr(record.outcome[1])
    elif record.outcome is not None:
        result = f"raised {record.outcome[1]}: {record.outcome[2]}"
    mark = "  ✗ no order explains this" if record.label in marked else ""
    send = ""
    if record.send is not None:
        send = f" [send got {record.send.delivery}]"
    return f"  {record.label:<5} {record.verb}({shown}){send}\n        -> {result}{mark}"


def verdict_lines(judgement: Judgement) -> str:
    verdict = judgement.verdict
    lines = [
        f"verdict: {verdict.outcome} ({verdict.steps} model steps,"
        f" {verdict.explored} states explored)"
    ]
    lines += [f"  broken: {problem}" for problem in judgement.problems]
    lines += [f"  {note}" for note in verdict.notes]
    if verdict.outcome == "illegal" and verdict.notes:
        state = verdict.state
        if state is not None:
            lines.append("  rows after the run:")
            lines += [f"    {row}" for row in judgement.run.rows["jobs"]]
            lines += [f"    {row}" for row in judgement.run.rows["redrives"]]
            lines.append("  the model's rows at the end of the longest order:")
            lines += [f"    {row}" for row in state.jobs + state.redrives]
    return "\n".join(lines)


__all__ = ["Observed", "render"]
