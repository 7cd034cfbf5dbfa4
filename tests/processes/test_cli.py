"""The operator CLI: commands, clear one-line errors, and the demo as a real process.

Commands that do not install signal handlers run in-process through ``main``;
``serve`` and ``demo`` run as ``python -m courier`` child processes.
"""

from __future__ import annotations

import io
import json
import os
import shlex
import signal
import sqlite3
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import worker
from courier import queueview
from courier.cli import EXIT_ERROR, EXIT_OK, EXIT_USAGE, main
from courier.clock import clock_ms
from courier.delivery_request import RequestLine
from courier.inbox import Inbox
from courier.procs import Children, courier_command, project_root

COMMANDS = [
    "init",
    "enqueue",
    "status",
    "jobs",
    "show",
    "dead",
    "redrives",
    "redrive",
    "serve",
    "inbox",
    "audit",
    "run",
    "web",
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


def places(tmp_path: Path, queue: Path) -> dict[str, Path]:
    """The places an error test's argv names: ``{queue}``, a ``{folder}``, a ``{missing}``
    file, a ``{nowhere}`` folder, ``{not_a_db}`` (a text file) and ``{garbage}`` (bytes)."""
    not_a_db = tmp_path / "notes.txt"
    not_a_db.write_text("hello\n")
    garbage = tmp_path / "garbage.sqlite"
    garbage.write_bytes(b"not a database, just bytes" * 100)
    return {
        "queue": queue,
        "folder": tmp_path,
        "missing": tmp_path / "missing",
        "nowhere": tmp_path / "nowhere",
        "not_a_db": not_a_db,
        "garbage": garbage,
    }


def filled_in(argv: list[str], names: dict[str, Path]) -> list[str]:
    """``argv`` with each ``{name}`` replaced by its place."""
    return [arg.format(**names) for arg in argv]


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
        ["enqueue", "{queue}", "--file", "{missing}"],
        ["enqueue", "{queue}", "--file", "{folder}"],
        ["run", "{missing}", "--url", "http://127.0.0.1:9/deliveries", "--owner", "c1"],
        ["run", "{queue}", "--url", "ftp://x", "--owner", "c1"],
        ["run", "{queue}", "--url", "http://receiver..example/deliveries", "--owner", "c1"],
        ["run", "{queue}", "--url", "http://[::1/deliveries", "--owner", "c1"],
        ["run", "{queue}", "--url", "http://127.0.0.1:0/deliveries", "--owner", "c1"],
        ["run", "{queue}", "--url", "http://me:secret@127.0.0.1:9/d", "--owner", "c1"],
        ["run", "{queue}", "--url", "http://127.0.0.1:9/deliveries", "--owner", "c 1"],
        ["run", "{queue}", "--url", "http://x/", "--owner", "c1", "--stall-after-acks", "1"],
    ],
)
def test_bad_input_is_one_line_and_a_nonzero_exit(
    tmp_path: Path, queue: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, _, err = run_cli(capsys, *filled_in(argv, places(tmp_path, queue)))
    assert code in (EXIT_USAGE, EXIT_ERROR)
    assert err.startswith("courier: error: ") and err.count("\n") == 1, err
    assert not (tmp_path / "missing").exists(), "a command created a queue it should refuse"


def test_a_file_that_cannot_be_read_is_named_and_nothing_is_enqueued(
    tmp_path: Path, queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for given, why in ((tmp_path / "missing.jsonl", "No such file"), (tmp_path, "directory")):
        code, _, err = run_cli(capsys, "enqueue", str(queue), "--file", str(given))
        assert code == EXIT_USAGE
        assert f"cannot read --file {str(given)!r}" in err and why in err, err
    code, out, _ = run_cli(capsys, "status", str(queue), "--json")
    assert code == EXIT_OK and json.loads(out)["counts"]["pending"] == 0


def test_a_url_with_a_password_is_refused_without_echoing_it(
    queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = "http://me:s3cret@127.0.0.1:9/deliveries"
    code, out, err = run_cli(capsys, "run", str(queue), "--url", url, "--owner", "c1")
    assert code == EXIT_USAGE
    assert "user name or password" in err
    assert "s3cret" not in out + err


def test_argparse_errors_exit_2_with_usage(queue: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["enqueue", str(queue), "a", "x"], ["redrive", str(queue), "a"], ["nope"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == EXIT_USAGE
        assert "usage:" in capsys.readouterr().err


def dead_job(queue_module: Any, con: Any, now: int) -> None:
    """Make job ``broken`` (qty 2, one attempt) dead at ``now`` through ``queue_module``'s calls."""
    queue_module.enqueue(con, {"id": "broken", "qty": 2}, now, 60_000, 1)
    ticket = queue_module.claim(con, "c1", now)
    assert ticket is not None
    assert queue_module.finish(con, ticket, "permanent", now) == "dead"


def make_dead_job(queue: Path) -> None:
    con = worker.open_queue(queue)
    try:
        dead_job(worker, con, clock_ms())
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
    while time.monotonic() < until and server.poll() is None:
        if port_file.exists() and port_file.read_text().endswith("\n"):
            break  # written whole (the file exists a moment before its text)
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


def demo_story(*options: str, timeout_s: float, within_s: float) -> str:
    """Run ``courier demo OPTIONS...`` as a fresh process; its output, once it told the story.

    It must exit 0 within ``within_s`` (killed at ``timeout_s``), say that c1 was
    SIGKILLed, that the receiver took 9 requests for 8 effects, and end with ``OK in``.
    """
    started = time.monotonic()
    done = subprocess.run(
        courier_command("demo", *options),
        cwd=project_root(),
        capture_output=True,
        text=True,
        timeout=timeout_s,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "c1 killed by SIGKILL" in done.stdout
    assert "receiver: 9 HTTP requests, 8 effects, 8 inbox rows" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1].startswith("OK in ")
    assert time.monotonic() - started < within_s
    return done.stdout


def test_demo_runs_as_a_fresh_process_and_passes(tmp_path: Path) -> None:
    demo_story(timeout_s=60, within_s=30)


# --- issue 17: the defects a new user met, each pinned -----------------------------------


def queue_tables(path: Path) -> set[str]:
    con = sqlite3.connect(path)
    try:
        return {name for (name,) in con.execute("SELECT name FROM sqlite_master")}
    finally:
        con.close()


@pytest.mark.parametrize("content", [b"", b"garbage, not a database at all" * 40, "inbox"])
def test_run_refuses_a_file_that_is_not_a_queue_and_leaves_it_alone(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: bytes | str
) -> None:
    target = tmp_path / "other.sqlite"
    if content == "inbox":
        Inbox(target)
    else:
        assert isinstance(content, bytes)
        target.write_bytes(content)
    before = target.read_bytes()
    argv: list[str | Path] = ["run", target, "--url", "http://127.0.0.1:9/deliveries"]
    argv += ["--owner", "c1"]
    code, _, err = run_cli(capsys, *argv, "--max-seconds", "1")
    assert code == EXIT_USAGE and "is not a queue file" in err and str(target) in err
    assert target.read_bytes() == before


def test_serve_refuses_to_put_its_inbox_into_a_queue_file(
    queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    before = queue_tables(queue)
    code, _, err = run_cli(capsys, "serve", queue, "--max-seconds", "1")
    assert code == EXIT_USAGE and "a queue file" in err and err.count("\n") == 1
    assert queue_tables(queue) == before


def test_a_send_timeout_not_below_the_lease_is_refused_with_the_reason(
    queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv: list[str | Path] = ["run", queue, "--url", "http://127.0.0.1:9/deliveries"]
    argv += ["--owner", "c1"]
    code, out, err = run_cli(capsys, *argv, "--lease-ms", "1000", "--timeout-ms", "3000")
    assert (code, out) == (EXIT_USAGE, "")
    assert "unsafe: --timeout-ms 3000 is not below --lease-ms 1000" in err
    assert "send it again" in err
    assert run_cli(capsys, *argv, "--lease-ms", "1000", "--timeout-ms", "1000")[0] == EXIT_USAGE


def test_reenqueueing_a_done_or_dead_job_says_what_it_is(
    queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    make_dead_job(queue)
    code, out, _ = run_cli(capsys, "enqueue", queue, "broken", "2")
    assert code == EXIT_OK and "already known broken qty=2: the job is dead" in out
    assert "already queued" not in out and "redrive it" in out


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["init", "{folder}"], "is a directory"),
        (["init", "{nowhere}/q.sqlite"], "no folder"),
        (["init", "{garbage}"], "{garbage}"),
        (["status", "{garbage}"], "{garbage}"),
        (["enqueue", "{queue}", "a", "-1"], "qty must be a whole number in 1..1000, got -1"),
        (["enqueue", "{queue}", "bad id", "1"], "job id must be 1-64 ASCII letters"),
        (["enqueue", "{queue}", "a", "1", "--ttl-ms", "60"], "60 seconds write 60000"),
        (["redrive", "{queue}", "ghost", "--note", "n"], "no job 'ghost'"),
    ],
)
def test_errors_name_the_file_and_speak_the_clis_words(
    tmp_path: Path, queue: Path, capsys: pytest.CaptureFixture[str], argv: list[str], words: str
) -> None:
    names = places(tmp_path, queue)
    code, _, err = run_cli(capsys, *filled_in(argv, names))
    assert code == EXIT_USAGE and err.count("\n") == 1, err
    assert words.format(**names) in err, err
    assert "that is a" not in err, "the library's message showed through"


@pytest.mark.parametrize("qty", ["\u0663", "1_0", "+7", " 3"])
def test_qty_is_ascii_digits_only(
    queue: Path, capsys: pytest.CaptureFixture[str], qty: str
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["enqueue", str(queue), "a", qty])
    assert exit_info.value.code == EXIT_USAGE
    assert "not a whole number" in capsys.readouterr().err


def test_serve_on_a_busy_port_names_the_port(
    tmp_path: Path, receiver_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run_cli(
        capsys,
        "serve",
        tmp_path / "inbox.sqlite",
        "--port",
        str(receiver_port),
        "--max-seconds",
        "1",
    )
    assert code == EXIT_ERROR and f"port {receiver_port}" in err and err.count("\n") == 1


@pytest.fixture
def receiver_port(tmp_path: Path) -> Iterator[int]:
    from courier.receiver import Receiver

    with Receiver(tmp_path / "busy-inbox.sqlite") as busy:
        yield busy.port


def test_inbox_into_a_closed_pipe_ends_quietly(tmp_path: Path) -> None:
    Inbox(tmp_path / "inbox.sqlite")
    con = sqlite3.connect(tmp_path / "inbox.sqlite")
    with con:  # more rows than a pipe buffers, in one transaction
        con.executemany(
            "INSERT INTO inbox (id, qty, sender, received_at_ms) VALUES (?, 1, NULL, 0)",
            [(f"id-{n}",) for n in range(3000)],
        )
    con.close()
    done = subprocess.run(
        f"{shlex.join(courier_command('inbox', tmp_path / 'inbox.sqlite'))} | head -1",
        shell=True,
        cwd=project_root(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout.startswith("inbox ") and done.stdout.count("\n") == 1
    assert "Broken pipe" not in done.stderr and "Traceback" not in done.stderr, done.stderr
    assert "an unnamed sender" in run_inbox_text(tmp_path / "inbox.sqlite")


def run_inbox_text(inbox: Path) -> str:
    done = subprocess.run(
        courier_command("inbox", inbox),
        cwd=project_root(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.stdout


# --- issue 17: the commands operators expect ---------------------------------------------


def test_bulk_enqueue_from_jsonl_stdin_and_csv_one_commit_per_chunk(
    tmp_path: Path, queue: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    lines = "\n".join(json.dumps({"id": f"j-{n}", "qty": 1 + n % 5}) for n in range(25))
    monkeypatch.setattr("sys.stdin", io.StringIO(lines + "\n"))
    code, out, _ = run_cli(capsys, "enqueue", queue, "--file", "-", "--chunk", "10")
    assert code == EXIT_OK
    assert (
        "read 25 jobs: 25 enqueued, 0 already there (intake retries), 0 conflicts; 3 commits" in out
    )
    csv_file = tmp_path / "more.csv"
    csv_file.write_text("id,qty\nj-0,1\nc-1,2\nj-1,9\n")
    code, out, _ = run_cli(capsys, "enqueue", queue, "--file", csv_file)
    assert code == EXIT_ERROR and "1 enqueued, 1 already there" in out and "j-1" in out
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"id": "x-1", "qty": 1}\n{"id": "x-2", "qty": 0}\n')
    code, _, err = run_cli(capsys, "enqueue", queue, "--file", bad)
    assert code == EXIT_USAGE and "line 2: qty must be a whole number in 1..1000" in err
    code, out, _ = run_cli(capsys, "jobs", queue, "--prefix", "x-", "--json")
    assert json.loads(out) == [], "a bad file writes nothing"


def test_jobs_filters_show_and_redrives(queue: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_dead_job(queue)
    for job_id in ("keep-1", "keep-2", "other"):
        run_cli(capsys, "enqueue", queue, job_id, "1")
    code, out, _ = run_cli(capsys, "jobs", queue, "--prefix", "keep-", "--limit", "1", "--json")
    assert [job["id"] for job in json.loads(out)] == ["keep-1"]
    code, out, _ = run_cli(capsys, "jobs", queue, "--status", "dead", "--reason", "permanent")
    assert "broken" in out and "1 jobs" in out and "Z)" in out  # ISO time beside the ms
    run_cli(capsys, "redrive", queue, "broken", "--note", "ticket-9")
    code, out, _ = run_cli(capsys, "show", queue, "broken", "--json")
    shown = json.loads(out)
    assert shown["job"]["status"] == "pending" and [r["note"] for r in shown["redrives"]] == [
        "ticket-9"
    ]
    assert "attempts (0 recorded)" in run_cli(capsys, "show", queue, "broken")[1]
    code, out, _ = run_cli(capsys, "redrives", queue, "--id", "broken", "--json")
    assert code == EXIT_OK and [row["token"] for row in json.loads(out)] == [1]
    assert run_cli(capsys, "show", queue, "ghost")[0] == EXIT_USAGE


def test_bulk_redrive_writes_one_audit_row_per_job_of_the_reason(
    queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    con = worker.open_queue(queue)
    try:
        now = clock_ms()
        for n in range(4):
            worker.enqueue(con, {"id": f"d-{n}", "qty": 1}, now, 60_000, 1)
            ticket = worker.claim(con, "c1", now)
            assert ticket is not None
            outcome = "permanent" if n < 3 else "retry"
            worker.finish(con, ticket, outcome, now)
    finally:
        con.close()
    code, out, _ = run_cli(
        capsys, "redrive", queue, "--all", "--reason", "permanent", "--note", "fixed-it"
    )
    assert code == EXIT_OK and "redriven 3 of 3 dead jobs with reason permanent" in out
    rows = json.loads(run_cli(capsys, "redrives", queue, "--json")[1])
    assert sorted(row["id"] for row in rows) == ["d-0", "d-1", "d-2"]
    assert {row["note"] for row in rows} == {"fixed-it"}
    assert [job["id"] for job in json.loads(run_cli(capsys, "dead", queue, "--json")[1])] == ["d-3"]


def test_status_watch_redraws_and_every_reading_command_has_json(
    tmp_path: Path, queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    run_cli(capsys, "enqueue", queue, "a", "1")
    code, out, _ = run_cli(capsys, "status", queue, "--watch", "0.05", "--times", "3", "--json")
    views = [json.loads(line) for line in out.splitlines()]
    assert code == EXIT_OK and len(views) == 3 and views[0]["counts"]["pending"] == 1
    Inbox(tmp_path / "inbox.sqlite")
    readers: list[list[str | Path]] = [
        ["status", queue],
        ["jobs", queue],
        ["show", queue, "a"],
        ["dead", queue],
        ["redrives", queue],
        ["inbox", tmp_path / "inbox.sqlite"],
        ["audit", queue, tmp_path / "inbox.sqlite", "--in-flight-ok"],
    ]
    for argv in readers:
        code, out, _ = run_cli(capsys, *argv, "--json")
        json.loads(out)


def test_run_forever_has_no_day_cap_and_refuses_a_cap_beside_it(queue: Path) -> None:
    from courier.cli import build_parser
    from courier.commands.services import run_stop_rules

    args = build_parser().parse_args(
        ["run", str(queue), "--url", "http://x/", "--owner", "c1", "--forever"]
    )
    rules = run_stop_rules(args)
    assert (rules.max_runs, rules.max_seconds) == (None, None)
    args.max_seconds = 5.0
    with pytest.raises(ValueError, match="--forever"):
        run_stop_rules(args)


def test_the_readme_snippet_runs_as_printed(tmp_path: Path) -> None:
    text = (project_root() / "README.md").read_text(encoding="utf-8")
    section = text.split("## Using the queue", 1)[1]
    snippet = section.split("```python\n", 1)[1].split("```", 1)[0]
    done = subprocess.run(
        [sys.executable, "-c", snippet],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(project_root())},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "orders.sqlite").exists()


def test_the_console_script_is_declared() -> None:
    text = (project_root() / "pyproject.toml").read_text(encoding="utf-8")
    assert '[project.scripts]\ncourier = "courier.cli:main"' in text


class Terminal(io.StringIO):
    """A stderr that says it is a terminal, so the progress bar is drawn."""

    def isatty(self) -> bool:
        return True


def test_bulk_enqueue_draws_a_progress_bar_on_a_terminal_only(
    tmp_path: Path, queue: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = tmp_path / "jobs.jsonl"
    jobs.write_text("".join(json.dumps({"id": f"t-{n}", "qty": 1}) + "\n" for n in range(30)))
    terminal = Terminal()
    monkeypatch.setattr("sys.stderr", terminal)
    assert main(["enqueue", str(queue), "--file", str(jobs), "--chunk", "10"]) == EXIT_OK
    drawn = terminal.getvalue()
    assert drawn.count("\r[") == 3 and drawn.rstrip().endswith("30/30")
    monkeypatch.undo()
    capsys.readouterr()
    code, _, err = run_cli(capsys, "enqueue", queue, "--file", jobs)
    assert code == EXIT_OK and err == "", "no bar when stderr is not a terminal"


def test_status_warns_of_times_given_in_seconds(
    queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    con = worker.open_queue(queue)
    try:
        seconds = int(time.time())  # the mistake: seconds where milliseconds belong
        assert worker.enqueue(con, {"id": "early", "qty": 1}, seconds, 60_000)
    finally:
        con.close()
    code, out, _ = run_cli(capsys, "status", queue)
    assert code == EXIT_OK and "warning: 1 jobs have a deadline before 1973" in out
    assert json.loads(run_cli(capsys, "status", queue, "--json")[1])["seconds_suspects"] == 1
    fresh = queue.with_name("fresh.sqlite")
    run_cli(capsys, "init", fresh)
    assert run_cli(capsys, "enqueue", fresh, "fine", "1")[0] == EXIT_OK  # in milliseconds
    code, out, _ = run_cli(capsys, "status", fresh)
    assert code == EXIT_OK and "pending" in out and "warning" not in out


def test_the_oldest_due_job_is_the_one_due_longest_not_the_lowest_seq(queue: Path) -> None:
    con = worker.open_queue(queue)
    try:
        t0 = clock_ms() - 10_000
        worker.enqueue(con, {"id": "b", "qty": 1}, t0, 60_000)  # seq 1
        assert worker.claim(con, "c1", t0, 1000) is not None  # due again at t0 + 1000
        worker.enqueue(con, {"id": "a", "qty": 1}, t0 + 500, 60_000)  # seq 2, due at t0 + 500
        now = t0 + 2000
        following, _ = queueview.next_due(con, now)
        assert following is not None and following["id"] == "b"  # the next claim's, by seq
        oldest = queueview.oldest_due(con, now)
        assert oldest is not None
        assert (oldest["id"], oldest["due_since"], oldest["due_for_ms"]) == ("a", t0 + 500, 1500)
    finally:
        con.close()
