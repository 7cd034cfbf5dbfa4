"""docs/state-machine.md is rendered from the model and must not drift from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from model import TRANSITIONS, diagram


def test_the_committed_page_is_a_fresh_render() -> None:
    assert diagram.DOC_PATH.read_text(encoding="utf-8") == diagram.render(), (
        "docs/state-machine.md is out of date: run python -m model.diagram"
    )


def test_check_passes_on_the_committed_page() -> None:
    assert diagram.main(["--check"]) == 0


def test_check_fails_and_writing_repairs_a_stale_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    page = tmp_path / "state-machine.md"
    page.write_text("stale\n", encoding="utf-8")
    monkeypatch.setattr(diagram, "DOC_PATH", page)
    assert diagram.main(["--check"]) == 1
    assert diagram.main([]) == 0
    assert diagram.main(["--check"]) == 0


def test_the_diagram_draws_every_transition_with_its_guards() -> None:
    drawn = diagram.mermaid()
    assert drawn.startswith("---\ntitle: The job lifecycle\n---\nstateDiagram-v2")
    for row in TRANSITIONS:
        label = row["trigger"]
        if "conditions" in row:
            label += " [" + " & ".join(row["conditions"]) + "]"
        edge = f"{row['source']} --> {row['dest']}: "
        assert any(line.strip().startswith(edge) and label in line for line in drawn.splitlines())


def test_the_table_has_one_line_per_transition_in_decision_order() -> None:
    lines = diagram.transitions_table()[2:]
    assert [line.split("|")[2].strip(" `") for line in lines] == [
        row["trigger"] for row in TRANSITIONS
    ]
