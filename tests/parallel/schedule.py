"""Schedules: which branch runs at each step of a run under the controlled scheduler.

A schedule is data. The scheduler (``tests.parallel.scheduler``) asks a *policy* at
every step which of the branches that can run takes the next turn, and the run's
realized schedule is the sequence of those choices, written as a string of branch
numbers (``"1121"``: b1, b1, b2, b1). Replaying that string makes the same run. On
PostgreSQL a schedule may also say ``explicit``: the branches' connections are not in
autocommit, so every write is a transaction of its own with a step before its COMMIT
(``PostgresStore.scheduled_connect``); it is written first (``"explicit 1121"``).

Policies:

- ``Replay(steps)``: the recorded choices, one per step; a choice of a branch that
  cannot run there means the code or the program changed (``ScheduleFailed``).
- ``Random(switch, random)``: stay with the branch that ran last, and at each step
  switch to another one with probability ``switch`` (another branch drawn at random). A
  run switches seldom at a low rate, as PCT's few priority changes (Burckhardt et al.,
  ASPLOS 2010), often at a high one. ``random`` comes from hypothesis
  (``st.randoms()``), so the choices shrink with the program: toward fewer switches.
- ``Forced(prefix)``: the exhaustive search's (``tests.parallel.exhaustive``): the
  given choices first, then always the branch that ran last if it can, else the lowest;
  every step's options are kept, for the search to try the others.
"""

from __future__ import annotations

import random as stdlib_random
from dataclasses import dataclass, field
from typing import Protocol

from hypothesis import strategies as st

# How often a random schedule switches branch at a step, one rate per program:
# PCT-style rare switches first (what shrinking aims at), frequent ones too.
SWITCH_RATES = (0.05, 0.2, 0.5, 0.02, 0.8)


EXPLICIT = "explicit"


class Policy(Protocol):
    """Chooses the branch of each step."""

    explicit: bool  # the branches' writes are explicit transactions (see the docstring)

    @property
    def text(self) -> str:
        """The realized schedule so far, as it is written."""
        ...

    def choose(self, lanes: list[str], step: int) -> str:
        """The lane (``b1``...) to run at step ``step`` among ``lanes``, those that can."""
        ...

    def made(self, lane: str, effective: bool) -> None:
        """Step done by ``lane``; ``effective``: it changed something (a busy attempt that
        changed nothing is left out of the realized schedule)."""
        ...


def lane_of(number: str) -> str:
    return f"b{number}"


def number_of(lane: str) -> str:
    return lane.removeprefix("b")


@dataclass
class Recorder:
    """What every policy keeps: the realized schedule."""

    steps: list[str] = field(default_factory=list)
    last: str | None = None
    explicit: bool = False

    def made(self, lane: str, effective: bool) -> None:
        if effective:
            self.steps.append(number_of(lane))
            self.last = lane

    @property
    def text(self) -> str:
        return written(self.explicit, "".join(self.steps))


@dataclass
class Replay(Recorder):
    """The choices of ``schedule`` (a string of branch numbers), one per effective step."""

    schedule: str = ""

    @classmethod
    def of(cls, text: str) -> Replay:
        """The replay of a schedule as it is written (``parse``)."""
        explicit, steps = parse(text)
        return cls(explicit=explicit, schedule=steps)

    def choose(self, lanes: list[str], step: int) -> str:
        done = len(self.steps)
        if done >= len(self.schedule):
            # Past its end (a shorter schedule): the branch that ran last, else the lowest.
            return self.last if self.last in lanes else lanes[0]
        return lane_of(self.schedule[done])


@dataclass
class Random(Recorder):
    """Stay with the last branch; switch with probability ``switch`` at each step."""

    switch: float = 0.2
    random: stdlib_random.Random = field(default_factory=stdlib_random.Random)

    def choose(self, lanes: list[str], step: int) -> str:
        if self.last in lanes:
            others = [lane for lane in lanes if lane != self.last]
            # random() shrinks toward 0: toward staying.
            if others and self.random.random() >= 1 - self.switch:
                return others[self.random.randrange(len(others))]
            return self.last
        return lanes[self.random.randrange(len(lanes))] if len(lanes) > 1 else lanes[0]


@dataclass
class Forced(Recorder):
    """``prefix`` first, then the last branch if it can run, else the lowest; ``options``
    keeps, for each effective step, the lanes that could have run there."""

    prefix: str = ""
    options: list[list[str]] = field(default_factory=list)
    _offered: list[str] = field(default_factory=list)

    def choose(self, lanes: list[str], step: int) -> str:
        self._offered = lanes
        done = len(self.steps)
        if done < len(self.prefix):
            return lane_of(self.prefix[done])
        return self.last if self.last in lanes else lanes[0]

    def made(self, lane: str, effective: bool) -> None:
        if effective:
            self.options.append(list(self._offered))
        super().made(lane, effective)


@dataclass(frozen=True)
class Schedule:
    """A random schedule as hypothesis draws it: a switch rate, the random choices and
    whether writes are explicit transactions."""

    switch: float
    random: stdlib_random.Random
    explicit: bool = False

    def policy(self) -> Random:
        return Random(switch=self.switch, random=self.random, explicit=self.explicit)

    def __repr__(self) -> str:
        return f"Schedule(switch={self.switch}, explicit={self.explicit})"


def schedules(explicit: st.SearchStrategy[bool] | None = None) -> st.SearchStrategy[Schedule]:
    """A random schedule whose choices hypothesis shrinks with the program (``explicit``:
    whether writes are explicit transactions; never, unless a strategy is given)."""
    return st.builds(
        Schedule,
        st.sampled_from(SWITCH_RATES),
        st.randoms(use_true_random=False),
        explicit if explicit is not None else st.just(False),
    )


def written(explicit: bool, steps: str) -> str:
    """A schedule as it is written: ``explicit`` first if so, then the branch numbers."""
    return f"{EXPLICIT} {steps}" if explicit else steps


def parse(text: str) -> tuple[bool, str]:
    """A written schedule back as ``(explicit, choices)``: branch numbers, with spaces
    and dots ignored, after an optional ``explicit``."""
    rest = text.strip()
    explicit = rest.startswith(EXPLICIT)
    steps = "".join(char for char in rest.removeprefix(EXPLICIT) if char not in " ._")
    if not steps.isdigit() or "0" in steps:
        raise ValueError(
            f"a schedule is branch numbers 1-9 after an optional {EXPLICIT!r}, got {text!r}"
        )
    return explicit, steps


def shown(text: str) -> str:
    """A written schedule with its branch numbers in groups of ten, for counting steps."""
    explicit, steps = parse(text)
    return written(explicit, " ".join(steps[i : i + 10] for i in range(0, len(steps), 10)))
