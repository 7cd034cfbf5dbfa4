"""bench.postgres_peers at tiny sizes, pgworker's two rows only: every cell counts each job
once in the database and once in the processes, under durable settings; the verdicts say
plainly where pgworker is not ahead; docs/postgres.md is what the recorded JSON renders.

The peers (procrastinate, pgqueuer) are the optional ``peers`` extra and stay out of
this smoke run, installed or not: the harness that times them is the one that times
pgworker here, and the page's test checks that the recorded full run had all four.
Nothing here asserts a rate.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from typing import Any

import pytest

from bench import postgres_peers, report
from courier.procs import project_root
from tests.bench.quick import generated_section, quick_record

DOCS = project_root() / "docs"
OURS = ("pgworker", "pgworker-64", "courier-10")


@pytest.fixture(scope="module")
def quick_run() -> Iterator[tuple[dict[str, Any], str]]:
    """One ``python -m bench.postgres_peers --quick`` run of pgworker's rows in a child.

    Its folder is under /var/tmp, as ``tests.bench.quick`` explains.
    """
    yield from quick_record("bench.postgres_peers", *(f"--only={name}" for name in OURS))


def test_every_cell_counts_each_job_once_under_durable_settings(
    quick_run: tuple[dict[str, Any], str],
) -> None:
    record, _ = quick_run
    jobs = record["meta"]["jobs"]
    assert [entry["name"] for entry in record["contestants"]] == list(OURS)
    for entry in record["contestants"]:
        assert "psycopg" in entry["versions"]
        assert [cell["processes"] for cell in entry["cells"]] == list(
            postgres_peers.QUICK_PROCESSES
        )
        for cell in entry["cells"]:
            assert not cell["errors"], cell
            assert cell["done"] == jobs == sum(cell["ran_per_process"]), cell
            assert len(cell["ran_per_process"]) == cell["processes"]
            low, high = jobs / (cell["seconds"] + 0.0005), jobs / (cell["seconds"] - 0.0005)
            assert low - 0.05 <= cell["jobs_per_s"] <= high + 0.05, "s rounded to ms, rate to 0.1"
            assert "fsync=on" in cell["durability"]
            assert "synchronous_commit=on" in cell["durability"]


def test_the_run_prints_its_table(quick_run: tuple[dict[str, Any], str]) -> None:
    record, stdout = quick_run
    assert report.peers(record) in stdout
    assert "No peer ran beside pgworker: nothing to compare." in stdout


def _with_peer(record: dict[str, Any], rates: list[float | None]) -> dict[str, Any]:
    """``record`` plus a peer whose cells did ``rates`` jobs/s (``None``: failed)."""
    peer = copy.deepcopy(record["contestants"][0])
    peer.update(name="peer", takes="a peer", versions={"peer": "1.0"})
    for cell, rate in zip(peer["cells"], rates, strict=True):
        cell["jobs_per_s"] = rate
        cell["errors"] = [] if rate is not None else ["7 of 100 jobs acknowledged after 0.5 s"]
    return {**record, "contestants": [*record["contestants"], peer]}


def test_the_verdicts_name_each_peer_that_did_as_much_or_more(
    quick_run: tuple[dict[str, Any], str],
) -> None:
    record, _ = quick_run
    first_k, second_k = postgres_peers.QUICK_PROCESSES
    singles = record["contestants"][0]["cells"]
    text = report.peers(_with_peer(record, [singles[0]["jobs_per_s"], None]))
    assert f"- K={first_k}, pgworker (" in text
    assert f"K={first_k}, pgworker ({singles[0]['jobs_per_s']:,.0f} jobs/s): **not ahead**" in text
    assert f"K={second_k}, pgworker ({singles[1]['jobs_per_s']:,.0f} jobs/s): ahead of peer" in text
    assert f"- peer K={second_k}: 7 of 100 jobs acknowledged after 0.5 s." in text
    assert "| peer | peer 1.0 | a peer |" in text


def test_a_peer_not_installed_is_shown_as_such(quick_run: tuple[dict[str, Any], str]) -> None:
    record, _ = quick_run
    missing = {"name": "procrastinate", "takes": "its worker", "versions": None}
    text = report.peers({**record, "contestants": [*record["contestants"], missing]})
    assert "| procrastinate | not installed | its worker | - | - |" in text
    assert "No peer ran beside pgworker" in text


def test_the_page_is_the_recorded_full_run_of_all_four_rendered() -> None:
    record = json.loads((DOCS / "postgres-peers.json").read_text(encoding="utf-8"))
    assert generated_section(DOCS / "postgres.md", report.PEERS_MARKS) == report.peers(record)
    assert not record["meta"]["quick"], "the page shows a full run"
    assert record["meta"]["processes"] == list(postgres_peers.PROCESSES)
    assert [entry["name"] for entry in record["contestants"]] == list(postgres_peers.CONTESTANTS)
    assert all(entry["versions"] for entry in record["contestants"]), "every peer ran"
