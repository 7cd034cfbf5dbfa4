"""Every prediction of ``model.explain``, held against ``worker.py`` and ``pgworker.py``.

``ExplainedLockstep`` is the lockstep machine (``tests/stateful/lockstep.py``: every
rule, every draw, every row compared after every step) with one rule more,
``claim_when_explained``. For each job, in seq order, it asks the model what the
next claim does to the job and when (``explain(row, now).next``), then moves the
clock to 1 ms before that time and runs ``claim_many`` on both sides (the job must be
left exactly as it was), then to that time and runs it again (the job's row must be
what ``after_firing`` predicts: leased by this claim, or quarantined with the
predicted reason). A done or dead job must be left alone by a claim now. Both sides
run each claim (the lockstep's own ``claim_many`` rule), so a divergence of the
queue from the model is caught as in the lockstep, and a divergence of either from
the prediction here.

Kept apart from the lockstep machine on purpose: a rule more would slow every step of
the main suite's every shrink and change ``ci``'s derandomized seed. The SQLite run
takes a fifth of the active profile's examples, the PostgreSQL run a fourteenth (at
least 20); both count what they checked (``CHECKED``).
"""

from __future__ import annotations

from collections import Counter
from typing import Any, ClassVar

from hypothesis import settings
from hypothesis.stateful import multiple, rule, run_state_machine_as_test

from model.explain import after_firing, explain
from model.rules import MAX_BATCH
from tests.stateful.lockstep import PostgresLockstep, QueueLockstep
from tests.stateful.strategies import DEFAULT_LEASE_MS, LEASES, MAX_NOW, OWNER
from tests.support import JOB_COLUMNS

CHECKED: Counter[str] = Counter()
"""What the runs checked: ``examples``, and each kind of prediction held (``claim at
T``, ``nothing at T - 1``, ``left alone``), by the trigger predicted."""

SQLITE_SHARE, POSTGRES_SHARE = 5, 14


class ExplainedLockstep(QueueLockstep):
    """The lockstep machine, with each job's predicted next claim checked on both sides.

    The rules that only judge odd arguments or odd places (they change no row) are not
    drawn here, so the steps go to what moves jobs: the calls, the batches, the clock.
    """

    checked: ClassVar[Counter[str]] = CHECKED

    # Not drawn here (a class attribute that is no rule hides the lockstep's).
    call_with_odd_argument = None  # type: ignore[assignment]
    call_many_with_odd_arguments = None  # type: ignore[assignment]
    open_queue_odd_path = None  # type: ignore[assignment]
    borrowed_connection_odd = None  # type: ignore[assignment]
    run_file_without_a_queue = None  # type: ignore[assignment]
    retry_delay = None  # type: ignore[assignment]
    reopen = None  # type: ignore[assignment]

    def __init__(self) -> None:
        super().__init__()
        self.checked["examples"] += 1

    def real_row(self, job_id: str) -> tuple[Any, ...] | None:
        """The job's row on the store (seq aside: a PostgreSQL sequence may leave gaps)."""
        for values in self.store.comparable_rows(self.con)["jobs"]:
            if values[1] == job_id:
                return tuple(values)
        return None

    def claim_both(self, owner: str, lease_ms: int | None) -> list[dict[str, Any]]:
        """``claim_many`` of every claimable job on both sides (the lockstep's rule)."""
        issued = self.claim_many(owner=owner, limit=MAX_BATCH, lease_ms=lease_ms, fail_at=None)
        return list(getattr(issued, "values", ()))

    @rule(target=QueueLockstep.tickets, owner=OWNER, lease_ms=LEASES)
    def claim_when_explained(self, owner: str, lease_ms: int | None) -> Any:
        """For each job: 1 ms before the predicted time a claim leaves it alone, at that
        time it does what the model said; a done or dead job no claim moves."""
        issued: list[dict[str, Any]] = []
        for job_id in [values[1] for values in self.model.rows()["jobs"]]:
            row = self.row(job_id)
            assert row is not None
            values = tuple(row[column] for column in JOB_COLUMNS)
            following = explain(values, self.now).next
            if following is None:
                issued += self.claim_both(owner, lease_ms)
                assert self.real_row(job_id) == values, f"a claim moved {row['status']} job"
                self.checked[f"left alone ({row['status']})"] += 1
                continue
            if following.at_ms > MAX_NOW:
                continue
            if following.at_ms > self.now:
                self.now = following.at_ms - 1
                issued += self.claim_both(owner, lease_ms)
                assert self.real_row(job_id) == values, (
                    f"{job_id}: a claim 1 ms before {following.at_ms} changed it; the model "
                    f"predicted {following.trigger} at {following.at_ms}"
                )
                self.checked[f"nothing at T - 1 ({following.trigger})"] += 1
            self.now = following.at_ms
            issued += self.claim_both(owner, lease_ms)
            predicted = after_firing(
                values, following.trigger, self.now, owner, lease_ms or DEFAULT_LEASE_MS
            )
            assert self.real_row(job_id) == predicted, (
                f"{job_id}: a claim at {self.now} made {self.real_row(job_id)}; the model "
                f"predicted {following.trigger}: {predicted}"
            )
            self.checked[f"claim at T ({following.trigger})"] += 1
        return multiple(*issued)


