"""The lifecycle tables: well formed, strict, and exclusive within each step."""

from __future__ import annotations

import ast
import functools
import itertools
from pathlib import Path

import pytest
from transitions import MachineError

from model import Call, Job, lifecycle, new_machine

MODEL_DIR = Path(__file__).resolve().parents[2] / "model"
TRIGGERS = list(dict.fromkeys(row["trigger"] for row in lifecycle.TRANSITIONS))
GUARDS = sorted({name for row in lifecycle.TRANSITIONS for name in row.get("conditions", [])})
EFFECT_NAMES = sorted({name for names in lifecycle.EFFECTS.values() for name in names})


def new_job(state: str = "pending", **fields: object) -> Job:
    """A job added to a fresh machine in ``state``, with some fields overridden."""
    job = Job(seq=1, job_id="a", qty=2, max_attempts=3, now_ms=0, ttl_ms=1000)
    new_machine().add_model(job, initial=state)
    for name, value in fields.items():
        setattr(job, name, value)
    return job


def test_states_are_the_status_column_values() -> None:
    assert lifecycle.STATES == ["pending", "leased", "done", "dead"]


def test_every_row_goes_between_declared_states() -> None:
    for row in lifecycle.TRANSITIONS:
        assert row["source"] in lifecycle.STATES and row["dest"] in lifecycle.STATES, row


def test_done_is_final_and_only_redrive_leaves_dead() -> None:
    assert not [row for row in lifecycle.TRANSITIONS if row["source"] == "done"]
    assert [row["trigger"] for row in lifecycle.TRANSITIONS if row["source"] == "dead"] == [
        "redrive"
    ]


def test_every_trigger_has_its_effects_and_every_effect_its_trigger() -> None:
    assert list(lifecycle.EFFECTS) == TRIGGERS


def test_the_operations_try_every_trigger_once_in_table_order() -> None:
    steps = [
        lifecycle.QUARANTINE_TRIGGERS,
        lifecycle.CLAIM_TRIGGERS,
        *lifecycle.FINISH_TRIGGERS.values(),
        lifecycle.REDRIVE_TRIGGERS,
    ]
    tried = [trigger for step in steps for trigger in step]
    assert sorted(tried) == sorted(TRIGGERS)
    for step in steps:
        assert sorted(step, key=TRIGGERS.index) == list(step), step


@pytest.mark.parametrize("name", GUARDS + EFFECT_NAMES)
def test_every_guard_and_effect_is_a_documented_job_method(name: str) -> None:
    method = getattr(Job, name)
    assert callable(method) and method.__doc__, name


def test_conditions_are_named_methods_not_lambdas() -> None:
    for row in lifecycle.TRANSITIONS:
        assert all(type(name) is str for name in row.get("conditions", [])), row


def test_no_auto_transitions_and_invalid_triggers_raise() -> None:
    job = new_job("pending")
    assert not hasattr(job, "to_dead")
    with pytest.raises(MachineError):
        job.trigger("finish_ok", Call(now_ms=0))
    with pytest.raises(AttributeError):
        job.trigger("no_such_trigger", Call(now_ms=0))


def test_quarantine_reaches_a_pending_job_whatever_its_available_at() -> None:
    # Through the queue's API a pending job is always due before its deadline and
    # within budget; the rows still say what happens to one that is not.
    late = new_job("pending", available_at=500, deadline=100)
    assert late.trigger("quarantine_deadline", Call(now_ms=100))
    spent = new_job("pending", available_at=500, attempts=3)
    assert spent.trigger("quarantine_exhausted", Call(now_ms=100))
    assert (late.state, late.reason, spent.state, spent.reason) == (
        "dead",
        "deadline",
        "dead",
        "exhausted",
    )


def test_complementary_guards_disagree_everywhere() -> None:
    pairs = [
        ("deadline_passed", "before_deadline"),
        ("budget_spent", "budget_left"),
        ("retry_past_deadline", "retry_before_deadline"),
    ]
    for deadline, attempts, now, delay in itertools.product(
        [99, 100, 101], [2, 3, 4], [99, 100], [0, 1]
    ):
        job = new_job("leased", deadline=deadline, attempts=attempts)
        call = Call(now_ms=now, delay_ms=delay)
        for yes, no in pairs:
            assert getattr(job, yes)(call) is not getattr(job, no)(call)


@functools.cache
def situations() -> list[tuple[Job, Call]]:
    """Jobs around every boundary of every guard, with calls at and around each."""
    found = []
    for state, attempts, deadline, lease_until, available_at in itertools.product(
        ["pending", "leased"], [2, 3], [99, 100, 101], [99, 100, 101], [99, 100, 101]
    ):
        for delay, live in itertools.product([0, 1], [True, False]):
            job = new_job(
                state,
                attempts=attempts,
                deadline=deadline,
                available_at=available_at,
                token=4,
                owner=None if state == "pending" else "w",
                lease_until=None if state == "pending" else lease_until,
            )
            ticket = job.ticket() if live else {**job.ticket(), "token": 3}
            found.append((job, Call(now_ms=100, owner="w", ticket=ticket, delay_ms=delay)))
    return found


@pytest.mark.parametrize(
    "step",
    [
        lifecycle.QUARANTINE_TRIGGERS + lifecycle.CLAIM_TRIGGERS,
        lifecycle.FINISH_TRIGGERS["ok"],
        lifecycle.FINISH_TRIGGERS["permanent"],
        lifecycle.FINISH_TRIGGERS["retry"],
    ],
)
def test_at_most_one_trigger_of_a_step_may_fire(step: tuple[str, ...]) -> None:
    for job, call in situations():
        allowed = [trigger for trigger in step if job.may_trigger(trigger, call)]
        assert len(allowed) <= 1, (job.row(), call, allowed)


def test_a_retry_always_settles_a_live_ticket() -> None:
    for job, call in situations():
        if job.state == "leased" and job.ticket_live(call):
            allowed = [t for t in lifecycle.FINISH_TRIGGERS["retry"] if job.may_trigger(t, call)]
            assert len(allowed) == 1, (job.row(), call)


def test_the_model_uses_no_sqlite_and_only_the_exceptions_of_worker() -> None:
    exceptions = {"Conflict", "Retryable", "Permanent", "BadAck"}
    for path in MODEL_DIR.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = {alias.name for alias in node.names}
                assert not names & {"worker", "sqlite3"}, path
            if isinstance(node, ast.ImportFrom):
                assert node.module != "sqlite3", path
                if node.module == "worker":
                    assert {alias.name for alias in node.names} <= exceptions, path
