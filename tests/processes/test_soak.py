"""The chaos soak, short: a hundred-odd jobs, real couriers, real kills, one checker.

``python -m chaos`` runs as a child process on a temporary directory, with a
fixed seed, and must exit 0: nothing lost, no effect applied twice, no done job
without its effect, no ticket finished twice, and every forced event played and
shown by its witness. The test then checks that the chaos really happened (kills
at random moments, after the receiver's commit and inside the fault hooks; pauses
that came back stale; receiver faults) so that a quiet run cannot pass for a
survived one. Each of those figures is forced by the soak itself, not left to
luck: the first round of chaos is forced and the forced drill, pause in flight
(and, on PostgreSQL, partition) are followed through their witness until they
showed their effect (``chaos.witness``), so the checks hold however loaded the
machine is. The rest checks the soak's own parts: its schedule is a pure function
of the seed, and its checker does fail on a broken run.

With ``HYPOTHESIS_PROFILE=nightly`` the soak runs at the full run's sizes (3,000
jobs, 6 couriers) instead.
"""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

import worker
from chaos import report as soak_report
from chaos import schedule
from chaos.child import chaos_command, sender_name, sender_pid
from chaos.faults import Fault, FaultInjector
from chaos.tally import ChaosCounts
from chaos.witness import DRILL, EventTail
from courier.audit import Files
from courier.delivery import HttpSend
from courier.inbox import Inbox
from courier.procs import Children
from courier.receiver import Receiver
from tests.profiles import profile_name

LONG = profile_name() == "nightly"
# make test: enough jobs that deliveries flow until every forced event has played
# (the first round ends 2.8 s in); nightly: the full run's sizes.
JOBS = 3000 if LONG else 120
COURIERS = 6 if LONG else 4  # at least one first incarnation per hook point
SEED = 11
# Bounds, not durations: the chaos phase ends once the queue is drained and every
# forced event has shown its effect (about 6 s on an idle machine for the short soak).
CHAOS_SECONDS = 300 if LONG else 60
RECOVERY_SECONDS = 60 if LONG else 15
# The soak stops by itself after both phases and two stop graces at most.
SOAK_TIMEOUT_S = CHAOS_SECONDS + RECOVERY_SECONDS + 30
TERM_GRACE_S = 20.0


Soak = tuple[int, dict[str, Any], str, float]  # exit status, report, output, seconds


def run_soak(tmp_path: Path, jobs: int, seconds: float, *options: object) -> Soak:
    """Run ``python -m chaos`` as a child in ``tmp_path`` (``COURIERS`` couriers, ``SEED``).

    ``seconds`` of chaos, then ``RECOVERY_SECONDS`` of recovery; ``options`` go first
    on its command line. Returns its exit status, report, output and seconds.
    """
    report_path = tmp_path / "report.json"
    log_path = tmp_path / "soak.log"
    argv = chaos_command(
        *options,
        "--jobs",
        jobs,
        "--couriers",
        COURIERS,
        "--seed",
        SEED,
        "--seconds",
        seconds,
        "--recovery-seconds",
        RECOVERY_SECONDS,
        "--workdir",
        tmp_path / "run",
        "--json",
        report_path,
        "--quiet",
    )
    started = time.monotonic()
    with Children() as children:
        proc = children.start(argv, log_path)
        code = wait_or_stop(proc)
    elapsed = time.monotonic() - started
    output = log_path.read_text(encoding="utf-8", errors="replace")
    report = json.loads(report_path.read_text(encoding="utf-8")) if report_path.exists() else {}
    return code, report, output, elapsed


def run_short_soak(tmp_path: Path) -> Soak:
    """Run the short soak as a child; return its exit status, report, output and seconds."""
    return run_soak(tmp_path, JOBS, CHAOS_SECONDS)


def passed_every_check(soak: Soak, jobs: int) -> dict[str, Any]:
    """Check that ``soak`` exited 0 with every check held over ``jobs`` jobs; its report.

    Every job was enqueued once and ended done or dead, every done job (and only a
    dead job listed as having one) has its effect, and every must-be-zero figure is 0.
    """
    code, report, output, _ = soak
    assert code == 0, output
    assert report["ok"] and report["failures"] == [], output
    assert set(report["must_be_zero"].values()) == {0}, output
    files = report["files"]
    assert report["intake"]["enqueued"] == jobs == files["jobs"]
    assert files["done"] + sum(files["dead"].values()) == jobs
    assert files["effects"] == files["done"] + len(files["dead_with_effect"])
    return report


