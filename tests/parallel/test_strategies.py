"""What the drawn programs and schedules are made of: the properties the suite's power
rests on, checked on the draws themselves."""

from __future__ import annotations

from collections import Counter

from hypothesis import HealthCheck, given, settings

from tests.parallel.program import PREFIX, Program
from tests.parallel.schedule import DECISIONS, Schedule, runs_of
from tests.parallel.strategies import owners_of, programs

DRAWS = settings(
    max_examples=150,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=list(HealthCheck),
)


def test_the_schedules_of_a_program_are_not_copies_of_each_other() -> None:
    """Hypothesis's generator copies a drawn part over another drawn by the same
    strategy; drawn one by one, two schedules of a program were the same in 59 of 150
    programs, and one of the two runs repeated the other."""
    drawn: list[list[Schedule]] = []

    @DRAWS
    @given(runs_of(2, explicit=True))
    def draw(schedules: list[Schedule]) -> None:
        drawn.append(schedules)

    draw()
    assert all(len(one.flags) == DECISIONS for pair in drawn for one in pair)
    copies = sum(first == second for first, second in drawn)
    assert copies <= len(drawn) // 20, f"{copies} of {len(drawn)} programs ran one schedule twice"
    assert {one.explicit for pair in drawn for one in pair} == {False, True}


def test_every_program_starts_with_two_jobs_or_more() -> None:
    """The first call makes two or three distinct jobs: something for two claims."""
    drawn: list[Program] = []

    @DRAWS
    @given(programs())
    def draw(program: Program) -> None:
        drawn.append(program)

    draw()
    for program in drawn:
        first = program.prefix[0]
        assert first.verb == "enqueue_many"
        ids = [event["id"] for event in first.arg("events")]
        assert 2 <= len(ids) == len(set(ids)) <= 3


def test_each_branch_is_a_courier_of_its_own() -> None:
    assert owners_of(PREFIX)[0] == "c1"
    assert [owners_of(lane)[0] for lane in ("b1", "b2", "b3")] == ["c1", "c2", "c1"]
    assert sorted(owners_of("b2")) == ["c1", "c2"]


def test_a_branch_draws_claim_many_more_often_than_claim() -> None:
    """``claim_many`` is drawn once more than the other verbs of a branch (see
    ``MORE_OFTEN``). ``claim`` is drawn more than its share without it (hypothesis
    leans to a list's first option, and a branch left empty gets a claim). Batch claims
    per claim, without the weight: 0.69 to 0.85 in six draws; with it: 0.93 to 1.46 in
    draws of 150 programs, 1.14 to 1.46 in draws of 600 (1.45 here). A draw of 150 can
    fall on either side of 1.0, so this takes 600."""
    verbs: Counter[str] = Counter()

    @settings(DRAWS, max_examples=600)
    @given(programs())
    def draw(program: Program) -> None:
        verbs.update(call.verb for branch in program.branches for call in branch)

    draw()
    ratio = verbs["claim_many"] / verbs["claim"]
    assert ratio >= 1.0, f"claim_many {verbs['claim_many']}, claim {verbs['claim']}"


def test_a_failing_example_prints_each_schedule_in_a_few_characters() -> None:
    """Hypothesis prints a drawn value by its repr only when the repr parses as Python;
    a ``Schedule`` whose repr did not was printed as ``cut([False, True, ...])``, the
    64 drawn flags one a line."""

    @DRAWS
    @given(schedules=runs_of(2, explicit=True))
    def fails(schedules: list[Schedule]) -> None:
        assert schedules[0].flags[1] is False

    try:
        fails()
    except AssertionError as failed:
        notes = getattr(failed, "__notes__", [])
    else:
        raise AssertionError("the example that must fail passed")
    (printed,) = [note for note in notes if note.startswith("Failing test case:")]
    assert printed.splitlines() == [
        "Failing test case: fails(",
        "    schedules=[Schedule(switch_at=[1]), Schedule(switch_at=[], explicit=True)],",
        ")",
    ], printed
