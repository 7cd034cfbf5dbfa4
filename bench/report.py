"""Every page the benches write, rendered from their records: docs/performance.md
(``bench.perf``), the two generated sections of docs/postgres.md (``bench.postgres``,
``bench.postgres_peers``) and the slow-states table (``bench.slowpaths``). See
docs/benchmarks.md, ``bench.report``."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from bench.delivery import BUILDS_ON, GOALS
from bench.peers import VERBS

__all__ = ["PEERS_MARKS", "POSTGRES_MARKS", "peers", "performance", "postgres", "slow_states"]

TEMPLATES = Path(__file__).with_name("templates")
POSTGRES_MARKS = (
    "<!-- bench.postgres: begin (generated, do not edit) -->",
    "<!-- bench.postgres: end -->",
)
PEERS_MARKS = (
    "<!-- bench.postgres_peers: begin (generated, do not edit) -->",
    "<!-- bench.postgres_peers: end -->",
)
OURS = ("pgworker", "courier")  # bench.postgres_peers' contestants of this project
WIDTH = 98  # docs/performance.md's prose (and every slow-states paragraph) is wrapped here
_CONTRACT_MODE = "DELETE+FULL"
# bench.postgres' goals at GOAL_PROCESSES couriers: the ratio to SQLite, every share
GOAL_RATIO, GOAL_SPREAD, GOAL_PROCESSES = 3.0, (0.5, 2.0), 8
# (phase, its single call, its batch call, write transactions per call)
_PHASES = (
    ("enqueue", "enqueue", "enqueue_many", 1),
    ("claim", "claim", "claim_many", 1),
    ("finish", "finish", "finish_many", 1),
    ("cycle", "claim + finish", "claim_many + finish_many", 2),
)


def _words(section: str) -> dict[str, str]:
    """The ``section key: text`` lines of bench/templates/words.md, by key."""
    lines = (TEMPLATES / "words.md").read_text(encoding="utf-8").splitlines()
    found = (re.fullmatch(rf"{section} (\S+): (.+)", line) for line in lines)
    return {match[1]: match[2] for match in found if match}


def _fill(template: str, values: dict[str, Any], width: int | None = WIDTH) -> str:
    """bench/templates/``template``.md with ``values`` put in (``str.format_map``).

    A paragraph that is one placeholder alone takes its value as it is (a table, a
    rendered part; an empty one is left out with its paragraph); any other paragraph
    is rejoined and wrapped at ``width`` (``None``: one line), each ``- `` item apart.
    A paragraph naming a value the record lacks (not in ``values``) is left out.
    """
    paragraphs = []
    for block in (TEMPLATES / f"{template}.md").read_text(encoding="utf-8").split("\n\n"):
        block = block.strip("\n")
        if re.fullmatch(r"\{\w+\}", block):
            value = values.get(block[1:-1])  # none in an older record: left out
            paragraphs += [str(value).rstrip("\n")] if value else []
            continue
        try:
            text = block.format_map(values)
        except KeyError:
            continue
        items = [" ".join(item.split("\n")) for item in re.split(r"\n(?=- )", text)]
        paragraphs.append("\n".join(line for item in items for line in _wrap(item, width)))
    return "\n\n".join(paragraphs) + "\n"


def _wrap(text: str, width: int | None) -> list[str]:
    if width is None or text.startswith("#"):
        return [text]
    indent = "  " if text.startswith("- ") else ""
    return textwrap.wrap(
        text, width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )


def _fmt(value: float | None, digits: int = 0) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _table(header: str, rows: Iterable[str], aligns: str | None = None) -> str:
    """A markdown table: ``header`` and each row are cells joined by `` | ``; ``aligns``
    one character a column, ``r`` for right-aligned (by default none)."""
    aligns = aligns or "l" * (header.count(" | ") + 1)
    rule = "|" + "".join("---:|" if a == "r" else "---|" for a in aligns)
    return "\n".join([f"| {header} |", rule, *(f"| {row} |" for row in rows)])


def _limit(results: dict[str, Any], mode: str = _CONTRACT_MODE) -> float:
    """Bare one-row write transactions per second in ``mode`` (the limit)."""
    return float(results["limit"]["bare"][mode]["per_s"])


def _share_of_limit(results: dict[str, Any], figure: dict[str, Any], tx: float) -> float:
    """A phase's write transactions per second (``tx`` a job) as a share of the limit's.

    With several rounds, each round's figure is divided by the limit measured in the
    same round (seconds before it), and the median of those ratios is the result.
    """
    bare = results["limit"]["bare"][_CONTRACT_MODE]
    ours = figure.get("rounds_per_s") or [figure["per_s"]]
    limits = bare.get("rounds_per_s") or [bare["per_s"]]
    if len(ours) != len(limits):
        ours, limits = [figure["per_s"]], [bare["per_s"]]
    ratios = sorted(float(o) * tx / float(b) for o, b in zip(ours, limits, strict=True))
    return ratios[(len(ratios) - 1) // 2]


# --- docs/performance.md: bench.perf ----------------------------------------------------


def _settings(results: dict[str, Any]) -> dict[str, Any]:
    bare, words = results["limit"]["bare"], _words("mode")
    modes = [f"`{mode}` | {_fmt(fig['per_s'])} | {words[mode]}" for mode, fig in bare.items()]
    modes.append(f"no SQLite: write 4 KiB, fsync | {_fmt(results['limit']['fsync']['per_s'])} | -")
    full_us, off_us = 1e6 / _limit(results), 1e6 / _limit(results, "DELETE+OFF")
    ceiling = results["ceiling"]
    costs = []
    for call, name, *_ in (*_PHASES, ("redrive", "redrive")):
        full, off = ceiling["synced"][call], ceiling["without_sync"][call]
        us = [side[f"{key}_us_per_tx"] * full["tx_per_step"] for side in (full, off)
              for key in ("call", "ceiling")]  # fmt: skip
        costs.append(f"`{name}` | {_fmt(us[0])} | {_fmt(us[1])} | **{full['share']:.2f}** | ")
        costs[-1] += f"{_fmt(us[2])} | {_fmt(us[3])}"
    header = "call | µs per call | its ceiling, µs | share of the ceiling | µs with "
    header += "synchronous=OFF (not durable) | its ceiling, µs"
    return {
        "modes": _table("journal+synchronous | transactions/s | durable", modes),
        "durability_us": _fmt(full_us - off_us),
        "full_us": _fmt(full_us),
        "wal": _limit(results, "WAL+FULL") / _limit(results),
        "itself": ceiling["synced"]["ceiling_beside_itself"]["share"],
        "costs": _table(header, costs),
    }


def _throughput(results: dict[str, Any]) -> dict[str, Any]:
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
    header = "call | jobs/s | commits per job | share of the limit | vs single | rounds (jobs/s)"
    cycles = (single["cycle"]["per_s"], batch["cycle"]["per_s"])
    return {
        "throughput": _table(header, rows),
        "single_cycle": cycles[0],
        "batch": batch["size"],
        "batch_cycle": cycles[1],
        "batch_times": cycles[1] / cycles[0],
    }


def _peers(results: dict[str, Any]) -> dict[str, Any]:
    batch = results["worker"]["batch"]
    systems = [
        ("lease-queue", "single calls", _CONTRACT_MODE, results["worker"]["single"], "yes"),
        ("lease-queue", f"batches of {batch['size']}", _CONTRACT_MODE, batch, "yes"),
    ]
    measured = {n: p for n, p in results["peers"].items() if p["installed"]}
    for name, peer in measured.items():
        verbs = " / ".join(f"`{v}`" for v in VERBS[name] if not v.startswith("("))
        mode = f"{peer['journal_mode']}+{peer['synchronous']}"
        systems.append((name, f"{peer['version']}: {verbs}", mode, peer, "no"))
    rows = [
        f"{name} | {calls} | `{mode}` | {_fmt(figures['enqueue']['per_s'])} | "
        f"{_fmt(figures['cycle']['per_s'])} | {fenced}"
        for name, calls, mode, figures, fenced in systems
    ]
    header = "system | calls | mode | enqueue jobs/s | take+ack jobs/s | fenced lease"
    values: dict[str, Any] = {"peers": _table(header, rows)}
    cycles = {name: float(peer["cycle"]["per_s"]) for name, peer in measured.items()}
    if cycles:  # else the paragraph that compares is left out
        best = max(cycles, key=cycles.__getitem__)
        values |= {"best": best, "best_rate": cycles[best], "slowest_peer": min(cycles.values())}
    return values


def _couriers(results: dict[str, Any]) -> dict[str, Any]:
    section = results["couriers"]
    layers, fleets = section["layers"], section["results"]
    ms = {name: 1e3 / float(layer["per_s"]) for name, layer in layers.items()}
    added = {name: ms[name] - ms[below] for name, below in BUILDS_ON.items()}
    base = float(layers["run_once"]["per_s"])
    rows = [
        f"{label} | {_fmt(layers[name]['per_s'])} | {layers[name]['per_s'] / base:.2f} | "
        f"{ms[name]:.2f} | {_fmt(added.get(name), 2)}"
        for name, label in _words("layer").items()
    ]
    largest = max((name for name in added if name != "run_file"), key=added.__getitem__)
    shares = [
        f"{fleet['processes']} | {_fmt(fleet['per_s'])} | {fleet['smallest_share']:.2f} - "
        f"{fleet['largest_share']:.2f} | {fleet['lock_timeouts']} | {fleet['stale']}"
        for fleet in fleets
    ]
    header = "couriers | deliveries/s, all | each courier's share of the mean | lock timeouts "
    batches = {}
    if "batches" in section:
        part = section["batches"]
        batches = {"courier_batch": part["batch"]}
        batches["courier_batches"] = batched(part, "sqlite", titled=False)
    return batches | {
        "layer_seconds": section["layer_seconds"],
        "layer_rounds": section.get("layer_rounds", 3),
        "layers": _table(
            "one courier's round | deliveries/s | of `run_once` | ms each | ms added", rows
        ),
        "runner_share": layers["runner"]["per_s"] / base,
        "largest": _words("adds")[largest],
        "largest_ms": added[largest],
        "seconds": section["seconds"],
        "fleets": _table(header + "| stale finishes", shares),
        "fewest": min(fleet["smallest_share"] for fleet in fleets if fleet["processes"] > 1),
    }


def _met(value: float, goal: float) -> str:
    return "met" if value >= goal else "**not met**"


def batched(part: dict[str, Any], backend: str, titled: bool = True) -> str:
    """A ``bench.delivery.side_by_side`` record on ``backend`` (``sqlite``,
    ``postgres``) as markdown: its table, and each figure beside its goal (``GOALS``)."""
    words = _words("side")
    rows = []
    for name in ("single", "batched", "no_commit", "calls", "http", "inbox"):
        if name not in part:  # a record made before the delivery path alone was measured
            continue
        figure = part[name]
        spread = [float(rate) for rate in figure["rounds_per_s"]]
        inbox = figure.get("inbox") or {}
        per_commit = inbox["writes"] / inbox["commits"] if inbox.get("commits") else None
        rows.append(
            f"{words[name]} | {_fmt(figure['per_s'])} | "
            f"{'-' if len(spread) < 2 else f'{min(spread):,.0f} - {max(spread):,.0f}'} | "
            f"{figure.get('not_done', '-')} | {_fmt(per_commit, 1)}"
        )
    header = "what | jobs/s | rounds (jobs/s) | not done | receiver: deliveries a commit"
    batched_rate, overhead = float(part["batched"]["per_s"]), float(part["no_commit_vs_calls"])
    name = "PostgreSQL" if backend == "postgres" else "SQLite"
    values = {
        "title": f"**One courier in batches** on {name}: " if titled else "",
        "backend": name,
        "batch_table": _table(header, rows, "lrrrr"),
        "courier_batch": part["batch"],
        "in_flight": part["in_flight"],
        "batch_lease_ms": part["lease_ms"],
        "batch_timeout_ms": part["timeout_ms"],
        "batch_seconds": part["seconds"],
        "batch_rounds": part["rounds"],
        "batched_rate": batched_rate,
        "batched_goal": GOALS[backend],
        "batched_met": _met(batched_rate, GOALS[backend]),
        "batched_times": part["batched_vs_single"],
        "single_rate": float(part["single"]["per_s"]),
        "no_commit_rate": float(part["no_commit"]["per_s"]),
        "calls_rate": float(part["calls"]["per_s"]),
        "overhead": overhead,
        "overhead_rounds": ", ".join(
            f"{float(courier) / float(calls):.2f}" if float(calls) else "-"
            for courier, calls in zip(
                part["no_commit"]["rounds_per_s"], part["calls"]["rounds_per_s"], strict=True
            )
        ),
        "overhead_goal": GOALS["overhead"],
        "overhead_met": _met(overhead, GOALS["overhead"]),
    }
    if "http" in part:  # a record made before the delivery path alone was measured has none
        inbox = float(part["inbox"]["per_s"])
        values |= {
            "http_rate": float(part["http"]["per_s"]),
            "inbox_rate": inbox,
            "inbox_against": "above" if inbox >= GOALS[backend] else "**below**",
            "no_commit_vs_http": float(part["no_commit_vs_http"]),
            "batched_vs_inbox": float(part["batched_vs_inbox"]),
        }
    recorded = part.get("recorded")  # a section recorded apart from the rest of its page
    if recorded:
        values |= {
            "recorded_command": recorded["command"],
            "recorded_load_before": recorded["load_average_before"],
            "recorded_load_after": recorded["load_average_after"],
            "recorded_why": recorded["why"],
        }
    return _fill("batches", values)


def _slow_states(results: dict[str, Any]) -> dict[str, Any]:
    part, words = results["slowpaths"], _words("advice")
    advice, flat = [], []
    for small, large in _small_and_large(part):
        if large["p50_ms"] / small["p50_ms"] <= part["goals"]["cycle"]:
            flat.append(f"`{small['case']}`")
        else:
            advice += _wrap(f"- `{small['case']}`: {words.get(small['case'], '')}", WIDTH)
    flats = _wrap(f"- {', '.join(flat)}: {words['flat']}", WIDTH) if flat else []
    return {"slow_states": slow_states(part, titled=False), "advice": "\n".join(flats + advice)}


def performance(results: dict[str, Any]) -> str:
    """docs/performance.md for the run ``results`` (the record of ``bench.perf``)."""
    meta = results["meta"]
    values = {key: meta[key] for key in ("machine", "disk", "sqlite", "python")}
    values |= meta["settings"]
    for part in (_settings, _throughput, _peers, _couriers, _slow_states):
        values |= part(results)
    return _fill("performance", values)


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
    title = f"**Slow states** on {backend}: " if titled else ""
    values = {"title": title, "cycles": part["cycles"], **goals, "own": own}
    return _fill("slow-states", values | {"table": _table(header, rows)})


# --- docs/postgres.md: bench.postgres -----------------------------------------------------


def _shares(row: dict[str, Any]) -> str:
    """The idlest and the busiest process against the mean, or ``-``."""
    if row["smallest_share"] is None:
        return "-"
    return f"{row['smallest_share']:.2f}-{row['largest_share']:.2f}x"


def _goals(record: dict[str, Any]) -> dict[str, Any]:
    """The two goals at ``GOAL_PROCESSES`` couriers, judged on this record (none
    without that row)."""
    rows = [row for row in record["couriers"] if row["postgres"]["processes"] == GOAL_PROCESSES]
    if not rows or not rows[0]["sqlite"]["per_s"]:
        return {}
    sqlite, pg = rows[0]["sqlite"], rows[0]["postgres"]
    ratio = round(pg["per_s"] / sqlite["per_s"], 2)
    low, high = GOAL_SPREAD
    shares = (pg["smallest_share"], pg["largest_share"])
    spread = all(share is not None and low <= share <= high for share in shares)
    return {
        "goal_processes": GOAL_PROCESSES,
        "goal_ratio": ratio,
        "goal": GOAL_RATIO,
        "ratio_met": "met" if ratio >= GOAL_RATIO else "not met",
        "low": low,
        "high": high,
        "spread_met": "met" if spread else "not met",
    }


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
    by_backend = [
        f"{row['backend']} | {' | '.join(f'{row[c]:,.0f}' for c in calls)} | {row['durability']}"
        for row in record["calls"]
    ]
    header = "couriers | SQLite cycles/s | spread | PostgreSQL cycles/s | spread "
    header += "| PostgreSQL / SQLite | PostgreSQL WAL flushes/s | commits a flush"
    values = {**meta, **_goals(record)}
    values |= {
        "calls_table": _table(
            f"backend | {' | '.join(calls)} | durability", by_backend, "lrrrrrrl"
        ),
        "couriers": _table(header, couriers, "r" * 8),
        "sqlite_durability": first["sqlite"]["durability"],
        "postgres_durability": first["postgres"]["durability"],
        "slow_states": slow_states(record["slowpaths"]) if "slowpaths" in record else "",
        "courier_batches": batched(record["batches"], "postgres") if "batches" in record else "",
    }
    return _fill("postgres", values, width=None)


# --- docs/postgres.md: bench.postgres_peers -----------------------------------------------


def _rate_of(value: float | None) -> str:
    return "failed" if value is None else f"{value:,.0f}"


def _verdicts(record: dict[str, Any]) -> list[str]:
    """For each K, whether each pgworker (and courier) row is ahead of every peer that ran."""
    ran = [c for c in record["contestants"] if c.get("cells")]
    ours = [row["name"] for row in ran if row["name"].startswith(OURS)]
    others = [row["name"] for row in ran if not row["name"].startswith(OURS)]
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
    ks = meta["processes"]
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
    values = {**meta, "jobs": f"{meta['jobs']:,}", "took": took}
    values |= {"poll_ms": meta["poll_s"] * 1000, "poll_min_ms": meta["poll_min_s"] * 1000}
    values |= {"table": _table(header, rows, "lll" + "r" * len(ks))}
    failed = "Cells without a rate:\n\n" + "\n".join(failures) if failures else ""
    values |= {"verdicts": "\n".join(_verdicts(record)), "failures": failed}
    return _fill("postgres-peers", values, width=None)
