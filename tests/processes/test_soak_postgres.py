"""The chaos soak on PostgreSQL, short: couriers on simulated hosts, one of them cut off.

``python -m chaos --postgres`` runs as a child process with a fixed seed and must
exit 0: nothing lost, no effect applied twice, no stale overwrite, no done job
without its effect, every forced event played and shown by its witness. Where
network namespaces can be made (root and iproute2), each courier runs on a host
of its own, reaching a throwaway server over TCP, and the test checks that hosts
really were cut off while holding a lease, that their late finishes were refused
as stale, that other hosts took their jobs over and that the cut-off couriers
reconnected: the forced partition makes each of these happen in every run
(``chaos.witness``). Elsewhere the soak says why it skipped the hosts and runs
over loopback, and the test checks that instead. The rest checks the parts: the
hosts are made and deleted, leftovers of a dead run (namespaces, links, a
server's folder) are removed, partitions are planned only with hosts, a job
counts as taken over only by another host, and the checker does fail a stale
overwrite, a run whose partitions were never refused a late finish, and a forced
partition its witness does not show.

With ``HYPOTHESIS_PROFILE=nightly`` the soak runs at the full run's sizes.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import pytest

from chaos import cli, hosts, pgserver, schedule
from chaos import report as soak_report
from chaos.tally import ChaosCounts
from chaos.witness import DRILL
from tests.processes.test_soak import (
    BATCH_OPTIONS,
    CHAOS_SECONDS,
    COURIERS,
    JOBS,
    RECOVERY_SECONDS,
    Soak,
    forced_events_shown,
    observed,
    passed_every_check,
    record,
    run_soak,
)

SOAK_TIMEOUT_S = CHAOS_SECONDS + RECOVERY_SECONDS + 30  # jobs, couriers, seed: run_soak's
HOSTS_MISSING = hosts.unavailable()


def run_short_pg_soak(tmp_path: Path) -> Soak:
    """Run the short PostgreSQL soak as a child; its exit status, report, output and seconds."""
    return run_soak(tmp_path, JOBS, CHAOS_SECONDS, "--postgres")


@pytest.fixture(scope="module")
def pg_soak(tmp_path_factory: pytest.TempPathFactory) -> Soak:
    """One short PostgreSQL soak for the tests that read it."""
    return run_short_pg_soak(tmp_path_factory.mktemp("pgsoak"))


def test_the_short_postgres_soak_passes_every_check(pg_soak: Soak) -> None:
    """Each figure is forced (see test_soak's docstring), so each holds in every run."""
    report = passed_every_check(pg_soak, JOBS)
    output, elapsed = pg_soak[2], pg_soak[3]
    assert report["hosts"]["backend"] == "postgres"
    assert report["fencing"]["stale_overwrites"] == []
    with_hosts = {schedule.PARTITION} if HOSTS_MISSING is None else set()
    forced_events_shown(report, {DRILL, schedule.PAUSE_IN_FLIGHT} | with_hosts)
    assert report["fencing"]["stale_finishes_rejected"] > 0, output
    assert report["chaos"]["kills"].get("random moment", 0) > 0
    assert report["chaos"]["killed_at_hook"]["claim:after-claim"] > 0, output
    assert elapsed < SOAK_TIMEOUT_S


def test_a_short_postgres_soak_with_batched_couriers_passes_every_check(tmp_path: Path) -> None:
    """The PostgreSQL soak with batched couriers: every check holds, no stale overwrite."""
    soak = run_soak(tmp_path, JOBS, CHAOS_SECONDS, "--postgres", *BATCH_OPTIONS)
    report = passed_every_check(soak, JOBS)
    assert (report["config"]["batch"], report["config"]["in_flight"]) == (8, 4)
    assert report["fencing"]["stale_overwrites"] == []
    assert report["fencing"]["stale_finishes_rejected"] > 0, soak[2]


def test_hosts_were_cut_off_and_their_late_finishes_refused(pg_soak: Soak) -> None:
    _, report, output, _ = pg_soak
    if HOSTS_MISSING is not None:
        assert report["hosts"]["simulated_hosts"] == 0
        assert report["hosts"]["skipped"] == HOSTS_MISSING
        assert "simulated hosts skipped" in output
        assert report["partitions"]["partitions"] == 0
        pytest.skip(f"simulated hosts unavailable: {HOSTS_MISSING}; the soak ran on loopback")
    placed = report["hosts"]
    assert placed["simulated_hosts"] == COURIERS and len(set(placed["addresses"])) == COURIERS
    cut = report["partitions"]
    # the forced partition: its host stays cut until its courier lost its link and
    # another host took its job over, then the courier reconnects and is refused
    assert cut["partitions"] > 0 and cut["heals"] == cut["partitions"], output
    assert cut["late_finishes_refused"] > 0, output
    assert cut["jobs_taken_over"] > 0, output
    assert cut["reconnects"] > 0 and cut["disconnects"] > 0, output


# --- The parts ----------------------------------------------------------------------


def test_namespaces_are_unavailable_without_root_or_iproute2(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with monkeypatch.context() as patched:
        patched.setattr(os, "geteuid", lambda: 1000)
        assert hosts.unavailable() == "network namespaces need root (this process is not root)"
    with monkeypatch.context() as patched:
        patched.setattr(os, "geteuid", lambda: 0)
        patched.setattr(shutil, "which", lambda name: None)
        assert hosts.unavailable() == "network namespaces need iproute2 ('ip' is not on PATH)"


def test_without_namespaces_the_hosts_are_skipped_with_the_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(hosts, "unavailable", lambda: "network namespaces need root")
    assert cli.hosts_plan(postgres=True, loopback=False) == (False, "network namespaces need root")
    assert cli.hosts_plan(postgres=True, loopback=True) == (False, "--loopback")
    assert cli.hosts_plan(postgres=False, loopback=False) == (False, None)


def test_partitions_are_planned_only_with_hosts() -> None:
    with_hosts = schedule.Config(backend="postgres", hosts=True, seconds=120)
    planned = schedule.plan_chaos(with_hosts)
    cuts = [event for event in planned if event.kind == schedule.PARTITION]
    assert cuts and planned[0].kind == schedule.PARTITION and planned[0].forced
    assert all(2_000 <= event.duration_ms <= 4_000 for event in cuts)
    for config in (schedule.Config(seconds=120), schedule.Config(backend="postgres")):
        assert schedule.PARTITION not in {event.kind for event in schedule.plan_chaos(config)}
    with pytest.raises(ValueError, match="need the 'postgres' backend"):
        schedule.Config(hosts=True)


@pytest.mark.skipif(HOSTS_MISSING is not None, reason=f"simulated hosts: {HOSTS_MISSING}")
def test_hosts_are_made_cut_healed_and_deleted() -> None:
    def ip(*args: str) -> str:
        return subprocess.run(["ip", *args], capture_output=True, text=True, check=True).stdout

    with hosts.Hosts(2) as made:
        assert {made.namespace(1), made.namespace(2)} <= set(ip("netns", "list").split())
        made.cut(1)
        assert "state DOWN" in ip("link", "show", made.link(1))
        made.heal(1)
        assert made.down == set()
        inside = ip("-n", made.namespace(2), "-4", "-o", "addr", "show")
        assert made.address(2) in inside
    assert not {made.namespace(1), made.namespace(2)} & set(ip("netns", "list").split())
    assert made.tag not in ip("-o", "link", "show") + ip("-o", "addr", "show", "dev", "lo")


@pytest.mark.skipif(HOSTS_MISSING is not None, reason=f"simulated hosts: {HOSTS_MISSING}")
def test_leftovers_of_a_dead_run_are_removed_and_a_live_runs_are_kept() -> None:
    tag = f"{hosts.PREFIX}{2**22 + 12_345}"  # a pid above Linux's pid_max: no process has it
    made = [
        ("netns", "add", f"{tag}h1"),
        ("link", "add", f"{tag}v1", "type", "veth", "peer", "name", f"{tag}p1"),
        ("addr", "add", "10.254.254.254/32", "dev", "lo", "label", f"lo:{tag}"),
    ]
    try:
        for args in made:
            subprocess.run(["ip", *args], check=True, capture_output=True)
        with hosts.Hosts(1) as live:
            removed = hosts.remove_leftovers()
            assert sorted(removed) == sorted([f"{tag}h1", f"{tag}v1", f"lo:{tag}"])
            listed = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True)
            assert live.namespace(1) in listed.stdout and tag not in listed.stdout
            assert (
                live.hub
                in subprocess.run(
                    ["ip", "-o", "addr", "show", "dev", "lo"], capture_output=True, text=True
                ).stdout
            )
    finally:
        for undo in (
            ("netns", "del", f"{tag}h1"),
            ("link", "del", f"{tag}v1"),
            ("addr", "del", "10.254.254.254/32", "dev", "lo"),
        ):
            subprocess.run(["ip", *undo], capture_output=True, check=False)


def _result(token: int, status: str, now_ms: int, lease_until: int) -> dict[str, Any]:
    return {
        "event": "result",
        "id": "a",
        "token": token,
        "status": status,
        "now_ms": now_ms,
        "lease_until": lease_until,
    }


@pytest.mark.parametrize(
    "events",
    [
        # a finish accepted at its lease's end: the ticket was no longer live
        [
            _result(1, "done", 1_000, 1_000),
            {"event": "result", "id": "b", "token": 2, "status": "done"},
        ],
        # a done that does not stand: the job's row carries another token
        [
            _result(1, "done", 10, 1_000),
            {"event": "result", "id": "b", "token": 1, "status": "done"},
        ],
    ],
)
def test_the_checker_fails_a_stale_overwrite(events: list[dict[str, Any]]) -> None:
    report = soak_report.check(observed(processes=[record(events)]))
    assert report["must_be_zero"]["stale overwrites"] == 1
    assert any(line.startswith("stale overwrites = 1") for line in report["failures"])


def test_the_checker_fails_partitions_without_a_late_finish_refused() -> None:
    counts = ChaosCounts()
    counts.pauses.update({"in flight": 1, "resumed": 1})
    counts.partitions.append({"owner": "c1", "host": 1, "job": "a", "duration_ms": 3000})
    counts.heals = 1
    events = [
        {"event": "claimed", "id": "a", "token": 1, "lease_until": 1_000},
        _result(1, "done", 10, 1_000),
        {"event": "result", "id": "b", "token": 1, "status": "stale"},
        {"event": "result", "id": "b", "token": 2, "status": "done"},
    ]
    report = soak_report.check(observed(processes=[record(events)], counts=counts))
    assert report["partitions"]["partitions"] == 1
    assert report["partitions"]["late_finishes_refused"] == 0
    assert report["partitions"]["late_finish_outcomes"] == {"accepted": 1}
    assert any(line.startswith("late finishes refused = 0") for line in report["failures"])
    refused = [*events, _result(1, "stale", 5_000, 1_000)]
    healed = soak_report.check(observed(processes=[record(refused)], counts=counts))
    assert healed["partitions"]["late_finish_outcomes"] == {"refused (stale)": 1}
    assert healed["partitions"]["jobs_taken_over"] == 0
    assert not any("late finishes" in line for line in healed["failures"])


@pytest.mark.parametrize(("owner", "taken_over"), [("c2", 1), ("r2", 1), ("r1", 0)])
def test_a_job_is_taken_over_by_a_later_ticket_on_another_host(owner: str, taken_over: int) -> None:
    counts = ChaosCounts()
    counts.partitions.append({"owner": "c1", "host": 1, "job": "b", "duration_ms": 3000})
    cut_off = [
        {"event": "result", "id": "a", "token": 1, "status": "done"},
        {"event": "result", "id": "b", "token": 1, "status": "stale"},
    ]
    later = [{"event": "result", "id": "b", "token": 2, "status": "done"}]
    other = soak_report.ProcessRecord(owner, 0, False, None, 0, None, True, later, 0, "")
    report = soak_report.check(observed(processes=[record(cut_off), other], counts=counts))
    assert report["partitions"]["late_finishes_refused"] == 1
    assert report["partitions"]["jobs_taken_over"] == taken_over


@pytest.mark.parametrize(
    ("other", "drop", "shown"),
    [
        ("c2", None, True),
        ("r1", None, False),  # a later ticket on the cut-off courier's own host
        ("c2", "reconnect", False),
        ("c2", "disconnect", False),
    ],
)
def test_the_checker_fails_a_forced_partition_its_witness_does_not_show(
    other: str, drop: str | None, shown: bool
) -> None:
    counts = ChaosCounts()
    counts.pauses.update({"in flight": 1, "resumed": 1})
    cut = {"owner": "c1", "host": 1, "job": "b", "duration_ms": 3000, "token": 1}
    counts.partitions.append(cut)
    counts.heals = 1
    counts.witnesses.append(
        {"kind": schedule.PARTITION, "owner": "c1", "incarnation": 0, "job": "b", "token": 1}
    )
    cut_off: list[dict[str, Any]] = [
        {"event": "result", "id": "a", "token": 1, "status": "done"},
        {"event": "claimed", "id": "b", "token": 1, "lease_until": 1_000},
        {"event": "frozen", "id": "b"},
        {"event": "disconnect", "during": "finish"},
        {"event": "reconnect", "after_ms": 2_500},
        _result(1, "stale", 5_000, 1_000) | {"id": "b"},
    ]
    cut_off = [event for event in cut_off if event["event"] != drop]
    later = [{"event": "result", "id": "b", "token": 2, "status": "done"}]
    took = soak_report.ProcessRecord(other, 0, False, None, 0, None, True, later, 0, "")
    report = soak_report.check(observed(processes=[record(cut_off), took], counts=counts))
    assert report["forced"]["witnesses"][0]["shown"] is shown, report["forced"]
    assert report["ok"] is shown, report["failures"]


def test_the_folder_of_a_dead_supervisors_server_is_removed_and_a_live_ones_kept() -> None:
    scratch = Path(pgserver.SCRATCH or tempfile.gettempdir())
    dead = Path(tempfile.mkdtemp(prefix=f"{pgserver.FOLDER_PREFIX}{2**22 + 12_345}-", dir=scratch))
    live = Path(tempfile.mkdtemp(prefix=f"{pgserver.FOLDER_PREFIX}{os.getpid()}-", dir=scratch))
    try:
        (dead / "data").mkdir()
        (dead / "data" / "postmaster.pid").write_text("1\n")  # not a postgres: never killed
        removed = pgserver.remove_leftover_servers()
        assert str(dead) in removed and not dead.exists()
        assert str(live) not in removed and live.exists()
    finally:
        shutil.rmtree(dead, ignore_errors=True)
        shutil.rmtree(live, ignore_errors=True)
