"""The plant runner's own modes, on a few programs: what docs/testing.md's tables come
from must run (the tables themselves are measured by ``python -m tests.parallel.planted``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.parallel.planted import (
    BY_NAME,
    PLANTS,
    Plant,
    first_failures,
    hunt,
    main,
    rates,
    table,
)

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("bug", PLANTS, ids=lambda bug: bug.name)
def test_every_plant_fits_its_module(bug: Plant) -> None:
    """A plant is its module's own code with one mistake: a change of the module that
    moves a quoted text must move the plant with it, or the plant would not run."""
    source = (ROOT / f"{bug.module}.py").read_text(encoding="utf-8")
    planted = bug.source(source)
    assert planted != source
    compile(planted, f"{bug.module}.py with {bug.name}", "exec")


def test_rates_runs_the_same_programs_in_both_modes(tmp_path: Path) -> None:
    result = rates(BY_NAME["claim-chooses-then-leases"], tmp_path, 3)
    assert result["plant"] == "claim-chooses-then-leases"
    assert result["programs"] == 3
    for mode in ("scheduled", "real"):
        count = result[mode]
        assert isinstance(count, int) and 0 <= count <= 3


def test_first_failures_counts_the_programs_of_each_seed(tmp_path: Path) -> None:
    result = first_failures(BY_NAME["claim-chooses-then-leases"], tmp_path, 1, "scheduled", 30)
    assert result["mode"] == "scheduled" and result["cap"] == 30
    firsts = result["first_failures"]
    assert isinstance(firsts, list) and len(firsts) == 1
    # this plant fails within a few programs under the scheduler, whatever the seed
    assert all(isinstance(first, int) and 1 <= first <= 30 for first in firsts), firsts


def test_the_seeds_can_start_anywhere(tmp_path: Path) -> None:
    """``--from-seed``: a variant picked as the best on seeds 0-19 is judged on others.
    Seed 2 alone gives what it gives as the third of seeds 0-2."""
    bug = BY_NAME["claim-chooses-then-leases"]
    (tmp_path / "all").mkdir()
    (tmp_path / "one").mkdir()
    three = first_failures(bug, tmp_path / "all", 3, "scheduled", 30)
    alone = first_failures(bug, tmp_path / "one", 1, "scheduled", 30, first_seed=2)
    assert three["first_seed"] == 0 and alone["first_seed"] == 2
    firsts = three["first_failures"]
    assert isinstance(firsts, list)
    assert alone["first_failures"] == firsts[2:], (three, alone)


def test_a_first_only_hunt_stops_at_the_first_failure_of_cis_sequence(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``--first``: CI's own test function on the plant, stopped at its first failure
    with nothing shrunk or replayed (the cheap way to read CI's sequence)."""
    monkeypatch.setenv("LEASE_QUEUE_FAILURES", str(tmp_path / "failures"))
    result = hunt(BY_NAME["send-inside-claim"], tmp_path, first_only=True)
    assert result["caught"] is True
    first = result["programs_to_first_failure"]
    assert isinstance(first, int) and 1 <= first <= 18, result
    assert "shrink_s" not in result and "replays_failed" not in result
    assert [case.name for case in (tmp_path / "failures").iterdir()] == [
        "parallel-sqlite-send-inside-claim.json"
    ], "the failing case is saved where the environment says"


def test_the_table_shows_what_a_run_did_not_measure_as_a_dash() -> None:
    """``--table`` of a ``--first`` run (nothing shrunk, no lockstep) or of a plant never
    caught: a dash in each cell not measured, not a traceback nor a made-up "passes"."""
    first = {"plant": "send-inside-claim", "caught": True, "first_failure_s": 0.2}
    first["programs_to_first_failure"] = 1
    never = {"plant": "finish-checks-then-updates", "caught": False, "lockstep_catches": False}
    lines = table([first, never]).splitlines()
    cells = [[cell.strip() for cell in line.split(" | ")[2:]] for line in lines[2:]]
    assert cells[0] == ["-", "1", "0.2 s", "-", "-", "-", "-", "- |"]
    assert cells[1] == ["passes", "-", "-", "-", "-", "-", "-", "- |"]


@pytest.mark.parametrize(
    ("content", "why"),
    [
        (None, "No such file"),
        ("{not json", "Expecting"),
        ('[{"plant": "no-such-plant"}]', "no-such"),
    ],
    ids=["missing", "not-json", "unknown-plant"],
)
def test_the_table_of_a_file_that_is_not_a_record_is_refused_plainly(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, why: str
) -> None:
    """``--table`` of a file that is missing, not JSON or names no plant: one line that
    names the file and exit 2, not a traceback."""
    recorded = tmp_path / "results.json"
    if content is not None:
        recorded.write_text(content, encoding="utf-8")
    with pytest.raises(SystemExit) as exited:
        main(["--table", str(recorded)])
    assert exited.value.code == 2
    said = capsys.readouterr().err
    assert said.startswith(f"planted: --table {recorded}: not a recorded --json file (")
    assert why in said and "Traceback" not in said
