"""A trace: a path from the empty queue, run again step by step (``replay``), and
printed as a program of the lockstep machine's rules (``Trace.program``) or as a
regression test to paste (``Trace.regression_test``)."""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from model.explore.bounds import Bounds
from model.explore.edge import Edge, QueueFactory, edge_from
from model.explore.vocabulary import Held, Step
from model.explore.world import EMPTY
from model.queue import QueueModel


@dataclass(frozen=True)
class Trace:
    """A path from the empty queue at time 0, edge by edge."""

    edges: tuple[Edge, ...]

    def program(self) -> list[str]:
        """The trace as the lockstep's rule calls, ``state.promises_hold()`` after each
        (as hypothesis prints a shrunk run); a claim that issued a ticket names it
        ``tickets_<n>`` in the order issued, and a finish presents it by that name."""
        names: dict[int, str] = {}  # id() of a ticket held -> its name in the program
        lines = ["state = QueueLockstep()"]
        for edge in self.edges:

            def shown(value: Any, held: tuple[dict[str, Any], ...] = edge.before.tickets) -> str:
                return names[id(held[value.index])] if isinstance(value, Held) else repr(value)

            arguments = ", ".join(f"{key}={shown(value)}" for key, value in edge.step.arguments)
            call = f"state.{edge.step.rule}({arguments})"
            if edge.issued is not None:
                names[id(edge.issued)] = f"tickets_{len(names)}"
                call = f"{names[id(edge.issued)]} = {call}"
            lines += [call, "state.promises_hold()"]
        return [*lines, "state.teardown()"]

    def regression_test(self, name: str, summary: str) -> str:
        """The trace as a test to paste into ``tests/stateful/test_regressions.py``."""
        body = self.program()
        return "\n".join(
            [
                f"def test_regression_{name}() -> None:",
                f'    """Found by python -m model.explore ({len(self.edges)} steps):',
                "",
                *textwrap.wrap(f"{summary}.", 92, initial_indent="    ", subsequent_indent="    "),
                '    """',
                f"    {body[0]}",
                "    try:",
                *(f"        {line}" for line in body[1:-1]),
                "    finally:",
                f"        {body[-1]}",
            ]
        )


def replay(
    path: Iterable[Step], bounds: Bounds, factory: QueueFactory = QueueModel.from_rows
) -> Trace:
    """Run ``path`` from the empty queue at time 0, each step on a fresh model."""
    world, edges = EMPTY, []
    for action in path:
        edge = edge_from(world, action, bounds, factory)
        edges.append(edge)
        world = edge.after
    return Trace(tuple(edges))
