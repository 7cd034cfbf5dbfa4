"""bench.postgres at tiny sizes: it measures real work on both backends, records the
durability beside every figure, times every slow state at both sizes and prints each
ratio beside its goal, and docs/postgres.md is what its recorded JSON renders.

Nothing here asserts a rate: the benchmark reports speed; these tests check that
each figure counts checked calls, that both backends ran under their durable
settings, and that the page cannot drift from its record.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from bench import postgres, report, slowpaths
from courier.procs import project_root
from tests.bench.quick import generated_section, quick_record

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
        for side in row.values():
            assert side["reported"] == side["processes"] and not side["errors"]
            assert sum(side["per_process"]) == side["cycles"]
        pg = row["postgres"]
        assert pg["cycles"] > 0 and pg["smallest_share"] <= 1 <= pg["largest_share"]
        assert "fsync=on" in pg["durability"]
        assert "synchronous=FULL" in row["sqlite"]["durability"]


def test_every_slow_state_is_timed_at_both_sizes_on_postgres(
    quick_run: tuple[dict[str, Any], str],
) -> None:
    part = quick_run[0]["slowpaths"]
    assert part["backend"] == "postgres"
    cases = [entry["case"] for entry in part["results"]]
    assert cases == [case for case in slowpaths.POSTGRES_CASES for _ in "ab"]
    for small, large in zip(part["results"][::2], part["results"][1::2], strict=True):
        assert small["size"] < large["size"]
        assert small["p50_ms"] > 0 and large["batch_p50_ms"] > 0


def test_the_run_prints_its_tables_and_each_ratio_beside_its_goal(
    quick_run: tuple[dict[str, Any], str],
) -> None:
    record, stdout = quick_run
    assert report.postgres(record) in stdout
    assert "Goals at" not in stdout, "no 8-courier row at quick sizes"
    table = [line for line in stdout.splitlines() if line.startswith("| `")]
    assert [line.split(" | ")[0] for line in table] == [
        f"| `{case}`" for case in slowpaths.POSTGRES_CASES
    ]
    for line, (small, large) in zip(table, _pairs(record), strict=True):
        cells = line.strip("| ").split(" | ")
        for cell, key, goal in ((cells[4], "p50_ms", 1.3), (cells[8], "batch_p50_ms", 1.5)):
            ratio = large[key] / small[key]
            met = "met" if ratio <= goal else "**not met**"
            assert cell == f"{ratio:.2f}x (goal {goal:g}x: {met})"


def _pairs(record: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    results = record["slowpaths"]["results"]
    return list(zip(results[::2], results[1::2], strict=True))


def test_the_postgres_page_is_its_recorded_run_rendered() -> None:
    record = json.loads((DOCS / "postgres.json").read_text(encoding="utf-8"))
    section = generated_section(DOCS / "postgres.md", report.POSTGRES_MARKS)
    assert section == report.postgres(record)
    assert not record["meta"]["quick"], "the page shows a full run"