class ExplainedPostgresLockstep(ExplainedLockstep, PostgresLockstep):
    """The same on ``pgworker.py`` (a schema of the test's database per example)."""


def share(divisor: int, least: int) -> settings:
    profile = settings.default
    assert profile is not None
    return settings(profile, max_examples=max(least, profile.max_examples // divisor))


def test_every_prediction_holds_on_worker_py() -> None:
    before = CHECKED["examples"]
    run_state_machine_as_test(ExplainedLockstep, settings=share(SQLITE_SHARE, 50))
    assert CHECKED["examples"] > before
    assert any(key.startswith("claim at T") for key in CHECKED)
    print(f"model.explain on worker.py: {dict(sorted(CHECKED.items()))}")


def test_every_prediction_holds_on_pgworker_py(pg_conninfo: str) -> None:
    ExplainedPostgresLockstep.conninfo = pg_conninfo
    CHECKED.clear()
    run_state_machine_as_test(ExplainedPostgresLockstep, settings=share(POSTGRES_SHARE, 20))
    assert CHECKED["examples"] > 0
    print(f"model.explain on pgworker.py: {dict(sorted(CHECKED.items()))}")


def a_retried_job_is_claimed_when_its_delay_ends(state: ExplainedLockstep) -> None:
    """A pending job due later (a retry's delay): the one prediction the drawn programs
    rarely reach ("nothing at T - 1 (claim)"), kept as a program in the printed form."""
    before = CHECKED["nothing at T - 1 (claim)"]
    try:
        state.enqueue(job_id="a", qty=1, ttl_ms=60000, max_attempts=3)
        state.promises_hold()
        tickets_0 = state.claim(owner="c1", lease_ms=1000, fail_at=None)
        state.promises_hold()
        state.finish(ticket=tickets_0, outcome="retry", delay=500, fail_at=None)
        state.promises_hold()
        state.claim_when_explained(owner="c2", lease_ms=1000)
        state.promises_hold()
    finally:
        state.teardown()
    assert CHECKED["nothing at T - 1 (claim)"] == before + 1


def test_regression_a_retried_job_is_claimed_when_its_delay_ends() -> None:
    a_retried_job_is_claimed_when_its_delay_ends(ExplainedLockstep())


def test_regression_a_retried_job_is_claimed_when_its_delay_ends_on_postgres(
    pg_conninfo: str,
) -> None:
    ExplainedPostgresLockstep.conninfo = pg_conninfo
    a_retried_job_is_claimed_when_its_delay_ends(ExplainedPostgresLockstep())
