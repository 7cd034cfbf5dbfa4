"""What a random run made the model try, beside what the explorer found reachable: a
recorder that counts each (source, trigger, guard outcome) combination (``counting``)
and the report of both (``coverage_report``), for the lockstep and its fuzz campaigns."""

from __future__ import annotations

from collections import Counter
from typing import Any

from model.explore.edge import Combo
from model.job import FIRES, Recorder


def shown(combo: Combo) -> str:
    """A combination as the reports print it: ``leased --reclaim--> lease_expired fails``."""
    source, trigger, outcome = combo
    return f"{source} --{trigger}--> {outcome}"


def counting(reached: Counter[Combo]) -> Recorder:
    """A recorder for ``model.job.recording`` that counts each combination in ``reached``."""

    def count(source: str, trigger: str, outcome: str) -> None:
        reached[(source, trigger, outcome)] += 1

    return count


def coverage_report(reached: Counter[Combo], recorded: dict[str, Any]) -> list[str]:
    """What a random run (the lockstep, a fuzz campaign) made the model try, beside what
    the explorer found reachable: the transition rows fired, the (source, trigger,
    guard outcome) combinations reached, and by name each reachable one it missed."""
    reachable = {tuple(combo) for combo in recorded["reachable"]}
    got = set(reached)
    rows = {(s, t) for s, t, o in reachable if o == FIRES}
    fired = {(s, t) for s, t, o in got if o == FIRES}
    lines = [
        f"transitions fired: {len(fired & rows)} of the {len(rows)} rows the explorer fires",
        f"(source, trigger, guard outcome) reached: {len(got & reachable)} of the"
        f" {len(reachable)} the explorer found reachable (python -m model.explore)",
    ]
    lines += [f"  missing: {shown(combo)}" for combo in sorted(reachable - got)]
    lines += [
        f"  beyond the explorer's bounds: {shown(combo)} ({reached[combo]} times)"
        for combo in sorted(got - reachable)
    ]
    return lines
