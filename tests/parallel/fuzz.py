"""A time-bounded campaign of parallel programs on worker.py or pgworker.py.

    python -m tests.parallel.fuzz --minutes 10      (or: make fuzz MODE=parallel MINUTES=10)
    python -m tests.parallel.fuzz --minutes 10 --store postgres
    python -m tests.parallel.fuzz --minutes 10 --real   (each branch in a real process)

Draws programs with random seeds (the ``fuzz`` profile), in rounds, until the time is
up, and checks every history: under the controlled scheduler, each program under
random schedules (``tests.parallel.suite``), or with ``--real`` on real processes
(``tests.parallel.trial``). On the first failure hypothesis shrinks it and prints it
(with its schedule and the command that replays it, under the scheduler), and the
campaign exits 1. It reports programs, runs, the checker's verdicts and the time.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time

from hypothesis import given, settings

from tests import profiles
from tests.parallel.program import Program
from tests.parallel.runner import Pool, scratch_folder
from tests.parallel.schedule import Schedule, runs_of
from tests.parallel.strategies import programs
from tests.parallel.suite import Suite
from tests.parallel.trial import Trials
from tests.stores import Store
from tests.stores.postgres import PostgresStore
from tests.stores.sqlite import SQLiteStore

ROUND_EXAMPLES = 50  # programs per round of hypothesis, each round with a new seed


def campaign(minutes: float, kind: str = "sqlite", real: bool = False) -> int:
    """Fuzz for ``minutes`` on a store of ``kind`` (``sqlite``, or ``postgres`` on the
    server of ``LEASE_QUEUE_PG`` or a throwaway one); 1 on the first failure."""
    from tests.postgres import session_server

    with contextlib.ExitStack() as stack:
        store: Store = SQLiteStore(stack.enter_context(scratch_folder()))
        if kind == "postgres":
            server = stack.enter_context(session_server())
            conninfo = stack.enter_context(server.database())
            store = PostgresStore(conninfo)
        return rounds(minutes, store, real)


def rounds(minutes: float, store: Store, real: bool = False) -> int:
    sizes = profiles.PARALLEL["fuzz"]
    stop_at = time.monotonic() + minutes * 60
    started = time.monotonic()
    verdicts = {"ok": 0, "unknown": 0, "failed": 0}
    pool = Pool() if real else None
    trials = Trials(pool, store, sizes.repeats, sizes.budget) if pool else None
    suite = Suite(store, None, sizes.budget)
    explicit = store.name == "postgres"

    @settings(settings.get_profile("fuzz"), max_examples=ROUND_EXAMPLES)
    @given(schedules=runs_of(sizes.schedules, explicit), program=programs())
    def one(program: Program, schedules: list[Schedule]) -> None:
        if trials is not None:
            trial = trials.attempt(program)
            verdicts["failed" if trial.failed else "unknown" if trial.unknown else "ok"] += 1
            assert not trial.failed, trial.report()
            return
        try:
            judgements = suite.check(program, schedules)
        except AssertionError:
            verdicts["failed"] += 1
            raise
        verdicts["unknown" if any(j.unknown for j in judgements) else "ok"] += 1

    status = 0
    try:
        while time.monotonic() < stop_at:
            one()
    except AssertionError:
        status = 1
        raise
    finally:
        if pool is not None:
            pool.close()
        elapsed = time.monotonic() - started
        programs_run = trials.programs if trials is not None else suite.programs
        runs = trials.programs if trials is not None else suite.runs
        print(
            f"programs: {programs_run} in {elapsed:.0f} s"
            f" = {programs_run / max(elapsed, 1e-9):.1f} programs/s"
            f" ({'real processes' if real else f'{runs} scheduled runs'})"
        )
        print("verdicts: " + ", ".join(f"{kind} {count}" for kind, count in verdicts.items()))
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long to fuzz")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--real", action="store_true", help="branches in real processes")
    args = parser.parse_args(argv)
    return campaign(args.minutes, args.store, args.real)


if __name__ == "__main__":
    sys.exit(main())