def wait_or_stop(proc: subprocess.Popen[bytes]) -> int:
    """Wait for the soak; past its bound, SIGTERM it (it cleans up its couriers), then kill."""
    try:
        return proc.wait(timeout=SOAK_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=TERM_GRACE_S)
    except subprocess.TimeoutExpired:
        Children.kill(proc)
    pytest.fail(f"the soak did not stop by itself within {SOAK_TIMEOUT_S} s")


@pytest.fixture(scope="module")
def short_soak(tmp_path_factory: pytest.TempPathFactory) -> Soak:
    """One short soak for every test of this module (it is the expensive part)."""
    return run_short_soak(tmp_path_factory.mktemp("soak"))


def test_the_short_soak_passes_every_check(short_soak: Soak) -> None:
    files = passed_every_check(short_soak, JOBS)["files"]
    assert files["lost"] == files["unfinished"] == files["missing"] == []
    assert short_soak[3] < SOAK_TIMEOUT_S


# The couriers in batches (issue 33): small enough that a batch is often cut by a kill
# mid-batch, with a lease that covers two batches' deliveries in a row (``courier run``'s
# default timeout).
BATCH_OPTIONS = ("--batch", 8, "--in-flight", 4, "--lease-ms", 2000)


def test_a_short_soak_with_batched_couriers_passes_every_check(tmp_path: Path) -> None:
    """The same soak with ``courier run --batch 8 --in-flight 4``'s rounds: every check
    holds, the forced drill and pause in flight were shown, and a late finish was refused."""
    soak = run_soak(tmp_path, JOBS, CHAOS_SECONDS, *BATCH_OPTIONS)
    report = passed_every_check(soak, JOBS)
    assert (report["config"]["batch"], report["config"]["in_flight"]) == (8, 4)
    forced_events_shown(report, {DRILL, schedule.PAUSE_IN_FLIGHT})
    assert report["fencing"]["stale_finishes_rejected"] > 0, soak[2]
    assert report["files"]["lost"] == []


def forced_events_shown(report: dict[str, Any], kinds: set[str]) -> list[dict[str, Any]]:
    """Check that every forced event was played and each of ``kinds`` shown by its witness."""
    forced = report["forced"]
    assert forced["not_played"] == [] and forced["not_shown"] == [], forced
    assert {w["kind"] for w in forced["witnesses"]} == kinds, forced
    assert all(w["shown"] for w in forced["witnesses"]), forced
    witnesses: list[dict[str, Any]] = forced["witnesses"]
    return witnesses


def test_the_chaos_really_happened(short_soak: Soak) -> None:
    """Each figure is forced (see the module docstring), so each holds in every run."""
    _, report, output, _ = short_soak
    forced_events_shown(report, {DRILL, schedule.PAUSE_IN_FLIGHT})
    chaos = report["chaos"]
    # the forced kill at a random moment (it waits for a courier it may kill)
    assert chaos["kills"].get("random moment", 0) > 0, output
    # the forced drill's courier dies at its first claim and is restarted
    assert chaos["killed_at_hook"]["claim:after-claim"] > 0, output
    assert chaos["restarts"] > 0
    # the forced pause in flight: frozen past its lease, resumed, its finish refused
    assert chaos["pauses"].get("in flight", 0) > 0, output
    assert chaos["pauses"].get("resumed", 0) > 0, output
    assert report["fencing"]["stale_finishes_rejected"] > 0, output
    # the forced outage refuses one delivery at least: a request without an effect
    assert chaos["receiver_faults"].get("outage 503", 0) > 0
    assert report["files"]["deliveries"] > report["files"]["effects"]
    # every new job was enqueued (passed_every_check), and the plan has an intake
    # retry and a conflict before its last new job, so both were made
    ops = schedule.plan_intake(SEED, JOBS)
    last_new = max(n for n, op in enumerate(ops) if op.expect == "new")
    assert {"retry", "conflict"} <= {op.expect for op in ops[:last_new]}
    assert report["intake"]["retries"] > 0 and report["intake"]["conflicts"] > 0


def test_the_table_names_every_must_be_zero_figure(short_soak: Soak) -> None:
    _, report, output, _ = short_soak
    table = soak_report.render_table(report)
    for name in report["must_be_zero"]:
        assert name in table
    assert "stale finishes attempted and rejected" in table
    assert "OK: every check holds" in output


# --- The schedule ----------------------------------------------------------------------


