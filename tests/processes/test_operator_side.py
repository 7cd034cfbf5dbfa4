"""Issue 32: the operator side survives a busy file, a dead server and a hostile receiver.

Each test is one defect an operator met, on the real parts: a queue file another
real connection keeps locked, a receiver on a loopback port that answers with
escape sequences, ``courier`` run as a child process in a folder of the user's
own, a PostgreSQL server stopped under a running courier.
"""

from __future__ import annotations

import http.server
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from psycopg import conninfo as libpq

import courier.embedded
import pgworker
import worker
from courier import backend
from courier.cli import EXIT_ERROR, EXIT_OK, EXIT_USAGE, main
from courier.clock import clock_ms
from courier.procs import Children, courier_command, project_root
from courier.receiver import Receiver
from tests.processes.test_cli import make_dead_job, run_cli

WAIT_S = 20.0
STAMP = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z ")
RAW = ("\x1b", "\u202e", "\x07")


@pytest.fixture
def queue(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "queue.sqlite"
    assert run_cli(capsys, "init", path)[0] == EXIT_OK
    return path


def wait_for_text(path: Path, text: str, timeout_s: float) -> bool:
    until = time.monotonic() + timeout_s
    while time.monotonic() < until:
        if path.exists() and text in path.read_text(encoding="utf-8", errors="replace"):
            return True
        time.sleep(0.02)
    return False


@pytest.fixture
def locked(queue: Path) -> Iterator[sqlite3.Connection]:
    """Another process's long transaction: an exclusive lock, which readers wait on too."""
    con = sqlite3.connect(queue, isolation_level=None)
    con.execute("BEGIN EXCLUSIVE")
    try:
        yield con
    finally:
        con.execute("ROLLBACK")
        con.close()


# --- 1. a busy file is busy, not "not a queue" --------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["status", "{queue}"],
        ["jobs", "{queue}"],
        ["show", "{queue}", "a"],
        ["enqueue", "{queue}", "a", "1"],
        ["redrive", "{queue}", "--all", "--note", "n"],
    ],
)
def test_a_busy_queue_file_is_reported_busy_with_status_1(
    queue: Path, locked: sqlite3.Connection, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, _, err = run_cli(capsys, *[arg.format(queue=queue) for arg in argv])
    assert (code, err.count("\n")) == (EXIT_ERROR, 1), err
    assert "is busy" in err and "not a queue file" not in err, err


def test_run_waits_for_a_busy_queue_file_and_then_delivers(
    tmp_path: Path, queue: Path, receiver: Receiver, children: Children
) -> None:
    con = worker.open_queue(queue)
    assert worker.enqueue(con, {"id": "a", "qty": 1}, clock_ms(), 30_000)
    con.close()
    log = tmp_path / "c1.log"
    blocker = sqlite3.connect(queue, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")
    try:
        argv: list[str | Path] = [
            "run",
            queue,
            "--url",
            receiver.url,
            "--owner",
            "c1",
            "--until-drained",
        ]
        proc = children.start(courier_command(*argv, "--max-seconds", str(WAIT_S)), log)
        assert wait_for_text(log, "queue busy", WAIT_S), log.read_text()
        assert proc.poll() is None, log.read_text()  # waiting, not gone
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    assert proc.wait(timeout=WAIT_S + 10) == 0, log.read_text()
    assert "c1: a token=1 -> done" in log.read_text()


# --- 3. text from a receiver is shown escaped ------------------------------------------

HOSTILE = "\x1b[2J\x1b[31mgone\x1b[0m \u202eenod\u202c \x07"


class HostileHandler(http.server.BaseHTTPRequestHandler):
    """A receiver that refuses every delivery with a body of escape sequences."""

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("Content-Length", "0")))
        body = HOSTILE.encode("utf-8")
        self.send_response(409)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: object) -> None:
        """Quiet."""


