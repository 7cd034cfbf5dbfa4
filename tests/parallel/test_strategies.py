"""What the drawn programs and schedules are made of: the properties the suite's power
rests on, checked on the draws themselves."""

from __future__ import annotations

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
