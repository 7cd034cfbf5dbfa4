"""The lockstep's vocabulary: a ``Step`` (one rule of ``tests/stateful/lockstep.py``
with its arguments), the ticket a step presents by its place (``Held``), and the
lockstep's rule for a forged ticket (``forged``), whose one home is here."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from model.job import BOUNDARIES

__all__ = ["BOUNDARIES", "CLOCK_RULE", "TICKET_FIELDS", "Held", "Step", "forged", "step"]

# A deliberate copy of the lockstep's constant (tests/stateful: the model never imports
# the tests); tests/model/test_explore_vocabulary.py pins it, and the boundaries (the
# guards' times, model.job's), to the originals.
TICKET_FIELDS = ("id", "qty", "owner", "token", "attempt", "lease_until")


@dataclass(frozen=True)
class Held:
    """A ticket the couriers hold, by its place among the tickets held."""

    index: int


@dataclass(frozen=True)
class Step:
    """One rule of the lockstep machine with its arguments, in the rule's signature order."""

    rule: str
    arguments: tuple[tuple[str, Any], ...]

    def __getitem__(self, name: str) -> Any:
        return dict(self.arguments)[name]

    @property
    def fail_at(self) -> str | None:
        """The hook point this step fails at (``None``: no fault)."""
        return dict(self.arguments).get("fail_at")

    def failing_at(self, point: str | None) -> Step:
        """The same step with a fault at ``point`` (``None``: without a fault)."""
        return replace(
            self,
            arguments=tuple((k, point if k == "fail_at" else v) for k, v in self.arguments),
        )


def step(rule: str, **arguments: Any) -> Step:
    """A ``Step``; the keywords are given in the rule's signature order."""
    return Step(rule, tuple(arguments.items()))


def forged(ticket: dict[str, Any], field_name: str) -> dict[str, Any]:
    """A well-formed ticket that differs from ``ticket`` in one field: the lockstep's rule,
    which ``tests/stateful/strategies.py`` imports from here."""
    change: dict[str, Any] = {
        "id": "b" if ticket["id"] != "b" else "a",
        "qty": ticket["qty"] % 2 + 1,
        "owner": "c2" if ticket["owner"] != "c2" else "c1",
        "token": ticket["token"] + 1,
        "attempt": ticket["attempt"] % 16 + 1,
        "lease_until": ticket["lease_until"] + 1,
    }
    return {**ticket, field_name: change[field_name]}


CLOCK_RULE = "advance_clock_to"
"""The one rule that moves the clock; it calls no model."""
