"""bench.postgres at tiny sizes: it measures real work on both backends, records the
durability beside every figure, and docs/postgres.md is what its recorded JSON renders.

Nothing here asserts a rate: the benchmark reports speed; these tests check that
each figure counts checked calls, that both backends ran under their durable
settings, and that the page cannot drift from its record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from bench import postgres
from courier.procs import project_root
from tests.bench.quick import quick_record

DOCS = project_root() / "docs"
PHASES = ("enqueue", "claim", "finish", "enqueue_many", "claim_many", "finish_many")


@pytest.fixture(scope="module")
def quick_run() -> Iterator[tuple[dict[str, Any], str]]:
    """One ``python -m bench.postgres --quick`` run in a child: its JSON and its stdout."""
    yield from quick_record("bench.postgres")


def test_both_backends_ran_every_call_under_their_durable_settings(
    quick_run: tuple[dict[str, Any], str],
) -> None:
    record, _ = quick_run
    rows = {row["backend"]: row for row in record["calls"]}
    assert set(rows) == {"sqlite", "postgres"}
    for row in rows.values():
        assert all(row[phase] > 0 for phase in PHASES), row
    assert "synchronous=FULL" in rows["sqlite"]["durability"]
    assert "journal_mode=delete" in rows["sqlite"]["durability"]
    assert "fsync=on" in rows["postgres"]["durability"]
    assert "synchronous_commit=on" in rows["postgres"]["durability"]


def test_every_courier_row_counts_each_process_and_its_spread(
    quick_run: tuple[dict[str, Any], str],
) -> None:
    record, _ = quick_run
    assert [row["postgres"]["processes"] for row in record["couriers"]] == list(
        postgres.QUICK_PROCESSES
    )
    for row in record["couriers"]:
        pg = row["postgres"]
        assert pg["reported"] == pg["processes"] and not pg["errors"]
        assert sum(pg["per_process"]) == pg["cycles"] > 0
        assert pg["idlest_to_mean"] <= 1 <= pg["busiest_to_mean"]
        assert "fsync=on" in pg["durability"]
        assert row["sqlite"]["reported"] == row["sqlite"]["processes"]
        assert "synchronous=FULL" in row["sqlite"]["durability"]


def test_the_run_prints_its_tables(quick_run: tuple[dict[str, Any], str]) -> None:
    record, stdout = quick_run
    assert postgres.render(record) in stdout
    assert record["goals"] == {"judged": False}, "no 8-courier row at quick sizes"


def test_the_postgres_page_is_its_recorded_run_rendered() -> None:
    record = json.loads((DOCS / "postgres.json").read_text(encoding="utf-8"))
    page = (DOCS / "postgres.md").read_text(encoding="utf-8")
    section = page.split(postgres.BEGIN_MARK + "\n", 1)[1].split(postgres.END_MARK, 1)[0]
    assert section == postgres.render(record)
    assert not record["meta"]["quick"], "the page shows a full run"
