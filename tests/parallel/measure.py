"""How fast the parallel suite runs and how far its checker reaches.

    python -m tests.parallel.measure [--programs 200]

Draws programs of exactly 3 branches of N calls (N = 8, then larger), runs each once on
worker.py, then times the checker alone on the recorded histories. Prints, per N:
programs run per second, histories checked per second, the largest and the median
amount of the checker's work (model steps plus states explored), the share of calls that
overlapped a call of another branch, and how many verdicts were "unknown" (the budget ran out).
``docs/testing.md`` records a run.
"""

from __future__ import annotations

import argparse
import statistics
import time

from hypothesis import HealthCheck, Phase, given, settings

from tests.parallel.history import Run
from tests.parallel.judge import DEFAULT_BUDGET, judge
from tests.parallel.program import Program
from tests.parallel.runner import Pool, scratch_folder
from tests.parallel.strategies import programs
from tests.stores.sqlite import SQLiteStore


def sample(count: int, calls: int) -> list[Program]:
    """``count`` programs of exactly 3 branches of ``calls`` calls (random seeds)."""
    drawn: list[Program] = []

    @settings(
        max_examples=count,
        phases=[Phase.generate],
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(programs(min_branches=3, max_branches=3, min_calls=calls, max_calls=calls))
    def draw(program: Program) -> None:
        drawn.append(program)

    draw()
    return drawn[:count]


def measure(pool: Pool, count: int, calls: int, budget: int) -> dict[str, object]:
    drawn = sample(count, calls)
    started = time.monotonic()
    with scratch_folder() as folder:
        store = SQLiteStore(folder)
        runs: list[Run] = [pool.run(program, store) for program in drawn]
    ran_s = time.monotonic() - started
    started = time.monotonic()
    verdicts = [judge(run, store, budget) for run in runs]
    checked_s = time.monotonic() - started
    work = [j.verdict.steps + j.verdict.explored for j in verdicts]
    overlapping = [overlap_share(run) for run in runs]
    return {
        "calls_per_branch": calls,
        "programs": len(runs),
        "calls_per_history": statistics.median(len(run.records) for run in runs),
        "programs_run_per_s": round(len(runs) / ran_s, 1),
        "histories_checked_per_s": round(len(runs) / checked_s, 1),
        "overlapping_calls": round(statistics.mean(overlapping), 2),
        "median_work": statistics.median(work),
        "largest_work": max(work),
        "unknown": sum(j.verdict.outcome == "unknown" for j in verdicts),
        "failed": sum(j.failed for j in verdicts),
    }


def overlap_share(run: Run) -> float:
    """The share of a run's branch calls whose interval overlaps a call of another branch."""
    calls = [r for r in run.records if r.lane != "p"]
    ends = [(r, r.returned if r.returned is not None else 2**63) for r in calls]
    overlapping = sum(
        any(
            other.lane != record.lane and other.invoked < end and record.invoked < other_end
            for other, other_end in ends
        )
        for record, end in ends
    )
    return overlapping / max(len(calls), 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--programs", type=int, default=200)
    parser.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--budget", type=int, default=DEFAULT_BUDGET)
    args = parser.parse_args(argv)
    pool = Pool()
    try:
        for calls in args.sizes:
            print(measure(pool, args.programs, calls, args.budget), flush=True)
    finally:
        pool.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