def test_the_schedule_is_a_pure_function_of_the_seed() -> None:
    config = schedule.Config(couriers=4, jobs=200, seconds=60, seed=5)
    assert schedule.plan_chaos(config) == schedule.plan_chaos(config)
    assert schedule.plan_intake(5, 200) == schedule.plan_intake(5, 200)
    other = schedule.Config(couriers=4, seconds=60, seed=6)
    assert schedule.plan_chaos(config) != schedule.plan_chaos(other)
    faults = [schedule.receiver_fault(5, n, 750) for n in range(1, 500)]
    assert faults == [schedule.receiver_fault(5, n, 750) for n in range(1, 500)]
    assert {drawn[0] for drawn in faults if drawn is not None} == {
        kind for kind, _ in schedule.RECEIVER_FAULT_SHARES
    }


def test_the_first_round_of_chaos_has_every_kind_forced_and_everything_stays_in_bounds() -> None:
    config = schedule.Config(couriers=3, seconds=30, seed=1)
    events = schedule.plan_chaos(config)
    first = events[: len(schedule.CHAOS_KINDS)]
    assert [event.kind for event in first] == list(schedule.CHAOS_KINDS)
    assert [event.forced for event in first] == [
        k != schedule.REDRIVE for k in schedule.CHAOS_KINDS
    ]
    assert not any(event.forced for event in events[len(first) :])
    assert all(0 < event.at_ms < 30_000 for event in events)
    assert [event.at_ms for event in events] == sorted(event.at_ms for event in events)
    pauses = [e for e in events if e.kind in (schedule.PAUSE, schedule.PAUSE_IN_FLIGHT)]
    assert all(event.duration_ms > config.lease_ms for event in pauses), (
        "a pause must outlast a lease"
    )
    holds = [event for event in events if event.kind == schedule.HOLD_LOCK]
    assert all(event.duration_ms > schedule.BUSY_TIMEOUT_MS for event in holds)


def test_first_incarnations_drill_every_hook_point_and_the_forced_one_from_round_1() -> None:
    drills = [schedule.drill_for(3, index, 0) for index in range(4)]
    assert {(d.operation, d.point) for d in drills if d is not None} == set(schedule.HOOK_POINTS)
    for drill in drills:
        assert drill is not None and schedule.parse_drill(drill.name, drill.round) == drill
    forced = schedule.drill_for(3, *schedule.FORCED_DRILL)
    assert forced == schedule.Drill("claim", "after-claim", 1)
    assert all(d is not None and d.round >= schedule.DRILL_ROUNDS[0] for d in drills[1:])
    with pytest.raises(ValueError, match="a drill is one of"):
        schedule.parse_drill("finish:after-audit", 1)


def test_the_intake_plans_new_jobs_retries_and_conflicts() -> None:
    ops = schedule.plan_intake(2, 1000)
    new = {op.job_id: op.qty for op in ops if op.expect == "new"}
    assert len(new) == 1000
    for op in ops:
        if op.expect == "retry":
            assert new[op.job_id] == op.qty
        if op.expect == "conflict":
            assert new[op.job_id] != op.qty
    assert {op.expect for op in ops} == {"new", "retry", "conflict"}


def test_a_sender_name_gives_back_its_pid_and_nothing_else_does() -> None:
    assert sender_pid(sender_name("c3", 4711)) == 4711
    assert sender_pid(sender_name("r1-p2", 5)) == 5
    assert [sender_pid(name) for name in (None, "", "c1", "c1-p", "-p12", "c1-px")] == [None] * 6


# --- The checker ---------------------------------------------------------------------


def record(events: list[dict[str, Any]], exit_code: int | None = 0) -> soak_report.ProcessRecord:
    """A courier incarnation that logged ``events`` and ended with ``exit_code``."""
    return soak_report.ProcessRecord("c1", 0, False, None, exit_code, None, True, events, 0, "")


