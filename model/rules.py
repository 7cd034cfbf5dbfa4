"""The argument rules of the queue, declared as data.

Stated here independently of ``worker.py``, straight from ``docs/spec/CONTRACT.md``
(its "Decisions" included):

1. "Exact" means ``type(x) is int`` / ``str`` / ``dict`` / ``float``: ``bool`` and
   every subclass are rejected.
2. An identifier is an exact ``str`` that fully matches ``[A-Za-z0-9_-]{1,64}``.
3. Every time (``now_ms``, each ``clock()`` reading) is an exact int in
   ``0 .. 10**15 - 60000``; every range is inclusive.
4. A dict argument has exactly the required keys, no more and no fewer.
5. A malformed argument raises ``ValueError`` (never ``TypeError``) before
   anything changes; ``check_arguments`` checks in the order it is given.
6. A batch (``docs/batches.md``) is an exact ``list`` of 0 to ``MAX_BATCH``
   items, checked item by item, each item fully before the next; an item or
   field is named by its place: ``events[3]['id']``,
   ``results[3]['ticket']['token']``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final, cast

# The limits and the outcomes: a deliberate copy of the contract's rules, independent of
# worker.py (the model must not trust the code it checks).
MAX_TIME_MS: Final = 10**15 - 60000
MAX_TOKEN: Final = 10**15
MAX_LEASE_UNTIL: Final = 10**15
MAX_DURATION_MS: Final = 60000
MAX_BATCH: Final = 1000
OUTCOMES: Final = ("ok", "retry", "permanent")


class Rule:
    """What one argument must be; ``str(rule)`` says it in words."""

    def accepts(self, value: object, arguments: Mapping[str, object]) -> bool:
        """Whether ``value`` is well formed (``arguments`` are the call's other arguments)."""
        raise NotImplementedError

    def describe(self, arguments: Mapping[str, object]) -> str:
        """The rule in words, as an error message says it for this call."""
        return str(self)


@dataclass(frozen=True)
class Int(Rule):
    """An exact ``int`` in ``lo .. hi``; ``lo`` may name another, earlier argument."""

    lo: int | str
    hi: int

    def accepts(self, value: object, arguments: Mapping[str, object]) -> bool:
        lo = arguments[self.lo] if isinstance(self.lo, str) else self.lo
        return type(value) is int and type(lo) is int and lo <= value <= self.hi

    def __str__(self) -> str:
        return f"an int in {self.lo}..{self.hi}"

    def describe(self, arguments: Mapping[str, object]) -> str:
        lo = arguments[self.lo] if isinstance(self.lo, str) else self.lo
        return f"an int in {lo}..{self.hi}"


@dataclass(frozen=True)
class Identifier(Rule):
    """An exact ``str`` of 1-64 ASCII letters, digits, ``_`` or ``-``."""

    # A deliberate copy of the contract's rule, independent of worker.py (the model must
    # not trust the code it checks).
    pattern: re.Pattern[str] = re.compile(r"[A-Za-z0-9_-]{1,64}")

    def accepts(self, value: object, arguments: Mapping[str, object]) -> bool:
        return type(value) is str and self.pattern.fullmatch(value) is not None

    def __str__(self) -> str:
        return "a str of 1-64 ASCII letters, digits, '_' or '-'"


@dataclass(frozen=True)
class Ratio(Rule):
    """An exact ``int`` or ``float``, finite, in ``0 .. 1`` (the caller's jitter)."""

    def accepts(self, value: object, arguments: Mapping[str, object]) -> bool:
        if type(value) is int:  # compared as an int: a huge one would overflow a float
            return 0 <= value <= 1
        return type(value) is float and math.isfinite(value) and 0 <= value <= 1

    def __str__(self) -> str:
        return "a finite int or float in 0..1"


@dataclass(frozen=True)
class OneOf(Rule):
    """An exact ``str`` among ``choices``."""

    choices: tuple[str, ...]

    def accepts(self, value: object, arguments: Mapping[str, object]) -> bool:
        return type(value) is str and value in self.choices

    def __str__(self) -> str:
        return f"one of {self.choices}"


@dataclass(frozen=True)
class Function(Rule):
    """Something callable; with ``optional``, ``None`` too (no hook)."""

    optional: bool = False

    def accepts(self, value: object, arguments: Mapping[str, object]) -> bool:
        return callable(value) or (self.optional and value is None)

    def __str__(self) -> str:
        return "None or a callable" if self.optional else "a callable"


@dataclass(frozen=True)
class Record(Rule):
    """An exact ``dict`` with exactly the keys of ``fields``, each value following its
    rule; the fields are checked in the order declared."""

    fields: Mapping[str, Rule]

    def has_shape(self, value: object) -> bool:
        """An exact ``dict`` with exactly the declared keys (values not looked at)."""
        return type(value) is dict and value.keys() == self.fields.keys()

    def accepts(self, value: object, arguments: Mapping[str, object]) -> bool:
        if not self.has_shape(value):
            return False
        record = cast(dict[str, object], value)
        return all(rule.accepts(record[key], record) for key, rule in self.fields.items())

    def __str__(self) -> str:
        return f"a dict with exactly the keys {sorted(self.fields)}"


@dataclass(frozen=True)
class Batch(Rule):
    """An exact ``list`` of 0 to ``MAX_BATCH`` items, each following ``item``;
    checked item by item, each fully before the next."""

    item: Rule

    def has_shape(self, value: object) -> bool:
        """An exact ``list`` (not a tuple, not a subclass) of 0 to ``MAX_BATCH`` items."""
        return type(value) is list and len(value) <= MAX_BATCH

    def accepts(self, value: object, arguments: Mapping[str, object]) -> bool:
        if not self.has_shape(value):
            return False
        items = cast(list[object], value)
        return all(self.item.accepts(item, arguments) for item in items)

    def __str__(self) -> str:
        return f"a list of 0..{MAX_BATCH} items"


IDENTIFIER: Final = Identifier()
TIME: Final = Int(0, MAX_TIME_MS)
DURATION: Final = Int(1, MAX_DURATION_MS)
# The ranges of qty and of attempts: a deliberate copy of the contract's rules,
# independent of worker.py (the model must not trust the code it checks).
QTY: Final = Int(1, 1000)
ATTEMPTS: Final = Int(1, 16)

EVENT: Final = Record({"id": IDENTIFIER, "qty": QTY})
TICKET: Final = Record(
    {
        "id": IDENTIFIER,
        "owner": IDENTIFIER,
        "qty": QTY,
        "token": Int(1, MAX_TOKEN),
        "attempt": ATTEMPTS,
        "lease_until": Int(1, MAX_LEASE_UNTIL),
    }
)
OUTCOME: Final = OneOf(OUTCOMES)
DELAY: Final = Int(0, MAX_DURATION_MS)

ARGUMENT_RULES: Final[Mapping[str, Rule]] = {
    # enqueue
    "event": EVENT,
    "now_ms": TIME,
    "ttl_ms": DURATION,
    "max_attempts": ATTEMPTS,
    # claim
    "owner": IDENTIFIER,
    "lease_ms": DURATION,
    "fault": Function(optional=True),
    # finish
    "ticket": TICKET,
    "outcome": OUTCOME,
    "delay_ms": DELAY,
    # redrive
    "job_id": IDENTIFIER,
    "note": IDENTIFIER,
    # run_once (its first clock() reading is claim's now_ms)
    "jitter": Ratio(),
    "clock": Function(),
    "send": Function(),
    "second clock()": TIME,  # run_once's second reading, the time of its finish
    # retry_delay
    "attempt": ATTEMPTS,
    "base_ms": DURATION,
    "cap_ms": Int("base_ms", MAX_DURATION_MS),
    # the batches (docs/batches.md): each item as the single call takes it
    "events": Batch(EVENT),  # enqueue_many
    "limit": Int(1, MAX_BATCH),  # claim_many
    "results": Batch(  # finish_many: finish's ticket, outcome and delay_ms, in that order
        Record({"ticket": TICKET, "outcome": OUTCOME, "delay_ms": DELAY})
    ),
}
"""Argument name -> the rule every queue operation applies to an argument of that name."""


def check_arguments(**arguments: object) -> None:
    """Check each argument against ``ARGUMENT_RULES``, in the order given; a
    dict argument's shape first, then each field as ``name['field']``; a batch's
    shape first, then each item fully as ``name[index]``, before the next.

    Raises:
        ValueError: the first malformed argument, named, with what was expected
            and what came: ``'name' must be <rule> (got <repr> that is a '<type>')``.
    """
    for name, value in arguments.items():
        _check(name, ARGUMENT_RULES[name], value, arguments)


def _check(
    name: str,
    rule: Rule,
    value: object,
    arguments: Mapping[str, object],
    path: tuple[object, ...] = (),
) -> None:
    """Check ``value`` against ``rule``; a record or batch part by part, each part named
    (``name`` and the ``path`` of keys and indexes to the part, spelled out only in an
    error: checking is what the conformance checker does for every step it judges)."""
    if isinstance(rule, Record):
        if not rule.has_shape(value):
            raise malformed(_named(name, path), str(rule), value)
        record = cast(dict[str, object], value)
        for key, field in rule.fields.items():
            _check(name, field, record[key], record, (*path, key))
    elif isinstance(rule, Batch):
        if not rule.has_shape(value):
            raise malformed(_named(name, path), str(rule), value)
        for index, item in enumerate(cast(list[object], value)):
            _check(name, rule.item, item, arguments, (*path, index))
    elif not rule.accepts(value, arguments):
        raise malformed(_named(name, path), rule.describe(arguments), value)


def _named(name: str, path: tuple[object, ...]) -> str:
    """``name`` with each key (``['id']``) and index (``[3]``) of ``path``."""
    return name + "".join(f"[{part}]" if type(part) is int else f"[{part!r}]" for part in path)


def malformed(name: str, expected: str, value: object) -> ValueError:
    """The error for a malformed argument, in the words every operation uses."""
    return ValueError(
        f"'{name}' must be {expected} (got {value!r} that is a {type(value).__name__!r})"
    )
