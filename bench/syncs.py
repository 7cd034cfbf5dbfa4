"""Count the fsync and fdatasync calls of each operation, with strace.

For each (system, operation), a child interpreter (``python -m bench.syncs child ...``)
runs the system's ``bench.ops`` phases ``n`` calls each (the phases before the
operation's are its set-up), calling ``os.access`` on a marker path just before the
operation's phase and on a second marker just after it. The parent runs it under
``strace -f`` and counts the ``fsync``/``fdatasync``/``sync_file_range`` calls between
the two markers, so set-up and interpreter start-up are not counted. The result is
the number of syncs per call (and per job for batch calls). Without ``strace`` (or
without permission to trace) the section is reported as skipped.

Syncs that are deferred, as WAL checkpoints are, show up only when a checkpoint falls
inside the ``n`` calls: a figure of 0 means "none per commit", not "never".
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import worker
from bench.limits import bare_connection, bare_transaction
from bench.measure import Timed, run_counted
from bench.ops import Calls, Queue, Steps, phases
from bench.peers import PEERS, open_peer, peer_version

__all__ = ["SCENARIOS", "count_in_trace", "count_syncs", "syncs_table"]

START = "/bench-syncs-start"
END = "/bench-syncs-end"
TRACED = "fsync,fdatasync,sync_file_range,access"
SYNC_CALL = re.compile(r"^(?:\[pid\s+)?\d*\]?\s*(fsync|fdatasync|sync_file_range)\(")
CHILD_TIMEOUT_S = 120.0
BARE = ("DELETE+FULL", "WAL+FULL", "WAL+NORMAL")  # SQLite alone, as in bench.limits

# (system, operation): what docs/performance.md shows (a commit's syncs, a take+ack's)
SCENARIOS: tuple[tuple[str, str], ...] = (
    *((f"bare {mode}", "transaction") for mode in BARE),
    *(("worker", op) for op in ("claim", "finish", "claim_many", "finish_many")),
    *((peer, op) for peer in PEERS for op in ("claim", "finish")),
)


class _Traced(Exception):
    """The traced phase has ended: nothing more to run."""


class _Bare(Calls):
    """Bare transactions (``bench.limits``) as a queue whose every put is one (only the
    puts are traced)."""

    def __init__(self, folder: Path, mode: str) -> None:
        super().__init__(None, bare_connection(folder / "bare.sqlite", *mode.split("+")))

    def put(self, i: int) -> None:
        bare_transaction(self.con)


def child(system: str, op: str, n: int, size: int, folder: Path) -> None:
    """Run ``n`` calls of ``op`` on ``system`` in ``folder`` between the two markers."""
    queue: Queue | None
    if system.startswith("bare "):
        queue = _Bare(folder, system.removeprefix("bare "))
    elif system == "worker":
        batch = size if op.endswith("_many") else 1
        queue = Calls(worker, worker.open_queue(folder / "syncs.sqlite"), batch)
    else:
        queue = open_peer(system, folder / system)
    if queue is None:
        raise SystemExit(f"{system} is not installed")
    traced = "enqueue" if op == "transaction" else op.removesuffix("_many")

    def timer(phase: str, steps: Steps, count: int) -> Timed:
        if phase == traced:
            os.access(START, os.F_OK)
        figure = run_counted(steps[0], count, CHILD_TIMEOUT_S)
        if phase == traced:
            os.access(END, os.F_OK)
            raise _Traced
        return figure

    with contextlib.suppress(_Traced):
        phases([queue], n, timer)


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
    with tempfile.TemporaryDirectory(dir=folder) as work:
        trace = Path(work) / "trace.txt"
        argv = ["strace", "-f", "-qq", "-o", str(trace), "-e", f"trace={TRACED}", sys.executable]
        argv += ["-m", "bench.syncs", "child", system, op, str(n), str(size), work]
        env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
        done = subprocess.run(argv, env=env, capture_output=True, timeout=CHILD_TIMEOUT_S)
        lines = trace.read_text().splitlines() if trace.exists() else []
    if done.returncode != 0 or not any(START in line for line in lines):
        return None
    return count_in_trace(lines) / n


def syncs_table(folder: Path, n: int, size: int) -> dict[str, Any]:
    """Syncs per call for every scenario that can run here; why not, for the others."""
    if shutil.which("strace") is None:
        return {"skipped": "strace not found"}
    rows: list[dict[str, Any]] = []
    for system, op in SCENARIOS:
        missing = system in PEERS and peer_version(system) is None
        per_call = None if missing else count_syncs(system, op, n, size, folder)
        row: dict[str, Any] = {"system": system, "op": op, "per_call": per_call}
        if per_call is None:
            row["note"] = "not installed" if missing else "strace failed"
        rows.append(row)
    return {"calls": n, "rows": rows}


if __name__ == "__main__":  # python -m bench.syncs child SYSTEM OP N SIZE FOLDER: what is traced
    system, op, n, size, folder = sys.argv[2:]
    child(system, op, int(n), int(size), Path(folder))
