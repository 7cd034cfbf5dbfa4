"""``model.explain``: one job's row read at a time, held against the machine.

The explanation is computed from the tables and the guards alone (no machine); each
test here holds it against something else: the guards probed at every millisecond
around the row's times, the machine's own ``claim_many`` 1 ms before and at the
predicted time, and the words an operator reads. Without ``transitions`` installed
the explanation (and ``import model``) still works.
"""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

from courier.procs import project_root
from model import QueueModel
from model.explain import after_firing, explain, headline, lines
from model.job import BOUNDARIES, GUARDS, ROW_FIELDS, Call, Job, JobRow, new_machine
from model.lifecycle import TRANSITIONS
from model.rules import MAX_BATCH

NOW = 10_000
TIMES = st.integers(NOW - 3000, NOW + 3000)


@st.composite
def job_rows(draw: st.DrawFn) -> JobRow:
    """A row in any state the queue reaches (its invariants kept), times around ``NOW``."""
    status = draw(st.sampled_from(["pending", "leased", "done", "dead"]))
    budget = draw(st.integers(1, 4))
    attempts = draw(st.integers(0, budget - 1 if status == "pending" else budget))
    if status == "leased":
        attempts = max(attempts, 1)
    deadline = draw(st.integers(NOW - 2999, NOW + 3000))
    available_at = draw(st.integers(NOW - 3000, deadline - 1))
    owner, lease_until, reason = None, None, None
    if status == "leased":
        owner = draw(st.sampled_from(["c1", "c2"]))
        lease_until = draw(st.integers(NOW - 3000, deadline))
    if status == "dead":
        reason = draw(st.sampled_from(["deadline", "exhausted", "permanent"]))
    if status == "pending" and attempts > 0:
        reason = "retry"
    token = attempts + draw(st.integers(0, 3))
    times = (available_at, deadline, owner, lease_until, reason)
    return (1, "a", 2, status, attempts, budget, token, *times)


def claimed_at(row: JobRow, now_ms: int) -> JobRow:
    """The job's row after the machine's ``claim_many`` at ``now_ms``, with the job alone."""
    queue = QueueModel.from_rows({"jobs": [row], "redrives": []})
    queue.claim_many("c9", now_ms, MAX_BATCH, lease_ms=1000)
    after: JobRow = queue.rows()["jobs"][0]
    return after


@settings(max_examples=400, deadline=None)
@given(row=job_rows(), now=TIMES, later=TIMES)
def test_no_guard_changes_its_answer_between_two_of_the_rows_times(
    row: JobRow, now: int, later: int
) -> None:
    """Rule 2: each guard's answer at any time is its answer at the last of the row's
    times before it; a retry's guards, whose time is ``deadline - delay_ms``, too."""
    job = Job(1, "a", 2, row[5], 0, 0)
    job.restore(row)
    at = max(now, later)
    for delay in (0, 5, 60000):
        times = {now, job.deadline - delay}
        times |= {getattr(job, b) for b in BOUNDARIES if getattr(job, b) is not None}
        moment = max(t for t in times if t <= at)
        ticket = job.ticket()
        one, other = (Call(t, ticket=ticket, delay_ms=delay) for t in (at, moment))
        for (_, source), guards in GUARDS.items():
            for guard in guards if source == job.state else ():
                assert getattr(job, guard)(one) == getattr(job, guard)(other), (guard, delay)


@settings(max_examples=400, deadline=None)
@given(row=job_rows(), now=TIMES)
def test_a_claim_at_the_predicted_time_does_what_was_predicted_and_1_ms_before_nothing(
    row: JobRow, now: int
) -> None:
    following = explain(row, now).next
    if following is None:
        assert row[3] in ("done", "dead")
        assert claimed_at(row, now) == row and claimed_at(row, now + 10**6) == row
        return
    assert following.at_ms >= now
    if following.at_ms > now:
        assert claimed_at(row, following.at_ms - 1) == row
    predicted = after_firing(row, following.trigger, following.at_ms, "c9", 1000)
    assert claimed_at(row, following.at_ms) == predicted
    assert predicted[3] == following.dest and predicted[11] == following.reason


