"""The lockstep machine on PostgreSQL: ``tests/stateful/lockstep.py``'s rules and draws,
run on ``pgworker.py`` and the model, with every row compared after every step.

The SQLite run is ``tests/stateful/test_lockstep.py`` (the active profile's examples);
this one takes a fourteenth of them (at least 20), since each step costs PostgreSQL round
trips. Each example makes its queue in a schema of its own of this test's database.
"""

from __future__ import annotations

from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from tests.stateful.lockstep import PostgresLockstep

SHARE = 14


def test_pgworker_and_the_model_in_lockstep(pg_conninfo: str) -> None:
    PostgresLockstep.conninfo = pg_conninfo
    profile = settings.default
    assert profile is not None
    examples = max(20, profile.max_examples // SHARE)
    run_state_machine_as_test(PostgresLockstep, settings=settings(profile, max_examples=examples))
