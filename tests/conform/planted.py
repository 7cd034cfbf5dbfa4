"""Write-level bugs planted in a copy of ``worker.py``, each run in one chaos soak: does
the conformance monitor (``courier conform``, run by every soak) flag it?

Each plant is a ``tests.parallel.planted.Plant`` (exact text replacements, each of which
must match once). ``soak(bug, ...)`` copies the project's code (``worker.py``,
``pgworker.py``, ``chaos``, ``courier``, ``model``) into a folder of its own with the
planted ``worker.py`` and runs ``python -m chaos`` there: the soak starts its couriers
from the project root it finds itself in (``courier.procs.project_root``), so every
process of the soak runs the planted module. A plant counts as flagged when the soak's
conformance check finds at least one transaction no model step explains.

    python -m tests.conform.planted --json FILE            # every plant, one soak each
    python -m tests.conform.planted --only finish-keeps-owner
    python -m tests.conform.planted --table FILE           # the docs' table of a run

``docs/testing.md`` (the conformance monitor) holds the table of a recorded run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from tests.parallel.planted import ROOT, Plant

__all__ = ["PLANTS", "main", "soak", "table"]

# The texts below quote worker.py on purpose: a plant is worker.py's own code with one
# mistake in it, so its replacements must match the source exactly (``Plant.source``).
_LIVE = """
    AND owner = json_extract(ticket.value, '$[3]')
    AND token = json_extract(ticket.value, '$[4]')
    AND attempts = json_extract(ticket.value, '$[5]')
    AND lease_until = json_extract(ticket.value, '$[6]')
