"""The soak's report: what the checker finds after a run, and the table it prints.

The checker trusts files, not reports. What the queue file and the inbox file can
decide (lost jobs, effects applied twice, done jobs without an effect, effects
without their job, tokens) is decided by ``courier.audit``, the same check the demo
and the process tests use, with the intake's accepted jobs as the expected ones.
The couriers' event logs add only what the files cannot show: how each finish came
back (``stale`` ones must have been rejected, no ticket finished twice, no job done
by two tickets), how each process ended, and the lock timeouts seen. The chaos
counts say how much chaos there was; no rule trusts them.

A **stale overwrite** is a finish the queue accepted although its ticket was no
longer live: one whose ``now_ms`` had reached its ``lease_until`` (the
PostgreSQL couriers log both, at the server's clock), or a ``done`` that does not
stand in the queue at the end (another status, or another token). Each must be 0.

With simulated hosts, the partitions are read back the same way: the job each
cut-off courier was delivering, whether that courier's late finish of it came
back ``stale``, and whether a courier on another host took the job over (a
later ticket, a higher token); a run with partitions but no late finish refused fails, as one
with pauses in flight but no stale finish does. Reconnects are the couriers'
own ``reconnect`` lines.

The **forced events** (``chaos.witness``) are read back from their witnesses' own
event logs: the forced drill's courier died at its hook; the courier frozen in
flight had its finish of the job it held refused as stale; the courier cut off
lost its connection, reconnected, had its late finish refused, and another host
took its job over. A forced event that was never played, or whose witness does
not show that, fails the run: a run that happens to be quiet must not pass.

A job quarantined as ``dead`` may still have had its effect applied: that is the
gap the contract does not claim to close, counted, never a failure.
"""

from __future__ import annotations

import json
import signal
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos.courier_process import CourierProcess
from chaos.schedule import HOOK_POINTS, PAUSE_IN_FLIGHT, Config
from chaos.tally import ChaosCounts
from chaos.witness import DRILL
from courier import audit

__all__ = ["Observed", "ProcessRecord", "check", "process_record", "render_table"]

LOG_TAIL_LINES = 15
# The report's ``hosts`` section of a run on a queue file (``chaos.run.Site.describe``).
ONE_HOST: dict[str, Any] = {
    "backend": "sqlite",
    "simulated_hosts": 0,
    "addresses": [],
    "server": "a queue file",
    "skipped": None,
}


@dataclass
class ProcessRecord:
    """One courier incarnation as the checker sees it."""

    owner: str
    incarnation: int
    healthy: bool
    drill: str | None
    exit_code: int | None
    killed_for: str | None
    terminated: bool
    events: list[dict[str, Any]]
    unreadable_lines: int
    log_tail: str


@dataclass
class Observed:
    """Everything the checker reads after a run: both files, the event logs, the counts."""

    config: Config
    ended: str
    timings: dict[str, float]
    files: audit.Files
    accepted: dict[str, int]
    intake_outcomes: dict[str, int]
    intake_surprises: list[str]
    intake_busy: int
    planned_new: int
    processes: list[ProcessRecord]
    counts: ChaosCounts
    receiver_faults: dict[str, int]
    hosts: dict[str, Any] = field(default_factory=lambda: dict(ONE_HOST))


def read_events(path: Path) -> tuple[list[dict[str, Any]], int]:
    """The JSON lines of one event log, and how many lines could not be read."""
    if not path.exists():
        return [], 0
    events: list[dict[str, Any]] = []
    unreadable = 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            unreadable += 1
            continue
        if isinstance(value, dict):
            events.append(value)
        else:
            unreadable += 1
    return events, unreadable


def _tail(path: Path) -> str:
    if not path.exists():
        return ""
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return "\n".join(lines[-LOG_TAIL_LINES:])


def process_record(courier: CourierProcess) -> ProcessRecord:
    """What the checker needs of one courier incarnation, its event log read back."""
    events, unreadable = read_events(courier.events)
    return ProcessRecord(
        owner=courier.owner,
        incarnation=courier.incarnation,
        healthy=courier.healthy,
        drill=None if courier.drill is None else courier.drill.name,
        exit_code=courier.exit_code,
        killed_for=courier.killed_for,
        terminated=courier.terminated,
        events=events,
        unreadable_lines=unreadable,
        log_tail=_tail(courier.log),
    )


