"""Parallel programs on worker.py and pgworker.py: every history must be one the model
explains, under the store's claim order.

Each example is a program drawn whole (``tests.parallel.strategies``): a prefix, then
two or three branches run at once, each on its own connection to one real SQLite file,
or to one real PostgreSQL database (a schema per program). Two modes:

- **under the controlled scheduler** (``tests.parallel.scheduler``): the branches take
  turns at every SQL statement, hook call and send, in the order a schedule drawn with
  the program chooses. A run is deterministic: hypothesis shrinks program and schedule
  together, and a failure prints its schedule and a command that replays it exactly;
- **in real processes** (``tests.parallel.runner``): each branch in a process of its own,
  the operating system choosing the interleaving, real SIGKILL; a few programs in
  ``ci``, at length in ``make nightly`` (the scheduler's assumptions checked against
  the real thing).

The history of every run is checked against the model (``tests.parallel.judge``):
SQLite's under the ``strict`` claim order, PostgreSQL's under ``relaxed``.
``docs/debugging.md`` shows a failure and its replay.

``LEASE_QUEUE_PLANT=<name>`` runs the tests of the plant's store on a copy of worker.py
or pgworker.py with one of the bugs of ``tests.parallel.planted`` planted in it, to
watch the suite catch it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import event, given

from tests.parallel.planted import BY_NAME, plant
from tests.parallel.program import Program
from tests.parallel.runner import Pool, scratch_folder
from tests.parallel.schedule import Schedule, runs_of
from tests.parallel.strategies import programs
from tests.parallel.suite import Suite
from tests.parallel.trial import Trials
from tests.postgres import Server
from tests.profiles import parallel_settings
from tests.stores import Store
from tests.stores.postgres import PostgresStore
from tests.stores.sqlite import SQLiteStore

SCHEDULED, SIZES = parallel_settings("scheduled")
SCHEDULED_POSTGRES, _ = parallel_settings("scheduled_postgres")
REAL, _ = parallel_settings("real")
REAL_POSTGRES, _ = parallel_settings("real_postgres")
PLANTED = BY_NAME.get(os.environ.get("LEASE_QUEUE_PLANT", ""))


@pytest.fixture(scope="module")
def sqlite_store() -> Iterator[Store]:
    with scratch_folder() as folder:
        if PLANTED is not None and PLANTED.store == "sqlite":
            yield plant(PLANTED, Path(folder))
        else:
            yield SQLiteStore(folder)


@pytest.fixture(scope="module")
def postgres_store(pg_server: Server) -> Iterator[Store]:
    with pg_server.database() as conninfo, scratch_folder() as folder:
        if PLANTED is not None and PLANTED.store == "postgres":
            yield plant(PLANTED, Path(folder), conninfo)
        else:
            yield PostgresStore(conninfo)


def suite_on(store: Store) -> Suite:
    planted = PLANTED.name if PLANTED is not None and PLANTED.store == store.name else None
    return Suite(store, planted, SIZES.budget)


@pytest.fixture(scope="module")
def sqlite_suite(sqlite_store: Store) -> Suite:
    return suite_on(sqlite_store)


@pytest.fixture(scope="module")
def postgres_suite(postgres_store: Store) -> Suite:
    return suite_on(postgres_store)


def checked(suite: Suite, program: Program, schedules: list[Schedule]) -> None:
    __tracebackhide__ = True
    judgements = suite.check(program, schedules)
    event(f"verdict: {'unknown' if any(j.unknown for j in judgements) else 'ok'}")
    event(f"branches: {len(program.branches)}")


@SCHEDULED
@given(schedules=runs_of(SIZES.schedules), program=programs())
def test_scheduled_histories_linearize(
    sqlite_suite: Suite, program: Program, schedules: list[Schedule]
) -> None:
    """worker.py's histories under schedules, judged under the strict claim order."""
    checked(sqlite_suite, program, schedules)


@SCHEDULED_POSTGRES
@given(schedules=runs_of(SIZES.schedules, explicit=True), program=programs())
def test_scheduled_histories_linearize_on_postgres(
    postgres_suite: Suite, program: Program, schedules: list[Schedule]
) -> None:
    """pgworker.py's histories under schedules (the second of each program's with every
    write an explicit transaction), judged under the relaxed claim order."""
    checked(postgres_suite, program, schedules)


@pytest.fixture(scope="module")
def sqlite_trials(pool: Pool, sqlite_store: Store) -> Trials:
    return Trials(pool, sqlite_store, SIZES.repeats, SIZES.budget)


@pytest.fixture(scope="module")
def postgres_trials(pool: Pool, postgres_store: Store) -> Trials:
    return Trials(pool, postgres_store, SIZES.repeats, SIZES.budget)


def judged(trials: Trials, program: Program) -> None:
    trial = trials.attempt(program)
    event(f"verdict: {'failed' if trial.failed else 'unknown' if trial.unknown else 'ok'}")
    if trial.failed:
        raise AssertionError(trial.report())


@pytest.mark.skipif(SIZES.real == 0, reason="no real-process runs in this profile")
@REAL
@given(program=programs())
def test_real_process_histories_linearize(sqlite_trials: Trials, program: Program) -> None:
    """worker.py's histories with each branch in a process of its own."""
    judged(sqlite_trials, program)


@pytest.mark.skipif(
    SIZES.real_postgres == 0, reason="real-process runs on PostgreSQL are make nightly's"
)
@REAL_POSTGRES
@given(program=programs())
def test_real_process_histories_linearize_on_postgres(
    postgres_trials: Trials, program: Program
) -> None:
    """pgworker.py's histories with each branch in a process of its own."""
    judged(postgres_trials, program)
