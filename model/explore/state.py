"""A state: a world's fingerprint (``fingerprint``), equal for worlds with the same
futures, and its canonical form under the renamings of names that are symmetries of
the steps (``Renaming``, ``Symmetry``, ``canonical``)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, NamedTuple

from model.explore.vocabulary import TICKET_FIELDS, forged

if TYPE_CHECKING:
    from model.explore.world import Snapshot


State = tuple[tuple[tuple[Any, ...], ...], ...]
"""A world's fingerprint: its jobs, audit rows and tickets as tuples, every time relative
to the clock (``fingerprint``), names as ``canonical`` gives them."""


def fingerprint(world: Snapshot, every_ticket: bool = False) -> State:
    """The world as a hashable value, equal for two worlds with the same futures: its
    jobs, its audit rows and its live tickets (``every_ticket``: all it holds).

    Every time becomes relative to the clock: a time at or after now as its
    distance from now; a time before now as its rank among the past times (-1 the
    latest, -2 the one before, ...). Sound because nothing in the model, its
    properties or the lockstep's clock does more with a time than compare it with
    another time or with ``now + d`` for a duration ``d >= 0``, add a duration to
    ``now``, or move the clock to a time (+1, 0 or -1) that lies after now. A map
    that keeps every time from now on and the order of the past ones answers each
    of these alike (a past time is below ``now + d`` and never a clock target), so
    two worlds with one fingerprint have the same futures step for step: a shift of
    all times merges, and so do histories that differ only in how long ago.
    """
    now = world.now
    jobs, audit = world.rows["jobs"], world.rows["redrives"]
    tickets = [t for t in world.tickets if every_ticket or world.is_live(t)]
    times = {time for row in jobs for time in (row[7], row[8], row[10])}
    times |= {row[3] for row in audit} | {t["lease_until"] for t in tickets}
    times.discard(None)
    past = sorted((t for t in times if t < now), reverse=True)
    at: dict[int | None, int | None] = {t: t - now for t in times if t >= now}
    at |= {t: -place for place, t in enumerate(past, start=1)}
    at[None] = None
    return (
        tuple((*row[:7], at[row[7]], at[row[8]], row[9], at[row[10]], row[11]) for row in jobs),
        tuple((*row[:3], at[row[3]], row[4]) for row in audit),
        tuple(
            (t["id"], t["qty"], t["owner"], t["token"], t["attempt"], at[t["lease_until"]])
            for t in tickets
        ),
    )


class Renaming(NamedTuple):
    """A renaming of job ids and owners (any other name stays)."""

    ids: dict[str, str]
    owners: dict[str, str]

    def state(self, state: State) -> State:
        """``state`` with its names renamed."""
        jobs, audit, tickets = state
        i, o = self.ids, self.owners
        return (
            tuple((r[0], i.get(r[1], r[1]), *r[2:9], o.get(r[9], r[9]), *r[10:]) for r in jobs),
            tuple((r[0], i.get(r[1], r[1]), *r[2:]) for r in audit),
            tuple((i.get(t[0], t[0]), t[1], o.get(t[2], t[2]), *t[3:]) for t in tickets),
        )


class Symmetry(NamedTuple):
    """The renamings of ``ids`` and ``owners`` that are symmetries; ``complete`` when
    every renaming is one."""

    ids: tuple[str, ...]
    owners: tuple[str, ...]
    renamings: list[Renaming]
    complete: bool


def symmetry_among(ids: tuple[str, ...], owners: tuple[str, ...]) -> Symmetry:
    """The renamings of ``ids`` and of ``owners`` that commute with the lockstep's
    ``forged`` rule (``Bounds.symmetry`` says why those are the symmetries)."""
    renamings = [
        Renaming(dict(zip(ids, new_ids, strict=True)), dict(zip(owners, new_owners, strict=True)))
        for new_ids in itertools.permutations(ids)
        if _commutes(dict(zip(ids, new_ids, strict=True)), "id")
        for new_owners in itertools.permutations(owners)
        if _commutes(dict(zip(owners, new_owners, strict=True)), "owner")
    ]
    every = math.factorial(len(ids)) * math.factorial(len(owners))
    return Symmetry(ids, owners, renamings, len(renamings) == every)


def _commutes(names: dict[str, str], field_name: str) -> bool:
    """Whether renaming by ``names`` (any other name stays) commutes with forging ``field_name``."""

    def forge(name: str) -> str:
        return str(forged({**PLAIN_TICKET, field_name: name}, field_name)[field_name])

    return all(names.get(forge(name), forge(name)) == forge(names[name]) for name in names)


PLAIN_TICKET: dict[str, Any] = dict.fromkeys(TICKET_FIELDS, 1) | {"id": "a", "owner": "c1"}


def _by_appearance(seen: Iterable[str | None], names: tuple[str, ...]) -> dict[str, str]:
    """The renaming that gives ``names``, in order, to the names as they first appear in
    ``seen`` (then to the names that never appear, in order)."""
    order = dict.fromkeys(name for name in seen if name in names)
    return dict(zip([*order, *(n for n in names if n not in order)], names, strict=True))


def canonical(world: Snapshot, symmetry: Symmetry, every_ticket: bool = False) -> State:
    """The world's fingerprint under a renaming chosen alike for every world that
    differs from it only in names (TLC's symmetry sets).

    With every renaming a symmetry, names are given in order of first appearance
    (ids by seq; owners in the rows by seq, then in the tickets); otherwise the
    smallest fingerprint over the symmetries is taken.
    """
    plain = fingerprint(world, every_ticket)
    if len(symmetry.renamings) == 1:
        return plain
    if symmetry.complete:
        jobs, _, tickets = plain
        renaming = Renaming(
            _by_appearance((row[1] for row in jobs), symmetry.ids),
            _by_appearance([*(row[9] for row in jobs), *(t[2] for t in tickets)], symmetry.owners),
        )
        unchanged = all(k == v for names in renaming for k, v in names.items())
        return plain if unchanged else renaming.state(plain)
    return min((renaming.state(plain) for renaming in symmetry.renamings), key=repr)
