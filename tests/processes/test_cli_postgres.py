"""The operator CLI on PostgreSQL: a conninfo or URL in place of the queue file's path.

Real server (``tests/postgres.py``), real courier child processes, real HTTP. The
commands read and write the same tables as on SQLite; the courier judges leases on
the server's clock, whatever the host's clock says; a conninfo that cannot connect
fails in one line that names the host and hides the password.
"""

from __future__ import annotations

import json
import sys
import urllib.parse
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import conninfo as libpq

import pgworker
from courier import backend
from courier.attempts import attempts_of
from courier.cli import EXIT_ERROR, EXIT_OK, EXIT_USAGE, main
from courier.clock import clock_ms
from courier.delivery import HttpSend
from courier.pg_rounds import PgRounds
from courier.procs import Children, courier_command
from courier.receiver import Receiver
from courier.transient import is_transient
from tests.processes.test_cli import dead_job, demo_story
from tests.processes.test_courier import drain

WAIT_S = 20.0


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(arg) for arg in argv])
    out, err = capsys.readouterr()
    return code, out, err


def as_url(conninfo: str) -> str:
    """The same database as a ``postgresql://`` URL (a socket folder goes in ``host=``)."""
    params = libpq.conninfo_to_dict(conninfo)
    query = urllib.parse.urlencode({"host": params["host"]}) if "host" in params else ""
    user = f"{params['user']}@" if "user" in params else ""
    port = f":{params['port']}" if "port" in params else ""
    return f"postgresql://{user}{port}/{params['dbname']}?{query}"


def server_now(conninfo: str) -> int:
    with psycopg.connect(conninfo, autocommit=True) as con:
        return backend.server_clock_ms(con)


def test_targets_are_told_apart(tmp_path: Path) -> None:
    assert backend.is_conninfo("postgresql://u@h/db") and backend.is_conninfo("postgres://h/db")
    assert backend.is_conninfo("host=/tmp dbname=orders")
    assert not backend.is_conninfo("q.sqlite") and not backend.is_conninfo(tmp_path / "q")
    odd = tmp_path / "host=1.sqlite"
    odd.write_bytes(b"")
    assert not backend.is_conninfo(str(odd)), "an existing file is a file, whatever its name"
    assert not backend.is_conninfo("colour=blue")


