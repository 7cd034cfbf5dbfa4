"""The harness every bench uses: timing, percentiles, medians of rounds, fleets of child
processes, and a recorded bench's command line (measure a record, or render one). See
docs/benchmarks.md, ``bench.measure``."""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import platform
import queue
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

__all__ = ["T0_MS", "Timed", "add_record_options", "fleet", "fleet_totals", "load_average"]
__all__ += ["log", "median_of_rounds", "paired", "percentile", "record_or_render"]
__all__ += ["publish", "refuse_unwritable", "write_page"]

# The virtual time base of every single-process measurement: the queues never read a
# clock, so a fixed "now" (plus a millisecond per step where the order matters) makes
# the runs independent of the wall clock. Processes that run together use the real
# wall clock instead, their only shared time base.
T0_MS = 1_700_000_000_000
READY_TIMEOUT_S = 120.0


@dataclass(frozen=True)
class Timed:
    """``count`` operations (or jobs) done in ``seconds`` of wall time."""

    count: int
    seconds: float

    @property
    def per_s(self) -> float:
        """Operations per second (0 when nothing was timed)."""
        return self.count / self.seconds if self.seconds > 0 else 0.0

    def as_dict(self, **extra: Any) -> dict[str, Any]:
        """The figure as JSON: count, seconds, per_s and any ``extra`` fields."""
        return {**asdict(self), "per_s": round(self.per_s, 1), **extra}


def run_counted(step: Callable[[int], int], count: int, max_seconds: float) -> Timed:
    """Call ``step(i)`` for ``i`` in ``0 .. count-1`` (each returns the jobs it handled),
    timing the whole loop; early once ``max_seconds`` have passed."""
    jobs = 0
    start = time.perf_counter()
    for i in range(count):
        jobs += step(i)
        if time.perf_counter() > start + max_seconds:
            break
    return Timed(jobs, time.perf_counter() - start)


def paired(
    steps: Sequence[Callable[[int], object]], count: int, max_seconds: float
) -> tuple[int, float, float]:
    """Run ``count`` steps, each of the two ``steps(i)`` in turn (the order flips every
    step, so both meet the disk in the same second), each timed; ``(steps, the first's
    seconds, the second's)``, early once ``max_seconds`` have passed."""
    spent = [0.0, 0.0]
    deadline = time.perf_counter() + max_seconds
    for i in range(count):
        for side in (0, 1) if i % 2 == 0 else (1, 0):
            started = time.perf_counter()
            steps[side](i)
            spent[side] += time.perf_counter() - started
        if time.perf_counter() > deadline:
            return i + 1, spent[0], spent[1]
    return count, spent[0], spent[1]


