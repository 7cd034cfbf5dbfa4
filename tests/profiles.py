"""The hypothesis settings profiles, chosen by the environment variable ``HYPOTHESIS_PROFILE``.

- ``ci`` (default; what ``make test`` and ``.ci/run`` use): derandomized, so a
  CI failure replays identically on any machine, sized so that the whole of
  ``make test`` stays under 5 minutes on 2 cores (every kind of test runs, each
  short).
- ``nightly`` (``make nightly``): the same suite with long draws, random seeds:
  ten times the lockstep examples, five times the parallel programs, and the
  soaks at their long sizes (``tests/processes/test_soak*.py``).
- ``dev``: a quick local loop, random seeds, failures saved in ``.hypothesis``.
- ``mutation``: what ``make mutants`` runs each mutant against; derandomized,
  no shrinking, so a mutant counts as killed only if a repeatable run finds it.
- ``fuzz``: long campaigns (``make fuzz MINUTES=N``), random, never derandomized.

``tests/conftest.py`` loads the chosen one for pytest; ``tests.stateful.fuzz``
builds its rounds on ``fuzz``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, Phase, settings

_SLOW_IS_FINE = [HealthCheck.too_slow, HealthCheck.data_too_large]
# How ci, dev and fuzz find, shrink and print a failure:
# - no explain phase: it re-ran a shrunk failure for 20-70 s and added nothing to the
#   printed program (the notes of each step already say what both sides returned);
# - report_multiple_bugs=False: one bug in worker.py shows as several failing asserts
#   (a return value, a hook's rows, a send); shrinking each one separately took 3x as
#   long. Hypothesis shrinks the smallest and may slip to another with a shorter program.
_SHRUNK_AND_PRINTED: dict[str, Any] = {
    "deadline": None,
    "phases": [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    "print_blob": True,
    "report_multiple_bugs": False,
    "suppress_health_check": _SLOW_IS_FINE,
}
# ci: 2,000 examples of up to 20 steps, 40,000 steps at most: as many as the mutation
# profile's 1,000 x 40, which kills every mutant of worker.py that is not equivalent
# (docs/testing.md); 44 s here (5,500 took 122 s). Up to 20 steps per example: every
# planted bug needs at most 8, and a short program shrinks fast (40 steps made some
# shrinks take five minutes).
settings.register_profile(
    "ci", max_examples=2000, stateful_step_count=20, derandomize=True, **_SHRUNK_AND_PRINTED
)
settings.register_profile(
    "nightly", max_examples=20_000, stateful_step_count=20, **_SHRUNK_AND_PRINTED
)
settings.register_profile("dev", max_examples=30, stateful_step_count=20, **_SHRUNK_AND_PRINTED)
settings.register_profile(
    "mutation",
    max_examples=1000,
    stateful_step_count=40,  # nothing to shrink: longer programs reach more states
    derandomize=True,
    phases=[Phase.explicit, Phase.generate],  # a kill needs no shrinking
    deadline=None,
    suppress_health_check=_SLOW_IS_FINE,
)
settings.register_profile(
    "fuzz", max_examples=1_000_000, stateful_step_count=60, **_SHRUNK_AND_PRINTED
)


@dataclass(frozen=True)
class ParallelSizes:
    """How much the parallel suite (``tests/parallel``) does under a profile.

    ``scheduled`` and ``scheduled_postgres``: programs run under the controlled scheduler
    (``tests/parallel/scheduler.py``) on SQLite and on PostgreSQL, each once, under a
    schedule hypothesis draws; ``real`` and ``real_postgres``: programs run with each
    branch in a process of its own, as the operating system interleaves them (the
    second mode, which checks the scheduler's assumptions against the real thing);
    ``schedules``: how many schedules each scheduled program runs under (Lincheck's
    invocations of one scenario; shrinking keeps the one that fails);
    ``repeats``: runs of each real-process candidate once a failure has been seen
    (their interleavings are not deterministic; see ``tests.parallel.trial``);
    ``budget``: the history checker's model steps per run before "unknown".
    """

    scheduled: int
    scheduled_postgres: int
    real: int
    real_postgres: int
    repeats: int = 5
    budget: int = 100_000
    schedules: int = 2


# ci: the scheduled runs are deterministic and take no repeats; the real-process mode
# runs a few programs as a check that the rig still works, and at length in nightly.
PARALLEL: dict[str, ParallelSizes] = {
    "ci": ParallelSizes(scheduled=600, scheduled_postgres=150, real=40, real_postgres=0),
    "nightly": ParallelSizes(
        scheduled=20_000, scheduled_postgres=3000, real=6000, real_postgres=1000
    ),
    "dev": ParallelSizes(scheduled=200, scheduled_postgres=50, real=20, real_postgres=10),
    "mutation": ParallelSizes(
        scheduled=300, scheduled_postgres=100, real=0, real_postgres=0, repeats=1
    ),
    "fuzz": ParallelSizes(
        scheduled=1_000_000,
        scheduled_postgres=1_000_000,
        real=1_000_000,
        real_postgres=1_000_000,
        repeats=10,
    ),
}


def profile_name() -> str:
    """The profile chosen by ``HYPOTHESIS_PROFILE`` (``ci`` by default)."""
    return os.environ.get("HYPOTHESIS_PROFILE", "ci")


def parallel_settings(count: str) -> tuple[settings, ParallelSizes]:
    """The active profile's settings for ``count`` programs (a field of
    ``ParallelSizes``: ``scheduled``, ``scheduled_postgres``, ``real``, ``real_postgres``)
    and its sizes."""
    sizes = PARALLEL[profile_name()]
    examples = max(1, int(getattr(sizes, count)))
    return settings(settings.get_profile(profile_name()), max_examples=examples), sizes
