"""docs/performance.md: the user page, rendered from one recorded run of ``bench.perf``.

``render(results)`` turns the JSON ``bench.perf`` writes into the page: its tables and
every number in its prose come from that JSON, and the words around them from this
module, so the page cannot drift from its record. ``python -m bench.perf --render
docs/performance.json --page docs/performance.md`` renders it again without a run,
and a test checks that the committed page is exactly the render of the committed JSON.
Ratios compare figures of the same run only.
"""

from __future__ import annotations

import textwrap
from typing import Any

from bench import delivery
from bench.peers import VERBS

__all__ = ["CONTRACT_MODE", "limit_per_s", "render", "tx_per_job"]

CONTRACT_MODE = "DELETE+FULL"
NOTEBOOK = "dev/2026-12-01-performance-notebook.md"
NOTE = "dev/2026-12-01-single-calls-and-couriers.md"
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
_MODES = {
    "DELETE+FULL": "yes: the contract's settings",
    "WAL+FULL": "yes, but a `-wal` and a `-shm` file must stay with the queue file",
    "WAL+NORMAL": "no: a commit can be lost in a power cut",
    "DELETE+OFF": "no: a power cut can corrupt the file",
}
# What to do about each slow state (bench.slowpaths); a case whose cost does not grow
# with its size needs nothing.
_ADVICE = {
    "ahead-and-due": "jobs enqueued ahead (a producer's clock runs fast) with due jobs behind "
    "them: each claim reads past them. Keep producers and couriers on the contract's one time "
    "base; with such a backlog, `claim_many` reads past them once per batch.",
    "expired-leases": "a courier died holding many leases: the claims take them first, "
    "oldest first. Let a courier lease no more jobs than it can finish within one lease, and "
    "drain such a backlog in small batches: a large one holds the write lock past the "
    "others' busy timeout.",
}
_FLAT = (
    "flat, nothing to do: each queue of claimable rows (fresh, retried, leased) is read in seq "
    "order through a partial index of its own, the retries and the leases only when one is "
    "due, and the quarantine runs only when it has a job to move."
)
# The paragraph before each section's table.
_INTROS = {
    "The settings and what they cost": "A bare one-row write transaction in each mode, on the "
    "same disk; the first row is **the limit** of any call that is one write transaction "
    "under the contract:",
    "The peers": "The same work through persist-queue, litequeue and huey in their default "
    "modes (read back from their own connections), on the same disk:",
    "Latency against rows": "One claim and its finish, timed together, in files of `pending` "
    "rows (all due) and of `history` rows (mostly done and dead, a tenth waiting retries, "
    "due jobs last):",
    "Couriers end to end": "One courier's round, a layer at a time ({layer_seconds} s each, the "
    "median of 3 rounds):",
    "Slow states, and what to do about them": "States a real queue reaches in which claim's "
    "cost could grow, each at a small and a large size, and a batch (`claim_many` + "
    "`finish_many`) in the same state:",
}
_GROWS = 2.0  # a case grows if its large size costs this many times its small size
WIDTH = 98  # the page's prose is wrapped at this width


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _spread(figure: dict[str, Any]) -> str:
    """The lowest and highest round of a figure, or ``-`` for a single round."""
    rounds = figure.get("rounds_per_s", [])
    return "-" if len(rounds) < 2 else f"{min(rounds):,.0f} - {max(rounds):,.0f}"


def limit_per_s(results: dict[str, Any], mode: str = CONTRACT_MODE) -> float | None:
    """Bare one-row write transactions per second in ``mode`` (the limit), if measured."""
    bare = results.get("limit", {}).get("bare", {}).get(mode)
    return float(bare["per_s"]) if bare else None


def tx_per_job(kind: str, phase: str, size: int) -> float:
    """Write transactions per job: 1 (2 for a cycle) per call, shared by a batch's jobs."""
    return _TX_PER_CALL[phase] / (size if kind == "batch" else 1)


def _ratio(results: dict[str, Any], kind: str, phase: str) -> float | None:
    """A phase's write transactions per second as a share of the limit's.

    With several rounds, each round's figure is divided by the limit measured in the
    same round (seconds before it), and the median of those ratios is the result.
    """
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


def _syncs(results: dict[str, Any]) -> dict[tuple[str, str], float | None]:
    rows = results.get("syncs", {}).get("rows", [])
    return {(row["system"], row["op"]): row.get("per_call") for row in rows}