@settings(max_examples=200, deadline=None)
@given(row=job_rows(), now=TIMES)
def test_every_row_from_the_state_is_judged_and_enabled_means_the_machine_may_fire_it(
    row: JobRow, now: int
) -> None:
    explanation = explain(row, now)
    assert [v.number for v in explanation.rows] == [
        n for n, t in enumerate(TRANSITIONS, start=1) if t["source"] == row[3]
    ]
    job = Job(1, "a", 2, row[5], 0, 0)
    new_machine().add_model(job)
    job.restore(row)
    for verdict in explanation.rows:
        if verdict.actor == "finish":
            calls = [Call(now, ticket=job.ticket(), delay_ms=d) for d in (0, 60000)]
        else:
            calls = [Call(now, ticket=None, delay_ms=0)]
        may = any(job.may_trigger(verdict.trigger, call) for call in calls)
        assert may == verdict.enabled, verdict
        if verdict.from_ms is not None and verdict.blockers:
            assert verdict.from_ms > now and verdict.blockers[-1][1] == verdict.from_ms


def test_the_words_name_the_courier_the_time_and_the_reason() -> None:
    def at(status: str, attempts: int, lease_until: int | None, owner: str | None) -> JobRow:
        reason = "permanent" if status == "dead" else None
        return (1, "a", 2, status, attempts, 3, attempts, 500, 9000, owner, lease_until, reason)

    said = headline(explain(at("leased", 1, 2000, "c1"), 1200))
    assert said.startswith("leased to c1 (token 1, 1 of 3 attempts made)")
    assert "claimable again by any courier from 2000 (in 800 ms) (`reclaim`)" in said
    said = headline(explain(at("leased", 3, 2000, "c1"), 1200))
    assert "no attempts left: quarantined as exhausted by the first claim from 2000" in said
    said = headline(explain(at("pending", 1, None, None), 100))
    assert said == (
        "pending (1 of 3 attempts made): due at 500 (in 400 ms): claimable from then (`claim`)"
    )
    assert headline(explain(at("dead", 3, None, None), 100)).startswith("dead (permanent)")
    described = lines(explain(at("leased", 1, 2000, "c1"), 1200))
    assert (
        "row 2 `quarantine_deadline` -> dead (by any claim): `lease_expired` fails now;"
        " from 2000 (in 800 ms) `deadline_passed` fails; can fire from 9000 (in 7800 ms)"
    ) in described
    assert (
        "row 11 `finish_retry` -> pending (by the holder's finish): can fire now until"
        " 2000 (in 800 ms), with a delay below 7800 ms"
    ) in described


def test_the_row_may_be_a_mapping_of_the_contracts_columns() -> None:
    row: JobRow = (4, "b", 1, "pending", 0, 3, 0, 100, 900, None, None, None)
    columns = ["status" if name == "state" else name for name in ROW_FIELDS]
    as_mapping = dict(zip(columns, row, strict=True))
    assert explain(as_mapping, 50).as_dict() == explain(row, 50).as_dict()


def test_the_model_and_its_explanation_need_no_transitions() -> None:
    """``transitions`` is a test dependency: without it ``import model`` and the
    explanation work, and only building the machine says what to install."""
    script = (
        "import sys; sys.modules['transitions'] = None\n"
        "import model\n"
        "from model.explain import explain, headline\n"
        "print(headline(explain((1, 'a', 1, 'pending', 0, 3, 0, 5, 90, None, None, None), 0)))\n"
        "try:\n    model.QueueModel()\nexcept ImportError as error:\n    print(error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        cwd=project_root(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    said, error = done.stdout.splitlines()
    assert said.startswith("pending (0 of 3 attempts made): due at 5")
    assert "pip install 'lease-queue[test]'" in error
