"""The parallel suite under the controlled scheduler, as a test runs it and as the
measurement of the planted bugs runs it (``tests.parallel.planted``).

``Suite.check(program, schedule)`` runs the program once under the schedule hypothesis
drew (a run is deterministic, so no run is repeated: hypothesis shrinks the program and
the schedule together, each candidate run once). A failing run is replayed once more
from its realized schedule (a run that does not fail again is said to be not
deterministic, never hidden), saved as a case (``tests.parallel.case``) and reported
with the command that replays it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.parallel.case import Case, judged, report
from tests.parallel.judge import DEFAULT_BUDGET, Judgement
from tests.parallel.program import Program
from tests.parallel.schedule import Policy, Replay, Schedule
from tests.stores import Store


@dataclass(eq=False)
class Suite:
    """Programs under schedules on ``store`` (the plant named ``plant`` in it, if any)."""

    store: Store
    plant: str | None = None
    budget: int = DEFAULT_BUDGET
    programs: int = field(default=0, init=False, repr=False)
    runs: int = field(default=0, init=False, repr=False)
    failures: int = field(default=0, init=False, repr=False)
    last_failure: tuple[Case, Judgement, Path] | None = field(default=None, init=False, repr=False)

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        """How hypothesis prints the fixture: the store and the plant, nothing more."""
        printer.text(f"Suite({self.store.name}, plant={self.plant!r})")

    def check(self, program: Program, schedules: Sequence[Schedule]) -> list[Judgement]:
        """Run ``program`` under each of ``schedules`` and judge each run;
        ``AssertionError`` with the report (and the case saved) at the first that fails."""
        __tracebackhide__ = True  # the report is the message: no frame of the suite's
        self.programs += 1
        judgements = []
        for schedule in schedules:
            judgements.append(self.check_one(program, schedule))
        return judgements

    def check_one(self, program: Program, schedule: Schedule) -> Judgement:
        __tracebackhide__ = True
        judgement = self.run(program, schedule.policy())
        if not judgement.failed:
            return judgement
        self.failures += 1
        written = judgement.run.schedule or ""
        case = Case(self.store.name, program, written, self.plant)
        again = self.run(program, Replay.of(written)).failed
        path = case.save()
        self.last_failure = (case, judgement, path)
        raise AssertionError(report(judgement, case, path, again))

    def run(self, program: Program, policy: Policy) -> Judgement:
        self.runs += 1
        return judged(program, self.store, policy, self.budget)
