"""Count the fsync and fdatasync calls of each operation, with strace.

For each (system, operation), a child interpreter (``python -m bench.syncs child ...``)
sets up what the operation needs, calls ``os.access`` on a marker path, runs the
operation ``n`` times, and calls ``os.access`` on a second marker. The parent runs it
under ``strace -f`` and counts the ``fsync``/``fdatasync``/``sync_file_range`` calls
between the two markers, so set-up and interpreter start-up are not counted. The result
is the number of syncs per call (and per job for batch calls). Without ``strace`` (or
without permission to trace) the section is reported as skipped.

Syncs that are deferred, as WAL checkpoints are, show up only when a checkpoint falls
inside the ``n`` calls: a figure of 0 means "none per commit", not "never".
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import worker
from bench.measure import T0_MS
from bench.ops import batch_available
from bench.peers import PEERS, installed, open_peer
from bench.rows import fill

__all__ = ["SCENARIOS", "count_syncs", "main", "syncs_table"]

START = "/bench-syncs-start"
END = "/bench-syncs-end"
TRACED = "fsync,fdatasync,sync_file_range,access"
SYNC_CALL = re.compile(r"^(?:\[pid\s+)?\d*\]?\s*(fsync|fdatasync|sync_file_range)\(")
CHILD_TIMEOUT_S = 120.0

# (system, operation); "bare" systems are SQLite alone, as in bench.limits.
SCENARIOS: tuple[tuple[str, str], ...] = (
    ("bare DELETE+FULL", "transaction"),
    ("bare WAL+FULL", "transaction"),
    ("bare WAL+NORMAL", "transaction"),
    ("worker", "enqueue"),
    ("worker", "claim"),
    ("worker", "finish"),
    ("worker", "enqueue_many"),
    ("worker", "claim_many"),
    ("worker", "finish_many"),
    *((peer, op) for peer in PEERS for op in ("enqueue", "claim", "finish")),
)


def _mark(path: str) -> None:
    os.access(path, os.F_OK)


def _bare(folder: Path, system: str, n: int) -> None:
    _, mode = system.split(" ")
    journal, sync = mode.split("+")
    con = sqlite3.connect(folder / "bare.sqlite", isolation_level=None)
    con.execute(f"PRAGMA journal_mode={journal}").fetchall()
    con.execute(f"PRAGMA synchronous={sync}")
    con.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)")
    con.execute("INSERT INTO t VALUES (1, 0)")
    _mark(START)
    for _ in range(n):
        con.execute("BEGIN IMMEDIATE")
        con.execute("UPDATE t SET n = n + 1 WHERE id = 1")
        con.execute("COMMIT")
    _mark(END)
    con.close()


def _worker(folder: Path, op: str, n: int, size: int) -> None:
    con = worker.open_queue(folder / "syncs.sqlite")
    jobs = n * size if op.endswith("_many") else n
    if op != "enqueue" and op != "enqueue_many":
        fill(con, jobs, T0_MS)
    tickets: list[dict[str, Any]] = []
    if op in ("finish", "finish_many"):
        tickets = [t for t in iter(lambda: worker.claim(con, "syncs", T0_MS, 60_000), None)]
    calls: dict[str, Callable[[int], object]] = {
        "enqueue": lambda i: worker.enqueue(con, {"id": f"e-{i}", "qty": 1}, T0_MS, 60_000),
        "claim": lambda i: worker.claim(con, "syncs", T0_MS, 60_000),
        "finish": lambda i: worker.finish(con, tickets[i], "ok", T0_MS + 1),
        "enqueue_many": lambda i: worker.enqueue_many(
            con, [{"id": f"e-{i}-{k}", "qty": 1} for k in range(size)], T0_MS, 60_000
        ),
        "claim_many": lambda i: worker.claim_many(con, "syncs", T0_MS, size, 60_000),
        "finish_many": lambda i: worker.finish_many(
            con,
            [
                {"ticket": t, "outcome": "ok", "delay_ms": 0}
                for t in tickets[i * size : (i + 1) * size]
            ],
            T0_MS + 1,
        ),
    }
    _mark(START)
    for i in range(n):
        calls[op](i)
    _mark(END)
    con.close()


def _peer(folder: Path, name: str, op: str, n: int) -> None:
    peer = open_peer(name, folder / name)
    if peer is None:
        raise SystemExit(f"{name} is not installed")
    handles: list[object] = []
    if op != "enqueue":
        for i in range(n):
            peer.put(i)
    if op == "finish":
        handles = [peer.take() for _ in range(n)]
    _mark(START)
    for i in range(n):
        if op == "enqueue":
            peer.put(n + i)
        elif op == "claim":
            peer.take()
        else:
            peer.ack(handles[i])
    _mark(END)
    peer.close()


def child(system: str, op: str, n: int, size: int, folder: Path) -> None:
    """Run ``n`` calls of ``op`` on ``system`` in ``folder`` between the two markers."""
    if system.startswith("bare "):
        _bare(folder, system, n)
    elif system == "worker":
        _worker(folder, op, n, size)
    else:
        _peer(folder, system, op, n)


def count_in_trace(lines: Sequence[str]) -> int:
    """The sync calls between the start and end markers of an ``strace -f`` output."""
    inside = False
    count = 0
    for line in lines:
        if START in line:
            inside = True
        elif END in line:
            break
        elif inside and SYNC_CALL.search(line) and "resumed>" not in line:
            count += 1
    return count


def count_syncs(system: str, op: str, n: int, size: int, folder: Path) -> float | None:
    """Syncs per call of ``op`` on ``system``: ``None`` if strace could not trace it."""
    strace = shutil.which("strace")
    if strace is None:
        return None
    with tempfile.TemporaryDirectory(dir=folder) as work:
        trace = Path(work) / "trace.txt"
        argv = [strace, "-f", "-qq", "-o", str(trace), "-e", f"trace={TRACED}"]
        argv += [sys.executable, "-m", "bench.syncs", "child", system, op, str(n), str(size), work]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        done = subprocess.run(
            argv, env=env, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False
        )
        if done.returncode != 0 or not trace.exists():
            return None
        lines = trace.read_text().splitlines()
    if not any(START in line for line in lines):
        return None
    return count_in_trace(lines) / n


def syncs_table(folder: Path, n: int, size: int) -> dict[str, Any]:
    """Syncs per call for every scenario that can run here; why not, for the others."""
    if shutil.which("strace") is None:
        return {"skipped": "strace not found"}
    rows: list[dict[str, Any]] = []
    for system, op in SCENARIOS:
        if system in PEERS and not installed(system):
            rows.append({"system": system, "op": op, "per_call": None, "note": "not installed"})
            continue
        if op.endswith("_many") and not batch_available():
            rows.append({"system": system, "op": op, "per_call": None, "note": "no batch calls"})
            continue
        per_call = count_syncs(system, op, n, size, folder)
        row: dict[str, Any] = {"system": system, "op": op, "per_call": per_call}
        if per_call is not None and op.endswith("_many"):
            row["per_job"] = round(per_call / size, 3)
            row["jobs_per_call"] = size
        if per_call is None:
            row["note"] = "strace failed"
        rows.append(row)
    return {"calls": n, "rows": rows}


def main(argv: Sequence[str] | None = None) -> int:
    """``child SYSTEM OP N SIZE FOLDER`` (what the parent traces) or a table on a temp dir."""
    parser = argparse.ArgumentParser(prog="python -m bench.syncs", description=__doc__)
    sub = parser.add_subparsers(dest="command")
    run = sub.add_parser("child", help="run one traced scenario (used by the parent)")
    run.add_argument("system")
    run.add_argument("op")
    run.add_argument("n", type=int)
    run.add_argument("size", type=int)
    run.add_argument("folder", type=Path)
    table = sub.add_parser("table", help="print syncs per call for every scenario")
    table.add_argument("--calls", type=int, default=50)
    table.add_argument("--dir", type=Path, default=None)
    args = parser.parse_args(argv)
    if args.command == "child":
        child(args.system, args.op, args.n, args.size, args.folder)
        return 0
    with tempfile.TemporaryDirectory(dir=args.dir if args.command == "table" else None) as tmp:
        result = syncs_table(Path(tmp), args.calls if args.command == "table" else 50, 64)
    for row in result.get("rows", []):
        print(f"{row['system']:>20} {row['op']:>13} {row['per_call']}")
    if "skipped" in result:
        print(result["skipped"])
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
