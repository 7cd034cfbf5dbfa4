"""The planted bugs of ``tests.conform.planted`` still fit ``worker.py`` (each replaced
text is there exactly once), so a plant never silently plants nothing; and the table in
docs/testing.md is the one the recorded run prints."""

from __future__ import annotations

import json

from courier.procs import project_root
from tests.conform.planted import PLANTS, table
from tests.parallel.planted import ROOT

RECORD = project_root() / "docs" / "conform-planted.json"


def test_every_plant_fits_worker_py() -> None:
    source = (ROOT / "worker.py").read_text(encoding="utf-8")
    for bug in PLANTS:
        assert bug.source(source) != source, bug.name


def test_the_docs_table_is_the_recorded_runs() -> None:
    results = json.loads(RECORD.read_text(encoding="utf-8"))
    assert [r["plant"] for r in results] == [bug.name for bug in PLANTS]
    page = (project_root() / "docs" / "testing.md").read_text(encoding="utf-8")
    assert table(results) in page