def _exit_kind(record: ProcessRecord) -> str:
    """How one courier process ended: the checker's classification."""
    code = record.exit_code
    if record.killed_for is not None:
        return f"killed by the supervisor ({record.killed_for})"
    if code == -signal.SIGKILL:
        dies = [event for event in record.events if event.get("event") == "die"]
        return f"died at hook {dies[-1]['point']}" if dies else "unexplained SIGKILL"
    if code == 0 or (code == -signal.SIGTERM and record.terminated):
        return "stopped"
    return "crashed"


def fencing_figures(processes: list[ProcessRecord]) -> dict[str, Any]:
    """What the couriers saw of their finishes: stale ones, and any fenced twice.

    A ticket ``(id, token)`` belongs to exactly one claim, so it can be finished
    (not ``stale``) at most once; and ``done`` is final, so one id is done by at
    most one ticket.
    """
    results = [e for p in processes for e in p.events if e.get("event") == "result"]
    by_status = Counter(str(e["status"]) for e in results)
    finishes = Counter((e["id"], e["token"]) for e in results if e["status"] != "stale")
    done_tokens: dict[str, set[int]] = defaultdict(set)
    for event in results:
        if event["status"] == "done":
            done_tokens[event["id"]].add(event["token"])
    return {
        "run_once_results": dict(sorted(by_status.items())),
        "stale_finishes_rejected": by_status["stale"],
        "tickets_finished_twice": sorted(f"{i}@{t}" for (i, t), n in finishes.items() if n > 1),
        "jobs_done_by_two_tickets": sorted(
            i for i, tokens in done_tokens.items() if len(tokens) > 1
        ),
        "largest_token_reported": max((int(e["token"]) for e in results), default=0),
    }


ACCEPTED = ("done", "pending", "dead")  # a finish's answers other than stale (and unsent)


def stale_overwrites(processes: list[ProcessRecord], jobs: list[dict[str, Any]]) -> list[str]:
    """Accepted finishes whose ticket was no longer live (see the module docstring)."""
    final = {job["id"]: job for job in jobs}
    found: set[str] = set()
    for event in (e for p in processes for e in p.events if e.get("event") == "result"):
        if event["status"] not in ACCEPTED:
            continue
        ticket = f"{event['id']}@{event['token']}"
        now_ms, lease_until = event.get("now_ms"), event.get("lease_until")
        if isinstance(now_ms, int) and isinstance(lease_until, int) and now_ms >= lease_until:
            found.add(ticket)
        job = final.get(event["id"])
        if event["status"] == "done" and (
            job is None or job["status"] != "done" or int(job["token"]) != int(event["token"])
        ):
            found.add(ticket)
    return sorted(found)


def _host(owner: str) -> str:
    """The simulated host of an owner: ``cN`` and its successor ``rN`` share host ``N``."""
    return owner[1:]


def _late_finish(events: list[dict[str, Any]]) -> str:
    """How the cut-off courier's own finish of the job it held came out."""
    statuses = {str(e["status"]) for e in events if e["event"] == "result"}
    if "stale" in statuses:
        return "refused (stale)"
    if statuses - {"unsent"}:
        return "accepted"  # a stale overwrite if it came too late (checked apart)
    if statuses:
        return "never sent (the courier was stopping)"
    return "none (the courier was killed first)"


Tickets = dict[str, list[tuple[int, str]]]  # job id -> (token, host) of every ticket logged


def _tickets(processes: list[ProcessRecord]) -> Tickets:
    tickets: Tickets = defaultdict(list)
    for record in processes:
        for event in record.events:
            if event.get("event") in ("claimed", "result"):
                tickets[str(event["id"])].append((int(event["token"]), _host(record.owner)))
    return tickets


def _taken_over(tickets: Tickets, job: object, held: int | None, owner: str) -> bool:
    """Whether a courier on another host than ``owner``'s logged a later ticket for ``job``."""
    later = [host for token, host in tickets.get(str(job), []) if held is not None and token > held]
    return any(host != _host(owner) for host in later)


