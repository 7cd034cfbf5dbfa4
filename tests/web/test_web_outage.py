"""The web page when the queue does not answer: a locked file, a stopped server.

The page answers 503 with the reason, on the page and on ``/status.json``, logs one
line (no traceback), and comes back by itself once the queue answers again.
"""

from __future__ import annotations

import json
import sqlite3
import time
from pathlib import Path

import psycopg
from psycopg import conninfo as libpq

import courier.embedded
import pgworker
from courier.procs import Children
from courier.web import SECURITY_HEADERS
from tests.web.queues import WAIT_S, enqueue, fetch, keep, kept, start_web
from tests.web.webdriver import Browser


def web_log(tmp_path: Path) -> str:
    return "".join(path.read_text() for path in sorted(tmp_path.glob("web*.log")))


def test_a_locked_queue_file_is_a_503_that_says_so_and_the_page_comes_back(
    tmp_path: Path, children: Children, browser: Browser
) -> None:
    queue = tmp_path / "queue.sqlite"
    enqueue(queue, "a", "b")
    url = start_web(children, tmp_path, queue, "--refresh-s", "0.3")
    blocker = sqlite3.connect(queue, isolation_level=None)
    blocker.execute("BEGIN EXCLUSIVE")  # another process's long transaction
    try:
        status, headers, body = fetch(url)
        assert status == 503 and "is busy" in body and "the queue did not answer" in body
        assert headers.get("Content-Security-Policy") == SECURITY_HEADERS["Content-Security-Policy"]
        status, headers, body = fetch(url + "status.json")
        assert status == 503 and headers.get("Content-Type") == "application/json"
        answer = json.loads(body)
        assert answer["error"] == "unavailable" and "is busy" in answer["detail"]
        browser.get(url)
        path = keep(tmp_path, "outage.png")
        browser.screenshot(path)
        kept(path)
        assert "is busy" in browser.text("#unavailable")
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
    until = time.monotonic() + WAIT_S
    while time.monotonic() < until:
        shown = browser.execute(
            "const c = document.querySelector('#count-pending'); return c ? c.textContent : null"
        )
        if shown == "2":
            break
        time.sleep(0.05)
    assert shown == "2", "the page did not come back by itself"
    log = web_log(tmp_path)
    assert "GET / 503: the queue did not answer:" in log and "Traceback" not in log, log


def test_a_stopped_postgres_server_is_a_503_that_says_so(
    tmp_path: Path, children: Children
) -> None:
    with courier.embedded.embedded_server("lease-queue-web-outage-") as admin:
        with psycopg.connect(admin, autocommit=True) as con:
            con.execute("CREATE DATABASE web")
        conninfo = libpq.make_conninfo(admin, dbname="web")
        pgworker.open_queue(conninfo).close()
        url = start_web(children, tmp_path, conninfo, "--refresh-s", "0")
        assert fetch(url)[0] == 200
    # The server is stopped and its folder gone.
    for path in ("", "status.json", "job?id=a"):
        status, headers, body = fetch(url + path)
        assert status == 503, (path, body)
        assert "cannot connect to PostgreSQL" in body, body
        assert headers.get("X-Frame-Options") == "DENY"
    log = web_log(tmp_path)
    assert "503: the queue did not answer: cannot connect" in log and "Traceback" not in log, log