def _para(*parts: str) -> list[str]:
    """One paragraph (or list item) of prose: its parts joined, wrapped at ``WIDTH``."""
    text = " ".join(parts)
    indent = "  " if text.startswith("- ") else ""
    return textwrap.wrap(
        text, WIDTH, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )


def _section(title: str, table: list[str], **values: object) -> list[str]:
    """A ``##`` section: its title, its ``_INTROS`` paragraph (with ``values``), the table."""
    return [f"## {title}", "", *_para(_INTROS[title].format(**values)), "", *table]


def _per_s(results: dict[str, Any], *path: str) -> float:
    value: Any = results
    for key in path:
        value = value[key]
    return float(value["per_s"])


# --- the sections ------------------------------------------------------------------


def _intro(results: dict[str, Any]) -> list[str]:
    meta = results.get("meta", {})
    return [
        "# Performance",
        "",
        *_para(
            "lease-queue keeps the contract's durability settings (`journal_mode=DELETE`,",
            "`synchronous=FULL`): every write transaction waits for the disk. This page shows",
            "what that costs and what batches buy. Every figure is from one run of `make",
            "bench`, recorded in [`performance.json`](performance.json):",
            f"on {str(meta.get('started', '?'))[:10]}, {meta.get('machine', '?')}, disk",
            f"{meta.get('disk', '?')}, SQLite {meta.get('sqlite', '?')}, Python",
            f"{meta.get('python', '?')}; absolute figures depend on the disk, ratios carry over.",
        ),
    ]


def _settings(results: dict[str, Any]) -> list[str]:
    bare = results.get("limit", {}).get("bare", {})
    syncs = _syncs(results)
    rows = [
        [
            f"`{mode}`",
            _fmt(figure["per_s"]),
            _fmt(syncs.get((f"bare {mode}", "transaction")), 2),
            _MODES.get(mode, ""),
        ]
        for mode, figure in bare.items()
    ]
    fsync = results.get("limit", {}).get("fsync")
    if fsync:
        rows.append(["no SQLite: write 4 KiB, fsync", _fmt(fsync["per_s"]), "one fsync", "-"])
    header = ["journal+synchronous", "transactions/s", "syncs per commit", "durable"]
    lines = _section("The settings and what they cost", _table(header, rows))
    lines.append("")
    limit, wal = limit_per_s(results), limit_per_s(results, "WAL+FULL")
    off = limit_per_s(results, "DELETE+OFF")
    if limit and wal and off:
        full_us, off_us = 1e6 / limit, 1e6 / off
        commit_syncs = _fmt(syncs.get((f"bare {CONTRACT_MODE}", "transaction")))
        lines += _para(
            f"A commit syncs {commit_syncs} times (the journal, its directory, the journal again,",
            f"the database): a bare transaction spends {_fmt(full_us - off_us)} of its",
            f"{_fmt(full_us)} µs on durability. WAL with FULL syncs once ({wal / limit:.1f}x the",
            "limit); the contract keeps DELETE so that a queue is one self-contained file.",
        )
    return [
        *lines,
        "",
        *_para(
            "Each single call beside **its ceiling**, the same row writes with the same indexes",
            "alone in their transaction, timed step by step beside it (share: the ceiling's time",
            f"over the call's; a ceiling beside itself got {_beside_itself(results)}); with",
            "synchronous=OFF (not a mode of the queue) the code's own cost shows:",
        ),
        "",
        *_cost_table(results),
    ]


_CEILING_CALLS = {**_PHASE_NAMES["single"], "redrive": "redrive"}


def _beside_itself(results: dict[str, Any]) -> str:
    """The share a ceiling got beside itself, synced, or ``-`` if not measured."""
    figure = results.get("ceiling", {}).get("synced", {}).get("ceiling_beside_itself")
    return "-" if figure is None else f"{figure['share']:.2f}"


def _cost_table(results: dict[str, Any]) -> list[str]:
    """Each single call beside its ceiling, with the contract's sync and without."""
    section = results.get("ceiling", {})
    synced, unsynced = section.get("synced", {}), section.get("without_sync", {})
    rows = []
    for call, name in _CEILING_CALLS.items():
        if call in synced and call in unsynced:
            full, off = synced[call], unsynced[call]
            tx = int(full["tx_per_step"])
            rows.append(
                [
                    f"`{name}`",
                    _fmt(full["call_us_per_tx"] * tx),
                    _fmt(full["ceiling_us_per_tx"] * tx),
                    f"**{full['share']:.2f}**",
                    _fmt(off["call_us_per_tx"] * tx),
                    _fmt(off["ceiling_us_per_tx"] * tx),
                ]
            )
    header = ["call", "µs per call", "its ceiling, µs", "share of the ceiling"]
    header += ["µs with synchronous=OFF (not durable)", "its ceiling, µs"]
    return _table(header, rows)