def partition_figures(processes: list[ProcessRecord], counts: ChaosCounts) -> dict[str, Any]:
    """What became of each host cut off and of the job it was delivering.

    The ticket the cut-off courier held is the partition's ``token`` if the
    supervisor knew it (the forced partition), else its highest logged for the job.
    """
    tickets = _tickets(processes)
    outcomes: Counter[str] = Counter()
    taken_over = 0
    for cut in counts.partitions:
        owner, job = cut["owner"], cut["job"]
        mine = [
            e
            for p in processes
            if p.owner == owner and not p.healthy
            for e in p.events
            if e.get("event") in ("claimed", "result") and e.get("id") == job
        ]
        outcomes[_late_finish(mine)] += 1
        held = cut.get("token", max((int(e["token"]) for e in mine), default=None))
        taken_over += _taken_over(tickets, job, held, owner)
    events = [e for p in processes for e in p.events]
    return {
        "partitions": len(counts.partitions),
        "heals": counts.heals,
        "late_finishes_refused": outcomes["refused (stale)"],
        "late_finish_outcomes": dict(sorted(outcomes.items())),
        "jobs_taken_over": taken_over,
        "reconnects": sum(1 for e in events if e.get("event") == "reconnect"),
        "disconnects": sum(1 for e in events if e.get("event") == "disconnect"),
        "finishes_retried_after_reconnect": sum(
            1 for e in events if e.get("event") == "result" and e.get("retried")
        ),
        "cuts": counts.partitions,
    }


def _after_frozen(record: ProcessRecord, job: object) -> list[dict[str, Any]]:
    """The events ``record`` logged after it froze holding ``job`` (its last such line)."""
    frozen = [
        n for n, e in enumerate(record.events) if e.get("event") == "frozen" and e.get("id") == job
    ]
    return record.events[frozen[-1] + 1 :] if frozen else []


def _witness_outcome(
    witness: dict[str, Any], record: ProcessRecord | None, tickets: Tickets
) -> tuple[bool, str]:
    """Whether one forced event's witness shows its effect, and what it shows."""
    if record is None:
        return False, "no such courier"
    if witness["kind"] == DRILL:
        ending = _exit_kind(record)
        return ending == f"died at hook {record.drill}", ending
    after = _after_frozen(record, witness["job"])
    finish = _late_finish([e for e in after if e.get("id") == witness["job"]])
    if witness["kind"] == PAUSE_IN_FLIGHT:
        return finish == "refused (stale)", f"its finish: {finish}"
    seen = {str(e.get("event")) for e in after}
    parts = {
        "lost its connection": "disconnect" in seen,
        "reconnected": "reconnect" in seen,
        "late finish refused": finish == "refused (stale)",
        "job taken over by another host": _taken_over(
            tickets, witness["job"], witness["token"], record.owner
        ),
    }
    shown = ", ".join(name if held else f"NOT {name}" for name, held in parts.items())
    return all(parts.values()), f"{shown} (its finish: {finish})"


def witness_figures(processes: list[ProcessRecord], counts: ChaosCounts) -> dict[str, Any]:
    """The forced events: those never played, and what each witness shows."""
    tickets = _tickets(processes)
    witnesses = []
    for witness in counts.witnesses:
        key = (witness["owner"], witness["incarnation"])
        record = next(
            (p for p in processes if (p.owner, p.incarnation) == key and not p.healthy), None
        )
        shown, outcome = _witness_outcome(witness, record, tickets)
        witnesses.append({**witness, "shown": shown, "outcome": outcome})
    return {
        "not_played": list(counts.forced_left),
        "witnesses": witnesses,
        "not_shown": [
            f"{w['kind']} on {w['owner']}: {w['outcome']}" for w in witnesses if not w["shown"]
        ],
    }


def process_figures(processes: list[ProcessRecord]) -> dict[str, Any]:
    """How every courier process ended, and where the drills killed them."""
    kinds = Counter(_exit_kind(record) for record in processes)
    hooks = Counter(
        kind.removeprefix("died at hook ") for kind in kinds.elements() if "hook" in kind
    )
    crashed = [
        {"owner": r.owner, "incarnation": r.incarnation, "exit": r.exit_code, "log": r.log_tail}
        for r in processes
        if _exit_kind(r) == "crashed"
    ]
    busy = sum(1 for p in processes for e in p.events if e.get("event") == "busy")
    crashed_on_lock = sum(1 for c in crashed if "locked" in str(c["log"]))
    return {
        "started": len(processes),
        "endings": dict(sorted(kinds.items())),
        "killed_at_hook": {f"{o}:{p}": hooks[f"{o}:{p}"] for o, p in HOOK_POINTS},
        "crashes": crashed,
        "unexplained_kills": kinds["unexplained SIGKILL"],
        "unreadable_event_lines": sum(r.unreadable_lines for r in processes),
        "lock_timeouts_seen": busy,
        "lock_timeouts_survived": busy - crashed_on_lock,
    }