def median_of_rounds(rounds: Sequence[Any]) -> Any:
    """Merge the same JSON tree from several rounds: each figure becomes its median round.

    A figure is a dict with ``count`` and ``per_s`` (``Timed.as_dict``); the round with
    the median ``per_s`` (the lower one for an even number of rounds) is kept whole,
    plus ``rounds_per_s``, every round's rate in run order. Anything else is taken
    from the first round (journal modes, versions: the same in every round).
    """
    first = rounds[0]
    if isinstance(first, dict) and "per_s" in first and "count" in first:
        ordered = sorted(rounds, key=lambda figure: float(figure["per_s"]))
        return {**ordered[(len(ordered) - 1) // 2], "rounds_per_s": [r["per_s"] for r in rounds]}
    if isinstance(first, dict):
        return {key: median_of_rounds([r[key] for r in rounds]) for key in first}
    return first


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, nearest-rank method."""
    if not values:
        raise ValueError("percentile of no values")
    return sorted(values)[max(1, math.ceil(q / 100 * len(values))) - 1]


def _collect(results: Any, kind: str, n: int, timeout: float) -> list[Any]:
    """Up to ``n`` values of the messages ``(kind, value)`` on ``results`` within ``timeout``."""
    got: list[Any] = []
    until = time.monotonic() + timeout
    while len(got) < n:
        try:
            what, value = results.get(timeout=max(0.01, until - time.monotonic()))
        except queue.Empty:
            break
        if what == kind:
            got.append(value)
    return got


def fleet(
    target: Callable[..., None],
    args_of: Callable[[str], tuple[Any, ...]],
    n: int,
    grace_s: float,
    context: Any = None,
    watch: Callable[[Callable[[], bool]], Any] | None = None,
) -> tuple[float, list[dict[str, Any]], Any]:
    """Start ``n`` processes (``spawn`` unless ``context`` is given) running
    ``target(*args_of(owner), go, results)``, owners ``courier-0`` ...; once all put
    ``("ready", owner)`` on ``results``, set ``go``, run ``watch(alive)`` if given
    (``alive()``: whether any child still runs), and take the ``("result", report)``
    messages that come within ``grace_s``. Every child is joined, killed if it hangs.

    Returns the seconds until all were ready, the reports, and what ``watch`` returned
    (``None`` if some child never got ready).
    """
    context = context or multiprocessing.get_context("spawn")
    go, results = context.Event(), context.Queue()
    children = [
        context.Process(target=target, args=(*args_of(f"courier-{k}"), go, results), daemon=True)
        for k in range(n)
    ]
    began = time.perf_counter()
    try:
        for child in children:
            child.start()
        ready = len(_collect(results, "ready", n, READY_TIMEOUT_S))
        startup_s = time.perf_counter() - began
        go.set()
        alive = lambda: any(child.is_alive() for child in children)  # noqa: E731
        watched = watch(alive) if watch is not None and ready == n else None
        return startup_s, _collect(results, "result", n, grace_s), watched
    finally:
        go.set()
        for child in (child for child in children if child.pid is not None):
            child.join(timeout=10)
            if child.is_alive():
                child.kill()
                child.join()


def fleet_totals(
    processes: int, seconds: float, reports: list[dict[str, Any]], counted: str, *summed: str
) -> dict[str, Any]:
    """The children's ``counted`` work together over the longest window any reported
    (``per_s``), each child's share of the mean (the smallest and the largest), the
    sums of ``summed`` and every error."""
    counts = [int(report.get(counted, 0)) for report in reports]
    window = max((float(report.get("seconds", 0.0)) for report in reports), default=seconds)
    mean = sum(counts) / len(counts) if counts else 0.0
    return {
        "processes": processes,
        "reported": len(reports),
        "seconds": round(window, 3),
        counted: sum(counts),
        "per_s": round(sum(counts) / window, 1) if window > 0 else 0.0,
        "per_process": counts,
        "smallest_share": round(min(counts) / mean, 2) if mean else None,
        "largest_share": round(max(counts) / mean, 2) if mean else None,
        **{key: sum(int(report.get(key, 0)) for report in reports) for key in summed},
        "errors": [report["error"] for report in reports if "error" in report],
    }


def add_record_options(parser: argparse.ArgumentParser, page: str | None = "--doc") -> None:
    """The options of every recorded bench: ``--quick``, ``--dir``, ``--json``,
    ``--render`` and the page to write (``page``, if any)."""
    parser.add_argument("--quick", action="store_true", help="tiny sizes: a smoke run (seconds)")
    parser.add_argument("--dir", type=Path, help="a folder on a real disk (default: temporary)")
    parser.add_argument("--json", type=Path, help="write the record here")
    parser.add_argument("--render", type=Path, help="render a recorded JSON, measure nothing")
    if page is not None:
        parser.add_argument(page, type=Path, help="render into this page")


def load_average() -> float:
    """The 1-minute load average."""
    return round(os.getloadavg()[0], 2)


def record_or_render(
    args: argparse.Namespace,
    argv: Sequence[str] | None,
    module: str,
    measure: Callable[[Path], dict[str, Any]],
) -> dict[str, Any]:
    """The record of ``--render``, or one that ``measure(work)`` makes in the folder
    ``work`` of ``--dir`` (or of a temporary folder under /var/tmp named after the
    bench's ``module``), removed afterwards. A measured record starts with its ``meta``
    (the command ``argv`` spelt, the time, Python, the CPUs, quick or not, the load
    average before and after, and what ``measure`` put there) and is written to
    ``--json`` if given."""
    if args.render is not None:
        return dict(json.loads(args.render.read_text(encoding="utf-8")))
    folder = args.dir or Path(tempfile.mkdtemp(prefix=module.replace(".", "-"), dir="/var/tmp"))
    if str(folder.resolve()).startswith("/dev/shm"):
        log("warning: tmpfs makes every fsync free; these figures say nothing of durability")
    words = sys.argv[1:] if argv is None else argv
    meta = {
        "command": shlex.join(["python", "-m", module, *words]),
        "started": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "quick": bool(args.quick),
        "load_average_before": load_average(),
    }
    try:
        (folder / "work").mkdir(parents=True, exist_ok=True)
        record = measure(folder / "work")
    finally:
        shutil.rmtree(folder / "work" if args.dir else folder, ignore_errors=True)
    meta |= {**record.pop("meta", {}), "load_average_after": load_average()}
    record = {"meta": meta, **record}
    if args.json is not None:
        args.json.write_text(json.dumps(record, indent=1) + "\n", encoding="utf-8")
    return record


def write_page(page: Path | None, body: str, markers: tuple[str, str] | None = None) -> None:
    """Write ``body`` to ``page`` (if given): the whole page, or what stands between the
    lines ``markers`` of it.

    Raises:
        ValueError: ``page`` lacks the first marker or, after it, the second.
    """
    if page is None:
        return
    if markers is None:
        page.write_text(body, encoding="utf-8")
        return
    head, tail = _around_section(page, page.read_text(encoding="utf-8"), markers)
    page.write_text(f"{head}{markers[0]}\n{body}{markers[1]}{tail}", encoding="utf-8")


def _around_section(page: Path, text: str, markers: tuple[str, str]) -> tuple[str, str]:
    """What stands before the section ``markers`` of ``text`` and after it; ``ValueError``
    if ``page`` has no such section."""
    head, found, rest = text.partition(markers[0])
    _, ended, tail = rest.partition(markers[1])
    if not (found and ended):
        raise ValueError(f"{page} has no {markers[0]!r} ... {markers[1]!r} section")
    return head, tail


def refuse_unwritable(
    parser: argparse.ArgumentParser,
    args: argparse.Namespace,
    page: str | None = "--doc",
    markers: tuple[str, str] | None = None,
) -> None:
    """Stop with a usage error, before anything is measured, if what the run writes at
    its end could not be written: ``--json`` in a missing folder, or the page of the
    option ``page`` missing, or without its section ``markers`` (a page written whole
    needs only its folder). Minutes of measuring would otherwise end in a traceback,
    the record lost."""
    measures = getattr(args, "render", None) is None  # --render writes no --json
    if measures and args.json is not None and not args.json.parent.is_dir():
        parser.error(f"--json {args.json}: there is no folder {args.json.parent}")
    path = None if page is None else getattr(args, page.lstrip("-").replace("-", "_"))
    if path is None:
        return
    if markers is None:
        if not path.parent.is_dir():
            parser.error(f"{page} {path}: there is no folder {path.parent}")
        return
    if not path.is_file():
        parser.error(f"{page} {path}: no such file (the section goes into a page with its markers)")
    try:
        _around_section(path, path.read_text(encoding="utf-8"), markers)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        parser.error(f"{page} {path}: {error}")


def log(line: str) -> None:
    """Print one progress line on standard error (standard output carries the tables)."""
    print(line, file=sys.stderr, flush=True)


def publish(page: Path | None, text: str, markers: tuple[str, str] | None = None) -> int:
    """Write ``text`` into ``page`` (as ``write_page`` does) and print it; the exit status 0."""
    write_page(page, text, markers)
    print(text, end="")
    return 0