@pytest.fixture
def hostile_url() -> Iterator[str]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), HostileHandler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/deliveries"
    finally:
        server.shutdown()
        thread.join(timeout=10)
        server.server_close()


def test_a_receivers_escape_sequences_reach_no_terminal_raw(
    tmp_path: Path,
    queue: Path,
    hostile_url: str,
    children: Children,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_cli(capsys, "enqueue", queue, "a", "1")
    log = tmp_path / "c1.log"
    argv: list[str | Path] = [
        "run",
        queue,
        "--url",
        hostile_url,
        "--owner",
        "c1",
        "--until-drained",
    ]
    proc = children.start(courier_command(*argv, "--max-seconds", str(WAIT_S)), log)
    assert proc.wait(timeout=WAIT_S + 10) == 0, log.read_text()
    printed = {
        "run": log.read_text(encoding="utf-8"),
        "dead": run_cli(capsys, "dead", queue)[1],
        "show": run_cli(capsys, "show", queue, "a")[1],
    }
    for command, text in printed.items():
        assert not [char for char in RAW if char in text], (command, text)
        assert "\\x1b[2J\\x1b[31mgone" in text and "\\u202eenod\\u202c" in text, (command, text)
    assert json.loads(run_cli(capsys, "dead", queue, "--json")[1])[0]["last_attempt"][
        "detail"
    ].startswith("\x1b[2J"), "the log keeps what the receiver said; only the showing escapes"


# --- 5. an unknown reason is a usage error ------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        ["jobs", "{queue}", "--reason", "bogus"],
        ["redrive", "{queue}", "--all", "--reason", "bogus", "--note", "n"],
        ["redrive", "{queue}", "--all", "--reason", "retry", "--note", "n"],
    ],
)
def test_an_unknown_reason_is_a_usage_error(
    queue: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    make_dead_job(queue)
    code, out, err = run_cli(capsys, *[arg.format(queue=queue) for arg in argv])
    assert (code, out) == (EXIT_USAGE, "") and "--reason must be one of" in err, err
    assert "permanent" in err
    assert run_cli(capsys, "dead", queue, "--json")[1] != "[]\n", "nothing was redriven"


# --- 6. the installed package, from any folder ----------------------------------------


def in_a_users_folder(
    folder: Path, *argv: str, script: str | None = None
) -> subprocess.CompletedProcess[str]:
    """``python -m courier ARGV`` (or ``python -c SCRIPT``) run in ``folder`` as a user of
    the installed package runs it: the folder first on the search path, the package
    after it (here: this checkout, by PYTHONPATH, which comes after the folder as
    site-packages does)."""
    command = [sys.executable, "-c", script] if script else courier_command(*argv)
    env = {**os.environ, "PYTHONPATH": str(project_root())}
    return subprocess.run(
        command, cwd=folder, env=env, capture_output=True, text=True, timeout=60, check=False
    )


def test_python_m_courier_in_a_folder_with_its_own_worker_py_uses_the_queues(
    tmp_path: Path,
) -> None:
    (tmp_path / "worker.py").write_text("VERSION = 'the user script, not the queue'\n")
    (tmp_path / "model.py").write_text("raise SystemExit('the user model.py was imported')\n")
    for argv in (
        ["init", "q.sqlite"],
        ["enqueue", "q.sqlite", "a", "1"],
        ["show", "q.sqlite", "a"],
    ):
        done = in_a_users_folder(tmp_path, *argv)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr
    assert "pending" in done.stdout


def test_version_is_the_installed_distributions(tmp_path: Path) -> None:
    declared = re.search(
        r'^version = "([^"]+)"', (project_root() / "pyproject.toml").read_text(), re.M
    )
    assert declared is not None
    done = in_a_users_folder(tmp_path, "--version")
    assert (done.returncode, done.stdout) == (0, f"python -m courier {declared.group(1)}\n")
    script = Path(sys.executable).with_name("courier")
    console = subprocess.run(
        [str(script), "--version"], cwd=tmp_path, capture_output=True, text=True, timeout=60
    )
    assert console.stdout == f"courier {declared.group(1)}\n", console.stderr


def test_a_postgresql_url_without_psycopg_says_what_to_install(tmp_path: Path) -> None:
    script = (
        "import sys; sys.modules['psycopg'] = None\n"
        "from courier.cli import main\n"
        "sys.exit(main(['status', 'postgresql://queue@db.example/orders']))\n"
    )
    done = in_a_users_folder(tmp_path, script=script)
    assert done.returncode == EXIT_ERROR, done.stderr
    assert done.stderr.startswith("courier: error: ") and done.stderr.count("\n") == 1
    assert "pip install 'lease-queue[postgres]'" in done.stderr
    assert "Traceback" not in done.stderr and "ModuleNotFoundError" not in done.stderr


def test_show_explains_a_job_without_transitions_installed(tmp_path: Path, queue: Path) -> None:
    make_dead_job(queue)
    script = (
        "import sys; sys.modules['transitions'] = None\n"
        "from courier.cli import main\n"
        f"sys.exit(main(['show', {str(queue)!r}, 'broken']))\n"
    )
    done = in_a_users_folder(tmp_path, script=script)
    assert done.returncode == 0, done.stderr
    assert "dead (permanent): stays dead until an operator redrives it" in done.stdout


# --- 8. logs: timestamps, and no flood of one failure --------------------------------


def test_courier_and_receiver_lines_are_timestamped(
    tmp_path: Path, queue: Path, children: Children, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cli(capsys, "enqueue", queue, "a", "1")
    port_file, serve_log = tmp_path / "port", tmp_path / "serve.log"
    serve: list[str | Path] = ["serve", tmp_path / "inbox.sqlite", "--port-file", port_file]
    server = children.start(courier_command(*serve, "--max-seconds", str(WAIT_S)), serve_log)
    assert wait_for_text(port_file, "\n", WAIT_S)
    url = f"http://127.0.0.1:{int(port_file.read_text())}/deliveries"
    log = tmp_path / "c1.log"
    argv: list[str | Path] = ["run", queue, "--url", url, "--owner", "c1", "--until-drained"]
    assert children.start(courier_command(*argv), log).wait(timeout=WAIT_S + 10) == 0
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=WAIT_S) == 0
    for path in (log, serve_log):
        lines = path.read_text().splitlines()
        assert len(lines) >= 3 and all(STAMP.match(line) for line in lines), lines


def test_a_postgres_outage_is_one_line_every_few_seconds_with_a_count(
    tmp_path: Path, receiver: Receiver, children: Children
) -> None:
    log = tmp_path / "c1.log"
    with courier.embedded.embedded_server("lease-queue-outage-") as admin:
        with psycopg.connect(admin, autocommit=True) as con:
            con.execute("CREATE DATABASE outage")
        conninfo = libpq.make_conninfo(admin, dbname="outage")
        pgworker.open_queue(conninfo).close()
        argv = ["run", conninfo, "--url", receiver.url, "--owner", "c1", "--max-idle-ms", "60000"]
        proc = children.start(courier_command(*argv, "--max-seconds", str(WAIT_S)), log)
        assert wait_for_text(log, "c1: started", WAIT_S), log.read_text()
        time.sleep(0.5)  # a few idle rounds on the live server
    # The server is stopped and its folder gone: every round now fails the same way.
    assert wait_for_text(log, "unreachable", WAIT_S), log.read_text()
    time.sleep(6.0)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=WAIT_S) == 0, log.read_text()
    lines = log.read_text().splitlines()
    failing = [line for line in lines if "unreachable" in line]
    assert 1 <= len(failing) <= 3, "\n".join(lines)
    assert any("(again: " in line or "came " in line for line in lines), "\n".join(lines)
    assert all(STAMP.match(line) for line in lines), lines


