"""The operator CLI: commands, clear one-line errors, and the demo as a real process.

Commands that do not install signal handlers run in-process through ``main``;
``serve`` and ``demo`` run as ``python -m courier`` child processes.
"""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

import worker
from courier.cli import EXIT_ERROR, EXIT_OK, EXIT_USAGE, main
from courier.procs import Children, courier_command, project_root
from courier.receiver import Inbox, RequestLine
from courier.runner import clock_ms

COMMANDS = [
    "init",
    "enqueue",
    "status",
    "dead",
    "redrive",
    "serve",
    "inbox",
    "audit",
    "run",
    "demo",
]
WAIT_S = 20.0


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture
def queue(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "queue.sqlite"
    assert run_cli(capsys, "init", path)[0] == EXIT_OK
    return path


def test_help_names_every_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    text = capsys.readouterr().out
    for command in COMMANDS:
        assert command in text


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(capsys: pytest.CaptureFixture[str], command: str) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main([command, "--help"])
    assert exit_info.value.code == 0
    assert "usage: python -m courier " + command in capsys.readouterr().out


def test_init_creates_and_then_keeps_a_queue(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "queue.sqlite"
    assert run_cli(capsys, "init", path)[:2] == (EXIT_OK, f"created queue {path}\n")
    run_cli(capsys, "enqueue", path, "a", "1")
    assert "kept its 1 jobs" in run_cli(capsys, "init", path)[1]


def test_enqueue_reports_true_false_and_conflict(
    queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run_cli(capsys, "enqueue", queue, "order-1", "3", "--ttl-ms", "5000")
    assert (code, out.startswith("enqueued order-1 qty=3 (True")) == (EXIT_OK, True)
    code, out, _ = run_cli(capsys, "enqueue", queue, "order-1", "3")
    assert (code, out.startswith("already queued order-1 qty=3 (False")) == (EXIT_OK, True)
    code, out, err = run_cli(capsys, "enqueue", queue, "order-1", "4")
    assert (code, out) == (EXIT_ERROR, "")
    assert err.startswith("courier: error: conflict: ")


@pytest.mark.parametrize(
    "argv",
    [
        ["enqueue", "{queue}", "bad id", "1"],
        ["enqueue", "{queue}", "a", "0"],
        ["enqueue", "{queue}", "a", "1001"],
        ["enqueue", "{queue}", "a", "1", "--ttl-ms", "0"],
        ["enqueue", "{queue}", "a", "1", "--max-attempts", "17"],
        ["enqueue", "{missing}", "a", "1"],
        ["enqueue", "{folder}", "a", "1"],
        ["status", "{missing}"],
        ["status", "{not_a_db}"],
        ["dead", "{missing}"],
        ["redrive", "{queue}", "nobody", "--note", "why"],
        ["redrive", "{queue}", "a", "--note", "not an identifier"],
        ["inbox", "{missing}"],
        ["run", "{missing}", "--url", "http://127.0.0.1:9/deliveries", "--owner", "c1"],
        ["run", "{queue}", "--url", "ftp://x", "--owner", "c1"],
        ["run", "{queue}", "--url", "http://127.0.0.1:9/deliveries", "--owner", "c 1"],
        ["run", "{queue}", "--url", "http://x/", "--owner", "c1", "--stall-after-acks", "1"],
    ],
)
def test_bad_input_is_one_line_and_a_nonzero_exit(
    tmp_path: Path, queue: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("hello\n")
    names = {
        "queue": queue,
        "missing": tmp_path / "missing",
        "folder": tmp_path,
        "not_a_db": not_a_db,
    }
    code, _, err = run_cli(capsys, *(arg.format(**names) for arg in argv))
    assert code in (EXIT_USAGE, EXIT_ERROR)
    assert err.startswith("courier: error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "missing").exists(), "a command created a queue it should refuse"


def test_argparse_errors_exit_2_with_usage(queue: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["enqueue", str(queue), "a", "x"], ["redrive", str(queue), "a"], ["nope"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == EXIT_USAGE
        assert "usage:" in capsys.readouterr().err


def make_dead_job(queue: Path) -> None:
    con = worker.open_queue(queue)
    try:
        now = clock_ms()
        worker.enqueue(con, {"id": "broken", "qty": 2}, now, 60_000, 1)
        ticket = worker.claim(con, "c1", now)
        assert ticket is not None
        assert worker.finish(con, ticket, "permanent", now) == "dead"
    finally:
        con.close()


def test_status_dead_and_redrive_show_the_quarantine_and_its_audit(
    queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_dead_job(queue)
    run_cli(capsys, "enqueue", queue, "fine", "1")
    code, out, _ = run_cli(capsys, "status", queue, "--json")
    status = json.loads(out)
    assert status["counts"] == {"pending": 1, "leased": 0, "done": 0, "dead": 1}
    assert (status["due"], status["next_due"]["id"]) == (1, "fine")
    assert "next due: fine (pending" in run_cli(capsys, "status", queue)[1]

    code, out, _ = run_cli(capsys, "dead", queue, "--json")
    (dead,) = json.loads(out)
    assert (dead["id"], dead["reason"], dead["token"], dead["attempts"]) == (
        "broken",
        "permanent",
        1,
        1,
    )
    assert "broken" in run_cli(capsys, "dead", queue)[1]

    code, out, _ = run_cli(capsys, "redrive", queue, "broken", "--note", "ticket-4711")
    assert code == EXIT_OK
    audit = json.loads(out.splitlines()[1].removeprefix("audit row: "))
    assert {k: audit[k] for k in ("seq", "id", "token", "note")} == {
        "seq": 1,
        "id": "broken",
        "token": 1,
        "note": "ticket-4711",
    }
    assert run_cli(capsys, "dead", queue)[1] == "no dead jobs\n"
    code, _, err = run_cli(capsys, "redrive", queue, "broken", "--note", "again")
    assert code == EXIT_USAGE and "only a dead job" in err


# --- audit: the queue file against the inbox ----------------------------------------------


def delivered(queue: Path, inbox: Path, jobs: dict[str, str]) -> None:
    """Jobs in the queue (``id -> 'done' | 'dead' | 'pending'``), qty 2 each; a done job's
    delivery applied once in the inbox, as a courier would have made it."""
    con = worker.open_queue(queue)
    received = Inbox(inbox)
    try:
        for job_id, status in jobs.items():
            now = clock_ms()
            worker.enqueue(con, {"id": job_id, "qty": 2}, now, 60_000)
            if status == "pending":
                continue
            ticket = worker.claim(con, "c1", now)
            assert ticket is not None and ticket["id"] == job_id
            if status == "done":
                received.deliver(job_id, 2, "c1", RequestLine("POST", "/deliveries"))
            outcome = "ok" if status == "done" else "permanent"
            assert worker.finish(con, ticket, outcome, now) == status
    finally:
        con.close()


def test_audit_passes_when_every_done_job_has_its_one_effect(
    tmp_path: Path, queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inbox = tmp_path / "inbox.sqlite"
    delivered(queue, inbox, {"a": "done", "b": "done", "c": "dead"})
    code, out, _ = run_cli(capsys, "audit", queue, inbox)
    assert code == EXIT_OK, out
    assert "jobs 3: done 2, dead 1 (permanent 1), unfinished 0" in out
    assert "effects 2; delivery requests 2 (200 2)" in out
    assert out.rstrip().endswith("OK: every check holds")
    code, out, _ = run_cli(capsys, "audit", queue, inbox, "--json")
    report = json.loads(out)
    assert (report["ok"], report["done"], report["effects"]) == (True, 2, 2)
    assert set(report["must_be_zero"].values()) == {0}


def test_audit_fails_naming_the_jobs_that_break_a_rule(
    tmp_path: Path, queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    inbox = tmp_path / "inbox.sqlite"
    delivered(queue, inbox, {"a": "done", "b": "done", "c": "pending"})
    con = sqlite3.connect(inbox, isolation_level=None)
    try:  # a deduplication bug and a lost effect
        con.execute("INSERT INTO effects (id, qty, at_ms) VALUES ('a', 2, 0)")
        con.execute("DELETE FROM effects WHERE id = 'b'")
    finally:
        con.close()
    code, out, _ = run_cli(capsys, "audit", queue, inbox)
    assert code == EXIT_ERROR
    assert "FAILED: effects applied twice = 1 (must be 0): a" in out
    assert "FAILED: done jobs without an inbox effect = 1 (must be 0): b" in out
    assert "FAILED: lost = 1 (must be 0): c" in out
    code, out, _ = run_cli(capsys, "audit", queue, inbox, "--in-flight-ok")
    assert code == EXIT_ERROR and "lost = 1" not in out


def test_audit_of_a_missing_inbox_is_bad_input(
    tmp_path: Path, queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(capsys, "audit", queue, tmp_path / "nowhere.sqlite")
    assert code == EXIT_USAGE and "no inbox file" in err
    assert not (tmp_path / "nowhere.sqlite").exists()


def test_serve_prints_its_port_serves_and_stops_cleanly_on_sigterm(
    tmp_path: Path, children: Children
) -> None:
    port_file, log = tmp_path / "port", tmp_path / "serve.log"
    server = children.start(
        courier_command(
            "serve",
            tmp_path / "inbox.sqlite",
            "--port-file",
            port_file,
            "--max-seconds",
            str(WAIT_S),
        ),
        log,
    )
    until = time.monotonic() + WAIT_S
    while not port_file.exists() and time.monotonic() < until and server.poll() is None:
        time.sleep(0.02)
    port = int(port_file.read_text())
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/deliveries",
        data=b'{"id": "a", "qty": 2}',
        method="POST",
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        assert response.status == 200
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=WAIT_S) == 0
    text = log.read_text()
    assert f"(port {port})" in text
    assert "receiver stopped: 1 requests, 1 effects, 1 inbox rows, total qty 2" in text


def test_demo_runs_as_a_fresh_process_and_passes(tmp_path: Path) -> None:
    started = time.monotonic()
    done = subprocess.run(
        courier_command("demo"),
        cwd=project_root(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "c1 killed by SIGKILL" in done.stdout
    assert "receiver: 9 HTTP requests, 8 effects, 8 inbox rows" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("OK in ")
    assert time.monotonic() - started < 30
