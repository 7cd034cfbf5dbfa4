"""A time-bounded campaign of parallel programs on worker.py or pgworker.py.

    python -m tests.parallel.fuzz --minutes 10      (or: make fuzz MODE=parallel MINUTES=10)
    python -m tests.parallel.fuzz --minutes 10 --store postgres

Draws programs with random seeds (the ``fuzz`` profile), in rounds, until the time is up, runs
each on real processes and checks every history. On the first failure hypothesis
shrinks the program (each candidate run ``repeats`` times) and prints it with its
timeline, and the campaign exits 1. It reports programs, calls, distinct
interleavings seen and the checker's verdicts.
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
from tests.parallel.strategies import programs
from tests.parallel.trial import Trials
from tests.stores import Store
from tests.stores.postgres import PostgresStore
from tests.stores.sqlite import SQLiteStore

ROUND_EXAMPLES = 50  # programs per round of hypothesis, each round with a new seed


def campaign(minutes: float, kind: str = "sqlite") -> int:
    """Fuzz for ``minutes`` on a store of ``kind`` (``sqlite``, or ``postgres`` on the
    server of ``LEASE_QUEUE_PG`` or a throwaway one); 1 on the first failure."""
    from tests.postgres import session_server

    with contextlib.ExitStack() as stack:
        store: Store = SQLiteStore(stack.enter_context(scratch_folder()))
        if kind == "postgres":
            server = stack.enter_context(session_server())
            conninfo = stack.enter_context(server.database())
            store = PostgresStore(conninfo)
        return rounds(minutes, store)


def rounds(minutes: float, store: Store) -> int:
    sizes = profiles.PARALLEL["fuzz"]
    pool = Pool()
    trials = Trials(pool, store, sizes.repeats, sizes.budget)
    stop_at = time.monotonic() + minutes * 60
    started = time.monotonic()
    interleavings: set[tuple[str, object]] = set()
    verdicts = {"ok": 0, "unknown": 0, "failed": 0}

    @settings(settings.get_profile("fuzz"), max_examples=ROUND_EXAMPLES)
    @given(program=programs())
    def one(program: Program) -> None:
        runs_before = trials.programs
        trial = trials.attempt(program)
        if trials.programs > runs_before:  # a program met before is not counted again
            interleavings.update((repr(program), order) for order in trial.interleavings)
            verdicts["failed" if trial.failed else "unknown" if trial.unknown else "ok"] += 1
        assert not trial.failed, trial.report()

    status = 0
    try:
        while time.monotonic() < stop_at:
            one()
    except AssertionError:
        status = 1
        raise
    finally:
        pool.close()
        elapsed = time.monotonic() - started
        print(
            f"programs: {trials.programs} in {elapsed:.0f} s"
            f" = {trials.programs / max(elapsed, 1e-9):.1f} programs/s"
        )
        print(f"calls: {trials.calls}")
        print(f"distinct interleavings seen: {len(interleavings)}")
        print("verdicts: " + ", ".join(f"{kind} {count}" for kind, count in verdicts.items()))
    return status


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long to fuzz")
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    args = parser.parse_args(argv)
    return campaign(args.minutes, args.store)


if __name__ == "__main__":
    sys.exit(main())
