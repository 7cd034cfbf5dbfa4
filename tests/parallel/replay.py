"""Replay a case of the parallel suite: the same program under the same schedule.

    python -m tests.parallel.replay failures/parallel-sqlite-queue-0123456789.json
    python -m tests.parallel.replay FILE --runs 10      # ten runs, each judged
    python -m tests.parallel.replay FILE --real 50      # the program in real processes

A failure of the parallel suite prints such a command; the file (``tests.parallel.case``)
holds the program, its schedule, the kind of store and the planted bug, if any. Each
run makes a new queue (a file in a temporary folder, or a schema on the PostgreSQL
server of ``LEASE_QUEUE_PG``, else a throwaway one), plants the bug in a copy of the
module if the case names one, runs the program under the schedule and judges the run.

``--real N`` runs the program ``N`` times with each branch in a process of its own, as
the operating system interleaves them (the schedule is not used): how the scheduler's
own assumptions are checked against the real thing.

The answer is never silent, and the exit status says it:

- 1: the failure reproduced (the report of the first failing run is printed);
- 0: every run was explained: it did not reproduce (on this code, the bug is gone);
- 2: the case could not be run (not a case file, a schedule that does not fit the
  program on this code, a server that cannot be reached).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

from tests.parallel.case import Case, judged, report
from tests.parallel.judge import Judgement
from tests.parallel.planted import BY_NAME, plant
from tests.parallel.runner import Pool, RunFailed, scratch_folder
from tests.parallel.schedule import Replay
from tests.parallel.scheduler import ScheduleFailed
from tests.parallel.trial import replay as replay_real
from tests.stores import Store
from tests.stores.postgres import PostgresStore
from tests.stores.sqlite import SQLiteStore

REPRODUCED, NOT_REPRODUCED, CANNOT_RUN = 1, 0, 2


@contextlib.contextmanager
def store_for(case: Case) -> Iterator[Store]:
    """A store of the case's kind, with its plant planted if it names one."""
    if case.plant is not None and case.plant not in BY_NAME:
        raise ValueError(f"no planted bug named {case.plant!r} (tests/parallel/planted.py)")
    with scratch_folder() as folder:
        if case.kind == "sqlite":
            yield plant(BY_NAME[case.plant], Path(folder)) if case.plant else SQLiteStore(folder)
            return
        from tests.postgres import session_server

        with session_server() as server, server.database() as conninfo:
            if case.plant:
                yield plant(BY_NAME[case.plant], Path(folder), conninfo)
            else:
                yield PostgresStore(conninfo)


def scheduled(case: Case, store: Store, runs: int) -> tuple[int, Judgement | None]:
    """How many of ``runs`` runs under the case's schedule failed, and the first that did.
    Where the schedule stops fitting the code (a recorded branch cannot run there: the
    code changed since), the run goes on with the branch that ran last, and says so."""
    failed, first = 0, None
    for number in range(1, runs + 1):
        policy = Replay.of(case.schedule, lenient=True)
        judgement = judged(case.program, store, policy)
        if policy.stopped_fitting is not None:
            print(
                f"run {number}: the schedule stopped fitting this code at step"
                f" {policy.stopped_fitting} of {len(policy.schedule)}; the run went on"
                " with the branch that ran last"
            )
        print(f"run {number}: {'failed' if judgement.failed else 'explained'}", flush=True)
        if judgement.failed:
            failed += 1
            first = first or judgement
    return failed, first


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.parallel.replay", description=__doc__.split("\n")[0]
    )
    parser.add_argument("case", type=Path, help="a case file a failure of the suite saved")
    parser.add_argument("--runs", type=int, default=1, help="runs under its schedule (1)")
    parser.add_argument(
        "--real", type=int, default=0, metavar="N", help="instead: N runs in real processes"
    )
    args = parser.parse_args(argv)
    try:
        case = Case.load(args.case)
    except (OSError, ValueError) as error:
        print(f"cannot replay {args.case}: {error}", file=sys.stderr)
        return CANNOT_RUN
    runs = args.real or args.runs
    if runs < 1:
        print("cannot replay: --runs and --real take a count of 1 or more", file=sys.stderr)
        return CANNOT_RUN
    how = "in real processes" if args.real else f"under schedule {case.schedule}"
    print(f"replaying {args.case} on {case.kind} ({case.plant or 'no plant'}) {how}")
    try:
        with store_for(case) as store:
            if args.real:
                pool = Pool()
                try:
                    trial = replay_real(pool, store, case.program, runs)
                finally:
                    pool.close()
                failed = trial.failures
                text = trial.report() if trial.failed else ""
            else:
                failed, first = scheduled(case, store, runs)
                text = report(first, case, args.case, None) if first else ""
    except (ScheduleFailed, RunFailed, ValueError, RuntimeError) as error:
        print(f"could not replay the case: {error}", file=sys.stderr)
        return CANNOT_RUN
    if failed:
        print(f"\nREPRODUCED: failed {failed} of {runs} runs\n\n{text}")
        return REPRODUCED
    print(f"\nNOT REPRODUCED: all {runs} runs were explained on this code")
    return NOT_REPRODUCED


if __name__ == "__main__":
    raise SystemExit(main())
