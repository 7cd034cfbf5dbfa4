"""A time-bounded fuzzing campaign of the lockstep machine.

    python -m tests.stateful.fuzz --minutes 10      (or: make fuzz MINUTES=10)

Runs ``QueueLockstep`` with random seeds in rounds until the time is up, keeps
any failure in the example database (``.hypothesis/``) so that the next run
replays it first, and reports steps per second, how often each rule ran, and
which (source state, trigger, guard outcome) combinations the model tried,
beside those ``python -m model.explore`` found reachable (each one missed is
named). It exits 1 on the first failure, after hypothesis has printed the shrunk
program.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from model.explore import Combo, counting, coverage_report, load_record
from model.job import recording
from tests import profiles  # noqa: F401  (registers the profiles)
from tests.stateful.lockstep import RULE_NAMES, QueueLockstep

ROUND_EXAMPLES = 100
STEPS_PER_EXAMPLE = 60
REACHED: Counter[Combo] = Counter()  # what the model tried during the campaign


def campaign_settings() -> settings:
    """The ``fuzz`` profile (random, shrunk and printed like ``ci``), in rounds."""
    return settings(
        settings.get_profile("fuzz"),
        max_examples=ROUND_EXAMPLES,
        stateful_step_count=STEPS_PER_EXAMPLE,
    )


def report(started: float, rounds: int) -> None:
    elapsed = time.monotonic() - started
    counts = QueueLockstep.rules_run
    steps = sum(counts.values())
    print(f"rounds: {rounds} x {ROUND_EXAMPLES} examples, up to {STEPS_PER_EXAMPLE} steps each")
    print(f"steps: {steps} in {elapsed:.1f} s = {steps / max(elapsed, 1e-9):.0f} steps/s")
    names = sorted(RULE_NAMES)
    covered = [name for name in names if counts[name]]
    print(f"rules covered: {len(covered)}/{len(names)}")
    for name in names:
        print(f"  {name:<24} {counts[name]:>10}")
    print("model coverage:")
    for line in coverage_report(REACHED, load_record()):
        print(f"  {line}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=5.0, help="how long to fuzz")
    args = parser.parse_args(argv)
    started = time.monotonic()
    stop_at = started + args.minutes * 60
    rounds = 0
    status = 0
    try:
        with recording(counting(REACHED)):
            while time.monotonic() < stop_at:
                run_state_machine_as_test(QueueLockstep, settings=campaign_settings())
                rounds += 1
    except Exception:
        status = 1
        raise
    finally:
        report(started, rounds)
    return status


if __name__ == "__main__":
    sys.exit(main())