def _chaos_figures(obs: Observed, processes: dict[str, Any]) -> dict[str, Any]:
    counts = obs.counts
    return {
        "kills": dict(sorted(counts.kills.items())),
        "killed_at_hook": processes["killed_at_hook"],
        "pauses": dict(sorted(counts.pauses.items())),
        "restarts": counts.restarts,
        "receiver_faults": dict(sorted(obs.receiver_faults.items())),
        "outages": counts.outages,
        "redrives": dict(sorted(counts.redrives.items())),
        "skipped_no_target": dict(sorted(counts.skipped.items())),
        "armed_never_fired": counts.armed_left,
    }


def check(obs: Observed) -> dict[str, Any]:
    """The report of one run: every figure, the must-be-zero ones, and the failures."""
    files = audit.check(obs.files, obs.accepted)
    fencing = fencing_figures(obs.processes)
    fencing["stale_overwrites"] = stale_overwrites(obs.processes, obs.files.jobs)
    processes = process_figures(obs.processes)
    partitions = partition_figures(obs.processes, obs.counts)
    forced = witness_figures(obs.processes, obs.counts)
    from_logs = {
        "stale overwrites": len(fencing["stale_overwrites"]),
        "tickets finished twice": len(fencing["tickets_finished_twice"]),
        "jobs done by two tickets": len(fencing["jobs_done_by_two_tickets"]),
        "intake surprises": len(obs.intake_surprises),
        "courier crashes": len(processes["crashes"]),
        "unexplained kills": processes["unexplained_kills"],
        "forced events not played or not shown": len(forced["not_played"])
        + len(forced["not_shown"]),
    }
    failures = files.failures()
    failures += [f"{name} = {value} (must be 0)" for name, value in from_logs.items() if value]
    failures += [f"forced {kind} never played" for kind in forced["not_played"]]
    failures += [f"forced {line}" for line in forced["not_shown"]]
    # A courier frozen in flight (after the receiver's commit, before the queue's
    # finish) for longer than its lease must come back to a stale finish: the fencing
    # at work. The forced pause in flight makes sure there is one, and says which.
    frozen = obs.counts.pauses["in flight"]
    if frozen and not fencing["stale_finishes_rejected"]:
        failures.append(f"stale finishes = 0 after {frozen} pauses in flight (must be > 0)")
    cuts = partitions["partitions"]
    if cuts and not partitions["late_finishes_refused"]:
        failures.append(f"late finishes refused = 0 after {cuts} partitions (must be > 0)")
    return {
        "config": asdict(obs.config),
        "ended": obs.ended,
        "timings_s": obs.timings,
        "files": files.as_dict(),
        "intake": {
            "planned": obs.planned_new,
            "enqueued": len(obs.accepted),
            "retries": obs.intake_outcomes.get("retry", 0),
            "conflicts": obs.intake_outcomes.get("conflict", 0),
            "surprises": obs.intake_surprises,
            "redriven": len({row["id"] for row in obs.files.redrives}),
        },
        "fencing": fencing,
        "hosts": obs.hosts,
        "partitions": partitions,
        "forced": forced,
        "processes": processes,
        "chaos": _chaos_figures(obs, processes),
        "locks": {
            "courier_lock_timeouts": processes["lock_timeouts_seen"],
            "intake_lock_timeouts": obs.intake_busy,
            "lock_holds": dict(obs.counts.lock_holds),
        },
        "must_be_zero": files.must_be_zero() | from_logs,
        "failures": failures,
        "ok": not failures,
    }


# --- The table ----------------------------------------------------------------------


def _pairs(mapping: dict[str, Any]) -> str:
    return ", ".join(f"{key} {value}" for key, value in mapping.items()) or "none"