def _throughput(results: dict[str, Any]) -> list[str]:
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
            times = (
                f"{float(figure['per_s']) / float(single[phase]['per_s']):.1f}x"
                if kind == "batch" and phase in single
                else "-"
            )
            rows.append(
                [
                    f"`{name}`" + (f" ({size})" if kind == "batch" else ""),
                    _fmt(figure["per_s"]),
                    _fmt(tx_per_job(kind, phase, size), 3 if kind == "batch" else 0),
                    _fmt(_ratio(results, kind, phase), 2),
                    times,
                    _spread(figure),
                ]
            )
    header = ["call", "jobs/s", "commits per job", "share of the limit", "vs single"]
    lines = [
        "## Throughput",
        "",
        *_table([*header, "rounds (jobs/s)"], rows),
        "",
        "![jobs per second of every system and mode; claim+finish latency against rows]"
        "(performance.png)",
    ]
    batch = worker.get("batch", {})
    if "cycle" in single and "cycle" in batch:
        gain = float(batch["cycle"]["per_s"]) / float(single["cycle"]["per_s"])
        lines += [
            "",
            *_para(
                f"One job at a time every call is a commit: {_fmt(single['cycle']['per_s'])}",
                f"claim+finish cycles a second. A batch of {batch['size']} is one commit for all",
                f"its jobs: {_fmt(batch['cycle']['per_s'])} jobs a second, {gain:.1f}x the single",
                "cycle.",
            ),
        ]
    return lines


def _peers(results: dict[str, Any]) -> list[str]:
    syncs = _syncs(results)
    rows = []
    worker = results.get("worker", {})
    for kind, mode in (("single", "single calls"), ("batch", "batches")):
        section = worker.get(kind)
        if not section or "cycle" not in section:
            continue
        size = int(section.get("size", 1))
        ops = ("claim", "finish") if kind == "single" else ("claim_many", "finish_many")
        total = [syncs.get(("worker", op)) for op in ops]
        per_cycle = None if None in total else sum(t or 0.0 for t in total) / size
        label = mode if kind == "single" else f"{mode} of {size}"
        rows.append(_system_row("lease-queue", label, CONTRACT_MODE, per_cycle, section, "yes"))
    measured = {n: p for n, p in results.get("peers", {}).items() if p.get("installed")}
    for name, peer in measured.items():
        total = [syncs.get((name, op)) for op in ("claim", "finish")]
        per_cycle = None if None in total else sum(t or 0.0 for t in total)
        mode = f"{peer['journal_mode']}+{peer['synchronous']}"
        verbs = " / ".join(f"`{v}`" for v in VERBS[name] if not v.startswith("("))
        rows.append(_system_row(name, f"{peer['version']}: {verbs}", mode, per_cycle, peer, "no"))
    header = ["system", "calls", "mode", "syncs per take+ack", "enqueue jobs/s"]
    lines = _section("The peers", _table([*header, "take+ack jobs/s", "fenced lease"], rows))
    if measured and "cycle" in worker.get("batch", {}):
        best = max(measured, key=lambda n: _per_s(results, "peers", n, "cycle"))
        slowest = min(_per_s(results, "peers", n, "cycle") for n in measured)
        commit_syncs = _fmt(syncs.get(("worker", "claim")))
        lines += [
            "",
            *_para(
                "None of the peers has a lease with an expiry and a fencing token. One job at a",
                "time lease-queue is the slowest",
                f"({_fmt(_per_s(results, 'worker', 'single', 'cycle'))} take+ack jobs/s",
                f"against {_fmt(slowest)} to {_fmt(_per_s(results, 'peers', best, 'cycle'))}),",
                f"paying {commit_syncs} syncs per commit where the WAL peers pay one or none;",
                "in batches it is ahead of all of them",
                f"({_fmt(_per_s(results, 'worker', 'batch', 'cycle'))} against",
                f"{_fmt(_per_s(results, 'peers', best, 'cycle'))} for {best}).",
            ),
        ]
    return lines


