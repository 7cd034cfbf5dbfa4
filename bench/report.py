"""The benchmark's results as markdown tables, and the issue's goals judged on one run.

Everything here works on the JSON ``bench.perf`` writes (``render(results)``), so the
tables of a recorded run can be printed again with ``python -m bench.perf --render
docs/performance.json``. Ratios are computed from figures of the same run only.
"""

from __future__ import annotations

from typing import Any

from bench.peers import VERBS

__all__ = ["judge_goals", "limit_per_s", "render", "tx_per_job"]

# Write transactions per job of each phase, for single calls; batch calls divide by size.
_TX_PER_CALL = {"enqueue": 1, "claim": 1, "finish": 1, "cycle": 2}
_PHASE_NAMES = {
    "single": {
        "enqueue": "enqueue",
        "claim": "claim",
        "finish": "finish",
        "cycle": "claim + finish",
    },
    "batch": {
        "enqueue": "enqueue_many",
        "claim": "claim_many",
        "finish": "finish_many",
        "cycle": "claim_many + finish_many",
    },
}
SINGLE_GOAL = 0.9
BATCH_GOAL = 10.0
FLAT_GOAL = 1.3
CONTRACT_MODE = "DELETE+FULL"


def _fmt(value: float | None, digits: int = 0) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


def _yes(met: bool | None) -> str:
    return "n/a" if met is None else ("**met**" if met else "**not met**")


def limit_per_s(results: dict[str, Any], mode: str = CONTRACT_MODE) -> float | None:
    """Bare one-row write transactions per second in ``mode`` (the limit), if measured."""
    bare = results.get("limit", {}).get("bare", {}).get(mode)
    return float(bare["per_s"]) if bare else None


def tx_per_job(kind: str, phase: str, size: int) -> float:
    """Write transactions per job: 1 (2 for a cycle) per call, shared by a batch's jobs."""
    return _TX_PER_CALL[phase] / (size if kind == "batch" else 1)


def _paired_ratio(results: dict[str, Any], layer: str, phase: str) -> float | None:
    """A phase's share of the limit measured transaction by transaction (``bench.paired``)."""
    figure = results.get("paired", {}).get(layer, {}).get(phase)
    return float(figure["ratio"]) if figure else None


