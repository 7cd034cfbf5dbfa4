"""The explorer finds bugs planted in copies of the model, each with its shortest trace.

Each bug lives in a subclass of ``Job`` (or a copy of the lifecycle table) patched
into ``model.queue`` for one test only: the files of ``model/`` are never edited.
The search stops at the first violation, which, breadth first, is the shortest.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from transitions import Machine

import model.job
import model.queue
from model.explore import Bounds, Exploration, explore
from model.job import Call, Job, machine_config
from model.lifecycle import EFFECTS
from model.properties import ALWAYS
from tests.model.test_explore import replays_in_the_lockstep

# One job and one courier are enough for every bug below, and fast.
SMALL = Bounds(ids=("a",), owners=("c1",))

Plant = Callable[[type[Job]], None]


@pytest.fixture
def plant(monkeypatch: pytest.MonkeyPatch) -> Plant:
    """Make every queue built from then on (``from_rows`` included) use ``job_class``."""

    def planting(job_class: type[Job]) -> None:
        monkeypatch.setattr(model.queue, "Job", job_class)

    return planting


def violation(name: str, bounds: Bounds = SMALL) -> tuple[Exploration, list[str]]:
    """Explore until the first violation; it must be of ``name``. Returns the run and the
    rules of the shortest trace, replayed from time 0."""
    found = explore(bounds, stop_at_violation=True)
    assert name in found.findings, f"{name} not broken: {sorted(found.findings)}"
    return found, [edge.step.rule for edge in found.trace(name).edges]


class TokenResetOnRedrive(Job):
    """Redrive starts the job's fencing generation over."""

    def renew_budget(self, call: Call) -> None:
        super().renew_budget(call)
        self.token = 0


class LeaseNotCapped(Job):
    """A lease as long as asked, even past the deadline."""

    def take_lease(self, call: Call) -> None:
        super().take_lease(call)
        self.lease_until = call.now_ms + call.lease_ms


class PermanentWithoutReason(Job):
    """A permanent failure quarantined without saying so."""

    def mark_permanent(self, call: Call) -> None:
        self.reason = None


class OwnerNotChecked(Job):
    """A finish that trusts any courier holding the right token ("the token is enough")."""

    def ticket_live(self, call: Call) -> bool:
        assert call.ticket is not None
        presented = {**call.ticket, "owner": self.owner}
        return super().ticket_live(Call(call.now_ms, ticket=presented, delay_ms=call.delay_ms))


class TokenKeptOnReclaim(Job):
    """A reclaim that keeps the token of the lease it takes over."""

    def take_lease(self, call: Call) -> None:
        reclaiming = self.lease_until is not None
        super().take_lease(call)
        if reclaiming:
            self.token -= 1


def test_redrive_resetting_the_token(plant: Plant) -> None:
    plant(TokenResetOnRedrive)
    found, rules = violation("tokens_never_go_down")
    assert rules == ["enqueue", "claim", "finish", "redrive"]
    assert "no_audit_row_is_above_its_job" in found.findings  # the same step breaks both


def test_its_trace_replays_on_worker_py_and_catches_the_bug_there(
    plant: Plant, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The printed trace is a program of the lockstep's rules: on worker.py and the model
    as written it passes (both keep the token); with the bug planted in the lockstep's
    model, worker.py disagrees with it at the redrive, the trace's last step."""
    plant(TokenResetOnRedrive)
    found, _ = violation("tokens_never_go_down")
    program = found.trace("tokens_never_go_down").regression_test("token", "the token is kept")
    monkeypatch.undo()
    replays_in_the_lockstep(program, "token")
    plant(TokenResetOnRedrive)
    with pytest.raises(AssertionError, match="redrive at after-redrive: rows differ"):
        replays_in_the_lockstep(program, "token")


def test_a_lease_not_capped_by_the_deadline(plant: Plant) -> None:
    plant(LeaseNotCapped)
    _, rules = violation("a_lease_never_outlives_its_deadline")
    assert rules == ["enqueue", "claim"]  # ttl 2, lease 3


def test_a_permanent_failure_without_its_reason(plant: Plant) -> None:
    plant(PermanentWithoutReason)
    _, rules = violation("a_dead_job_has_a_reason_and_no_owner")
    assert rules == ["enqueue", "claim", "finish"]


def test_a_finish_that_does_not_check_the_owner(plant: Plant) -> None:
    plant(OwnerNotChecked)
    found, rules = violation("only_a_live_ticket_finishes")
    assert rules == ["enqueue", "claim", "finish_forged"]
    assert found.trace("only_a_live_ticket_finishes").edges[-1].step["field"] == "owner"


def test_a_reclaim_that_keeps_the_token(plant: Plant) -> None:
    plant(TokenKeptOnReclaim)
    _, rules = violation("a_new_ticket_has_a_newer_token")
    assert rules == ["enqueue", "claim", "advance_clock_to", "claim"]


@pytest.fixture
def redrive_from_done(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A copy of the lifecycle table with one row more: redrive takes done jobs too."""
    extra: dict[str, Any] = {"trigger": "redrive", "source": "done", "dest": "pending"}

    def new_machine() -> Machine:
        config = machine_config()
        config["transitions"] = [
            *config["transitions"],
            {**extra, "after": list(EFFECTS["redrive"])},
        ]
        return Machine(model=None, **config)

    monkeypatch.setattr(model.queue, "new_machine", new_machine)
    monkeypatch.setitem(model.job.SOURCES, "redrive", frozenset({"dead", "done"}))
    monkeypatch.setitem(model.job.GUARDS, ("redrive", "done"), ())
    yield


@pytest.mark.usefixtures("redrive_from_done")
def test_a_redrive_that_takes_done_jobs() -> None:
    _, rules = violation("done_is_final")
    assert rules == ["enqueue", "claim", "finish", "redrive"]


def test_the_model_as_written_breaks_nothing_within_the_small_bounds() -> None:
    found = explore(SMALL, stop_at_violation=True)
    assert [p.name for p in ALWAYS if p.name in found.findings] == []