# --- 9. the smaller ones -------------------------------------------------------------


def test_range_messages_name_the_real_minimum(
    queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for value in ("70000", "0"):
        code, _, err = run_cli(capsys, "enqueue", queue, "a", "1", "--ttl-ms", value)
        assert code == EXIT_USAGE and "100..60000" in err and "1..60000" not in err, err


def test_bulk_intake_names_every_bad_line_and_the_file(
    tmp_path: Path, queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "orders.jsonl"
    bad.write_bytes(
        b'{"id": "a", "qty": 1}\n{"id": "b", "qty": 0}\n\x89PNG\x00\n{"id": "c d", "qty": 1}\n'
    )
    code, _, err = run_cli(capsys, "enqueue", queue, "--file", bad)
    assert code == EXIT_USAGE and err.count("\n") == 1, err
    assert str(bad) in err and "3 bad lines" in err
    assert "line 2: qty" in err and "line 3: not UTF-8" in err and "line 4: id" in err
    binary = tmp_path / "orders.csv"
    binary.write_bytes(bytes(range(256)) * 4)
    code, _, err = run_cli(capsys, "enqueue", queue, "--file", binary)
    assert code == EXIT_USAGE and str(binary) in err and "line 1: " in err, err
    assert json.loads(run_cli(capsys, "jobs", queue, "--json")[1]) == []


def test_postgres_without_a_schema_on_the_search_path_says_so(
    pg_conninfo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    nowhere = libpq.make_conninfo(pg_conninfo, options="-csearch_path=nowhere")
    for command in ("status", "init"):
        code, _, err = run_cli(capsys, command, nowhere)
        assert code == EXIT_USAGE and err.count("\n") == 1, err
        assert "search_path (nowhere) names no schema" in err, err
        assert "None" not in err and "CREATE TABLE" not in err and "LINE 1" not in err, err
    with psycopg.connect(pg_conninfo, autocommit=True) as con:
        assert con.execute("SELECT to_regnamespace('nowhere')").fetchone() == (None,)
    assert backend.is_conninfo(nowhere)
    assert main(["status", pg_conninfo]) == EXIT_OK


# --- the model explains each job; an attempt that left no outcome shows as one ---------


def test_a_courier_killed_mid_delivery_shows_as_claimed_with_no_outcome(
    tmp_path: Path,
    queue: Path,
    receiver: Receiver,
    children: Children,
    capsys: pytest.CaptureFixture[str],
) -> None:
    run_cli(capsys, "enqueue", queue, "a", "1")
    report, log = tmp_path / "stall.json", tmp_path / "c1.log"
    argv: list[str | Path] = [
        "run",
        queue,
        "--url",
        receiver.url,
        "--owner",
        "c1",
        "--lease-ms",
        "20000",
    ]
    argv += ["--stall-after-acks", "1", "--stall-report", str(report)]
    proc = children.start(courier_command(*argv, "--max-seconds", str(WAIT_S)), log)
    assert wait_for_text(report, "}", WAIT_S), log.read_text()
    assert Children.kill(proc) == -signal.SIGKILL
    shown = json.loads(run_cli(capsys, "show", queue, "a", "--json")[1])
    (attempt,) = shown["attempts"]
    assert (attempt["owner"], attempt["token"], attempt["outcome"]) == ("c1", 1, None)
    claimed_at = attempt["claimed_at_ms"]
    assert shown["job"]["lease_until"] - 20_000 <= claimed_at <= shown["explanation"]["now_ms"]
    assert shown["explanation"]["next"]["trigger"] == "reclaim"
    assert shown["explanation"]["next"]["at_ms"] == shown["job"]["lease_until"]
    text = run_cli(capsys, "show", queue, "a")[1]
    assert "attempts (1 recorded, 1 without an outcome)" in text
    assert f"token 1  c1  claimed by c1 at {claimed_at} (" in text and "no outcome recorded" in text
    assert "leased to c1 (token 1, 1 of 3 attempts made)" in text
    assert "claimable again by any courier from" in text
