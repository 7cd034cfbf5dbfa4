"""The performance harness at tiny sizes: its pieces do their work and its JSON has every part.

Nothing here asserts a duration or a rate: the benchmark reports speed, the tests check
that what it measures is real work (each figure counts checked calls), that every
section is present, that a peer is either measured with its real pragmas or marked
not installed, and that the documented shapes of the latency files hold. The whole
file runs in well under 30 seconds.
"""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import worker
from bench import latency, ops, paired, peers, plans, report, rows, slowpaths, syncs
from bench.measure import T0_MS, Timed, percentile, run_counted
from bench.perf import QUICK_ROWS, SECTIONS
from courier.procs import project_root

RUN_TIMEOUT_S = 25.0
PHASES = ("enqueue", "claim", "finish", "cycle")


@pytest.fixture(scope="module")
def quick_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], Path]:
    """One ``python -m bench.perf --quick`` run in a child; its JSON and its folder."""
    folder = tmp_path_factory.mktemp("perf")
    out = folder / "perf.json"
    argv = [sys.executable, "-m", "bench.perf", "--quick", "--dir", str(folder / "work")]
    argv += ["--json", str(out), "--chart", str(folder / "perf.png")]
    done = subprocess.run(
        argv,
        cwd=project_root(),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert "### Goals" in done.stdout
    return json.loads(out.read_text()), folder


def _positive_figure(figure: dict[str, Any]) -> None:
    assert figure["count"] > 0
    assert figure["seconds"] > 0
    assert figure["per_s"] > 0


def test_every_section_is_in_the_json(quick_run: tuple[dict[str, Any], Path]) -> None:
    results, _ = quick_run
    for section in (*SECTIONS, "meta", "goals", "foreign_file"):
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


def test_paired_measures_every_layer_and_phase(quick_run: tuple[dict[str, Any], Path]) -> None:
    section = quick_run[0]["paired"]
    assert list(section) == list(paired.LAYERS)
    for figures in section.values():
        assert list(figures) == list(PHASES)
        for phase, figure in figures.items():
            assert figure["count"] > 0
            assert figure["tx_per_step"] == (2 if phase == "cycle" else 1)
            assert figure["limit_us_per_tx"] > 0 and figure["case_us_per_tx"] > 0
            assert figure["ratio"] > 0


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
    assert [entry["case"] for entry in section] == [c for c, _, _ in slowpaths.CASES for _ in "ab"]
    for entry in section:
        assert entry["p50_ms"] > 0 and entry["off_p50_ms"] > 0


def test_deep_search_times_both_searches_on_the_grid(
    quick_run: tuple[dict[str, Any], Path],
) -> None:
    section = quick_run[0]["deep_search"]
    assert len(section) == len(slowpaths.DEEP_GRID)
    for entry in section:
        assert entry["lowest_due_ms"] > 0 and entry["one_pass_ms"] > 0
        assert entry["ahead"] > worker._CLAIM_HEAD_WINDOW, "the head must be all waiting"


def test_couriers_report_cycles_and_lock_counts(quick_run: tuple[dict[str, Any], Path]) -> None:
    section = quick_run[0]["couriers"]
    assert [entry["processes"] for entry in section["results"]] == [1, 2]
    for entry in section["results"]:
        assert entry["reported"] == entry["processes"]
        assert entry["cycles"] > 0
        assert entry["locked"] >= 0 and entry["stale"] >= 0
        assert entry["errors"] == []


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


def test_plans_and_goals_and_the_run_folder(quick_run: tuple[dict[str, Any], Path]) -> None:
    results, folder = quick_run
    assert {plan["name"] for plan in results["plans"]} == {n for n, _ in plans.statements()}
    assert all(goal["met"] in (True, False, None) for goal in results["goals"])
    assert not list((folder / "work").iterdir()), "the run left files behind"


def test_the_recorded_json_renders_again(quick_run: tuple[dict[str, Any], Path]) -> None:
    text = report.render(quick_run[0])
    for heading in ("The limit", "against the limit", "Every system", "latency", "couriers"):
        assert heading in text


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


def test_every_sql_constant_of_worker_is_planned(tmp_path: Path) -> None:
    names = {name for name, _ in plans.statements()}
    assert {"_SELECT_QTY", "_INSERT_JOB", "_LEASE", "_SETTLE", "_INSERT_AUDIT"} <= names
    for plan in plans.explain_all(tmp_path):
        assert plan["plan"] or plan["sql"].lstrip().upper().startswith("INSERT"), plan["name"]


def test_dummy_parameters_follow_the_placeholder_style() -> None:
    assert plans.dummy_parameters("SELECT 1 WHERE a = :now AND b <= :now") == {"now": 0}
    assert plans.dummy_parameters("UPDATE t SET a = ? WHERE b = ?") == (0, 0)


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


def test_goals_are_judged_from_the_figures_of_the_run() -> None:
    results = {
        "limit": {"bare": {"DELETE+FULL": {"per_s": 1000.0}}},
        "worker": {
            "single": {p: {"per_s": 950.0 if p != "cycle" else 400.0} for p in PHASES},
            "batch": {"size": 64, **{p: {"per_s": 5000.0} for p in PHASES}},
        },
        "peers": {"huey": {"installed": True, "enqueue": {"per_s": 6000.0}, "cycle": {"per_s": 1}}},
        "latency": {
            "results": [
                {"shape": "pending", "rows": 1_000, "p50_ms": 1.0},
                {"shape": "pending", "rows": 1_000_000, "p50_ms": 1.2},
            ]
        },
    }
    goals = {goal["goal"]: goal for goal in report.judge_goals(results)}
    assert goals["single enqueue: >= 0.9 of the limit"]["met"] is True
    assert goals["single claim + finish: >= 0.9 of the limit"]["figure"] == 0.8
    assert goals["single claim + finish: >= 0.9 of the limit"]["met"] is False
    assert goals["latency, pending: p50 at 1M rows <= 1.3x p50 at 1k"]["met"] is True
    assert goals["latency, history: p50 at 1M rows <= 1.3x p50 at 1k"]["met"] is None
    assert goals["batch 64 claim+finish cycle: >= 10.0x the single cycle"]["met"] is True
    assert goals["batch 64 enqueue ahead of every peer's enqueue"]["met"] is False


def test_single_goals_come_from_the_paired_calls_with_the_contract_ceiling() -> None:
    def layer(ratio: float) -> dict[str, Any]:
        return {p: {"ratio": ratio} for p in PHASES}

    results = {
        "limit": {"bare": {"DELETE+FULL": {"per_s": 1000.0}}},
        "worker": {"single": {p: {"per_s": 950.0} for p in PHASES}},
        "paired": {"contract": layer(0.85), "indexed": layer(0.8), "worker": layer(0.7)},
    }
    goals = {g["goal"]: g for g in report.judge_goals(results)}
    goal = goals["single enqueue: >= 0.9 of the limit"]
    assert (goal["figure"], goal["met"], goal["contract_ceiling"]) == (0.7, False, 0.85)


def _rows_after_each_phase(
    steps: ops.Steps, con: sqlite3.Connection, count: int
) -> dict[str, list[tuple[Any, ...]]]:
    snapshots: dict[str, list[tuple[Any, ...]]] = {}

    def timer(phase: str, step: Callable[[int], int], n: int) -> Timed:
        figure = run_counted(step, n, 60.0)
        snapshots[phase] = list(con.execute("SELECT * FROM jobs ORDER BY seq"))
        return figure

    ops.run_phases(steps, count, timer)
    return snapshots


def test_the_write_statements_write_what_the_calls_write(tmp_path: Path) -> None:
    """The ``contract`` and ``indexed`` layers time the very rows the calls produce."""
    count = 7
    calls = worker.open_queue(tmp_path / "calls.sqlite")
    written = worker.open_queue(tmp_path / "written.sqlite")
    try:
        expected = _rows_after_each_phase(ops.SingleCalls(calls), calls, count)
        got = _rows_after_each_phase(paired.WriteStatements(written), written, count)
    finally:
        calls.close()
        written.close()
    assert list(expected) == list(PHASES)
    statuses = {phase: {row[3] for row in rows} for phase, rows in expected.items()}
    assert statuses == {
        "enqueue": {"pending"},
        "claim": {"leased"},
        "finish": {"done"},
        "cycle": {"done"},
    }
    assert len(expected["cycle"]) == 2 * count
    assert got == expected


def test_paired_steps_run_the_limit_before_each_step_and_stop_in_time() -> None:
    calls: list[str] = []

    def step(i: int) -> int:
        calls.append(f"step {i}")
        return 1

    figure = paired.paired_steps(lambda: calls.append("limit"), step, 2, 3, 60.0)
    assert calls == [entry for i in range(3) for entry in ("limit", "limit", f"step {i}")]
    assert (figure.count, figure.tx) == (3, 2)
    assert paired.paired_steps(lambda: None, step, 1, 50, 0.0).count == 1


def test_timing_helpers_count_jobs_and_rank_percentiles() -> None:
    timed = run_counted(lambda i: 2, 5, 60.0)
    assert timed.count == 10
    assert percentile([5.0, 1.0, 3.0, 2.0, 4.0], 50) == 3.0
    assert percentile([float(v) for v in range(1, 101)], 99) == 99.0