def test_commands_work_on_a_conninfo_and_on_a_url(
    pg_conninfo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    url = as_url(pg_conninfo)
    assert run_cli(capsys, "init", url)[:2] == (
        EXIT_OK,
        f"queue {backend.describe(url)} ready: 0 jobs\n",
    )
    code, out, _ = run_cli(capsys, "enqueue", url, "order-1", "3")
    assert code == EXIT_OK and out.startswith("enqueued order-1 qty=3 (True")
    assert run_cli(capsys, "enqueue", pg_conninfo, "order-1", "4")[0] == EXIT_ERROR
    code, out, _ = run_cli(capsys, "status", pg_conninfo, "--json")
    status = json.loads(out)
    assert status["counts"] == {"pending": 1, "leased": 0, "done": 0, "dead": 0}
    assert status["next_due"]["id"] == "order-1"
    # enqueue took the server's clock as now: the job became available at server time
    assert abs(status["next_due"]["available_at"] - server_now(pg_conninfo)) < 60_000
    code, out, _ = run_cli(capsys, "jobs", url, "--status", "pending", "--json")
    assert [job["id"] for job in json.loads(out)] == ["order-1"]


def test_redrive_and_show_on_postgres(pg_conninfo: str, capsys: pytest.CaptureFixture[str]) -> None:
    con = pgworker.open_queue(pg_conninfo)
    try:
        dead_job(pgworker, con, backend.server_clock_ms(con))
    finally:
        con.close()
    code, out, _ = run_cli(capsys, "redrive", pg_conninfo, "broken", "--note", "ticket-1")
    assert code == EXIT_OK
    audit = json.loads(out.splitlines()[1].removeprefix("audit row: "))
    assert (audit["id"], audit["token"], audit["note"]) == ("broken", 1, "ticket-1")
    code, out, _ = run_cli(capsys, "show", pg_conninfo, "broken", "--json")
    shown = json.loads(out)
    assert shown["job"]["status"] == "pending"
    assert [row["seq"] for row in shown["redrives"]] == [audit["seq"]]
    code, out, _ = run_cli(capsys, "redrives", pg_conninfo, "--json")
    assert [row["note"] for row in json.loads(out)] == ["ticket-1"]


def test_an_unreachable_server_is_one_line_naming_the_host_never_the_password(
    capsys: pytest.CaptureFixture[str],
) -> None:
    url = "postgresql://operator:s3cret-pw@127.0.0.1:1/orders"
    words = "host=127.0.0.1 port=1 dbname=orders user=operator password=s3cret-pw"
    for argv in (["status", url], ["init", url], ["dead", url, "--json"], ["jobs", words]):
        code, out, err = run_cli(capsys, *argv)
        assert (code, out) == (EXIT_ERROR, "")
        assert (
            err.startswith("courier: error: cannot connect to PostgreSQL") and err.count("\n") == 1
        )
        assert "'127.0.0.1'" in err and "'orders'" in err
        assert "s3cret-pw" not in err


def test_a_database_without_the_queue_tables_is_refused_and_left_alone(
    pg_server: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    with pg_server.database() as conninfo:
        with psycopg.connect(conninfo, autocommit=True) as con:
            con.execute("DROP TABLE jobs, redrives")
        code, _, err = run_cli(capsys, "status", conninfo)
        assert code == EXIT_USAGE and "holds no queue" in err
        with psycopg.connect(conninfo, autocommit=True) as con:
            assert con.execute("SELECT to_regclass('jobs')").fetchone() == (None,)


def test_the_courier_judges_leases_on_the_servers_clock(
    pg_conninfo: str, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host whose clock says 1970 still delivers: every time comes from the server."""
    con = pgworker.open_queue(pg_conninfo)
    try:
        assert pgworker.enqueue(con, {"id": "a", "qty": 1}, backend.server_clock_ms(con), 30_000)
    finally:
        con.close()
    for name, module in list(sys.modules.items()):  # every courier module's view of it
        if name.partition(".")[0] == "courier" and getattr(module, "clock_ms", None) is clock_ms:
            monkeypatch.setattr(module, "clock_ms", lambda: 1)
    before = server_now(pg_conninfo)
    report = drain(pg_conninfo, receiver.url)
    assert report.stop_reason == "drained"
    assert report.results == [{"id": "a", "token": 1, "status": "done"}]
    with psycopg.connect(pg_conninfo, autocommit=True) as check:
        (available_at,) = check.execute("SELECT available_at FROM jobs").fetchall()[0]
    assert before <= available_at <= server_now(pg_conninfo)  # finish's time: the server's


@pytest.mark.parametrize(
    "batches", [(), ("--batch", "4", "--in-flight", "2")], ids=["one-job", "batched"]
)
def test_a_courier_process_on_postgres_records_why_each_attempt_failed(
    tmp_path: Path,
    pg_conninfo: str,
    children: Children,
    capsys: pytest.CaptureFixture[str],
    batches: tuple[str, ...],
) -> None:
    con = pgworker.open_queue(pg_conninfo)
    try:
        now = backend.server_clock_ms(con)
        assert pgworker.enqueue(con, {"id": "fine", "qty": 1}, now, 30_000)
        assert pgworker.enqueue(con, {"id": "refused", "qty": 2}, now, 30_000)
    finally:
        con.close()
    with Receiver(tmp_path / "inbox.sqlite") as receiver:
        assert HttpSend(receiver.url, "seed")({"id": "refused", "qty": 9}) is True  # qty 2: 409
        log = tmp_path / "c1.log"
        argv = ["run", pg_conninfo, "--url", receiver.url, "--owner", "c1", "--until-drained"]
        argv += batches
        proc = children.start(courier_command(*argv, "--max-seconds", str(WAIT_S)), log)
        assert proc.wait(timeout=WAIT_S + 10) == 0, log.read_text()
    text = log.read_text()
    assert "(the server's clock)" in text
    assert "refused token=1 -> dead (HTTP 409:" in text
    assert "could not record" not in text
    claimed, attempt = attempts_of(pg_conninfo, "refused")  # at the start, and the outcome
    assert (claimed["owner"], claimed["token"], claimed["outcome"]) == ("c1", 1, "claimed")
    assert claimed["at_ms"] <= attempt["at_ms"]
    assert (attempt["owner"], attempt["token"], attempt["outcome"], attempt["status"]) == (
        "c1",
        1,
        "permanent",
        "dead",
    )
    assert (attempt["kind"], attempt["http_status"]) == ("answer", 409)
    assert "conflict" in attempt["detail"]
    claimed, attempt = attempts_of(pg_conninfo, "fine")
    assert (claimed["token"], claimed["outcome"], claimed["status"]) == (1, "claimed", "leased")
    assert (attempt["token"], attempt["outcome"], attempt["status"]) == (1, "ok", "done")
    assert (attempt["kind"], attempt["http_status"]) == ("answer", 200)
    assert claimed["seq"] < attempt["seq"] and claimed["at_ms"] <= attempt["at_ms"]
    code, out, _ = run_cli(capsys, "dead", pg_conninfo)
    assert code == EXIT_OK
    assert "HTTP 409" in out and "by c1, token 1" in out


def test_demo_on_postgres_tells_the_same_story() -> None:
    output = demo_story("--backend", "postgres", timeout_s=90, within_s=60)
    assert "on an embedded PostgreSQL server" in output


def test_the_new_options_work_on_postgres_as_on_a_file(
    tmp_path: Path, pg_conninfo: str, capsys: pytest.CaptureFixture[str]
) -> None:
    jobs = tmp_path / "jobs.csv"
    jobs.write_text("id,qty\n" + "".join(f"p-{n},{1 + n % 3}\n" for n in range(12)))
    code, out, _ = run_cli(capsys, "enqueue", pg_conninfo, "--file", jobs, "--chunk", "5")
    assert code == EXIT_OK and "12 enqueued" in out and "3 commits" in out
    con = pgworker.open_queue(pg_conninfo)
    try:
        now = backend.server_clock_ms(con)
        tickets = pgworker.claim_many(con, "c1", now, limit=3)
        for ticket in tickets:
            assert pgworker.finish(con, ticket, "permanent", now) == "dead"
    finally:
        con.close()
    code, out, _ = run_cli(
        capsys, "jobs", pg_conninfo, "--status", "dead", "--prefix", "p-", "--json"
    )
    assert [job["id"] for job in json.loads(out)] == ["p-0", "p-1", "p-2"]
    code, out, _ = run_cli(
        capsys, "status", pg_conninfo, "--watch", "0.05", "--times", "2", "--json"
    )
    assert [json.loads(line)["counts"]["dead"] for line in out.splitlines()] == [3, 3]
    code, out, _ = run_cli(
        capsys, "redrive", pg_conninfo, "--all", "--reason", "permanent", "--note", "bulk-1"
    )
    assert code == EXIT_OK and "redriven 3 of 3" in out
    rows = json.loads(run_cli(capsys, "redrives", pg_conninfo, "--id", "p-1", "--json")[1])
    assert [(row["id"], row["note"]) for row in rows] == [("p-1", "bulk-1")]
    code, out, _ = run_cli(capsys, "show", pg_conninfo, "p-1")
    assert code == EXIT_OK and "redrives (1)" in out and "Z)" in out


def test_the_web_page_reads_a_postgres_queue(pg_conninfo: str) -> None:
    """The page's reads on PostgreSQL: counts, the dead jobs by cause (the attempt log's
    own SQL there), a page of them by cause, a job's explanation and attempts."""
    from courier.attempts import Attempt, AttemptLog, dead_ids
    from courier.delivery import Cause
    from courier.web import Filters, WebPage
    from courier.web.views import home

    con = pgworker.open_queue(pg_conninfo)
    log = AttemptLog(pg_conninfo)
    try:
        now = backend.server_clock_ms(con)
        for job_id in ("w-1", "w-2"):
            pgworker.enqueue(con, {"id": job_id, "qty": 1}, now, 60_000, 1)
        ticket = pgworker.claim(con, "c1", now)
        assert ticket is not None and ticket["id"] == "w-1"
        log.claimed("w-1", "c1")
        assert pgworker.finish(con, ticket, "permanent", now) == "dead"
        log.record(Attempt("w-1", 1, "c1", now, "permanent", "dead", Cause("answer", "no", 409)))
    finally:
        log.close()
        con.close()
    page = WebPage(pg_conninfo, allow_redrive=False, allow_remote=False, token="t")
    data = page.home(Filters())
    assert data["counts"]["pending"] == 1 and data["oldest_due"]["id"] == "w-2"
    assert data["dead_causes"] == [{"reason": "permanent", "cause": "HTTP 409", "jobs": 1}]
    assert dead_ids(pg_conninfo, cause="HTTP 409") == ["w-1"]
    assert dead_ids(pg_conninfo, cause="HTTP 500") == []
    assert [job["id"] for job in page.home(Filters(cause="HTTP 409"))["jobs"]] == ["w-1"]
    assert "id='count-pending'>1<" in home(page, data, Filters())
    job = page.job("w-1")
    assert job is not None and job["explanation"].next is None
    (attempt,) = job["attempts"]
    assert (attempt["token"], attempt["outcome"], attempt["http_status"]) == (1, "permanent", 409)
    assert attempt["claimed_at_ms"] is not None  # on the server's clock


def test_a_courier_that_lost_its_server_connection_connects_again(
    pg_conninfo: str, pg_server: Any
) -> None:
    rounds = PgRounds(pg_conninfo)
    try:
        first = rounds.now_ms()
        (pid,) = rounds.connection().execute("SELECT pg_backend_pid()").fetchall()[0]
        pg_server.con.execute("SELECT pg_terminate_backend(%s)", (pid,))
        with pytest.raises(psycopg.OperationalError) as lost:
            rounds.drained()  # a call on the connection (the clock is carried a second)
        assert is_transient(lost.value)  # the courier backs off instead of dying
        assert rounds.now_ms() >= first  # and the next round has a new connection
        (again,) = rounds.connection().execute("SELECT pg_backend_pid()").fetchall()[0]
        assert again != pid
    finally:
        rounds.close()