def observed(**changes: Any) -> soak_report.Observed:
    """A small, healthy run: two jobs done, one effect each, one stale finish."""
    job = dict.fromkeys(("seq", "attempts", "max_attempts", "available_at", "deadline"), 1)
    jobs = [
        {**job, "id": "a", "qty": 2, "status": "done", "token": 1, "reason": None},
        {**job, "id": "b", "qty": 3, "status": "done", "token": 2, "reason": None},
    ]
    events = [
        {"event": "result", "id": "a", "token": 1, "status": "done"},
        {"event": "result", "id": "b", "token": 1, "status": "stale"},
        {"event": "result", "id": "b", "token": 2, "status": "done"},
    ]
    counts = ChaosCounts()
    counts.pauses.update({"in flight": 1, "resumed": 1})
    files: dict[str, Any] = {"jobs": jobs, "redrives": [], "effects": [("a", 2), ("b", 3)]}
    files["answers"] = [200] * 3
    files |= {name: changes.pop(name) for name in list(changes) if name in files}
    fields: dict[str, Any] = {
        "config": schedule.Config(),
        "ended": "drained",
        "timings": {"chaos": 1.0, "recovery": 1.0, "total": 2.0},
        "files": Files(**files),
        "accepted": {"a": 2, "b": 3},
        "intake_outcomes": {"new": 2},
        "intake_surprises": [],
        "intake_busy": 0,
        "planned_new": 2,
        "processes": [record(events)],
        "counts": counts,
        "receiver_faults": {},
    }
    return soak_report.Observed(**(fields | changes))


def test_the_checker_passes_a_healthy_run() -> None:
    report = soak_report.check(observed())
    assert report["ok"], report["failures"]
    assert report["fencing"]["stale_finishes_rejected"] == 1


@pytest.mark.parametrize(
    ("changes", "failure"),
    [
        ({"effects": [("a", 2), ("a", 2), ("b", 3)]}, "effects applied twice = 1"),
        ({"effects": [("a", 2)]}, "done jobs without an inbox effect = 1"),
        ({"effects": [("a", 2), ("b", 4)]}, "effects not matching an enqueued job = 1"),
        ({"accepted": {"a": 2, "b": 3, "c": 1}}, "lost = 1"),
        ({"accepted": {"a": 2}}, "jobs nobody enqueued = 1"),
        ({"intake_surprises": ["c: expected new, got retry"]}, "intake surprises = 1"),
        ({"redrives": [{"id": "a", "token": 5}]}, "token faults = 1"),
    ],
)
def test_the_checker_fails_a_broken_run(changes: dict[str, Any], failure: str) -> None:
    report = soak_report.check(observed(**changes))
    assert not report["ok"]
    assert any(line.startswith(failure) for line in report["failures"]), report["failures"]


def test_the_checker_fails_a_ticket_finished_twice_and_a_run_with_pauses_but_no_stale() -> None:
    twice = [
        {"event": "result", "id": "a", "token": 1, "status": "done"},
        {"event": "result", "id": "a", "token": 1, "status": "done"},
        {"event": "result", "id": "b", "token": 2, "status": "done"},
    ]
    failures = soak_report.check(observed(processes=[record(twice)]))["failures"]
    assert any(line.startswith("tickets finished twice = 1") for line in failures)
    assert any(line.startswith("stale finishes = 0") for line in failures)


def frozen_then(job: str, *events: dict[str, Any]) -> list[dict[str, Any]]:
    """A courier's events: it froze holding ``job`` (``FreezeOnRequest``), then ``events``."""
    return [{"event": "frozen", "id": job}, *events]


@pytest.mark.parametrize(
    ("witness", "events", "shown"),
    [
        ({"kind": DRILL}, [{"event": "die", "point": "claim:after-claim"}], True),
        ({"kind": DRILL}, [], False),  # it exited otherwise
        (
            {"kind": schedule.PAUSE_IN_FLIGHT, "job": "b"},
            frozen_then("b", {"event": "result", "id": "b", "token": 1, "status": "stale"}),
            True,
        ),
        (
            {"kind": schedule.PAUSE_IN_FLIGHT, "job": "b"},
            frozen_then("b", {"event": "result", "id": "b", "token": 1, "status": "pending"}),
            False,
        ),
        ({"kind": schedule.PAUSE_IN_FLIGHT, "job": "b"}, frozen_then("b"), False),
    ],
)
def test_the_checker_fails_a_forced_event_its_witness_does_not_show(
    witness: dict[str, Any], events: list[dict[str, Any]], shown: bool
) -> None:
    counts = ChaosCounts()
    counts.pauses.update({"in flight": 1, "resumed": 1})
    counts.witnesses.append({"owner": "c1", "incarnation": 0, "job": None, "token": 1} | witness)
    code = -signal.SIGKILL if witness["kind"] == DRILL else 0
    events = [*observed().processes[0].events, *events]
    process = soak_report.ProcessRecord(
        "c1", 0, False, "claim:after-claim", code, None, False, events, 0, ""
    )
    report = soak_report.check(observed(processes=[process], counts=counts))
    assert report["forced"]["witnesses"][0]["shown"] is shown
    assert report["must_be_zero"]["forced events not played or not shown"] == int(not shown)
    assert report["ok"] is shown, report["failures"]


