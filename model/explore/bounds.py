"""What the search may do: ``Bounds``, TLC's constants and state constraint, and what
each bound means (``BOUND_HELP``, the command's help and the doc's table)."""

from __future__ import annotations

from dataclasses import dataclass, fields

from model.explore.state import Symmetry, symmetry_among


@dataclass(frozen=True)
class Bounds:
    """What the search may do, TLC's CONSTANTS and state constraint; the defaults are
    the bounds ``docs/state-machine.md`` reports and ``make test`` runs."""

    ids: tuple[str, ...] = ("a", "b")
    owners: tuple[str, ...] = ("c1", "c2")
    budgets: tuple[int, ...] = (1, 2)
    ttls: tuple[int, ...] = (2,)
    leases: tuple[int, ...] = (1, 3)
    delays: tuple[int | str, ...] = (0, "before_deadline", "to_deadline")
    offsets: tuple[int, ...] = (0, -1, 1)
    outcomes: tuple[str, ...] = ("ok", "retry", "permanent")
    forged: tuple[str, ...] = ("ok",)
    qtys: tuple[int, ...] = (1,)
    notes: tuple[str, ...] = ("ops",)
    redrives: int = 1
    depth: int = 7
    faults: bool = True
    keep_stale: bool = False

    def __post_init__(self) -> None:
        if max(self.offsets, default=0) > 1:
            raise ValueError("an offset above 1 could reach a past time: fingerprint ranks them")

    def symmetry(self) -> Symmetry:
        """The renamings of the ids and of the owners that are symmetries of the steps.

        Names are only ever compared for equality (claim order follows ``seq``), so a
        renaming maps a world onto one with the same futures, unless it disagrees with
        the lockstep's ``forged`` rule, which picks a name: a renaming must commute with it.
        """
        return symmetry_among(self.ids, self.owners)

    def describe(self) -> str:
        """The bounds in one line, as the report prints them."""
        return "; ".join(
            f"{item.name} {','.join(map(str, value)) if isinstance(value, tuple) else value}"
            for item in fields(self)
            for value in [getattr(self, item.name)]
        )


DEFAULT_BOUNDS = Bounds()
"""The default bounds, those ``docs/state-machine.md`` reports."""

BOUND_HELP: dict[str, str] = {
    "ids": "the job ids `enqueue` and `redrive` name",
    "owners": "the couriers that `claim`",
    "budgets": "each `max_attempts` an `enqueue` may give",
    "ttls": "each `ttl_ms` of `enqueue` and `redrive`",
    "leases": "each `lease_ms` of `claim`",
    "delays": "each delay of a retry: ms, or aimed at the deadline (`to_deadline`,"
    " `before_deadline`)",
    "offsets": "where `advance_clock_to` moves the clock: onto a boundary (0), 1 ms before"
    " it (-1) or after it (1)",
    "outcomes": "each outcome of `finish`",
    "forged": "each outcome of `finish_forged` (a forged ticket must change nothing,"
    " whatever its outcome)",
    "qtys": "each `qty` of `enqueue` (two give `Conflict`)",
    "notes": "each note of `redrive`",
    "redrives": "audit rows in all, at most: the state constraint that keeps tokens finite",
    "depth": "steps from the empty queue, at most (0: no bound, until no new state is found)",
    "faults": "each hook point a call reaches is also a step that fails there",
    "keep_stale": "every ticket stays held and in the fingerprint, as in the lockstep's"
    " bundle (many more states)",
}
"""What each bound of ``Bounds`` means (the command's help, the doc's table)."""
