"""The bounded model checker: its run of the default bounds, its record and its command.

The default bounds are explored once (``default_run``): every verdict must be as
expected, ``docs/state-machine.json`` must be that run, and each trace it prints
must replay as a program of the lockstep machine, on ``worker.py`` and the model.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from model.explore import (
    Bounds,
    Exploration,
    explore,
    failures,
    load_record,
    main,
    record,
)
from model.properties import ALWAYS, NEVER_FIRES, SOMETIMES
from tests.stateful.lockstep import QueueLockstep

SMALL = ["--ids", "a", "--owners", "c1"]


@pytest.fixture(scope="module")
def default_run() -> Exploration:
    return explore(Bounds())


def test_the_record_is_a_fresh_run_of_the_default_bounds(default_run: Exploration) -> None:
    assert record(default_run) == load_record(), (
        "docs/state-machine.json is out of date: run make diagram"
    )


def test_every_always_holds_and_every_goal_is_reached(default_run: Exploration) -> None:
    assert failures(default_run) == []
    assert not [p.name for p in ALWAYS if p.name in default_run.findings]
    assert all(p.name in default_run.findings for p in SOMETIMES if p.expected)


def test_each_row_no_operation_fires_is_never_reached(default_run: Exploration) -> None:
    never = [p.name for p in SOMETIMES if not p.expected]
    assert len(never) == len(NEVER_FIRES) == 1
    assert not [name for name in never if name in default_run.findings]


def replays_in_the_lockstep(test_source: str, name: str) -> None:
    """Define the printed regression test and run it: worker.py and the model must agree
    on every step and every promise must hold after each."""
    namespace: dict[str, Any] = {"QueueLockstep": QueueLockstep}
    exec(test_source, namespace)
    namespace[f"test_regression_{name}"]()


def test_each_trace_replays_in_the_lockstep_on_worker_py(default_run: Exploration) -> None:
    names = sorted(default_run.findings)
    for name in names:
        trace = default_run.trace(name)
        replays_in_the_lockstep(trace.regression_test(name, "replayed"), name)
    assert len(names) == len(SOMETIMES) - 1


def test_the_command_prints_the_report_and_a_trace(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, "--trace", "a_stale_finish_is_refused"]) == 0
    printed = capsys.readouterr().out
    assert "distinct states found, depth" in printed
    assert "holds    only_a_live_ticket_finishes" in printed
    assert "never      row_3_quarantine_exhausted_from_pending" in printed
    assert "def test_regression_a_stale_finish_is_refused() -> None:" in printed
    assert "        tickets_0 = state.claim(owner='c1'" in printed


def test_the_command_records_its_run(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    assert main([*SMALL, "--redrives", "0", "--record", str(path)]) == 1  # no redrive: unseen
    recorded = json.loads(path.read_text(encoding="utf-8"))
    assert recorded == record(explore(Bounds(ids=("a",), owners=("c1",), redrives=0)))
    assert recorded["sometimes"]["row_12_redrive_from_dead"]["witnessed"] is False


def test_every_bound_is_an_option(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["--help"])
    shown = capsys.readouterr().out
    for name in Bounds.__dataclass_fields__:
        assert f"--{name.replace('_', '-')}" in shown