"""
_TIME = "AND :now < lease_until AND :now < deadline)"
_SETTLE_SET = "available_at = json_extract(verdict.value, '$[3]'), owner = NULL, lease_until = NULL"
_QUARANTINE_SET = "SET status = 'dead', reason = 'deadline', owner = NULL, lease_until = NULL"
_LEASE_SET = "lease_until = json_extract(lease.value, '$[3]'), reason = NULL"
_EXHAUSTED_LEASED = "WHERE status = 'leased' AND lease_until <= :now AND attempts >= max_attempts"
_EXHAUSTED_ANY = "WHERE status = 'leased' AND :now >= 0 AND attempts >= max_attempts"
_REQUEUE_SET = "SET status = 'pending', attempts = 0, available_at = ?, deadline = ?,"

PLANTS = (
    Plant(
        "finish-ignores-ticket",
        "finish checks the job is leased and the time bounds, but not the ticket's owner,"
        " token, attempt or lease_until: a stale courier settles its successor's lease",
        ((_LIVE, "\n"),),
    ),
    Plant(
        "finish-ignores-lease-end",
        "finish checks the ticket and the deadline but not that the lease is still running",
        ((_TIME, "AND :now < deadline)"),),
    ),
    Plant(
        "finish-keeps-owner",
        "finish clears lease_until but leaves the owner on the settled job",
        ((_SETTLE_SET, _SETTLE_SET.replace(" owner = NULL,", "")),),
    ),
    Plant(
        "retry-ignores-budget",
        "a retry on the last attempt goes back to pending instead of dead/exhausted",
        (("    if attempts >= max_attempts:\n", "    if attempts > max_attempts:\n"),),
    ),
    Plant(
        "retry-past-deadline",
        "a retry whose delay reaches the deadline goes back to pending instead of dead/deadline",
        (("    if now_ms + delay_ms >= deadline:\n", "    if now_ms > deadline:\n"),),
    ),
    Plant(
        "claim-lease-uncapped",
        "claim's lease is now + lease_ms, not capped by the job's deadline",
        (
            (
                '"lease_until": min(now_ms + lease_ms, deadline),',
                '"lease_until": now_ms + lease_ms,',
            ),
        ),
    ),
    Plant(
        "claim-keeps-token",
        "claim counts the attempt but does not raise the fencing token",
        (('"token": token + 1,', '"token": token,'),),
    ),
    Plant(
        "claim-ignores-backoff",
        "claim takes a retried job before its backoff ends (available_at not checked)",
        (
            ("{_RETRIED} AND available_at <= :now),", "{_RETRIED}),"),
            ("{_RETRIED} AND +available_at <= :now ORDER", "{_RETRIED} ORDER"),
        ),
    ),
    Plant(
        "claim-keeps-reason",
        "claim leases a retried job but leaves its reason (retry) on the lease",
        ((_LEASE_SET, _LEASE_SET.replace(", reason = NULL", "")),),
    ),
    Plant(
        "claim-keeps-attempts",
        "claim's ticket counts the attempt, but the row keeps the attempts it had",
        (
            (
                '[job[0], ticket["attempt"], ticket["token"], ticket["lease_until"]]',
                '[job[0], job[3], ticket["token"], ticket["lease_until"]]',
            ),
        ),
    ),
    Plant(
        "enqueue-deadline-is-ttl",
        "enqueue stores the ttl as the deadline (now is not added)",
        (
            (
                "return _intake(con, job_id, qty, now_ms, now_ms + ttl_ms, max_attempts)",
                "return _intake(con, job_id, qty, now_ms, ttl_ms, max_attempts)",
            ),
            (
                "_intake(con, job_id, qty, now_ms, now_ms + ttl_ms, max_attempts))",
                "_intake(con, job_id, qty, now_ms, ttl_ms, max_attempts))",
            ),
        ),
    ),
    Plant(
        "finish-ok-with-reason",
        "finish gives a done job the reason ok (the contract's done job has none)",
        (('        return "done", None, now_ms\n', '        return "done", "ok", now_ms\n'),),
    ),
    Plant(
        "quarantine-takes-running-lease",
        "the quarantine takes a leased job whose budget is spent before its lease has expired",
        (
            (f'  {_EXHAUSTED_LEASED}"""', f'  {_EXHAUSTED_ANY}"""'),
            (f'    {_EXHAUSTED_LEASED})"""', f'    {_EXHAUSTED_ANY})"""'),
        ),
    ),
    Plant(
        "quarantine-wrong-reason",
        "the quarantine marks a job whose deadline passed as exhausted",
        ((_QUARANTINE_SET, _QUARANTINE_SET.replace("'deadline'", "'exhausted'")),),
    ),
    Plant(
        "quarantine-keeps-lease",
        "the quarantine of a passed deadline leaves the owner and lease_until of an expired lease",
        ((_QUARANTINE_SET, "SET status = 'dead', reason = 'deadline'"),),
    ),
    Plant(
        "redrive-resets-token",
        "redrive sets the fencing token back to 0, so an old ticket's token comes round again",
        ((_REQUEUE_SET, _REQUEUE_SET.replace("attempts = 0,", "attempts = 0, token = 0,")),),
    ),
    Plant(
        "redrive-without-audit",
        "redrive re-queues the job without writing its audit row",
        (("        con.execute(_INSERT_AUDIT, (job_id, token, now_ms, note))\n", ""),),
    ),
    Plant(
        "redrive-keeps-deadline",
        "redrive renews the budget but keeps the old deadline",
        (
            (
                _REQUEUE_SET,
                "SET status = 'pending', attempts = 0, available_at = ?,"
                " deadline = coalesce(deadline, ?),",
            ),
        ),
    ),
)
BY_NAME = {bug.name: bug for bug in PLANTS}

PACKAGES = ("chaos", "courier", "model")
SOAK = ("--seconds", "20", "--recovery-seconds", "15", "--jobs", "400", "--seed", "1")
SOAK_TIMEOUT_S = 600
SHOWN = 110  # characters of the first unexplained transaction's reasons, in the table


def soak(bug: Plant, folder: Path, options: tuple[str, ...] = SOAK) -> dict[str, Any]:
    """Run one chaos soak on ``bug``'s copy of ``worker.py``; what its conformance check
    found."""
    folder.mkdir(parents=True, exist_ok=True)
    for package in PACKAGES:
        ignore = shutil.ignore_patterns("__pycache__")
        shutil.copytree(ROOT / package, folder / package, ignore=ignore, dirs_exist_ok=True)
    shutil.copy(ROOT / "pgworker.py", folder / "pgworker.py")
    (folder / "worker.py").write_text(bug.source((ROOT / "worker.py").read_text()))
    report = folder / "report.json"
    env = dict(os.environ, PYTHONPATH=str(folder))
    command = [sys.executable, "-m", "chaos", *options, "--quiet", "--json", str(report)]
    done = subprocess.run(
        command, cwd=folder, env=env, capture_output=True, timeout=SOAK_TIMEOUT_S, check=False
    )
    if not report.exists():
        tail = done.stderr.decode(errors="replace")[-2000:]
        return {"plant": bug.name, "summary": bug.summary, "error": tail, "flagged": False}
    result = json.loads(report.read_text())
    conformance = result["conformance"]
    first = _shown(conformance["findings"][0]) if conformance["findings"] else None
    return {
        "plant": bug.name,
        "summary": bug.summary,
        "transactions": conformance["transactions"],
        "unexplained": conformance["unexplained"],
        "flagged": conformance["unexplained"] > 0,
        "first": first,
        "operations": conformance["operations"],
        "soak_ok": result["ok"],
        "other_failures": [f for f in result["failures"] if "model step" not in f],
    }


def _shown(finding: dict[str, Any]) -> str:
    """The first reasons an unexplained transaction gives: a rule no value satisfies, or
    the columns where the model's row differs from the queue's."""
    reasons = list(finding["problems"][:2])
    step = finding["step"]["operation"] if finding["step"] else "the step"
    for d in finding["differences"][: 2 - len(reasons)]:
        reasons.append(
            f"{step}: {d['row']} {d['column']} model {d['model']!r}, queue {d['queue']!r}"
        )
    return "; ".join(reasons)


def table(results: list[dict[str, Any]]) -> str:
    """The docs' markdown table of a recorded run."""
    lines = [
        "| plant | the bug | transactions checked | unexplained | what the first one shows |",
        "|---|---|---:|---:|---|",
    ]
    for r in results:
        first = r.get("first") or r.get("error", "").splitlines()[-1:] or "-"
        shown = first if isinstance(first, str) else " ".join(first)
        shown = shown if len(shown) <= SHOWN else shown[: SHOWN - 3] + "..."
        lines.append(
            f"| `{r['plant']}` | {r['summary']} | {r.get('transactions', '-')} "
            f"| {r.get('unexplained', '-')} | {shown.replace('|', '/')} |"
        )
    flagged = sum(1 for r in results if r["flagged"])
    lines.append("")
    lines.append(f"Flagged in their first soak: {flagged} of {len(results)}.")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="One chaos soak per planted bug.")
    parser.add_argument("--only", action="append", choices=sorted(BY_NAME), help="one plant")
    parser.add_argument("--json", type=Path, help="write the results here")
    parser.add_argument("--table", type=Path, help="print the table of a recorded JSON")
    args = parser.parse_args(argv)
    if args.table:
        print(table(json.loads(args.table.read_text())))
        return 0
    results = []
    with tempfile.TemporaryDirectory(prefix="conform-planted-") as tmp:
        for bug in [BY_NAME[name] for name in args.only] if args.only else PLANTS:
            result = soak(bug, Path(tmp) / bug.name)
            print(json.dumps(result), flush=True)
            results.append(result)
            if args.json:
                args.json.write_text(json.dumps(results, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
