"""What ``courier conform`` prints: a summary of what was checked, and each transaction
no model step explains, for a person or as JSON (one object; with ``--follow`` one per
line).

An unexplained transaction is shown with what the feed knows of it (where it is in the
feed, the clock at the write, the writer on PostgreSQL), why no step explains it, every
row it changed before and after, the step the checker tried if one came close, and the
nearest model step for each row: the transition, the arguments guessed from the rows,
the guards that do not hold and the columns where the model's row differs.
"""

from __future__ import annotations

from typing import Any

from courier.commands.output import when
from courier.conform.checker import Checker, Finding
from courier.conform.feed import COLUMNS
from courier.conform.inference import Rules, Step
from courier.conform.judge import Difference

__all__ = ["finding_dict", "finding_lines", "rules_text", "summary_dict", "summary_lines"]


def _row(table: str, row: tuple[Any, ...] | None) -> dict[str, Any] | None:
    return None if row is None else dict(zip(COLUMNS[table], row, strict=False))


def _step(step: Step | None) -> dict[str, Any] | None:
    if step is None:
        return None
    return {
        "operation": step.operation,
        "arguments": step.arguments,
        "now_range": list(step.now_range),
    }


def _difference(difference: Difference) -> dict[str, Any]:
    return dict(difference.__dict__)


def finding_dict(finding: Finding) -> dict[str, Any]:
    """One transaction checked, as JSON."""
    return {
        "transaction": finding.label,
        "explained": finding.explained,
        "clock_ms": finding.clock_ms,
        "statements": finding.statements,
        "writer": finding.writer,
        "problems": finding.problems,
        "step": _step(finding.step),
        "differences": [_difference(d) for d in finding.differences],
        "changes": [
            {
                "table": change.table,
                "seq": change.seq,
                "before": _row(change.table, change.before),
                "after": _row(change.table, change.after),
            }
            for change in finding.changes
        ],
        "nearest": None
        if finding.nearest is None
        else {"operation": finding.nearest.operation, "rows": finding.nearest.rows},
    }


def rules_text(rules: Rules) -> str:
    """The rules a queue was held to, in words."""
    if rules.skew_ms is None:
        time_base = "times the writers chose (only the contract's range)"
    else:
        time_base = f"no now after the clock read at the write (+{rules.skew_ms} ms)"
    seqs = "the next seq (AUTOINCREMENT)" if rules.dense_seq else "seqs rising, gaps allowed"
    return f"claim order {rules.claim_order}; {time_base}; {seqs}"


def summary_dict(
    checker: Checker, queue: str, rules: Rules, position: int, extra: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Everything checked so far, as one JSON object."""
    return {
        "queue": queue,
        "rules": {
            "claim_order": rules.claim_order,
            "dense_seq": rules.dense_seq,
            "time_base": "simulated" if rules.skew_ms is None else "clock",
            "skew_ms": rules.skew_ms,
        },
        "transactions": checker.transactions,
        "changes": checker.changes,
        "operations": dict(sorted(checker.operations.items())),
        "unexplained": len(checker.unexplained),
        "findings": [finding_dict(f) for f in checker.unexplained],
        "position": position,
        **(extra or {}),
        "ok": not checker.unexplained,
    }


def summary_lines(checker: Checker, queue: str, rules: Rules) -> list[str]:
    """What was checked, in a few lines for a person."""
    operations = ", ".join(f"{name} {n}" for name, n in sorted(checker.operations.items()))
    lines = [
        f"change feed of {queue}: {checker.transactions} transactions checked "
        f"({checker.changes} changed rows)",
        f"  explained, by operation: {operations or 'none'}",
        f"  held to: {rules_text(rules)}",
        f"  unexplained: {len(checker.unexplained)}",
    ]
    if checker.unexplained:
        lines.append("FAILED: some committed changes are no step of the model (see above)")
    else:
        lines.append("OK: every committed transaction is one step of the model")
    return lines


def _values(row: dict[str, Any] | None) -> str:
    if row is None:
        return "(none)"
    return " ".join(f"{key}={value!r}" for key, value in row.items())


def finding_lines(finding: Finding) -> list[str]:
    """An unexplained transaction, for a person."""
    shown = finding_dict(finding)
    statements = f"{finding.statements} statement{'s' if finding.statements != 1 else ''}"
    writer = ", ".join(f"{k} {v}" for k, v in finding.writer.items() if v not in (None, ""))
    lines = [
        f"UNEXPLAINED {finding.label} ({statements}, clock at the write {when(finding.clock_ms)}"
        + (f"; {writer}" if writer else "")
        + ")"
    ]
    lines += [f"  why: {problem}" for problem in finding.problems]
    for change in shown["changes"]:
        lines.append(f"  {change['table']} seq {change['seq']}")
        lines.append(f"    before: {_values(change['before'])}")
        lines.append(f"    after:  {_values(change['after'])}")
    if finding.step is not None:
        arguments = ", ".join(f"{k}={v!r}" for k, v in finding.step.arguments.items())
        lines.append(f"  tried: {finding.step.operation}({arguments})")
        for d in finding.differences:
            lines.append(f"    {d.row} {d.column}: model {d.model!r}, queue {d.queue!r}")
    if finding.nearest is not None:
        lines.append(f"  nearest model step: {finding.nearest.operation}")
        for row in finding.nearest.rows:
            transition = str(row.get("transition") or "none")
            guessed = row.get("arguments")
            called = f" with {guessed}" if guessed else ""
            lines.append(f"    {row['row']}: {transition}{called}")
            if row.get("note"):
                lines.append(f"      {row['note']}")
            for guard in row.get("guards_failing", []):
                lines.append(f"      guard {guard} does not hold")
            for d in row.get("differences", []):
                lines.append(f"      {d['column']}: model {d['model']!r}, queue {d['queue']!r}")
    return lines
