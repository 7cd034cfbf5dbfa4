"""The performance harness at tiny sizes: its pieces do their work and its JSON has every part.

Nothing here asserts a duration or a rate: the benchmark reports speed, the tests check
that what it measures is real work (each figure counts checked calls), that every
section is present, that a peer is either measured with its real pragmas or marked
not installed, that the documented shapes of the latency files hold, and that
docs/performance.md is exactly the page its recorded JSON renders to. The whole file
runs in well under 30 seconds.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import worker
from bench import ceiling, delivery, latency, peers, report, rows, slowpaths, syncs
from bench.measure import T0_MS, percentile, run_counted
from bench.perf import QUICK_ROWS, SECTIONS
from courier.procs import project_root

RUN_TIMEOUT_S = 60.0  # a bound, not a figure (a quick run took 38 s at load 7)
PHASES = ("enqueue", "claim", "finish", "cycle")
DOCS = project_root() / "docs"
PAGE_LINES = 150


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """One ``python -m bench.perf --quick`` run in a child; its JSON and its folder."""
    folder = tmp_path_factory.mktemp("perf")
    out = folder / "perf.json"
    argv = [sys.executable, "-m", "bench.perf", "--quick", "--dir", str(folder / "work")]
    argv += ["--json", str(out), "--chart", str(folder / "perf.png")]
    argv += ["--page", str(folder / "perf.md")]
    done = subprocess.run(
        argv,
        cwd=project_root(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "## Throughput" in done.stdout
    return json.loads(out.read_text()), folder


def _positive_figure(figure: dict[str, Any]) -> None:
    assert figure["count"] > 0
    assert figure["seconds"] > 0
    assert figure["per_s"] > 0


def test_every_section_is_in_the_json(quick_run: tuple[dict[str, Any], Path]) -> None:
    results, _ = quick_run
    for section in (*SECTIONS, "meta", "foreign_file"):
        assert section in results, section
    assert results["meta"]["command"].startswith("python -m bench.perf --quick")


def test_the_limit_is_measured_in_the_modes_it_claims(
    quick_run: tuple[dict[str, Any], Path],
) -> None:
    limit = quick_run[0]["limit"]
    assert set(limit["bare"]) == {"DELETE+FULL", "WAL+FULL", "WAL+NORMAL", "DELETE+OFF"}
    for mode, figure in limit["bare"].items():
        _positive_figure(figure)
        assert f"{figure['journal_mode']}+{figure['synchronous']}" == mode
    _positive_figure(limit["fsync"])


def test_worker_figures_count_every_phase(quick_run: tuple[dict[str, Any], Path]) -> None:
    section = quick_run[0]["worker"]
    for phase in PHASES:
        _positive_figure(section["single"][phase])
        _positive_figure(section["batch"][phase])
    assert section["batch"]["size"] == 64
    assert section["batch"]["cycle"]["count"] % 64 == 0


def test_peers_are_measured_or_marked_not_installed(
    quick_run: tuple[dict[str, Any], Path],
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


def test_latency_has_both_shapes_at_every_size(quick_run: tuple[dict[str, Any], Path]) -> None:
    section = quick_run[0]["latency"]
    got = {(entry["shape"], entry["rows"]) for entry in section["results"]}
    assert got == {(shape, size) for shape in rows.SHAPES for size in QUICK_ROWS}
    for entry in section["results"]:
        assert entry["cycles"] == section["cycles"]
        assert entry["off_cycles"] == section["off_cycles"]
        assert 0 < entry["p50_ms"] <= entry["p99_ms"] <= entry["max_ms"]
        assert 0 < entry["off_p50_ms"] <= entry["off_p99_ms"]


def test_a_foreign_file_works_and_gets_the_indexes(
    quick_run: tuple[dict[str, Any], Path],
) -> None:
    foreign = quick_run[0]["foreign_file"]
    assert foreign["indexes_before"] == []
    assert foreign["works"] and foreign["gets_indexes"]
    assert set(foreign["fresh_file_indexes"]) <= set(foreign["indexes_after"])


def test_slowpaths_time_both_sizes_of_each_case(quick_run: tuple[dict[str, Any], Path]) -> None:
    section = quick_run[0]["slowpaths"]
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
    lines = capsys.readouterr().out.splitlines()
    cases = [line.split(" | ")[0] for line in lines if line.startswith("| `")]
    assert cases == ["| `due-retries`", "| `expired-leases`"]
    for line in (lines[2], lines[5]):
        cells = line.split(" | ")
        small, large = (float(x) for x in cells[2].split(" / "))
        ratio, goal = cells[3].split(" (goal ")
        # of the unrounded times: the printed ones are rounded
        assert float(ratio.removesuffix("x")) == pytest.approx(large / small, rel=0.03)
        met = float(ratio.removesuffix("x")) <= slowpaths.GOAL_CYCLE
        assert goal == f"{slowpaths.GOAL_CYCLE:g}x: {'met' if met else '**not met**'})"
    assert list(tmp_path.iterdir()) == [], "the files are removed"


def test_couriers_report_each_layer_and_each_fleet(
    quick_run: tuple[dict[str, Any], Path],
) -> None:
    section = quick_run[0]["couriers"]
    assert list(section["layers"]) == list(delivery.LAYERS)
    for figure in section["layers"].values():
        assert figure["deliveries"] > 0 and figure["per_s"] > 0
    assert [entry["processes"] for entry in section["results"]] == [1, 2]
    for entry in section["results"]:
        assert entry["reported"] == entry["processes"]
        assert entry["deliveries"] == sum(entry["per_courier"]) > 0
        assert entry["lock_timeouts"] >= 0 and entry["stale"] >= 0
        assert entry["effects"] >= entry["deliveries"], "a delivery without its effect"
        assert entry["errors"] == []


def test_every_single_call_is_timed_beside_its_ceiling(
    quick_run: tuple[dict[str, Any], Path],
) -> None:
    section = quick_run[0]["ceiling"]
    for mode in ("synced", "without_sync"):
        assert section[mode]["same_rows"] is True, mode
        for call in ceiling.CALLS:
            figure = section[mode][call]
            assert figure["count"] > 0 and figure["share"] > 0, (mode, call)


def test_the_ceiling_writes_exactly_the_rows_of_the_calls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert ceiling.measure(tmp_path, 5, 10.0, without_sync=True)["same_rows"] is True
    for name in tmp_path.iterdir():
        name.unlink()
    # A ceiling that settles its jobs one millisecond late writes other rows: noticed.
    late = ceiling._SETTLE_DONE.replace("available_at = ?", "available_at = ? + 1")
    monkeypatch.setattr(ceiling, "_SETTLE_DONE", late)
    assert ceiling.measure(tmp_path, 5, 10.0, without_sync=True)["same_rows"] is False


def test_syncs_are_counted_or_skipped(quick_run: tuple[dict[str, Any], Path]) -> None:
    section = quick_run[0]["syncs"]
    if "skipped" in section:
        return
    by_key = {(row["system"], row["op"]): row for row in section["rows"]}
    assert len(by_key) == len(syncs.SCENARIOS)
    # The contract's settings sync at every commit: never zero per transaction (where
    # this machine lets strace trace at all).
    for op in ("enqueue", "claim", "finish"):
        row = by_key[("worker", op)]
        assert row["per_call"] >= 1 if row["per_call"] is not None else row["note"]


def test_the_run_leaves_no_file_behind(quick_run: tuple[dict[str, Any], Path]) -> None:
    assert not list((quick_run[1] / "work").iterdir()), "the run left files behind"


def test_the_run_writes_its_page(quick_run: tuple[dict[str, Any], Path]) -> None:
    results, folder = quick_run
    page = (folder / "perf.md").read_text(encoding="utf-8")
    assert page == report.render(results)
    for heading in ("settings", "Throughput", "peers", "Latency", "Couriers", "Slow states"):
        assert heading in page


def test_the_performance_page_is_the_render_of_its_record() -> None:
    """docs/performance.md carries no figure kept by hand: it is its JSON, rendered."""
    recorded = json.loads((DOCS / "performance.json").read_text(encoding="utf-8"))
    page = (DOCS / "performance.md").read_text(encoding="utf-8")
    assert page == report.render(recorded), (
        "regenerate: python -m bench.perf --render docs/performance.json --page docs/performance.md"
    )
    assert len(page.splitlines()) <= PAGE_LINES
    assert re.search(r"\b\d{1,2}:\d{2}\b", page) is None, "a user page carries no clock time"
    assert str(recorded["meta"].get("git_head", "no head")) not in page


# --- the pieces ------------------------------------------------------------------


def test_the_history_shape_is_as_documented(tmp_path: Path) -> None:
    con = worker.open_queue(tmp_path / "q.sqlite")
    rows.fill_shape(con, "history", 1_000, T0_MS)
    assert rows.status_counts(con, T0_MS) == {
        "done": 400,
        "dead": 50,
        "leased": 0,
        "due": rows.DUE_ROWS,
        "waiting": 50,
    }
    newest_waiting, oldest_due = con.execute(
        "SELECT (SELECT max(seq) FROM jobs WHERE status = 'pending' AND available_at > ?),"
        " (SELECT min(seq) FROM jobs WHERE status = 'pending' AND available_at <= ?)",
        (T0_MS, T0_MS),
    ).fetchone()
    assert newest_waiting < oldest_due
    con.close()


def test_the_pending_shape_is_claimed_in_seq_order(tmp_path: Path) -> None:
    con = worker.open_queue(tmp_path / "q.sqlite")
    rows.fill_shape(con, "pending", 600, T0_MS)
    assert rows.status_counts(con, T0_MS)["due"] == 600
    ticket = worker.claim(con, "t", T0_MS)
    assert ticket is not None and ticket["id"] == "job-00000001"
    con.close()


def test_latency_refuses_a_file_with_too_few_due_jobs(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="too few"):
        latency.measure_latencies(tmp_path, [1_000], cycles=500, off_cycles=0, warmup=20)
    assert list(tmp_path.iterdir()) == []  # refused before building anything


def test_a_missing_peer_is_reported_not_installed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(peers.PEERS, "huey", ("no-such-dist-xyz", "no_such_module_xyz"))
    assert peers.measure_peer("huey", tmp_path, 10, 1.0) == {"installed": False}
    assert peers.peer_version("huey") is None


def test_syncs_are_counted_between_the_markers_only() -> None:
    trace = [
        "101 fdatasync(3) = 0",
        f'101 access("{syncs.START}", F_OK) = -1 ENOENT',
        "101 fdatasync(4) = 0",
        "102 fsync(5) = 0",
        "102 fdatasync(6 <unfinished ...>",
        "102 <... fdatasync resumed>) = 0",
        f'101 access("{syncs.END}", F_OK) = -1 ENOENT',
        "101 fdatasync(3) = 0",
    ]
    assert syncs.count_in_trace(trace) == 3


def test_timing_helpers_count_jobs_and_rank_percentiles() -> None:
    timed = run_counted(lambda i: 2, 5, 60.0)
    assert timed.count == 10
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert percentile([float(v) for v in range(1, 101)], 99) == 99.0
