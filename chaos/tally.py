"""What the chaos did, counted as it did it: the supervisor's side of the report.

The checker does not trust these counts for any rule that files can decide; they say
how much chaos a run really had (a quiet run must not pass for a survived one).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

__all__ = ["ChaosCounts"]


@dataclass
class ChaosCounts:
    """Kills, pauses, restarts, skipped events, lock holds, outages, redrives, partitions
    and the forced events.

    Each partition is ``{"owner", "host", "job", "duration_ms"}``: the courier whose
    host was cut, and the job whose delivery it was waiting on (or, for the forced
    one, holding). Each witness is ``chaos.witness.Witness.record()``: a forced
    event played on one courier incarnation (for the drill, when it started; for a
    freeze, when it froze); ``forced_left`` are the kinds of the forced events that
    never got to be played before the chaos phase ended.
    """

    kills: Counter[str] = field(default_factory=Counter)
    pauses: Counter[str] = field(default_factory=Counter)
    restarts: int = 0
    skipped: Counter[str] = field(default_factory=Counter)
    lock_holds: Counter[str] = field(default_factory=Counter)
    outages: int = 0
    redrives: Counter[str] = field(default_factory=Counter)
    armed_left: int = 0
    partitions: list[dict[str, Any]] = field(default_factory=list)
    heals: int = 0
    witnesses: list[dict[str, Any]] = field(default_factory=list)
    forced_left: list[str] = field(default_factory=list)