def _system_row(
    name: str, calls: str, mode: str, syncs: float | None, figures: dict[str, Any], fenced: str
) -> list[str]:
    enqueue, cycle = figures["enqueue"]["per_s"], figures["cycle"]["per_s"]
    return [name, calls, f"`{mode}`", _fmt(syncs, 2), _fmt(enqueue), _fmt(cycle), fenced]


def _latency(results: dict[str, Any]) -> list[str]:
    by_rows: dict[int, dict[str, dict[str, Any]]] = {}
    for entry in results.get("latency", {}).get("results", []):
        by_rows.setdefault(int(entry["rows"]), {})[entry["shape"]] = entry
    rows = []
    for count in sorted(by_rows):
        row = [f"{count:,}"]
        for shape in ("pending", "history"):
            entry = by_rows[count].get(shape)
            row += [_fmt(entry["p50_ms"], 2), _fmt(entry["p99_ms"], 2)] if entry else ["-"] * 2
        rows.append(row)
    header = ["rows", "pending: p50 ms", "p99 ms", "history: p50 ms", "p99 ms"]
    lines = _section("Latency against rows", _table(header, rows))
    prose: list[str] = []
    if len(by_rows) > 1:
        small, large = min(by_rows), max(by_rows)
        growth = [
            f"{by_rows[large][shape]['p50_ms'] / by_rows[small][shape]['p50_ms']:.2f}x ({shape})"
            for shape in ("pending", "history")
            if shape in by_rows[large] and shape in by_rows[small]
        ]
        prose += [
            f"p50 at {large:,} rows is {' and '.join(growth)} p50 at {small:,}: the partial",
            "indexes cover live rows only, so done and dead history costs a claim nothing.",
        ]
    foreign = results.get("foreign_file")
    if foreign:
        prose += [
            f"A file made elsewhere with only the contract's two tables ({foreign['rows']:,}",
            f"rows) gets the {len(foreign['indexes_after'])} indexes on its first",
            f"`open_queue`: {foreign['open_s']} s, holding the write lock that long once;",
            f"then p50 {foreign['p50_ms']:.2f} ms.",
        ]
    return [*lines, "", *_para(*prose)] if prose else lines


_LAYER_NAMES = {
    "run_once": "`run_once` on one connection, a send that returns at once",
    "run_file": "`run_file` instead: the file opened for each round (the runner keeps it open)",
    "HTTP": "`run_once` + HTTP: a server that answers 200 at once",
    "receiver": "+ the receiver: its inbox commit before the answer",
    "runner": "`courier run`'s loop (`run_courier`) around it",
}


_LAYER_COSTS = {
    "run_file": "reopening the file",
    "HTTP": "the HTTP request",
    "receiver": "the receiver's commit",
    "runner": "the runner's loop",
}


def _couriers(results: dict[str, Any]) -> list[str]:
    section = results.get("couriers", {})
    layers, entries = section.get("layers", {}), section.get("results", [])
    if not layers or not entries:
        return ["## Couriers end to end", "", "Not measured."]
    rows: list[list[str]] = []
    costs: dict[str, float] = {}
    base = float(layers["run_once"]["per_s"])
    for name, label in _LAYER_NAMES.items():
        rate = float(layers[name]["per_s"])
        if name in delivery.BUILDS_ON:
            costs[name] = 1e3 / rate - 1e3 / float(layers[delivery.BUILDS_ON[name]]["per_s"])
        added = _fmt(costs[name], 2) if name in costs else "-"
        rows.append([label, _fmt(rate), f"{rate / base:.2f}", _fmt(1e3 / rate, 2), added])
    header = ["one courier's round", "deliveries/s", "of `run_once`", "ms each", "ms added"]
    fleet = [
        [
            str(entry["processes"]),
            _fmt(entry["per_s"]),
            f"{entry['smallest_share']:.2f} - {entry['largest_share']:.2f}",
            str(entry["lock_timeouts"]),
            str(entry["stale"]),
        ]
        for entry in entries
    ]
    fleet_header = ["couriers", "deliveries/s, all", "each courier's share of the mean"]
    fleet_header += ["lock timeouts", "stale finishes"]
    runner = float(layers["runner"]["per_s"])
    largest = max((name for name in costs if name != "run_file"), key=lambda name: costs[name])
    smallest_share = min(entry["smallest_share"] for entry in entries if entry["processes"] > 1)
    return [
        *_section(
            "Couriers end to end",
            _table(header, rows),
            layer_seconds=section["layer_seconds"],
        ),
        "",
        *_para(
            "The runner keeps its queue and HTTP connections open; the receiver (its own",
            f"process) keeps a WAL inbox. One courier delivers {runner / base:.2f} of the",
            f"`run_once` rate; the largest step is {_LAYER_COSTS[largest]} ({costs[largest]:.2f}",
            f"ms a delivery). N `courier run` processes, one receiver, {section['seconds']} s:",
        ),
        "",
        *_table(fleet_header, fleet),
        "",
        *_para(
            "SQLite lets one writer in at a time, so N couriers together deliver at about the",
            "rate of one; they take turns at the file's writes (a `flock`), so none waits out the",
            f"1 s busy timeout. Every courier got at least {smallest_share:.2f} of the mean.",
        ),
    ]


