"""Every page the benches write, rendered from their records: docs/performance.md
(``bench.perf``), the two generated sections of docs/postgres.md (``bench.postgres``,
``bench.postgres_peers``) and the slow-states table (``bench.slowpaths``).

The tables and every number in the prose come from the record, the words around them
from this module, so that a page cannot drift from its record: each bench's
``--render JSON`` renders it again without a run, and a test checks that each
committed page (or section) is exactly the render of its committed JSON. Ratios
compare figures of the same run only.
"""

from __future__ import annotations

import textwrap
from collections.abc import Iterable
from typing import Any

from bench.delivery import BUILDS_ON
from bench.peers import VERBS

__all__ = ["CONTRACT_MODE", "PEERS_MARKS", "POSTGRES_MARKS", "limit_per_s", "peers"]
__all__ += ["performance", "postgres", "slow_states"]

CONTRACT_MODE = "DELETE+FULL"
POSTGRES_MARKS = (
    "<!-- bench.postgres: begin (generated, do not edit) -->",
    "<!-- bench.postgres: end -->",
)
PEERS_MARKS = (
    "<!-- bench.postgres_peers: begin (generated, do not edit) -->",
    "<!-- bench.postgres_peers: end -->",
)
NOTES = (
    "[notebook](dev/2026-12-01-performance-notebook.md), [ceilings and"
    " couriers](dev/2026-12-01-single-calls-and-couriers.md)"
)
WIDTH = 98  # the page's prose is wrapped at this width
# bench.postgres' goals at GOAL_PROCESSES couriers: the ratio to SQLite, every share
GOAL_RATIO, GOAL_SPREAD, GOAL_PROCESSES = 3.0, (0.5, 2.0), 8
# (phase, its single call, its batch call, write transactions per call)
_PHASES = (
    ("enqueue", "enqueue", "enqueue_many", 1),
    ("claim", "claim", "claim_many", 1),
    ("finish", "finish", "finish_many", 1),
    ("cycle", "claim + finish", "claim_many + finish_many", 2),
)
_MODES = {
    "DELETE+FULL": "yes: the contract's settings",
    "WAL+FULL": "yes, but a `-wal` and a `-shm` file must stay with the queue file",
    "WAL+NORMAL": "no: a commit can be lost in a power cut",
    "DELETE+OFF": "no: a power cut can corrupt the file",
}
# Each layer of a courier's round, and what it adds to the layer it builds on.
_LAYERS = {
    "run_once": ("`run_once` on one connection, a send that returns at once", ""),
    "run_file": (
        "`run_file` instead: the file opened for each round (the runner keeps it open)",
        "reopening the file",
    ),
    "HTTP": ("`run_once` + HTTP: a server that answers 200 at once", "the HTTP request"),
    "receiver": ("+ the receiver: its inbox commit before the answer", "the receiver's commit"),
    "runner": ("`courier run`'s loop (`run_courier`) around it", "the runner's loop"),
}
# What to do about each slow state (bench.slowpaths) whose claim+finish misses its goal;
# a state whose cost does not grow with its size needs nothing.
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


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _table(header: str, rows: Iterable[str], align: str = "---") -> list[str]:
    """A markdown table: ``header`` and each row are cells joined by `` | ``."""
    columns = header.count(" | ") + 1
    return [f"| {header} |", "|" + f"{align}|" * columns, *(f"| {row} |" for row in rows)]


def _para(*parts: str) -> list[str]:
    """One paragraph (or list item) of prose: its parts joined, wrapped at ``WIDTH``."""
    text = " ".join(parts)
    indent = "  " if text.startswith("- ") else ""
    return textwrap.wrap(
        text, WIDTH, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )


def limit_per_s(results: dict[str, Any], mode: str = CONTRACT_MODE) -> float:
    """Bare one-row write transactions per second in ``mode`` (the limit)."""
    return float(results["limit"]["bare"][mode]["per_s"])


