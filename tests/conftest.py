"""Fixtures shared by every suite, and the hypothesis settings profiles.

Profiles are chosen by the environment variable ``HYPOTHESIS_PROFILE``:

- ``ci`` (default; what ``make test`` and ``.ci/run`` use): derandomized, so a
  CI failure replays identically on any machine, sized to about 3 minutes of
  stateful fuzzing on 2 cores.
- ``dev``: a quick local loop, random seeds, failures saved in ``.hypothesis``.
- ``mutation``: what ``make mutants`` runs each mutant against; derandomized and
  small, so a mutant counts as killed only if a short, repeatable run finds it.
- ``fuzz``: long campaigns (``make fuzz MINUTES=N``), random, never derandomized.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, settings

import worker

_SLOW_IS_FINE = [HealthCheck.too_slow, HealthCheck.data_too_large]
# No explain phase: it re-ran a shrunk failure for 20-70 s and added nothing to the
# printed program (the notes of each step already say what both sides returned).
_FIND_AND_SHRINK = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]
# report_multiple_bugs=False: one bug in worker.py shows as several failing asserts
# (a return value, a hook's rows, a send); shrinking each one separately took 3x as
# long. Hypothesis shrinks the smallest and may slip to another with a shorter program.
# ci: 5,500 examples took about 3 minutes here (7,500 took 240 s). Up to 20 steps
# per example: every planted bug needs at most 6, and a short
# program shrinks fast (40 steps made some shrinks take five minutes).
settings.register_profile(
    "ci",
    max_examples=5500,
    stateful_step_count=20,
    derandomize=True,
    deadline=None,
    phases=_FIND_AND_SHRINK,
    print_blob=True,
    report_multiple_bugs=False,
    suppress_health_check=_SLOW_IS_FINE,
)
settings.register_profile(
    "dev",
    max_examples=30,
    stateful_step_count=20,
    deadline=None,
    phases=_FIND_AND_SHRINK,
    print_blob=True,
    report_multiple_bugs=False,
    suppress_health_check=_SLOW_IS_FINE,
)
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
    "fuzz",
    max_examples=1_000_000,
    stateful_step_count=60,
    deadline=None,
    phases=_FIND_AND_SHRINK,
    print_blob=True,
    report_multiple_bugs=False,
    suppress_health_check=_SLOW_IS_FINE,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


@pytest.fixture
def queue_path(tmp_path: Path) -> Path:
    """A path for a fresh queue file (not created yet)."""
    return tmp_path / "queue.sqlite"


@pytest.fixture
def con(queue_path: Path) -> Iterator[sqlite3.Connection]:
    """An open queue; the test fails if any call left a transaction open."""
    connection = worker.open_queue(queue_path)
    yield connection
    assert not connection.in_transaction, "a call left a transaction open"
    connection.close()
