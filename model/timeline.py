"""A worked example in numbers: one job's life, run on the model, rendered for the docs.

``STORY`` is a list of queue calls at given times: two couriers, one that crashes
mid-delivery, the other that takes the job over, the crashed one's late (stale)
finish, a quarantine, an operator's redrive and a last delivery. ``render`` runs
the calls on a ``QueueModel`` and prints, for each step, the call, what it
returned, which row of ``TRANSITIONS`` fired, the job's row before and after
(changed cells in bold), the audit rows, and what ``model.explain`` says then. So
the example is the model's own output: ``docs/state-machine.md`` is rendered
from it (``python -m model.diagram``) and a test fails while it is stale.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from model.explain import explain, headline
from model.job import ROW_FIELDS, recording
from model.queue import QueueModel

__all__ = ["STORY", "Step", "render"]

JOB_ID = "order-7"


@dataclass(frozen=True)
class Step:
    """One call of the story: who makes it, at which time, what it is, and why."""

    who: str
    now_ms: int
    call: str
    why: str
    run: Callable[[QueueModel, dict[str, Any]], object]


def _ticket_of(held: dict[str, Any], owner: str) -> dict[str, Any]:
    ticket: dict[str, Any] = held[owner]
    return ticket


def _claim(owner: str, now: int, lease_ms: int) -> Callable[[QueueModel, dict[str, Any]], object]:
    def run(queue: QueueModel, held: dict[str, Any]) -> object:
        ticket = queue.claim(owner, now, lease_ms)
        if ticket is not None:
            held[owner] = ticket
        return ticket

    return run


def _finish(
    owner: str, outcome: str, now: int, delay_ms: int = 0
) -> Callable[[QueueModel, dict[str, Any]], object]:
    def run(queue: QueueModel, held: dict[str, Any]) -> object:
        return queue.finish(_ticket_of(held, owner), outcome, now, delay_ms)

    return run


STORY: list[Step] = [
    Step(
        "the shop",
        0,
        f"enqueue({{'id': '{JOB_ID}', 'qty': 2}}, now_ms=0, ttl_ms=10000, max_attempts=2)",
        "A new job: pending, due at once, 10 s to be done, two attempts",
        lambda q, held: q.enqueue({"id": JOB_ID, "qty": 2}, 0, 10_000, 2),
    ),
    Step(
        "courier c1",
        100,
        "claim('c1', now_ms=100, lease_ms=1000)",
        "Courier c1 takes the job for 1 s: attempt 1, fencing token 1",
        _claim("c1", 100, 1000),
    ),
    Step(
        "courier c1",
        400,
        "(killed mid-delivery: no call)",
        "The receiver may have applied it; the queue cannot know, and waits for the lease",
        lambda q, held: None,
    ),
    Step(
        "courier c2",
        1100,
        "claim('c2', now_ms=1100, lease_ms=1000)",
        "The lease of c1 ended at 1100: c2 takes the job over, attempt 2, token 2",
        _claim("c2", 1100, 1000),
    ),
    Step(
        "courier c1",
        1200,
        "finish(c1's ticket (token 1), 'ok', now_ms=1200)",
        "Restarted with its old ticket, c1 reports late: the ticket is stale, nothing changes",
        _finish("c1", "ok", 1200),
    ),
    Step(
        "courier c2",
        1600,
        "finish(c2's ticket (token 2), 'retry', now_ms=1600, delay_ms=200)",
        "The receiver answered 503: with both attempts spent, a retry quarantines the job",
        _finish("c2", "retry", 1600, 200),
    ),
    Step(
        "an operator",
        2000,
        f"redrive('{JOB_ID}', now_ms=2000, ttl_ms=10000, note='ticket-4711')",
        "The audit row first (the token at the redrive), then pending with a fresh budget",
        lambda q, held: q.redrive(JOB_ID, 2000, 10_000, "ticket-4711"),
    ),
    Step(
        "courier c1",
        2100,
        "claim('c1', now_ms=2100, lease_ms=1000)",
        "A newer token (3) than any ticket issued before the redrive",
        _claim("c1", 2100, 1000),
    ),
    Step(
        "courier c1",
        2300,
        "finish(c1's ticket (token 3), 'ok', now_ms=2300)",
        "Delivered and recorded: done, for good",
        _finish("c1", "ok", 2300),
    ),
]
"""The story, in time order (``render`` runs it on the model)."""

SHOWN = ROW_FIELDS[3:]  # the row's columns that change: status (``state``) to reason
HEADERS = ["status" if name == "state" else name for name in SHOWN]


def _cells(row: tuple[Any, ...] | None) -> list[str]:
    if row is None:
        return ["(no row)"] + [""] * (len(SHOWN) - 1)
    values = dict(zip(ROW_FIELDS, row, strict=True))
    return ["NULL" if values[name] is None else str(values[name]) for name in SHOWN]


def _result(value: object) -> str:
    if isinstance(value, dict):
        return "a ticket: " + ", ".join(f"{key} {item}" for key, item in value.items())
    return repr(value)


def render() -> list[str]:
    """The story as Markdown: one numbered step per call, rows before and after."""
    queue = QueueModel()
    held: dict[str, Any] = {}
    lines: list[str] = []
    for number, step in enumerate(STORY, start=1):
        before = {row[1]: row for row in queue.rows()["jobs"]}.get(JOB_ID)
        fired: list[tuple[str, str, str]] = []
        with recording(lambda *tried, into=fired: into.append(tried)):
            result = step.run(queue, held)
        rows = queue.rows()
        after = {row[1]: row for row in rows["jobs"]}.get(JOB_ID)
        fires = [f"`{trigger}` (from `{source}`)" for source, trigger, o in fired if o == "fires"]
        tried = [f"`{trigger}`: {outcome}" for _, trigger, outcome in fired if outcome != "fires"]
        if step.call.startswith("("):
            what = "Nothing is called; the row stays as it was."
        else:
            what = f"Returns {_result(result)}."
            if fires:
                what += f" Fires {', '.join(fires)}."
            elif tried:
                what += f" Nothing fires ({'; '.join(tried)})."
            elif step.call.startswith("enqueue"):
                what += " No transition: the job is added as `pending`."
        lines += [
            f"**{number}. t = {step.now_ms} ms, {step.who}:** `{step.call}`. {step.why}.",
            "",
            what,
            "",
            "| | " + " | ".join(HEADERS) + " |",
            "|---|" + "---|" * len(HEADERS),
        ]
        old, new = _cells(before), _cells(after)
        changed = [
            f"**{cell}**" if cell != was else cell for cell, was in zip(new, old, strict=True)
        ]
        lines += [f"| before | {' | '.join(old)} |", f"| after | {' | '.join(changed)} |", ""]
        if rows["redrives"] and step.call.startswith("redrive"):
            audit = ", ".join(f"{v!r}" for v in rows["redrives"][-1])
            lines += [f"Audit row written: `({audit})` (seq, id, token, at_ms, note).", ""]
        if after is not None:
            lines += [f"The model then says: {headline(explain(after, step.now_ms))}.", ""]
    return lines
