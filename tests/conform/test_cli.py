"""``courier conform``: install, check (exit 0, or 1 with the unexplained transaction
shown), ``--json``, ``--follow`` in a real child process, and uninstall."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import psycopg
import pytest

import pgworker
import worker
from courier import backend
from courier.cli import EXIT_ERROR, EXIT_OK, EXIT_USAGE, main
from courier.clock import clock_ms
from courier.procs import courier_command, project_root

FOLLOW_TIMEOUT_S = 60


def _queue(tmp_path: Path) -> str:
    path = str(tmp_path / "queue.sqlite")
    worker.open_queue(path).close()
    return path


def test_install_check_and_uninstall(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = _queue(tmp_path)
    assert main(["conform", path]) == EXIT_USAGE  # no feed yet: one line of bad input
    assert "--install" in capsys.readouterr().err
    assert main(["conform", path, "--install"]) == EXIT_OK
    assert "change feed installed" in capsys.readouterr().out
    con = worker.open_queue(path)
    now = clock_ms() - 1000
    worker.enqueue(con, {"id": "a", "qty": 1}, now, 60_000)
    ticket = worker.claim(con, "c1", now)
    assert ticket is not None
    worker.finish(con, ticket, "ok", now + 1)
    assert main(["conform", path]) == EXIT_OK
    out = capsys.readouterr().out
    assert "3 transactions checked" in out and "OK:" in out, out
    con.execute("UPDATE jobs SET status = 'pending' WHERE id = 'a'")
    con.close()
    assert main(["conform", path, "--json"]) == EXIT_ERROR
    summary = json.loads(capsys.readouterr().out)
    assert (summary["transactions"], summary["unexplained"], summary["ok"]) == (4, 1, False)
    assert summary["findings"][0]["changes"][0]["after"]["status"] == "pending"
    assert main(["conform", path, "--uninstall"]) == EXIT_OK
    assert "change feed removed" in capsys.readouterr().out


def _followed(target: str, meanwhile: Callable[[IO[str]], None]) -> tuple[list[Any], list[Any]]:
    """``courier conform TARGET --follow --json`` in a child process: ``meanwhile(its
    stdout)`` writes to the queue, then its lines are read up to the first unexplained
    one, and the child is stopped (SIGTERM, exit 1); the events read, and the rest."""
    command = courier_command("conform", target, "--follow", "--json", "--interval", "0.05")
    with subprocess.Popen(
        [*command, "--max-seconds", "30"],
        cwd=project_root(),
        stdout=subprocess.PIPE,
        text=True,
    ) as child:
        try:
            assert child.stdout is not None
            meanwhile(child.stdout)
            events = []
            for line in child.stdout:  # bounded by --max-seconds
                events.append(json.loads(line))
                if events[-1]["event"] == "unexplained":
                    break
            child.terminate()
            rest = [json.loads(line) for line in child.stdout]
            assert child.wait(FOLLOW_TIMEOUT_S) == EXIT_ERROR
        finally:
            if child.poll() is None:
                child.kill()
                child.wait(FOLLOW_TIMEOUT_S)
    return events, rest


def test_follow_checks_what_commits_next(tmp_path: Path) -> None:
    path = _queue(tmp_path)
    assert main(["conform", path, "--install", "--json"]) == EXIT_OK

    def write(_: IO[str]) -> None:
        con = worker.open_queue(path)
        now = clock_ms() - 1000
        worker.enqueue(con, {"id": "a", "qty": 1}, now, 60_000)
        con.execute("UPDATE jobs SET qty = 2 WHERE id = 'a'")
        con.close()

    events, rest = _followed(path, write)
    unexplained = [e for e in events if e["event"] == "unexplained"]
    assert unexplained and unexplained[0]["changes"][0]["after"]["qty"] == 2
    summary = rest[-1]
    assert summary["event"] == "summary"
    assert (summary["transactions"], summary["unexplained"]) == (2, 1)


def test_follow_reads_on_after_its_connection_is_cut(pg_conninfo: str) -> None:
    """A follower on PostgreSQL whose server process is terminated (as a restart or a
    failover would end it) says once that it lost the queue, connects again, and checks
    what committed meanwhile: nothing is skipped, nothing is checked twice."""
    pgworker.open_queue(pg_conninfo).close()
    assert main(["conform", pg_conninfo, "--install", "--json"]) == EXIT_OK

    def cut_then_write(out: IO[str]) -> None:
        assert json.loads(out.readline())["event"] == "progress"  # it has read the feed
        with psycopg.connect(pg_conninfo, autocommit=True) as admin:
            cut = admin.execute(
                """SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity
                WHERE datname = current_database() AND pid <> pg_backend_pid()"""
            ).fetchone()
            assert cut == (1,)  # the follower's own
        con = pgworker.open_queue(pg_conninfo)
        now = backend.server_clock_ms(con) - 1000
        pgworker.enqueue(con, {"id": "a", "qty": 1}, now, 60_000)
        con.execute("UPDATE jobs SET qty = 2 WHERE id = 'a'")
        con.close()

    events, rest = _followed(pg_conninfo, cut_then_write)
    kinds = [e["event"] for e in events if e["event"] != "progress"]
    assert kinds == ["lost", "back", "unexplained"], events
    assert events[-1]["changes"][0]["after"]["qty"] == 2
    summary = rest[-1]
    assert summary["event"] == "summary"
    assert (summary["transactions"], summary["unexplained"]) == (2, 1)
