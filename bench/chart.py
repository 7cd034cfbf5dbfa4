"""The benchmark's chart: jobs/s of every system and mode, and latency against rows.

matplotlib is optional (the ``bench`` extra); ``draw`` returns ``False`` without it. It
is imported with ``importlib`` so that type checking does not depend on it being
installed.
"""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

from bench.report import CONTRACT_MODE, limit_per_s

__all__ = ["draw", "throughput_bars"]


def throughput_bars(results: dict[str, Any]) -> list[tuple[str, float, float]]:
    """``(label, enqueue jobs/s, take+ack jobs/s)`` for every measured system and mode."""
    bars: list[tuple[str, float, float]] = []
    worker = results.get("worker", {})
    labels = (
        ("single", "lease-queue DELETE+FULL\nsingle calls"),
        ("batch", "lease-queue DELETE+FULL\nbatches of"),
    )
    for kind, label in labels:
        section = worker.get(kind, {})
        if "cycle" in section:
            name = label + (f" {section['size']}" if kind == "batch" else "")
            bars.append((name, section["enqueue"]["per_s"], section["cycle"]["per_s"]))
    for name, peer in results.get("peers", {}).items():
        if peer.get("installed"):
            mode = f"{peer['journal_mode']}+{peer['synchronous']}"
            bars.append((f"{name}\n{mode}", peer["enqueue"]["per_s"], peer["cycle"]["per_s"]))
    return bars


def _throughput(axis: Any, results: dict[str, Any]) -> None:
    bars = throughput_bars(results)
    positions = list(range(len(bars)))
    height = 0.38
    axis.barh([p - height / 2 for p in positions], [b[1] for b in bars], height, label="enqueue")
    axis.barh([p + height / 2 for p in positions], [b[2] for b in bars], height, label="take+ack")
    for p, (_, enqueue, cycle) in zip(positions, bars, strict=True):
        axis.text(enqueue, p - height / 2, f" {enqueue:,.0f}", va="center", fontsize=7)
        axis.text(cycle, p + height / 2, f" {cycle:,.0f}", va="center", fontsize=7)
    axis.set_yticks(positions, [b[0] for b in bars], fontsize=8)
    axis.invert_yaxis()
    axis.set_xscale("log")
    limit = limit_per_s(results)
    if limit is not None:
        label = f"limit: bare {CONTRACT_MODE} tx/s ({limit:,.0f})"
        axis.axvline(limit, color="black", linestyle="--", linewidth=1, label=label)
    axis.set_xlabel("jobs per second (log scale)")
    axis.set_title("Throughput, one process, same disk", fontsize=10)
    axis.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3)


def _latency(axis: Any, results: dict[str, Any]) -> None:
    entries = results.get("latency", {}).get("results", [])
    styles = {"pending": "tab:blue", "history": "tab:orange"}
    for shape, color in styles.items():
        points = sorted((e["rows"], e) for e in entries if e["shape"] == shape)
        if not points:
            continue
        rows = [count for count, _ in points]
        for key, style, what in (
            ("p50_ms", "o-", "p50"),
            ("p99_ms", "s--", "p99"),
            ("off_p50_ms", "^:", "p50, sync OFF"),
        ):
            if all(key in entry for _, entry in points):
                values = [entry[key] for _, entry in points]
                axis.plot(rows, values, style, color=color, label=f"{shape} {what}")
    axis.set_xscale("log")
    axis.set_ylim(bottom=0)
    axis.set_xlabel("rows in the queue file (log scale)")
    axis.set_ylabel("claim + finish, ms")
    axis.set_title("Claim+finish latency against rows (DELETE+FULL)", fontsize=10)
    axis.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.13), ncol=3)


def draw(results: dict[str, Any], path: Path) -> bool:
    """Write the PNG chart of ``results`` to ``path``; ``False`` if matplotlib is missing."""
    try:
        matplotlib = importlib.import_module("matplotlib")
    except ImportError:
        return False
    matplotlib.use("Agg")
    pyplot = importlib.import_module("matplotlib.pyplot")
    figure, (left, right) = pyplot.subplots(1, 2, figsize=(13, 6.2), width_ratios=(1.3, 1))
    _throughput(left, results)
    _latency(right, results)
    meta = results.get("meta", {})
    figure.suptitle(
        f"lease-queue benchmark, {str(meta.get('started', ''))[:10]}, {meta.get('disk', '')}",
        fontsize=9,
    )
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=110)
    pyplot.close(figure)
    return True
