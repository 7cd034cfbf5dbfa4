"""A linearizability checker: a history of calls and a sequential model in, a verdict out.

The search is Wing & Gong's, with Lowe's memoization, as in Porcupine and Knossos: it
looks for an order of the calls that respects real time (a call that returned before
another was invoked comes first) in which the model, run call by call, does exactly
what each call was seen to do. The rules it keeps:

1. A call is an ``Operation``: who made it, what was called, what came back, and when
   it was invoked and returned, on one clock shared by every process. The checker never
   looks inside ``call`` or ``output``: only the model does.
2. A call that never returned (``returned is None``: its process was killed) may have
   taken effect or not. It may be placed anywhere after its invocation, or nowhere; its
   output is not checked (there is none). Nothing has to come after it.
3. The model is three functions (``Model``): ``init()`` the first state, ``step(state,
   op)`` the state after ``op`` if the model can do what ``op`` was seen to do there
   (else ``None``; a model that may do it in several ways returns ``Choices`` of the
   states it may leave), and ``final(state)`` whether a complete order may end in
   ``state`` (the rows found in the file after the run). States must be hashable; two
   equal states are the same state.
4. Memoization: a (set of calls placed, state) pair is explored once. Steps are cached
   per (state, call), so the model runs each call once in each state.
5. The search has a budget: model steps plus states explored. When it runs out, the
   verdict is "unknown", never a wrong answer.

``check(operations, model, budget)`` returns a ``Verdict``: ``ok`` with one order that
works, ``illegal`` with the longest order found and the calls that could not come next,
or ``unknown``.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, Protocol, TypeVar

S = TypeVar("S", bound=Hashable)


@dataclass(frozen=True)
class Operation:
    """One call seen in a run: ``process`` called ``call`` and saw ``output``.

    ``invoked`` and ``returned`` are readings of one clock shared by every process
    (nanoseconds of ``time.monotonic_ns``). ``returned is None``: the call never
    returned (its process was killed), so it may have taken effect or not.
    """

    id: int
    process: str
    call: Any
    output: Any
    invoked: int
    returned: int | None

    @property
    def completed(self) -> bool:
        """Whether the call returned (or raised): only then must it be placed."""
        return self.returned is not None


class Choices(tuple[Any, ...]):
    """The states a call may leave when the model allows it more than one way (a claim
    that may pass over rows other calls hold); empty: the call is impossible there."""


class Model(Protocol[S]):
    """A sequential specification, as the checker runs it."""

    def init(self) -> S:
        """The state before the first call."""
        ...

    def step(self, state: S, op: Operation) -> S | Choices | None:
        """The state after ``op`` in ``state`` (or the ``Choices`` of states it may
        leave), or ``None`` if the model cannot do there what ``op`` was seen to do
        (for a call that never returned, only whether the call is possible at all)."""
        ...

    def final(self, state: S) -> bool:
        """Whether a complete order may end in ``state``."""
        ...


Outcome = Literal["ok", "illegal", "unknown"]


@dataclass(frozen=True)
class Verdict(Generic[S]):
    """What the search found.

    ``ok``: ``order`` is a complete order of the calls (by id) that the model explains,
    ``state`` its last state. ``illegal``: no order exists; ``order`` is the longest
    partial order found, ``state`` the state it leaves, and ``stuck`` the calls, each
    of which could not be placed after it (or empty, when every call was placed but no
    order ended in a state that ``final`` accepts). ``unknown``: the budget ran out first.
    """

    outcome: Outcome
    order: tuple[int, ...]
    stuck: frozenset[int] = frozenset()
    state: S | None = None
    steps: int = 0
    explored: int = 0
    notes: tuple[str, ...] = field(default=())


class _OutOfBudget(Exception):
    """The search used every model step it was given."""


class _Search(Generic[S]):
    """One run of the search over one history (see ``check``)."""

    def __init__(self, operations: Sequence[Operation], model: Model[S], budget: int) -> None:
        self.ops = sorted(operations, key=lambda op: (op.invoked, op.id))
        self.model = model
        self.budget = budget
        self.steps = 0
        self.index = {op.id: i for i, op in enumerate(self.ops)}
        self.required = 0
        for i, op in enumerate(self.ops):
            if op.completed:
                self.required |= 1 << i
        self.seen: set[tuple[int, S]] = set()
        self.cache: dict[tuple[S, int], tuple[S, ...]] = {}
        self.best: tuple[int, ...] = ()
        self.best_stuck: frozenset[int] = frozenset()
        self.best_state: S | None = None
        self.all_placed_once = False

    def step(self, state: S, i: int) -> tuple[S, ...]:
        """The states the call ``i`` may leave after ``state`` (none: it cannot come next)."""
        key = (state, i)
        if key in self.cache:
            return self.cache[key]
        self.spend()
        self.steps += 1
        after = self.model.step(state, self.ops[i])
        states: tuple[S, ...] = (
            () if after is None else tuple(after) if isinstance(after, Choices) else (after,)
        )
        self.cache[key] = states
        return states

    def spend(self) -> None:
        if self.steps + len(self.seen) >= self.budget:
            raise _OutOfBudget

    def candidates(self, placed: int) -> list[int]:
        """The calls that may come next: not placed, and invoked before every call
        still to be placed had returned (real-time order)."""
        deadline: int | None = None
        for i, op in enumerate(self.ops):
            if not placed >> i & 1 and op.returned is not None:
                deadline = op.returned if deadline is None else min(deadline, op.returned)
        return [
            i
            for i, op in enumerate(self.ops)
            if not placed >> i & 1 and (deadline is None or op.invoked <= deadline)
        ]

    def run(self) -> tuple[tuple[int, ...], S] | None:
        """Depth first, memoized; the first complete order found, or ``None``."""
        start = self.model.init()
        stack: list[tuple[int, S, tuple[int, ...]]] = [(0, start, ())]
        while stack:
            placed, state, order = stack.pop()
            if (placed, state) in self.seen:
                continue
            self.spend()
            self.seen.add((placed, state))
            if placed & self.required == self.required:
                self.all_placed_once = True
                if self.model.final(state):
                    return order, state
            options = self.candidates(placed)
            moves: list[tuple[int, S, tuple[int, ...]]] = []
            failed = []
            for i in options:
                states = self.step(state, i)
                if not states:
                    failed.append(self.ops[i].id)
                moves.extend((placed | 1 << i, after, (*order, self.ops[i].id)) for after in states)
            if len(order) > len(self.best) or not self.best:
                self.best, self.best_stuck, self.best_state = order, frozenset(failed), state
            # Try the earliest-invoked call first: pushed last, popped first.
            stack.extend(reversed(moves))
        return None


def check(operations: Sequence[Operation], model: Model[S], budget: int = 200_000) -> Verdict[S]:
    """Search for an order of ``operations`` that respects real time and that ``model``
    explains call by call, ending in a state ``model.final`` accepts.

    ``budget`` bounds the work: model steps plus states explored; past it the verdict
    is ``unknown``.
    """
    ids = [op.id for op in operations]
    if len(set(ids)) != len(ids):
        raise ValueError("every operation needs its own id")
    for op in operations:
        if op.returned is not None and op.returned < op.invoked:
            raise ValueError(f"operation {op.id} returned before it was invoked")
    search = _Search(operations, model, budget)
    try:
        found = search.run()
    except _OutOfBudget:
        return Verdict("unknown", search.best, steps=search.steps, explored=len(search.seen))
    if found is not None:
        order, state = found
        return Verdict("ok", order, state=state, steps=search.steps, explored=len(search.seen))
    notes: tuple[str, ...] = ()
    stuck = search.best_stuck
    if search.all_placed_once and len(search.best) >= bin(search.required).count("1"):
        notes = ("every call was placed, but no order ends in the state found after the run",)
        stuck = frozenset()
    return Verdict(
        "illegal",
        search.best,
        stuck=stuck,
        state=search.best_state,
        steps=search.steps,
        explored=len(search.seen),
        notes=notes,
    )
