"""Running one program several times, because interleavings are not deterministic.

A program that fails once is a bug, whatever the other runs did. While hypothesis is
still looking, each program runs once (a race found by chance is found all the same);
once a failure has been seen in the test, hypothesis is shrinking, and each candidate
runs ``repeats`` times and counts as failing if any run failed. So a shrunk program
keeps only what makes it fail within that many runs. A program's first trial is its
answer for the rest of the test: when hypothesis meets it again (it replays every failure
to confirm it and the final one to report it, and a shrink may land on a program it ran
before), the recorded trial comes back, so hypothesis never sees one program both pass
and fail and never reports a race as "flaky". Every failing program is run ``repeats``
times in all, and the report says how often it failed ("7 of 10 runs"), with the
timeline of its first failing run.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.parallel.judge import DEFAULT_BUDGET, Judgement, judge
from tests.parallel.program import Program, describe
from tests.parallel.runner import Pool
from tests.parallel.timeline import render
from tests.stores import Store


@dataclass
class Trial:
    """What the runs of one program showed."""

    program: Program
    runs: int = 0
    failures: int = 0
    unknown: int = 0
    first_failure: Judgement | None = None
    interleavings: set[tuple[tuple[str, str], ...]] = field(default_factory=set)

    @property
    def failed(self) -> bool:
        return self.failures > 0

    def report(self) -> str:
        assert self.first_failure is not None
        return (
            f"the program failed {self.failures} of {self.runs} runs\n\n"
            f"{describe(self.program)}\n\n"
            f"its first failing run:\n{render(self.first_failure)}"
        )


@dataclass(eq=False)
class Trials:
    """Runs programs on one store: once each until a failure is seen, then
    ``repeats`` times each (see the module docstring)."""

    pool: Pool
    store: Store
    repeats: int
    budget: int = DEFAULT_BUDGET
    shrinking: bool = field(default=False, init=False)
    programs: int = field(default=0, init=False)
    calls: int = field(default=0, init=False)
    trials: dict[str, Trial] = field(default_factory=dict, init=False)

    def attempt(self, program: Program) -> Trial:
        """Run ``program`` (see the module docstring); a program met before gets its
        recorded trial back."""
        key = describe(program)
        known = self.trials.get(key)
        if known is not None:
            return known
        trial = Trial(program)
        self.programs += 1
        while trial.runs < (self.repeats if self.shrinking or trial.failed else 1):
            run = self.pool.run(program, self.store)
            self.calls += len(run.records)
            judgement = judge(run, self.store, self.budget)
            trial.runs += 1
            trial.interleavings.add(run.interleaving())
            if judgement.failed:
                trial.failures += 1
                if trial.first_failure is None:
                    trial.first_failure = judgement
            elif judgement.unknown:
                trial.unknown += 1
        if trial.failed:
            self.shrinking = True
        self.trials[key] = trial
        return trial


def replay(pool: Pool, store: Store, program: Program, runs: int) -> Trial:
    """Run ``program`` exactly ``runs`` times on ``backend`` and count the failures: how a
    shrunk program is replayed by hand or kept as a regression test."""
    trials = Trials(pool, store, repeats=runs)
    trials.shrinking = True  # every run counts, not only the first
    return trials.attempt(program)