def _figure_rows(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    files, intake = report["files"], report["intake"]
    fencing, procs = report["fencing"], report["processes"]
    return [
        ("jobs enqueued (planned)", f"{intake['enqueued']} ({intake['planned']})", ""),
        ("intake retries / conflicts", f"{intake['retries']} / {intake['conflicts']}", ""),
        ("jobs done", str(files["done"]), ""),
        ("jobs dead, by reason", f"{sum(files['dead'].values())}: {_pairs(files['dead'])}", ""),
        ("dead jobs whose effect was applied", str(len(files["dead_with_effect"])), "allowed"),
        ("jobs redriven by the operator", str(intake["redriven"]), ""),
        ("stale finishes attempted and rejected", str(fencing["stale_finishes_rejected"]), "> 0"),
        (
            "couriers' reconnects (after a lost connection)",
            str(report["partitions"]["reconnects"]),
            "",
        ),
        ("run_once results", _pairs(fencing["run_once_results"]), ""),
        (
            "lock timeouts seen / survived",
            f"{procs['lock_timeouts_seen']} / {procs['lock_timeouts_survived']}",
            "",
        ),
        ("intake lock timeouts", str(report["locks"]["intake_lock_timeouts"]), ""),
        ("HTTP delivery requests / effects", f"{files['deliveries']} / {files['effects']}", ""),
        ("delivery answers by status", _pairs(files["answers"]), ""),
        ("largest fencing token", str(files["largest_token"]), ""),
    ]


def _chaos_rows(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    chaos, procs = report["chaos"], report["processes"]
    holds = _pairs(report["locks"]["lock_holds"])
    return [
        ("courier processes started / restarts", f"{procs['started']} / {chaos['restarts']}", ""),
        ("SIGKILLs by the supervisor", _pairs(chaos["kills"]), ""),
        ("SIGKILLs inside a fault hook", _pairs(chaos["killed_at_hook"]), ""),
        ("pauses (SIGSTOP past the lease)", _pairs(chaos["pauses"]), ""),
        ("receiver faults injected", _pairs(chaos["receiver_faults"]), ""),
        ("receiver outages / write-lock holds", f"{chaos['outages']} / {holds}", ""),
        ("operator redrives", _pairs(chaos["redrives"]), ""),
        *_partition_rows(report),
        *_forced_rows(report),
    ]


def _forced_rows(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    forced = report["forced"]
    shown = sum(1 for w in forced["witnesses"] if w["shown"])
    return [
        (
            "forced events shown by their witness / played",
            f"{shown} / {len(forced['witnesses'])}",
            "",
        ),
        *((f"  forced {w['kind']} on {w['owner']}", w["outcome"], "") for w in forced["witnesses"]),
    ]


def _partition_rows(report: dict[str, Any]) -> list[tuple[str, str, str]]:
    hosts, cut = report["hosts"], report["partitions"]
    if not hosts["simulated_hosts"]:
        why = hosts["skipped"] or "not asked for"
        return [("simulated hosts", f"none ({why})", "")]
    return [
        ("simulated hosts (own address each)", str(hosts["simulated_hosts"]), ""),
        (
            "hosts cut off while holding a lease / healed",
            f"{cut['partitions']} / {cut['heals']}",
            "",
        ),
        ("their late finishes refused (stale)", str(cut["late_finishes_refused"]), "> 0"),
        ("their own finish of that job, by outcome", _pairs(cut["late_finish_outcomes"]), ""),
        ("their jobs taken over by another host", str(cut["jobs_taken_over"]), ""),
        (
            "disconnects / finishes retried after reconnect",
            f"{cut['disconnects']} / {cut['finishes_retried_after_reconnect']}",
            "",
        ),
    ]


def render_table(report: dict[str, Any]) -> str:
    """The report as a fixed-width table: figure, the rule it must keep, value."""
    zero = [(name, str(value), "= 0") for name, value in report["must_be_zero"].items()]
    rows = _figure_rows(report) + zero + _chaos_rows(report)
    width = max(len(label) for label, _, _ in rows)
    timings = report["timings_s"]
    lines = [
        f"queue: {report['hosts']['server']}",
        f"chaos phase {timings['chaos']} s (ended: {report['ended']}), "
        f"recovery {timings['recovery']} s, total {timings['total']} s",
        f"{'figure':<{width}}  {'rule':<7}  value",
        f"{'-' * width}  {'-' * 7}  {'-' * 5}",
    ]
    lines += [f"{label:<{width}}  {rule:<7}  {value}" for label, value, rule in rows]
    return "\n".join(lines)