def _ratio(results: dict[str, Any], kind: str, phase: str) -> float | None:
    """The transactions per second a phase achieved, as a share of the limit.

    Single calls: the ``worker`` layer of ``bench.paired`` when the run has it (each
    call timed right after a limit transaction). Otherwise, and for batches: with
    several rounds, each round's figure is divided by the limit measured in the same
    round (seconds before it), and the median of those ratios is the result. With
    one round, the two figures.
    """
    if kind == "single":
        paired = _paired_ratio(results, "worker", phase)
        if paired is not None:
            return paired
    bare = results.get("limit", {}).get("bare", {}).get(CONTRACT_MODE)
    section = results.get("worker", {}).get(kind, {})
    if bare is None or phase not in section:
        return None
    tx = tx_per_job(kind, phase, int(section.get("size", 1)))
    ours = section[phase].get("rounds_per_s") or [section[phase]["per_s"]]
    limits = bare.get("rounds_per_s") or [bare["per_s"]]
    if len(ours) != len(limits):
        ours, limits = [section[phase]["per_s"]], [bare["per_s"]]
    ratios = sorted(float(o) * tx / float(b) for o, b in zip(ours, limits, strict=True))
    return ratios[(len(ratios) - 1) // 2]


def _peers_measured(results: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {n: p for n, p in results.get("peers", {}).items() if p.get("installed")}


def _latency_p50(results: dict[str, Any], shape: str, rows: int) -> float | None:
    for entry in results.get("latency", {}).get("results", []):
        if entry["shape"] == shape and entry["rows"] == rows:
            return float(entry["p50_ms"])
    return None


def judge_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    """Each goal of the issue: what it asks, the figure of this run, and whether it is met."""
    goals: list[dict[str, Any]] = []
    for phase in ("enqueue", "claim", "finish", "cycle"):
        ratio = _ratio(results, "single", phase)
        ceiling = _paired_ratio(results, "contract", phase)
        goals.append(
            {
                "goal": f"single {_PHASE_NAMES['single'][phase]}: >= {SINGLE_GOAL} of the limit",
                "figure": None if ratio is None else round(ratio, 3),
                "met": None if ratio is None else ratio >= SINGLE_GOAL,
                # What the call's write alone reaches on the contract's two tables:
                # no implementation of the contract can do better on this disk.
                "contract_ceiling": None if ceiling is None else round(ceiling, 3),
            }
        )
    for shape in ("pending", "history"):
        small = _latency_p50(results, shape, 1_000)
        large = _latency_p50(results, shape, 1_000_000)
        ratio = None if small is None or large is None else large / small
        goals.append(
            {
                "goal": f"latency, {shape}: p50 at 1M rows <= {FLAT_GOAL}x p50 at 1k",
                "figure": None if ratio is None else round(ratio, 3),
                "met": None if ratio is None else ratio <= FLAT_GOAL,
            }
        )
    goals += _batch_goals(results)
    foreign = results.get("foreign_file", {})
    if foreign:
        goals.append(
            {
                "goal": "a file with only the two tables works and gets the indexes on open",
                "figure": ", ".join(foreign.get("indexes_after", [])) or "no index",
                "met": bool(foreign.get("works")) and bool(foreign.get("gets_indexes")),
            }
        )
    return goals


def _batch_goals(results: dict[str, Any]) -> list[dict[str, Any]]:
    batch = results.get("worker", {}).get("batch", {})
    single = results.get("worker", {}).get("single", {})
    if "cycle" not in batch or "cycle" not in single:
        return [{"goal": "batches of 64", "figure": "not measured", "met": None}]
    size = int(batch.get("size", 64))
    cycle = float(batch["cycle"]["per_s"])
    times = cycle / float(single["cycle"]["per_s"])
    goals: list[dict[str, Any]] = [
        {
            "goal": f"batch {size} claim+finish cycle: >= {BATCH_GOAL}x the single cycle",
            "figure": round(times, 2),
            "met": times >= BATCH_GOAL,
        }
    ]
    for phase, what in (("cycle", "take+ack cycle"), ("enqueue", "enqueue")):
        peers = _peers_measured(results)
        best = max(peers.items(), key=lambda kv: float(kv[1][phase]["per_s"]), default=None)
        if best is None:
            goals.append({"goal": f"batch {what} ahead of every peer", "figure": "no peer"})
            goals[-1]["met"] = None
            continue
        ours = float(batch[phase]["per_s"])
        theirs = float(best[1][phase]["per_s"])
        goals.append(
            {
                "goal": f"batch {size} {what} ahead of every peer's {what}",
                "figure": f"{ours:,.0f} vs {theirs:,.0f} ({best[0]}): {ours / theirs:.1f}x",
                "met": ours > theirs,
            }
        )
    return goals


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _limit_table(results: dict[str, Any]) -> list[str]:
    limit = results.get("limit", {})
    rows = []
    for mode, bare in limit.get("bare", {}).items():
        note = (
            "**the limit** (the contract's settings)"
            if mode == CONTRACT_MODE
            else "not durable: the cost without syncs"
            if mode.endswith("+OFF")
            else "context: what WAL would give"
        )
        rows.append(
            [
                f"bare `BEGIN IMMEDIATE; UPDATE 1 row; COMMIT`, {mode}",
                _fmt(bare["per_s"]),
                f"{bare['journal_mode']}+{bare['synchronous']} (read back)",
                note,
                _spread(bare),
            ]
        )
    if "fsync" in limit:
        fsync = limit["fsync"]
        rows.append(["write 4 KiB + fsync, no SQLite", _fmt(fsync["per_s"]), "-", "disk"])
        rows[-1].append(_spread(fsync))
    return _table(["what", "per second", "mode", "note", "rounds"], rows)


def _worker_table(results: dict[str, Any]) -> list[str]:
    worker = results.get("worker", {})
    single = worker.get("single", {})
    rows = []
    for kind in ("single", "batch"):
        section = worker.get(kind, {})
        size = int(section.get("size", 1))
        for phase, name in _PHASE_NAMES[kind].items():
            if phase not in section:
                continue
            figure = section[phase]
            ratio = _ratio(results, kind, phase)
            times = (
                float(figure["per_s"]) / float(single[phase]["per_s"])
                if kind == "batch" and phase in single
                else None
            )
            rows.append(
                [
                    f"`{name}`" + (f" ({size})" if kind == "batch" else ""),
                    f"{figure['count']:,}",
                    _fmt(figure["per_s"]),
                    _fmt(tx_per_job(kind, phase, size), 3 if kind == "batch" else 0),
                    _fmt(ratio, 2),
                    "-" if times is None else f"{times:.1f}x",
                    _spread(figure),
                ]
            )
    header = ["call", "jobs", "jobs/s", "tx per job", "tx/s ÷ limit", "vs single"]
    header.append("rounds (jobs/s)")
    return _table(header, rows)


_LAYER_HEADINGS = {
    "contract": "the write alone, contract's two tables",
    "indexed": "the write alone, + worker.py's indexes",
    "worker": "the worker.py call",
}


def _paired_table(results: dict[str, Any]) -> list[str]:
    """Each single call beside the limit, per layer: the share, and µs against µs."""
    section = results.get("paired", {})
    layers = [layer for layer in _LAYER_HEADINGS if layer in section]
    rows = []
    for phase, name in _PHASE_NAMES["single"].items():
        cells = []
        for layer in layers:
            figure = section[layer].get(phase)
            cells.append(
                "-"
                if figure is None
                else f"**{figure['ratio']:.2f}** ({figure['case_us_per_tx']:.0f} µs vs "
                f"{figure['limit_us_per_tx']:.0f})"
            )
        steps = section[layers[0]][phase]["count"] if layers else 0
        rows.append([f"`{name}`", f"{steps:,}", *cells])
    header = ["call", "steps", *(_LAYER_HEADINGS[layer] for layer in layers)]
    return _table(header, rows)


def _spread(figure: dict[str, Any]) -> str:
    """The lowest and highest round of a figure, or ``-`` for a single round."""
    rounds = figure.get("rounds_per_s", [])
    if len(rounds) < 2:
        return "-"
    return f"{min(rounds):,.0f} - {max(rounds):,.0f}"


def _cost_table(results: dict[str, Any]) -> list[str]:
    """Microseconds per call with and without the syncs: where the time goes."""
    bare = results.get("limit", {}).get("bare", {})
    worker = results.get("worker", {})
    durable, unsynced = worker.get("single", {}), worker.get("single_without_sync", {})
    pairs: list[tuple[str, Any, Any]] = []
    if CONTRACT_MODE in bare and "DELETE+OFF" in bare:
        pairs.append(("bare one-row transaction", bare[CONTRACT_MODE], bare["DELETE+OFF"]))
    for phase, name in _PHASE_NAMES["single"].items():
        if phase in durable and phase in unsynced:
            pairs.append((f"`{name}`", durable[phase], unsynced[phase]))
    rows = []
    for name, full, off in pairs:
        full_us, off_us = 1e6 / float(full["per_s"]), 1e6 / float(off["per_s"])
        rows.append([name, _fmt(full_us), _fmt(off_us), _fmt(full_us - off_us)])
    header = ["call", "µs per call, FULL", "µs, synchronous=OFF (not durable)"]
    return _table([*header, "µs for durability (FULL - OFF)"], rows)


def _systems_table(results: dict[str, Any]) -> list[str]:
    syncs = {
        (row["system"], row["op"]): row.get("per_call")
        for row in results.get("syncs", {}).get("rows", [])
    }
    rows = []
    worker = results.get("worker", {})
    for kind, label in (("single", "single calls"), ("batch", "batches")):
        section = worker.get(kind)
        if not section or "cycle" not in section:
            continue
        size = int(section.get("size", 1))
        mode = label if kind == "single" else f"{label} of {size}"
        ops = ("claim", "finish") if kind == "single" else ("claim_many", "finish_many")
        per_cycle = _sync_sum(syncs, "worker", ops, size if kind == "batch" else 1)
        rows.append(_system_row("lease-queue", mode, "DELETE", "FULL", per_cycle, section, True))
    for name, peer in results.get("peers", {}).items():
        if not peer.get("installed"):
            rows.append([name, "not installed", *["-"] * 7])
            continue
        per_cycle = _sync_sum(syncs, name, ("claim", "finish"), 1)
        mode = f"default ({peer['version']})"
        journal, sync = peer["journal_mode"], peer["synchronous"]
        rows.append(_system_row(name, mode, journal, sync, per_cycle, peer, False))
    header = ["system", "mode", "journal", "synchronous", "syncs per take+ack"]
    header += ["enqueue jobs/s", "take+ack jobs/s", "take jobs/s", "fenced lease"]
    return _table(header, rows)


def _sync_sum(
    syncs: dict[tuple[str, str], Any], system: str, ops: tuple[str, ...], size: int
) -> float | None:
    total = 0.0
    for op in ops:
        value = syncs.get((system, op))
        if value is None:
            return None
        total += float(value)
    return total / size


def _system_row(
    name: str,
    mode: str,
    journal: str,
    sync: str,
    per_cycle: float | None,
    figures: dict[str, Any],
    fenced: bool,
) -> list[str]:
    return [
        name,
        mode,
        journal,
        sync,
        _fmt(per_cycle, 2),
        _fmt(figures["enqueue"]["per_s"]),
        _fmt(figures["cycle"]["per_s"]),
        _fmt(figures["claim"]["per_s"]),
        "yes" if fenced else "no",
    ]


def _latency_table(results: dict[str, Any]) -> list[str]:
    latency = results.get("latency", {})
    by_rows: dict[int, dict[str, dict[str, Any]]] = {}
    for entry in latency.get("results", []):
        by_rows.setdefault(int(entry["rows"]), {})[entry["shape"]] = entry
    rows = []
    for count in sorted(by_rows):
        row = [f"{count:,}"]
        for shape in ("pending", "history"):
            entry = by_rows[count].get(shape)
            row += (
                [
                    _fmt(entry["p50_ms"], 2),
                    _fmt(entry["p99_ms"], 2),
                    _fmt(entry.get("off_p50_ms"), 3),
                    _fmt(entry["open_s"], 4),
                ]
                if entry
                else ["-"] * 4
            )
        rows.append(row)
    header = ["rows"]
    for shape in ("pending", "history"):
        header += [f"{shape} p50 ms", "p99 ms", "p50 ms, sync OFF", "reopen s"]
    return _table(header, rows)


def _couriers_table(results: dict[str, Any]) -> list[str]:
    rows = [
        [
            str(entry["processes"]),
            _fmt(entry["cycles_per_s"]),
            f"{entry['cycles']:,}",
            f"{entry['per_process_min']:,} - {entry['per_process_max']:,}",
            str(entry["locked"]),
            str(entry["stale"]),
            f"{entry['seconds']:.1f}",
        ]
        for entry in results.get("couriers", {}).get("results", [])
    ]
    header = ["processes", "cycles/s (total)", "cycles", "per process (min - max)"]
    return _table([*header, "`database is locked`", "stale finishes", "seconds"], rows)


def _slowpaths_table(results: dict[str, Any]) -> list[str]:
    rows = [
        [
            f"`{entry['case']}`",
            entry["grows_with"],
            f"{entry['size']:,}",
            _fmt(entry["p50_ms"], 2),
            _fmt(entry["off_p50_ms"], 3),
            _fmt(entry.get("batch_p50_ms"), 2),
        ]
        for entry in results.get("slowpaths", [])
    ]
    header = ["case", "what grows", "how many", "claim+finish p50 ms", "p50 ms, sync OFF"]
    header.append("batch of 64 (claim_many + finish_many), ms")
    return _table(header, rows)


def _deep_search_table(results: dict[str, Any]) -> list[str]:
    rows = [
        [
            f"{entry['ahead']:,}",
            f"{entry['due']:,}",
            _fmt(entry["lowest_due_ms"], 2),
            _fmt(entry["one_pass_ms"], 2),
        ]
        for entry in results.get("deep_search", [])
    ]
    header = ["jobs enqueued ahead", "due jobs behind", "`_lowest_due` ms", "one pass by time ms"]
    return _table(header, rows)


def _verb(system: str, op: str) -> str:
    """A call as its system names it: ``claim`` of huey is its ``dequeue``."""
    verbs = VERBS.get(system)
    if verbs is None:
        return f"`{op}`"
    verb = verbs[("enqueue", "claim", "finish").index(op)]
    return verb if verb.startswith("(") else f"`{verb}`"


def _syncs_table(results: dict[str, Any]) -> list[str]:
    syncs = results.get("syncs", {})
    if "skipped" in syncs:
        return [f"skipped: {syncs['skipped']}"]
    rows = [
        [
            row["system"],
            _verb(row["system"], row["op"]),
            _fmt(row.get("per_call"), 2) if row.get("per_call") is not None else row.get("note"),
            _fmt(row.get("per_job"), 3) if "per_job" in row else "-",
        ]
        for row in syncs.get("rows", [])
    ]
    return _table(["system", "call", "syncs per call", "syncs per job"], rows)


def _foreign_lines(results: dict[str, Any]) -> list[str]:
    foreign = results.get("foreign_file")
    if not foreign:
        return []
    return [
        f"A file with only the contract's two tables, {foreign['rows']:,} rows "
        f"(history shape): indexes before open: {foreign['indexes_before'] or 'none'}; "
        f"`open_queue` took {foreign['open_s']} s and left {foreign['indexes_after']}; "
        f"claim+finish p50 {foreign['p50_ms']} ms, p99 {foreign['p99_ms']} ms.",
    ]


def _goal_figure(goal: dict[str, Any]) -> str:
    """A goal's figure, with the contract's ceiling beside it where one was measured."""
    text = "-" if goal["figure"] is None else str(goal["figure"])
    ceiling = goal.get("contract_ceiling")
    return text if ceiling is None else f"{text} (the contract's tables alone: {ceiling})"


def _load_range(meta: dict[str, Any]) -> str:
    during = meta.get("loadavg_1min_during")
    if not during:
        return "?"
    return f"{during['min']:.2f} to {during['max']:.2f}"


def render(results: dict[str, Any]) -> str:
    """Every table of one run, as markdown."""
    meta = results.get("meta", {})
    out = [
        f"Run of {meta.get('started', '?')} on {meta.get('disk', '?')}, "
        f"SQLite {meta.get('sqlite', '?')}, Python {meta.get('python', '?')}, "
        f"load average at start {meta.get('loadavg_start', '?')}, "
        f"at end {meta.get('loadavg_end', '?')} (1-minute load at each progress line: "
        f"{_load_range(meta)}); {meta.get('duration_s', '?')} s. "
        f"worker.py sha256 {meta.get('worker_sha256', '?')} (git {meta.get('git_head', '?')}, "
        f"changed since: {meta.get('worker_changed_since_head', '?')}).",
        "",
        f"Command: `{meta.get('command', '?')}`",
        "",
        "### The limit (same disk, same run)",
        "",
        *_limit_table(results),
        "",
        "### worker.py against the limit",
        "",
        *_worker_table(results),
        "",
        "tx/s ÷ limit: for single calls, from the `worker` layer of the next table when the"
        " run has it; for batches, each round's figure over the limit of the same round,"
        " median of the rounds.",
        "",
        "### Each single call beside the limit, transaction by transaction (bench.paired)",
        "",
        "Share of the limit (limit µs ÷ call µs, per write transaction), then the two"
        " times per transaction, each call timed right after a limit transaction:",
        "",
        *_paired_table(results),
        "",
        "### Where the time of a call goes",
        "",
        *_cost_table(results),
        "",
        "### Every system, same work, same disk",
        "",
        *_systems_table(results),
        "",
        "### Claim+finish latency against rows in the file",
        "",
        *_latency_table(results),
        "",
        *_foreign_lines(results),
        "",
        "### Where claim could grow (bench.slowpaths)",
        "",
        *_slowpaths_table(results),
        "",
        "The deeper search alone (best of 5, read-only, no claim), beside the one pass"
        " by time it replaced:",
        "",
        *_deep_search_table(results),
        "",
        "### N couriers (processes) on one file, claim+finish",
        "",
        *_couriers_table(results),
        "",
        "### Syncs per call (strace)",
        "",
        *_syncs_table(results),
        "",
        "### Goals",
        "",
        *_table(
            ["goal", "this run", "verdict"],
            [[g["goal"], _goal_figure(g), _yes(g["met"])] for g in judge_goals(results)],
        ),
        "",
    ]
    return "\n".join(out)