def _share_of_limit(results: dict[str, Any], figure: dict[str, Any], tx: float) -> float:
    """A phase's write transactions per second (``tx`` a job) as a share of the limit's.

    With several rounds, each round's figure is divided by the limit measured in the
    same round (seconds before it), and the median of those ratios is the result.
    """
    bare = results["limit"]["bare"][CONTRACT_MODE]
    ours = figure.get("rounds_per_s") or [figure["per_s"]]
    limits = bare.get("rounds_per_s") or [bare["per_s"]]
    if len(ours) != len(limits):
        ours, limits = [figure["per_s"]], [bare["per_s"]]
    ratios = sorted(float(o) * tx / float(b) for o, b in zip(ours, limits, strict=True))
    return ratios[(len(ratios) - 1) // 2]


# --- docs/performance.md: bench.perf ----------------------------------------------------


def _intro(results: dict[str, Any]) -> list[str]:
    meta = results["meta"]
    return [
        "# Performance",
        "",
        *_para(
            "lease-queue keeps the contract's durability settings (`journal_mode=DELETE`,",
            "`synchronous=FULL`): every write transaction waits for the disk. This page shows",
            "what that costs and what batches buy. Every figure is from one run of `make",
            "bench`, recorded in [`performance.json`](performance.json):",
            f"on {meta['started'][:10]}, {meta['machine']}, disk {meta['disk']}, SQLite",
            f"{meta['sqlite']}, Python {meta['python']}; absolute figures depend on the disk,",
            "ratios carry over.",
        ),
    ]


def _settings(results: dict[str, Any]) -> list[str]:
    bare = results["limit"]["bare"]
    modes = [
        f"`{mode}` | {_fmt(figure['per_s'])} | {_MODES[mode]}" for mode, figure in bare.items()
    ]
    modes.append(f"no SQLite: write 4 KiB, fsync | {_fmt(results['limit']['fsync']['per_s'])}")
    modes[-1] += " | -"
    full_us, off_us = 1e6 / limit_per_s(results), 1e6 / limit_per_s(results, "DELETE+OFF")
    wal = limit_per_s(results, "WAL+FULL") / limit_per_s(results)
    ceiling = results["ceiling"]
    costs = []
    for call, name, *_ in (*_PHASES, ("redrive", "redrive")):
        full, off = ceiling["synced"][call], ceiling["without_sync"][call]
        us = [
            side[f"{key}_us_per_tx"] * full["tx_per_step"]
            for side in (full, off)
            for key in ("call", "ceiling")
        ]
        costs.append(f"`{name}` | {_fmt(us[0])} | {_fmt(us[1])} | **{full['share']:.2f}** | ")
        costs[-1] += f"{_fmt(us[2])} | {_fmt(us[3])}"
    return [
        "## The settings and what they cost",
        "",
        *_para(
            "A bare one-row write transaction in each mode, on the same disk; the first row is",
            "**the limit** of any call that is one write transaction under the contract:",
        ),
        "",
        *_table("journal+synchronous | transactions/s | durable", modes),
        "",
        *_para(
            f"A bare transaction spends {_fmt(full_us - off_us)} of its {_fmt(full_us)} µs on",
            f"durability. WAL with FULL syncs once ({wal:.1f}x the limit); the contract keeps",
            "DELETE so that a queue is one self-contained file.",
        ),
        "",
        *_para(
            "Each single call beside **its ceiling**, the same row writes with the same indexes",
            "alone in their transaction, timed step by step beside it (share: the ceiling's time",
            "over the call's; a ceiling beside itself got",
            f"{ceiling['synced']['ceiling_beside_itself']['share']:.2f}); with synchronous=OFF",
            "(not a mode of the queue) the code's own cost shows:",
        ),
        "",
        *_table(
            "call | µs per call | its ceiling, µs | share of the ceiling | µs with "
            "synchronous=OFF (not durable) | its ceiling, µs",
            costs,
        ),
    ]


def _throughput(results: dict[str, Any]) -> list[str]:
    single, batch = results["worker"]["single"], results["worker"]["batch"]
    rows = []
    for section, size in ((single, 1), (batch, int(batch["size"]))):
        for phase, one, many, tx in _PHASES:
            figure, rounds = section[phase], section[phase].get("rounds_per_s", [])
            share = _share_of_limit(results, figure, tx / size)
            times = "-" if size == 1 else f"{figure['per_s'] / single[phase]['per_s']:.1f}x"
            spread = "-" if len(rounds) < 2 else f"{min(rounds):,.0f} - {max(rounds):,.0f}"
            rows.append(
                f"{f'`{one}`' if size == 1 else f'`{many}` ({size})'} | {_fmt(figure['per_s'])} | "
                f"{_fmt(tx / size, 0 if size == 1 else 3)} | {share:.2f} | {times} | {spread}"
            )
    cycles = (single["cycle"]["per_s"], batch["cycle"]["per_s"])
    return [
        "## Throughput",
        "",
        *_table(
            "call | jobs/s | commits per job | share of the limit | vs single | rounds (jobs/s)",
            rows,
        ),
        "",
        *_para(
            f"One job at a time every call is a commit: {_fmt(cycles[0])} claim+finish cycles",
            f"a second. A batch of {batch['size']} is one commit for all its jobs:",
            f"{_fmt(cycles[1])} jobs a second, {cycles[1] / cycles[0]:.1f}x the single cycle.",
        ),
    ]


def _system(name: str, calls: str, mode: str, figures: dict[str, Any], fenced: str) -> str:
    """A row of the peers' table."""
    enqueue, cycle = _fmt(figures["enqueue"]["per_s"]), _fmt(figures["cycle"]["per_s"])
    return f"{name} | {calls} | `{mode}` | {enqueue} | {cycle} | {fenced}"


def _peers(results: dict[str, Any]) -> list[str]:
    single, batch = results["worker"]["single"], results["worker"]["batch"]
    rows = [
        _system("lease-queue", "single calls", CONTRACT_MODE, single, "yes"),
        _system("lease-queue", f"batches of {batch['size']}", CONTRACT_MODE, batch, "yes"),
    ]
    measured = {n: p for n, p in results["peers"].items() if p["installed"]}
    for name, peer in measured.items():
        verbs = " / ".join(f"`{v}`" for v in VERBS[name] if not v.startswith("("))
        mode = f"{peer['journal_mode']}+{peer['synchronous']}"
        rows.append(_system(name, f"{peer['version']}: {verbs}", mode, peer, "no"))
    lines = [
        "## The peers",
        "",
        *_para(
            "The same work through persist-queue, litequeue and huey in their default modes",
            "(read back from their own connections), on the same disk:",
        ),
        "",
        *_table(
            "system | calls | mode | enqueue jobs/s | take+ack jobs/s | fenced lease",
            rows,
        ),
    ]
    cycles = {name: float(peer["cycle"]["per_s"]) for name, peer in measured.items()}
    if not cycles:
        return lines
    best = max(cycles, key=cycles.__getitem__)
    return [
        *lines,
        "",
        *_para(
            "None of the peers has a lease with an expiry and a fencing token. One job at a",
            f"time lease-queue is the slowest ({_fmt(single['cycle']['per_s'])} take+ack",
            f"jobs/s against {_fmt(min(cycles.values()))} to {_fmt(cycles[best])}): every",
            "commit waits for the disk in DELETE+FULL, where the peers' modes sync less or not",
            "at all; in batches it is ahead of all of them",
            f"({_fmt(batch['cycle']['per_s'])} against {_fmt(cycles[best])} for {best}).",
        ),
    ]


def _couriers(results: dict[str, Any]) -> list[str]:
    section = results["couriers"]
    layers, fleets = section["layers"], section["results"]
    ms = {name: 1e3 / float(layer["per_s"]) for name, layer in layers.items()}
    added = {name: ms[name] - ms[below] for name, below in BUILDS_ON.items()}
    base = float(layers["run_once"]["per_s"])
    rows = [
        f"{label} | {_fmt(layers[name]['per_s'])} | {layers[name]['per_s'] / base:.2f} | "
        f"{ms[name]:.2f} | {_fmt(added.get(name), 2)}"
        for name, (label, _) in _LAYERS.items()
    ]
    largest = max((name for name in added if name != "run_file"), key=added.__getitem__)
    shares = [
        f"{fleet['processes']} | {_fmt(fleet['per_s'])} | {fleet['smallest_share']:.2f} - "
        f"{fleet['largest_share']:.2f} | {fleet['lock_timeouts']} | {fleet['stale']}"
        for fleet in fleets
    ]
    fewest = min(fleet["smallest_share"] for fleet in fleets if fleet["processes"] > 1)
    return [
        "## Couriers end to end",
        "",
        *_para(
            f"One courier's round, a layer at a time ({section['layer_seconds']} s each, the",
            f"median of {section.get('layer_rounds', 3)} rounds):",
        ),
        "",
        *_table("one courier's round | deliveries/s | of `run_once` | ms each | ms added", rows),
        "",
        *_para(
            "The runner keeps its queue and HTTP connections open; the receiver (its own",
            "process) keeps a WAL inbox. One courier delivers",
            f"{layers['runner']['per_s'] / base:.2f} of the `run_once` rate; the largest step is",
            f"{_LAYERS[largest][1]} ({added[largest]:.2f} ms a delivery). N `courier run`",
            f"processes, one receiver, {section['seconds']} s:",
        ),
        "",
        *_table(
            "couriers | deliveries/s, all | each courier's share of the mean | lock timeouts "
            "| stale finishes",
            shares,
        ),
        "",
        *_para(
            "SQLite lets one writer in at a time, so N couriers together deliver at about the",
            "rate of one; they take turns at the file's writes (a `flock`), so none waits out the",
            f"1 s busy timeout. Every courier got at least {fewest:.2f} of the mean.",
        ),
    ]


def _slow_states(results: dict[str, Any]) -> list[str]:
    part = results["slowpaths"]
    advice, flat = [], []
    for small, large in _small_and_large(part):
        if large["p50_ms"] / small["p50_ms"] <= part["goals"]["cycle"]:
            flat.append(f"`{small['case']}`")
        else:
            advice += _para(f"- `{small['case']}`: {_ADVICE.get(small['case'], '')}")
    return [
        "## Slow states, and what to do about them",
        "",
        *slow_states(part, titled=False).splitlines(),
        "",
        *(_para(f"- {', '.join(flat)}: {_FLAT}") if flat else []),
        *advice,
    ]


def _method(results: dict[str, Any]) -> list[str]:
    settings = results["meta"]["settings"]
    return [
        "## How it measures",
        "",
        *_para(
            f"Throughput: {settings['count']:,} single calls or {settings['batches']} batches",
            "per phase, every result checked, on virtual time (`now_ms` is a parameter); the",
            f"limit, `worker.py` and the peers run in {settings['rounds']} interleaved rounds,",
            "each figure its median round, each share of the limit the median of the rounds'",
            "ratios. The slow states are filled with direct SQL (`bench/rows.py`). Never run",
            "it on tmpfs (`/dev/shm`): an fsync there is free. Each module",
            "of [`bench/`](../bench/) says how it measures.",
        ),
        "",
        *_para(
            "`make bench` writes this page and its JSON; `python -m bench.perf --render",
            "docs/performance.json --page docs/performance.md` renders it again: never edit it by",
            f"hand. The investigation: {NOTES}.",
        ),
    ]


def performance(results: dict[str, Any]) -> str:
    """docs/performance.md for the run ``results`` (the record of ``bench.perf``)."""
    sections = (_intro, _settings, _throughput, _peers, _couriers, _slow_states)
    return "\n\n".join("\n".join(section(results)) for section in (*sections, _method)) + "\n"


# --- bench.slowpaths ----------------------------------------------------------------------


def _small_and_large(part: dict[str, Any]) -> list[tuple[dict[str, Any], dict[str, Any]]]:
    """Each state's first (small) and last (large) size, in the order measured."""
    by_case: dict[str, list[dict[str, Any]]] = {}
    for entry in part["results"]:
        by_case.setdefault(entry["case"], []).append(entry)
    return [(sizes[0], sizes[-1]) for sizes in by_case.values()]


def _against(small: dict[str, Any], large: dict[str, Any], key: str, goal: float) -> str:
    ratio = large[key] / small[key]
    return f"{ratio:.2f}x (goal {goal:g}x: {'met' if ratio <= goal else '**not met**'})"


def slow_states(part: dict[str, Any], titled: bool = True) -> str:
    """A ``bench.slowpaths`` record (or its part of a ``bench.perf`` or ``bench.postgres``
    record): both sizes of each state, with the ratios large/small beside their goals
    (with no sync, the statements' own cost, which a busy disk does not blur)."""
    goals, meta = part["goals"], part.get("meta")
    backend = "PostgreSQL" if part["backend"] == "postgres" else "SQLite"
    own = ":"
    if meta:
        own = f". From a run of its own, `{meta['command']}`; the 1-minute load average was"
        own += f" {meta['load_average_before']} before it and {meta['load_average_after']} after:"
    lines = _para(
        *([f"**Slow states** on {backend}:"] if titled else []),
        f"Claim+finish p50 ({part['cycles']} cycles) and the median batch of 64 (`claim_many` +",
        "`finish_many`) where a claim's cost could grow; the goals: the large size within",
        f"{goals['cycle']:g}x and {goals['batch']:g}x of the small{own}",
    )
    rows = [
        f"`{small['case']}` | {small['grows_with']} | {small['size']:,} / {large['size']:,} | "
        f"{small['p50_ms']:.2f} / {large['p50_ms']:.2f} | "
        f"{_against(small, large, 'p50_ms', goals['cycle'])} | "
        f"{small['off_p50_ms']:.3f} / {large['off_p50_ms']:.3f} | "
        f"{large['off_p50_ms'] / small['off_p50_ms']:.2f}x | "
        f"{small['batch_p50_ms']:.1f} / {large['batch_p50_ms']:.1f} | "
        f"{_against(small, large, 'batch_p50_ms', goals['batch'])}"
        for small, large in _small_and_large(part)
    ]
    header = "state | what grows | how many | claim+finish p50 ms | large/small | with no sync, "
    header += "ms | large/small | batch of 64, ms | large/small"
    return "\n".join([*lines, "", *_table(header, rows)]) + "\n"


# --- docs/postgres.md: bench.postgres -----------------------------------------------------


def _shares(row: dict[str, Any]) -> str:
    """The idlest and the busiest process against the mean, or ``-``."""
    if row["smallest_share"] is None:
        return "-"
    return f"{row['smallest_share']:.2f}-{row['largest_share']:.2f}x"


def _goals(record: dict[str, Any]) -> list[str]:
    """The two goals at ``GOAL_PROCESSES`` couriers, judged on this record (no line
    without that row)."""
    rows = [row for row in record["couriers"] if row["postgres"]["processes"] == GOAL_PROCESSES]
    if not rows or not rows[0]["sqlite"]["per_s"]:
        return []
    sqlite, pg = rows[0]["sqlite"], rows[0]["postgres"]
    ratio = round(pg["per_s"] / sqlite["per_s"], 2)
    low, high = GOAL_SPREAD
    shares = (pg["smallest_share"], pg["largest_share"])
    spread = all(share is not None and low <= share <= high for share in shares)
    return [
        "",
        f"Goals at {GOAL_PROCESSES} couriers: PostgreSQL / SQLite = {ratio}x (goal "
        f"{GOAL_RATIO:g}x: {'met' if ratio >= GOAL_RATIO else 'not met'}); every PostgreSQL "
        f"courier within {low:g}-{high:g}x of the mean: {'met' if spread else 'not met'}.",
    ]


def postgres(record: dict[str, Any]) -> str:
    """The record of ``bench.postgres`` as markdown (what ``--doc`` puts into
    docs/postgres.md between ``POSTGRES_MARKS``)."""
    meta, first = record["meta"], record["couriers"][0]
    calls = [one for _, one, _, _ in _PHASES[:3]] + [many for _, _, many, _ in _PHASES[:3]]
    couriers = []
    for row in record["couriers"]:
        sqlite, pg = row["sqlite"], row["postgres"]
        ratio = f"{pg['per_s'] / sqlite['per_s']:.1f}x" if sqlite["per_s"] else "-"
        couriers.append(
            f"{pg['processes']} | {sqlite['per_s']:,.0f} | {_shares(sqlite)} | {pg['per_s']:,.0f}"
            f" | {_shares(pg)} | {ratio} | {_fmt(pg.get('wal_flushes_per_s'))} | "
            f"{_fmt(pg.get('commits_per_flush'), 1)}"
        )
    lines = [
        f"One run of `python -m bench.postgres`: PostgreSQL {meta['postgres']} "
        f"({meta['server']}) and SQLite on the same disk, Python {meta['python']}, "
        f"{meta['cpus']} CPUs; the 1-minute load average was {meta['load_average_before']} "
        f"before the run and {meta['load_average_after']} after it (other work shares the "
        "disk and the cores, and moves every figure).",
        "",
        f"**Single calls** ({meta['calls']} each, calls/s) and **batches of {meta['batch']}** "
        f"({meta['batches']} each, jobs/s):",
        "",
        f"| backend | {' | '.join(calls)} | durability |",
        "|---|" + "---:|" * len(calls) + "---|",
        *(
            f"| {row['backend']} | {' | '.join(f'{row[c]:,.0f}' for c in calls)} "
            f"| {row['durability']} |"
            for row in record["calls"]
        ),
        "",
        f"**Couriers**: N processes, each claim then finish for {meta['seconds']} s on the "
        "wall clock; claim+finish cycles per second, and the busiest and the idlest "
        "process against the mean:",
        "",
        *_table(
            "couriers | SQLite cycles/s | spread | PostgreSQL cycles/s | spread "
            "| PostgreSQL / SQLite | PostgreSQL WAL flushes/s | commits a flush",
            couriers,
            "---:",
        ),
        "",
        f"Durability: SQLite {first['sqlite']['durability']}; "
        f"PostgreSQL {first['postgres']['durability']}. Every commit waits for its WAL "
        "flush; one flush carries the commits that were waiting when it began.",
        "",
        f"The disk alone synced {meta['disk_fsyncs_per_s']:,.0f} 4 KiB writes a second "
        "in the same run: the ceiling of flushes, which a busy PostgreSQL shares "
        "with its data files.",
        *_goals(record),
    ]
    if "slowpaths" in record:
        lines += ["", slow_states(record["slowpaths"]).rstrip("\n")]
    return "\n".join(lines) + "\n"


# --- docs/postgres.md: bench.postgres_peers -----------------------------------------------


def _rate_of(value: float | None) -> str:
    return "failed" if value is None else f"{value:,.0f}"


def _verdicts(record: dict[str, Any]) -> list[str]:
    """For each K, whether each pgworker row is ahead of every peer that ran."""
    ran = [c for c in record["contestants"] if c.get("cells")]
    ours = [row["name"] for row in ran if row["name"].startswith("pgworker")]
    others = [row["name"] for row in ran if not row["name"].startswith("pgworker")]
    if not ours or not others:
        return ["No peer ran beside pgworker: nothing to compare."]
    lines = []
    for k in record["meta"]["processes"]:
        rate = {c["name"]: next(x for x in c["cells"] if x["processes"] == k) for c in ran}
        for mine in ours:
            ours_rate = rate[mine]["jobs_per_s"]
            behind = [
                f"{peer} ({_rate_of(rate[peer]['jobs_per_s'])} jobs/s)"
                for peer in others
                if ours_rate is None or (rate[peer]["jobs_per_s"] or 0) >= ours_rate > 0
            ]
            verdict = f"**not ahead**: {', '.join(behind)} did as much or more" if behind else ""
            verdict = verdict or f"ahead of {', '.join(others)}"
            lines.append(f"- K={k}, {mine} ({_rate_of(ours_rate)} jobs/s): {verdict}.")
    return lines


def peers(record: dict[str, Any]) -> str:
    """The record of ``bench.postgres_peers`` as markdown (what ``--doc`` puts into
    docs/postgres.md between ``PEERS_MARKS``)."""
    meta = record["meta"]
    ks, jobs = meta["processes"], f"{meta['jobs']:,}"
    rows, failures, timed = [], [], []
    for entry in record["contestants"]:
        if entry["versions"] is None:
            rows.append(f"{entry['name']} | not installed | {entry['takes']}" + " | -" * len(ks))
            continue
        shown = ", ".join(f"{name} {version}" for name, version in entry["versions"].items())
        rates = " | ".join(_rate_of(cell["jobs_per_s"]) for cell in entry["cells"])
        rows.append(f"{entry['name']} | {shown} | {entry['takes']} | {rates}")
        for cell in entry["cells"]:
            timed.append((cell["seconds"], entry["name"], cell["processes"]))
            errors = "; ".join(cell["errors"])
            failures += [f"- {entry['name']} K={cell['processes']}: {errors}."] if errors else []
    took = ""
    if timed:
        (low, low_name, low_k), (high, high_name, high_k) = min(timed), max(timed)
        took = f"Cells took from {low:g} s ({low_name}, K={low_k}) to {high:g} s "
        took += f"({high_name}, K={high_k}). "
    header = "contestant | version | takes and acknowledges | " + " | ".join(f"K={k}" for k in ks)
    table = _table(header, rows)
    table[1] = "|---|---|---|" + "---:|" * len(ks)
    lines = [
        f"One run of `python -m bench.postgres_peers`: PostgreSQL {meta['postgres']} "
        f"({meta['server']}, a Unix socket), {meta['durability']}; Python {meta['python']}, "
        f"{meta['cpus']} CPUs; the 1-minute load average was {meta['load_average_before']} "
        f"before the run and {meta['load_average_after']} after it (other work shares the "
        "cores and the disk, and moves every figure).",
        "",
        f"Each cell: {jobs} no-op jobs in a fresh database, enqueued by the contestant's own "
        "batch call; then K worker processes, each started and connected before one start "
        "signal, take and acknowledge them with the contestant's own worker loop. Jobs per "
        f"second is {jobs} over the time from the signal until the database holds {jobs} "
        f"acknowledged jobs (counted every {meta['poll_s'] * 1000:g} ms, down to "
        f"{meta['poll_min_s'] * 1000:g} ms as the end nears):",
        "",
        *table,
        "",
        f"{took}pgworker leases with a fencing token and finishes with a compare-and-set on "
        "the whole ticket; procrastinate finishes by job id and pgqueuer deletes by job id, "
        "neither checks who took the job.",
        "",
        "Against the goal (pgworker ahead of both peers at every K):",
        "",
        *_verdicts(record),
        *(["", "Cells without a rate:", "", *failures] if failures else []),
    ]
    return "\n".join(lines) + "\n"