def _growth(large: object, small: object) -> str:
    """``large / small`` as ``1.03x``; ``-`` when either is missing."""
    if not isinstance(large, int | float) or not isinstance(small, int | float) or not small:
        return "-"
    return f"{large / small:.2f}x"


def _slow_states(results: dict[str, Any]) -> list[str]:
    by_case: dict[str, list[dict[str, Any]]] = {}
    for entry in results.get("slowpaths", []):
        by_case.setdefault(entry["case"], []).append(entry)
    rows, flat, advice = [], [], []
    for case, sizes in by_case.items():
        small, large = sizes[0], sizes[-1]
        grows = float(large["p50_ms"]) >= _GROWS * float(small["p50_ms"])
        if grows:
            advice += _para(f"- `{case}`: {_ADVICE.get(case, '')}")
        else:
            flat.append(f"`{case}`")
        rows.append(
            [
                f"`{case}`",
                small["grows_with"],
                f"{small['size']:,} / {large['size']:,}",
                f"{_fmt(small['p50_ms'], 2)} / {_fmt(large['p50_ms'], 2)}",
                _growth(large["p50_ms"], small["p50_ms"]),
                f"{_fmt(small.get('batch_p50_ms'), 1)} / {_fmt(large.get('batch_p50_ms'), 1)}",
                _growth(large.get("batch_p50_ms"), small.get("batch_p50_ms")),
                "**grows**" if grows else "flat",
            ]
        )
    if flat:
        advice = _para(f"- {', '.join(flat)}: {_FLAT}") + advice
    size = next(iter(by_case.values()))[0].get("batch_size", "?") if by_case else "?"
    header = ["state", "what grows", "how many", "claim+finish p50 ms", "large/small"]
    header += [f"batch of {size} ms", "large/small"]
    table = _table([*header, "verdict"], rows)
    return [*_section("Slow states, and what to do about them", table), "", *advice]


def _method(results: dict[str, Any]) -> list[str]:
    settings = results.get("meta", {}).get("settings", {})
    return [
        "## How it measures",
        "",
        *_para(
            f"Throughput: {settings.get('count', '?'):,} single calls or",
            f"{settings.get('batches', '?')} batches per phase, every result checked, on",
            "virtual time (`now_ms` is a parameter); the limit, `worker.py` and the peers run",
            f"in {settings.get('rounds', '?')} interleaved rounds, each figure its median",
            "round, each share of the limit the median of the rounds' ratios. Latency:",
            f"{settings.get('warmup', '?')} untimed and {settings.get('cycles', '?')} timed",
            "cycles per file, filled with direct SQL (`bench/rows.py`). Syncs are counted with",
            "`strace`. Never run it on tmpfs (`/dev/shm`): an fsync there is free. Each module",
            "of [`bench/`](../bench/) says how it measures.",
        ),
        "",
        *_para(
            "`make bench` writes this page, its JSON and chart; `python -m bench.perf --render",
            "docs/performance.json --page docs/performance.md` renders it again: never edit it by",
            f"hand. The investigation: [notebook]({NOTEBOOK}), [ceilings and couriers]({NOTE}).",
        ),
    ]


def render(results: dict[str, Any]) -> str:
    """docs/performance.md for the run ``results`` (the JSON of ``bench.perf``)."""
    sections = (_intro, _settings, _throughput, _peers, _latency, _couriers, _slow_states)
    lines: list[str] = []
    for section in (*sections, _method):
        lines += [*section(results), ""]
    return "\n".join(lines[:-1]) + "\n"