def test_the_checker_fails_a_forced_event_never_played() -> None:
    counts = ChaosCounts()
    counts.pauses.update({"in flight": 1, "resumed": 1})
    counts.forced_left.append(schedule.KILL)
    report = soak_report.check(observed(counts=counts))
    assert "forced kill never played" in report["failures"]
    assert report["must_be_zero"]["forced events not played or not shown"] == 1


def test_an_event_tail_gives_each_complete_line_once(tmp_path: Path) -> None:
    log = tmp_path / "c1-0.jsonl"
    tail = EventTail(log)
    assert tail.new_lines() == []  # no file yet
    log.write_text('{"event": "start"}\n{"event": "fro', encoding="utf-8")
    assert tail.new_lines() == [{"event": "start"}]
    with log.open("a", encoding="utf-8") as file:
        file.write('zen", "id": "a"}\n[1]\n')
    assert tail.new_lines() == [{"event": "frozen", "id": "a"}]
    assert tail.new_lines() == []


def test_the_checker_counts_a_crash_and_an_unexplained_kill() -> None:
    crashed = soak_report.ProcessRecord("c1", 0, False, None, 1, None, False, [], 0, "Traceback")
    killed = record([], exit_code=-signal.SIGKILL)
    base = observed()
    failures = soak_report.check(observed(processes=[*base.processes, crashed, killed]))
    assert any(line.startswith("courier crashes = 1") for line in failures["failures"])
    assert any(line.startswith("unexplained kills = 1") for line in failures["failures"])


# --- The receiver's chaos knobs, as the soak uses them -----------------------------------


def test_an_injected_error_status_is_classified_and_changes_nothing(tmp_path: Path) -> None:
    statuses = iter([503, 422])

    def faults(job_id: str, sender: str | None) -> Fault:
        return Fault(status=next(statuses))

    with Receiver(tmp_path / "inbox.sqlite", interference=FaultInjector(faults)) as receiver:
        send = HttpSend(receiver.url, "c1-p1")
        with pytest.raises(worker.Retryable, match="503"):
            send({"id": "a", "qty": 1})
        with pytest.raises(worker.Permanent, match="422"):
            send({"id": "a", "qty": 1})
        summary = receiver.inbox.summary()
        logged = [(r["status"], r["delivery_id"]) for r in receiver.inbox.requests()]
    assert (summary["effects"], summary["inbox_rows"]) == (0, 0)
    assert logged == [(503, "a"), (422, "a")]


def test_a_dropped_answer_after_the_commit_is_retryable_and_the_effect_stays(
    tmp_path: Path,
) -> None:
    committed: list[tuple[str, str | None, str]] = []
    injector = FaultInjector(
        faults=lambda job_id, sender: Fault(drop=True),
        on_commit=lambda job_id, sender, verdict: committed.append((job_id, sender, verdict)),
    )
    with Receiver(tmp_path / "inbox.sqlite", interference=injector) as receiver:
        send = HttpSend(receiver.url, "c1-p1")
        for _ in range(2):
            with pytest.raises(worker.Retryable):
                send({"id": "a", "qty": 4})
        summary = receiver.inbox.summary()
    assert (summary["effects"], summary["total_qty"]) == (1, 4)
    assert committed == [("a", "c1-p1", "applied"), ("a", "c1-p1", "duplicate")]


def test_on_commit_runs_after_the_commit_and_before_the_answer(tmp_path: Path) -> None:
    inbox = Inbox(tmp_path / "inbox.sqlite")
    answers: list[bool] = []
    seen: list[tuple[int, int]] = []  # (effects committed, answers received) at the call

    def on_commit(job_id: str, sender: str | None, verdict: str) -> None:
        seen.append((inbox.summary()["effects"], len(answers)))

    with Receiver(inbox.path, interference=FaultInjector(on_commit=on_commit)) as receiver:
        answers.append(HttpSend(receiver.url, "c1")({"id": "a", "qty": 1}))
    assert seen == [(1, 0)] and answers == [True]


@pytest.mark.parametrize(
    ("status", "delay_ms"), [(200, 0), (399, 0), (600, 0), (None, -1), (None, 10**6)]
)
def test_a_fault_outside_its_ranges_is_refused(status: int | None, delay_ms: int) -> None:
    with pytest.raises(ValueError):
        Fault(status=status, delay_ms=delay_ms)
