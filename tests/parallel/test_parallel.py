"""Parallel programs on worker.py and pgworker.py: every history must be one the model
explains, under the backend's claim order.

Each example is a program drawn whole (``tests.parallel.strategies``): a prefix, then
two or three branches run at once, each in its own process on its own connection to
one real SQLite file, or to one real PostgreSQL database (a schema per program),
started together behind a barrier. The history of every run is checked against the
model (``tests.parallel.judge``): SQLite's under the ``strict`` claim order, PostgreSQL's
under ``relaxed``. A failure prints the shrunk program, how often it failed, and its
timeline. ``docs/debugging.md`` shows one.

``LEASE_QUEUE_PLANT=<name>`` runs the test of the plant's store on a copy of worker.py
or pgworker.py with one of the bugs of ``tests.parallel.planted`` planted in it, to
watch the suite catch it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import event, given

from tests.parallel.planted import BY_NAME, plant
from tests.parallel.program import Program
from tests.parallel.runner import Pool, scratch_folder
from tests.parallel.strategies import programs
from tests.parallel.trial import Trials
from tests.postgres import Server
from tests.profiles import parallel_settings
from tests.stores import Store
from tests.stores.postgres import PostgresStore
from tests.stores.sqlite import SQLiteStore

SQLITE_SETTINGS, SIZES = parallel_settings("sqlite")
POSTGRES_SETTINGS, _ = parallel_settings("postgres")
PLANTED = BY_NAME.get(os.environ.get("LEASE_QUEUE_PLANT", ""))


@pytest.fixture(scope="module")
def sqlite_trials(pool: Pool) -> Iterator[Trials]:
    with scratch_folder() as folder:
        store: Store = SQLiteStore(folder)
        if PLANTED is not None and PLANTED.store == "sqlite":
            store = plant(PLANTED, Path(folder))
        yield Trials(pool, store, SIZES.repeats, SIZES.budget)


@pytest.fixture(scope="module")
def postgres_trials(pool: Pool, pg_server: Server) -> Iterator[Trials]:
    with pg_server.database() as conninfo, tempfile.TemporaryDirectory(prefix="plant-") as folder:
        store: Store = PostgresStore(conninfo)
        if PLANTED is not None and PLANTED.store == "postgres":
            store = plant(PLANTED, Path(folder), conninfo)
        yield Trials(pool, store, SIZES.repeats, SIZES.budget)


def judged(trials: Trials, program: Program) -> None:
    trial = trials.attempt(program)
    event(f"verdict: {'failed' if trial.failed else 'unknown' if trial.unknown else 'ok'}")
    event(f"branches: {len(program.branches)}")
    if trial.failed:
        raise AssertionError(trial.report())


@SQLITE_SETTINGS
@given(program=programs())
def test_parallel_histories_linearize(sqlite_trials: Trials, program: Program) -> None:
    """worker.py's histories, under the strict claim order."""
    judged(sqlite_trials, program)


@POSTGRES_SETTINGS
@given(program=programs())
def test_parallel_histories_linearize_on_postgres(
    postgres_trials: Trials, program: Program
) -> None:
    """pgworker.py's histories, under the relaxed claim order."""
    judged(postgres_trials, program)
