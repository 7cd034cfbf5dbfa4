"""A case of the parallel suite under the controlled scheduler: a program, the schedule
it ran under, and where (the kind of store, and a planted bug if any).

A case is data: ``Case.save`` writes it as one JSON file in the failures folder
(``tests/failures.py``: ``failures/`` or ``$LEASE_QUEUE_FAILURES``), ``Case.load``
reads it back, and ``python -m tests.parallel.replay FILE`` runs it again
(``tests.parallel.replay``). ``judged(case, store)`` runs it once and judges the run;
``report`` prints a failure as a developer reads it: what broke, the program, the
schedule, the command that replays it, and the run drawn as a timeline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.failures import ROOT, failures_folder
from tests.parallel.controlled import run_scheduled
from tests.parallel.judge import DEFAULT_BUDGET, Judgement, judge
from tests.parallel.program import Program, decoded, describe, encoded
from tests.parallel.schedule import Policy, Replay, shown
from tests.parallel.timeline import render
from tests.stores import Store

KINDS = ("sqlite", "postgres")


@dataclass(frozen=True)
class Case:
    """``program`` under ``schedule`` (as written) on a store of ``kind``, with the
    planted bug named ``plant`` (``None``: the queue module as it is)."""

    kind: str
    program: Program
    schedule: str
    plant: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "store": self.kind,
            "plant": self.plant,
            "schedule": self.schedule,
            "program": encoded(self.program),
        }

    @classmethod
    def from_json(cls, data: Any) -> Case:
        """The case of ``as_json``'s data; ``ValueError`` saying what is wrong otherwise."""
        if not isinstance(data, dict):
            raise ValueError("a case is a JSON object")
        missing = {"store", "schedule", "program"} - data.keys()
        if missing:
            raise ValueError(f"a case needs {', '.join(sorted(missing))}")
        if data["store"] not in KINDS:
            raise ValueError(f"'store' must be one of {KINDS}, got {data['store']!r}")
        Replay.of(str(data["schedule"]))  # says what is wrong with a bad schedule
        plant = data.get("plant")
        return cls(data["store"], decoded(data["program"]), str(data["schedule"]), plant)

    def save(self, folder: Path | None = None) -> Path:
        """Write the case to ``folder`` (the failures folder) under the name of its store
        and plant, over the last one saved there (while hypothesis shrinks, the last
        failure saved is the shrunk one); its path."""
        where = folder or failures_folder()
        where.mkdir(parents=True, exist_ok=True)
        path = where / f"parallel-{self.kind}-{self.plant or 'queue'}.json"
        path.write_text(json.dumps(self.as_json(), indent=1) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, path: Path) -> Case:
        """The case saved at ``path``; ``ValueError`` if it is not one."""
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise ValueError(f"{path} is not JSON: {error}") from None
        return cls.from_json(data)


def judged(
    program: Program, store: Store, policy: Policy, budget: int = DEFAULT_BUDGET
) -> Judgement:
    """Run ``program`` once under ``policy`` on ``store`` and judge the run."""
    return judge(run_scheduled(program, store, policy), store, budget)


def replay_command(path: Path) -> str:
    """The command that replays a saved case, run from the repository's root."""
    shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    return f".venv/bin/python -m tests.parallel.replay {shown}"


def report(judgement: Judgement, case: Case, path: Path | None, again: bool | None) -> str:
    """A failing run as a developer reads it (see the module docstring). ``again``:
    whether one more replay of the schedule failed too (``None``: not replayed)."""
    broken = judgement.problems or [
        f"no order of the calls explains the history ({judgement.verdict.outcome})"
    ]
    lines = [f"broken: {problem}" for problem in broken]
    if again is not None:
        lines.append(
            "replayed once more: "
            + ("it failed again" if again else "it passed: the run is not deterministic")
        )
    calls = judgement.run.program.size
    lines += ["", f"the program ({calls} calls, prefix included):", describe(case.program)]
    lines += ["", f"schedule: {shown(case.schedule)}"]
    if path is not None:
        lines.append(f"replay:   {replay_command(path)}   (from the repository's root)")
        lines.append(f"          (the file holds: {json.dumps(case.as_json())})")
    lines += ["", "the run:", render(judgement)]
    return "\n".join(lines)
