"""Parallel programs on worker.py: every history must be one the model explains.

Each example is a program drawn whole (``tests.parallel.strategies``): a prefix, then
two or three branches run at once, each in its own process on its own connection to
one real SQLite file, started together behind a barrier. The history of every run is
checked against the model (``tests.parallel.judge``); a failure prints the shrunk
program, how often it failed, and its timeline. ``docs/debugging.md`` shows one.

``LEASE_QUEUE_PLANT=<name>`` runs the same test on a copy of worker.py with one of the
bugs of ``tests.parallel.planted`` planted in it, to watch the suite catch it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import event, given

from tests.parallel.backends import SQLiteBackend
from tests.parallel.planted import BY_NAME, plant
from tests.parallel.program import Program
from tests.parallel.runner import Pool
from tests.parallel.strategies import programs
from tests.parallel.trial import Trials
from tests.profiles import parallel_settings

SETTINGS, SIZES = parallel_settings()


@pytest.fixture(scope="module")
def sqlite_trials() -> Iterator[Trials]:
    pool = Pool()
    planted = os.environ.get("LEASE_QUEUE_PLANT")
    try:
        with tempfile.TemporaryDirectory(prefix="plant-") as folder:
            backend = SQLiteBackend() if not planted else plant(BY_NAME[planted], Path(folder))
            yield Trials(pool, backend, SIZES.repeats, SIZES.budget)
    finally:
        pool.close()


@SETTINGS
@given(program=programs())
def test_parallel_histories_linearize(sqlite_trials: Trials, program: Program) -> None:
    trial = sqlite_trials.attempt(program)
    event(f"verdict: {'failed' if trial.failed else 'unknown' if trial.unknown else 'ok'}")
    event(f"branches: {len(program.branches)}")
    if trial.failed:
        raise AssertionError(trial.report())
