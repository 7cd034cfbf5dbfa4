"""``courier web``: the operator's page in a real headless Chromium, over real HTTP.

The page runs as a ``courier web`` child process on a real queue file whose dead
jobs got their causes from a real courier against the real receiver. The browser
loads it, its counts are held against the file, and a redrive submitted from the
page's form writes exactly one audit row. Without the page's token, or without
``--allow-redrive``, a POST changes nothing.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

import worker
from courier import queueview
from courier.cli import main
from courier.clock import clock_ms
from courier.delivery import HttpSend
from courier.procs import Children, courier_command
from courier.receiver import Receiver
from tests.processes.test_courier import drain
from tests.web.webdriver import Browser

WAIT_S = 20.0


def make_queue(tmp_path: Path) -> Path:
    """Two pending jobs, one done, two dead after a 409 (their causes in the attempt log)."""
    queue = tmp_path / "queue.sqlite"
    con = worker.open_queue(queue)
    now = clock_ms()
    for job_id in ("fine", "d-1", "d-2"):
        worker.enqueue(con, {"id": job_id, "qty": 1}, now, 60_000, 1)
    with Receiver(tmp_path / "inbox.sqlite") as receiver:
        for job_id in ("d-1", "d-2"):
            assert HttpSend(receiver.url, "seed")({"id": job_id, "qty": 7}) is True
        report = drain(queue, receiver.url, record_attempts=True)
    assert sorted(r["status"] for r in report.results) == ["dead", "dead", "done"]
    for job_id in ("p-1", "p-2"):
        worker.enqueue(con, {"id": job_id, "qty": 2}, clock_ms(), 60_000)
    con.close()
    return queue


def start_web(children: Children, tmp_path: Path, queue: Path, *flags: str) -> str:
    port_file = tmp_path / f"web{len(children.procs)}.port"
    argv = courier_command(
        "web", queue, "--port-file", port_file, "--max-seconds", str(WAIT_S * 3), *flags
    )
    proc = children.start(argv, tmp_path / f"web{len(children.procs)}.log")
    until = time.monotonic() + WAIT_S
    while time.monotonic() < until and proc.poll() is None:
        text = port_file.read_text() if port_file.exists() else ""
        if text.endswith("\n"):  # written whole (the file is created before it is written)
            return f"http://127.0.0.1:{int(text)}/"
        time.sleep(0.02)
    raise AssertionError(f"courier web did not start: {proc.poll()}")


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[Path]:
    yield make_queue(tmp_path)


def audit_rows(queue: Path) -> list[dict[str, object]]:
    return queueview.read_queue(queue)["redrives"]


def test_the_page_shows_the_files_counts_and_a_redrive_from_it_writes_one_audit_row(
    tmp_path: Path, queue: Path, children: Children, browser: Browser
) -> None:
    url = start_web(children, tmp_path, queue, "--allow-redrive")
    browser.get(url)
    con = queueview.connect_existing(queue)
    try:
        counts = queueview.status_counts(con)
    finally:
        con.close()
    assert counts == {"pending": 2, "leased": 0, "done": 1, "dead": 2}
    shown = {status: int(browser.text(f"#count-{status}")) for status in counts}
    assert shown == counts
    assert browser.text("#oldest").startswith("p-1 (pending")
    history = browser.text("#dead-d-1")
    assert "HTTP 409" in history and "permanent" in history and "c1" in history

    browser.type("#redrive-d-1 input[name=note]", "ticket-4711")
    browser.click("#redrive-d-1 button")
    browser.wait_for("#message")  # the redirect to the page that reports the redrive
    assert "redriven d-1: audit row #1" in browser.text("#message")
    rows = audit_rows(queue)
    assert [(row["id"], row["note"]) for row in rows] == [("d-1", "ticket-4711")]
    assert int(browser.text("#count-dead")) == 1 and int(browser.text("#count-pending")) == 3
    browser.get(url)  # reloading the page after the redrive repeats nothing
    assert len(audit_rows(queue)) == 1


def post(url: str, fields: dict[str, str], headers: dict[str, str] | None = None) -> int:
    request = urllib.request.Request(
        url + "redrive",
        data=urllib.parse.urlencode(fields).encode(),
        method="POST",
        headers={"Content-Type": "application/x-www-form-urlencoded", **(headers or {})},
    )
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request, timeout=10) as response:
            return int(response.status)
    except urllib.error.HTTPError as error:
        return int(error.code)


def test_without_the_pages_token_or_the_flag_nothing_changes(
    tmp_path: Path, queue: Path, children: Children
) -> None:
    writable = start_web(children, tmp_path, queue, "--allow-redrive")
    read_only = start_web(children, tmp_path, queue)
    fields = {"id": "d-1", "note": "forged"}
    assert post(writable, fields) == 403
    assert post(writable, {**fields, "token": "guessed"}) == 403
    with urllib.request.urlopen(read_only, timeout=10) as response:
        assert "<form" not in response.read().decode()
    assert post(read_only, fields) == 403
    assert audit_rows(queue) == []


def test_a_bind_beyond_loopback_must_be_asked_for(
    queue: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["web", str(queue), "--host", "0.0.0.0", "--max-seconds", "1"]) == 2
    assert "--allow-remote" in capsys.readouterr().err
