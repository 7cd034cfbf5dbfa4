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
- ``Switches(flags)``: stay with the branch that ran last, and switch at each decision
  (a step where more than one branch can run) whose flag is set. Hypothesis draws the
  flags up front, before the program, each a fair coin: measured on the planted bugs,
  frequent switches catch three to four times as many per program as PCT's few
  priority changes (Burckhardt et al., ASPLOS 2010). Shrinking clears flags: toward
  the fewest switches, PCT's bias, and drawn up front, a flag keeps its meaning when
  hypothesis drops a call of the program.
- ``Forced(prefix)``: the exhaustive search's (``tests.parallel.exhaustive``): the
  given choices first, then always the branch that ran last if it can, else the lowest;
  every step's options are kept, for the search to try the others.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from hypothesis import strategies as st

# The decisions a drawn schedule has a flag for (a run past them stays with its branch):
# a decision is a step where more than one branch can run, and the suite's programs
# have 5 in the median run and 26 at most (measured on 300 programs).
DECISIONS = 32


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
    lenient: bool = False  # past a choice that does not fit: stay, and say where
    stopped_fitting: int | None = None  # the step (from 1) where a choice did not fit

    @classmethod
    def of(cls, text: str, lenient: bool = False) -> Replay:
        """The replay of a schedule as it is written (``parse``); ``lenient``: where a
        recorded choice cannot run (the code changed), go on as ``Forced`` does."""
        explicit, steps = parse(text)
        return cls(explicit=explicit, schedule=steps, lenient=lenient)

    def choose(self, lanes: list[str], step: int) -> str:
        done = len(self.steps)
        if done < len(self.schedule) and self.stopped_fitting is None:
            lane = lane_of(self.schedule[done])
            if lane in lanes or not self.lenient:
                return lane
            self.stopped_fitting = done + 1
        # Past its end, or past where it fit: the branch that ran last, else the lowest.
        return self.last if self.last in lanes else lanes[0]


@dataclass
class Switches(Recorder):
    """Stay with the branch that ran last, but switch at the decisions ``flags`` marks:
    the ``n``-th time more than one branch could run, switch if ``flags[n]`` (to the
    next branch after the last one, in lane order). Past the flags: stay."""

    flags: tuple[bool, ...] = ()
    decisions: int = 0

    def choose(self, lanes: list[str], step: int) -> str:
        if len(lanes) == 1:
            return lanes[0]
        decision, self.decisions = self.decisions, self.decisions + 1
        if self.last not in lanes:
            return lanes[0]
        assert self.last is not None
        if decision < len(self.flags) and self.flags[decision]:
            later = [lane for lane in lanes if lane > self.last]
            return (later or [lane for lane in lanes if lane != self.last])[0]
        return self.last


class Pruned(Exception):
    """A forced choice of a branch that cannot run there: its attempt was refused a lock
    and changed nothing, so the interleaving is one the search meets another way."""


@dataclass
class Forced(Recorder):
    """``prefix`` first, then the last branch if it can run, else the lowest; ``options``
    keeps, for each effective step, the lanes that could have run there."""

    prefix: str = ""
    options: list[list[str]] = field(default_factory=list)
    reduced = True  # the scheduler offers only the choices that give different runs
    _offered: list[str] = field(default_factory=list)

    def choose(self, lanes: list[str], step: int) -> str:
        self._offered = lanes
        done = len(self.steps)
        if done < len(self.prefix):
            lane = lane_of(self.prefix[done])
            if lane not in lanes:
                raise Pruned(lane)
            return lane
        return self.last if self.last in lanes else lanes[0]

    def made(self, lane: str, effective: bool) -> None:
        if effective:
            self.options.append(list(self._offered))
        super().made(lane, effective)


@dataclass(frozen=True)
class Schedule:
    """A schedule as hypothesis draws it: a switch flag for each decision (``Switches``),
    and whether writes are explicit transactions."""

    flags: tuple[bool, ...]
    explicit: bool = False

    def policy(self) -> Switches:
        return Switches(flags=self.flags, explicit=self.explicit)

    def __repr__(self) -> str:
        """The decisions that switch, as valid Python (``Schedule(switch_at=[1])``):
        hypothesis prints a drawn value by its repr only if that parses, and otherwise as
        the call that made it, here ``cut`` of all the drawn flags, one a line."""
        marked = [n for n, flag in enumerate(self.flags) if flag]
        return f"Schedule(switch_at={marked}{', explicit=True' if self.explicit else ''})"

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(repr(self))


def runs_of(count: int, explicit: bool = False) -> st.SearchStrategy[list[Schedule]]:
    """``count`` schedules for one program: it runs under each (Lincheck's many
    invocations of one scenario); shrinking keeps the one that fails. Each schedule's
    ``DECISIONS`` flags are fair coins while generating and shrink toward staying.

    ``explicit`` (PostgreSQL): every second schedule makes every write an explicit
    transaction, so each program runs in both modes. In autocommit, what pgworker
    runs in by default, a write without a hook is one statement, which the scheduler
    runs whole, so a race inside it (a read and an update of one statement, another
    session committing between them) shows only with a step before its COMMIT. (A coin
    for each schedule left a quarter of the programs without an explicit run.)

    The flags of all ``count`` schedules are drawn as one list and cut in ``count``:
    hypothesis's generator copies a drawn part over another part drawn by the same
    strategy (its mutations), and drawn as ``count`` schedules, the second schedule
    became a copy of the first in two of five of CI's programs, so one of the two
    runs repeated the other."""
    flags = st.lists(st.booleans(), min_size=DECISIONS * count, max_size=DECISIONS * count)

    def cut(drawn: list[bool]) -> list[Schedule]:
        return [
            Schedule(tuple(drawn[n * DECISIONS : (n + 1) * DECISIONS]), explicit and n % 2 == 1)
            for n in range(count)
        ]

    return flags.map(cut)


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
