"""The performance harness at tiny sizes: its pieces do their work and its JSON has every part.

Nothing here asserts a duration or a rate: the benchmark reports speed, the tests check
that what it measures is real work (each figure counts checked calls), that every
section is present, that a peer is either measured with its real pragmas or marked not
installed, and that docs/performance.md is exactly the page its recorded JSON renders
to. The whole file runs in well under 30 seconds.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bench import ceilings, delivery, peers, report, slowpaths
from bench.measure import percentile, run_counted
from bench.rows import fill
from courier.clock import clock_ms
from courier.procs import project_root
from tests.bench.quick import quick_record
from tests.stores.sqlite import SQLiteStore

PHASES = ("enqueue", "claim", "finish", "cycle")
DOCS = project_root() / "docs"


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dict[str, Any], str]]:
    """One ``python -m bench.perf --quick`` run in a child: its record, its stdout, its page."""
    page = tmp_path_factory.mktemp("perf") / "perf.md"
    for record, stdout in quick_record("bench.perf", "--page", str(page)):
        assert page.read_text(encoding="utf-8") == report.performance(record)
        yield record, stdout


def _positive_figure(figure: dict[str, Any]) -> None:
    assert figure["count"] > 0
    assert figure["seconds"] > 0
    assert figure["per_s"] > 0


def test_the_run_prints_its_page_with_every_section(quick_run: tuple[dict[str, Any], str]) -> None:
    record, stdout = quick_run
    assert report.performance(record) in stdout
    assert record["meta"]["command"].startswith("python -m bench.perf --quick")
    assert [line for line in stdout.splitlines() if line.startswith("## ")] == [
        "## The settings and what they cost",
        "## Throughput",
        "## The peers",
        "## Couriers end to end",
        "## One courier in batches of 64",
        "## Slow states, and what to do about them",
        "## How it measures",
    ]


def test_the_limit_is_measured_in_the_modes_it_claims(
    quick_run: tuple[dict[str, Any], str],
) -> None:
    limit = quick_run[0]["limit"]
    assert set(limit["bare"]) == {"DELETE+FULL", "WAL+FULL", "WAL+NORMAL", "DELETE+OFF"}
    for mode, figure in limit["bare"].items():
        _positive_figure(figure)
        assert f"{figure['journal_mode']}+{figure['synchronous']}" == mode
    _positive_figure(limit["fsync"])


def test_worker_figures_count_every_phase(quick_run: tuple[dict[str, Any], str]) -> None:
    section = quick_run[0]["worker"]
    for phase in PHASES:
        _positive_figure(section["single"][phase])
        _positive_figure(section["batch"][phase])
    assert section["batch"]["size"] == 64
    assert section["batch"]["cycle"]["count"] % 64 == 0


def test_peers_are_measured_or_marked_not_installed(
    quick_run: tuple[dict[str, Any], str],
) -> None:
    section = quick_run[0]["peers"]
    assert set(section) == set(peers.PEERS)
    for name, peer in section.items():
        if not peer["installed"]:
            assert peers.peer_version(name) is None
            continue
        assert peer["journal_mode"] in {"DELETE", "WAL", "TRUNCATE", "PERSIST", "MEMORY"}
        assert peer["synchronous"] in {"OFF", "NORMAL", "FULL", "EXTRA"}
        for phase in PHASES:
            _positive_figure(peer[phase])


def test_slowpaths_time_both_sizes_of_each_case(quick_run: tuple[dict[str, Any], str]) -> None:
    section = quick_run[0]["slowpaths"]["results"]
    assert [entry["case"] for entry in section] == [c for c in slowpaths.SQLITE_CASES for _ in "ab"]
    for entry in section:
        assert entry["p50_ms"] > 0 and entry["off_p50_ms"] > 0 and entry["batch_p50_ms"] > 0


def test_slowpaths_alone_prints_each_case_side_by_side(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``python -m bench.slowpaths --case ...``: one line per case asked for, both sizes
    of one run and their ratios beside their goals, on either backend."""
    slowpaths.main(["--backend", "postgres", "--case", "due-retries", "--cycles", "3"])
    slowpaths.main(
        ["--dir", str(tmp_path), "--case", "expired-leases", "--cycles", "3", "--scale", "0.01"]
    )
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `")]
    assert [line.split(" | ")[0] for line in lines] == ["| `due-retries`", "| `expired-leases`"]
    for line in lines:
        cells = line.split(" | ")
        small, large = (float(x) for x in cells[3].split(" / "))
        ratio, goal = cells[4].split(" (goal ")
        # of the unrounded times: the printed ones are rounded, and so is the ratio (to
        # 0.01: below 0.17x its rounding alone is more than 3 %)
        assert float(ratio.removesuffix("x")) == pytest.approx(large / small, rel=0.03, abs=0.005)
        met = float(ratio.removesuffix("x")) <= slowpaths.GOAL_CYCLE
        assert goal == f"{slowpaths.GOAL_CYCLE:g}x: {'met' if met else '**not met**'})"
    assert list(tmp_path.iterdir()) == [], "the files are removed"


def test_couriers_report_each_layer_and_each_fleet(
    quick_run: tuple[dict[str, Any], str],
) -> None:
    section = quick_run[0]["couriers"]
    assert list(section["layers"]) == list(delivery.LAYERS)
    for figure in section["layers"].values():
        assert figure["deliveries"] > 0 and figure["per_s"] > 0
    assert [entry["processes"] for entry in section["results"]] == [1, 2]
    for entry in section["results"]:
        assert entry["reported"] == entry["processes"]
        assert entry["deliveries"] == sum(entry["per_process"]) > 0
        assert entry["lock_timeouts"] >= 0 and entry["stale"] >= 0
        assert entry["effects"] >= entry["deliveries"], "a delivery without its effect"
        assert entry["errors"] == []


def test_every_single_call_is_timed_beside_its_ceiling(
    quick_run: tuple[dict[str, Any], str],
) -> None:
    section = quick_run[0]["ceiling"]
    for mode in ("synced", "without_sync"):
        assert section[mode]["same_rows"] is True, mode
        for call in ceilings.CALLS:
            figure = section[mode][call]
            assert figure["count"] > 0 and figure["share"] > 0, (mode, call)


def test_the_ceiling_writes_exactly_the_rows_of_the_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ceilings.ceilings(tmp_path, 5, 10.0, without_sync=True)["same_rows"] is True
    assert list(tmp_path.iterdir()) == [], "the files are removed"
    # A ceiling that settles its jobs one millisecond late writes other rows: noticed.
    late = ceilings._SETTLE_DONE.replace("available_at = ?", "available_at = ? + 1")
    monkeypatch.setattr(ceilings, "_SETTLE_DONE", late)
    assert ceilings.ceilings(tmp_path, 5, 10.0, without_sync=True)["same_rows"] is False


def test_the_performance_page_is_the_render_of_its_record() -> None:
    """docs/performance.md carries no figure kept by hand: it is its JSON, rendered."""
    recorded = json.loads((DOCS / "performance.json").read_text(encoding="utf-8"))
    page = (DOCS / "performance.md").read_text(encoding="utf-8")
    assert page == report.performance(recorded), (
        "regenerate: python -m bench.perf --render docs/performance.json --page docs/performance.md"
    )
    assert re.search(r"\b\d{1,2}:\d{2}\b", page) is None, "a user page carries no clock time"
    assert str(recorded["meta"].get("git_head", "no head")) not in page


# --- the pieces ------------------------------------------------------------------


def test_a_missing_peer_is_reported_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(peers.PEERS, "huey", ("no-such-dist-xyz", "no_such_module_xyz"))
    assert peers.measure_peer("huey", tmp_path, 10, 1.0) == {"installed": False}
    assert peers.peer_version("huey") is None


def test_timing_helpers_count_jobs_and_rank_percentiles() -> None:
    timed = run_counted(lambda i: 2, 5, 60.0)
    assert timed.count == 10
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert percentile([float(v) for v in range(1, 101)], 99) == 99.0


def test_the_calls_alone_finish_every_job_they_claim_and_stop_when_the_queue_runs_dry(
    tmp_path: Path,
) -> None:
    store = SQLiteStore(str(tmp_path))
    where = store.fresh("calls")
    con = store.connect(where)
    try:
        fill(con, 64 * 3 + 10, clock_ms())
    finally:
        con.close()
    with pytest.raises(RuntimeError, match="ran dry"):  # 4 cycles, then nothing claimable
        delivery.calls_alone(store, where, 30.0)
    con = store.connect(where)
    try:
        rows = store.rows(con)["jobs"]
    finally:
        con.close()
    assert len(rows) == 202 and all(row[3] == "done" for row in rows)
    fresh = store.fresh("more")
    con = store.connect(fresh)
    try:
        fill(con, 64 * 50, clock_ms())
    finally:
        con.close()
    figure = delivery.calls_alone(store, fresh, 0.05)
    assert figure["count"] == 64 * figure["cycles"] > 0
    assert figure["per_s"] == pytest.approx(figure["count"] / figure["seconds"], rel=0.05)
