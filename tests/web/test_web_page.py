"""``courier web``: the operator's page in a real headless Chromium, over real HTTP.

The page runs as a ``courier web`` child process on a real queue file whose jobs got
their states and causes from real couriers (``tests/web/queues.py``). The browser
loads it and each test holds what it shows against the file: the counts, the dead
jobs by cause, the job list with its filters and pages, a job's page with the
model's explanation and every attempt, a redrive and a bulk redrive (one audit row
each), the times in the browser's zone, the refresh that stops while hidden. Each
view is also saved as a screenshot (``LEASE_QUEUE_SCREENSHOTS=DIR`` keeps them).
"""

from __future__ import annotations

import datetime
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from courier import queueview
from courier.procs import Children
from tests.web.queues import WAIT_S, enqueue, fetch, keep, kept, mixed_queue, start_web
from tests.web.webdriver import Browser


@pytest.fixture
def queue(tmp_path: Path) -> Iterator[Path]:
    yield mixed_queue(tmp_path)


def audit_rows(queue: Path) -> list[dict[str, object]]:
    return queueview.read_queue(queue)["redrives"]


def counts(queue: Path) -> dict[str, int]:
    con = queueview.connect_existing(queue)
    try:
        return queueview.status_counts(con)
    finally:
        con.close()


def shot(browser: Browser, tmp_path: Path, name: str) -> None:
    path = keep(tmp_path, f"{name}.png")
    browser.screenshot(path)
    kept(path)


def live_text(browser: Browser, css: str) -> str:
    """The text of ``css`` read in one script: the refresh may replace it any moment."""
    return str(browser.execute("return document.querySelector(arguments[0]).textContent", css))


def wait_until(check: object, timeout_s: float = WAIT_S) -> None:
    until = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < until, "not within the time"
        time.sleep(0.05)


def test_the_front_page_shows_the_counts_the_causes_and_the_oldest_due_job(
    tmp_path: Path, queue: Path, children: Children, browser: Browser
) -> None:
    url = start_web(children, tmp_path, queue, "--refresh-s", "0")
    browser.window_size(1400, 1000)
    browser.get(url)
    shot(browser, tmp_path, "front")
    expected = counts(queue)
    assert expected == {"pending": 2, "leased": 1, "done": 1, "dead": 6}
    assert {status: int(browser.text(f"#count-{status}")) for status in expected} == expected
    assert browser.text("#oldest").startswith("p-2 (pending")
    causes = [browser.text(f"#cause-{n}") for n in (1, 2, 3)]
    assert causes == [
        "exhausted HTTP 503 3 list",
        "permanent HTTP 409 2 list",
        "exhausted connection: ConnectionRefusedError 1 list",
    ]
    hostile = browser.text("#job-x-1")
    assert "\u202e" not in hostile and "\x1b" not in hostile, "shown raw"
    assert "HTTP 503 \\x1b[2J\\x1b[31mgone\\x1b[0m \\u202eenod\\u202c" in hostile
    assert "claimed by c7" not in browser.text("#job-k-1")  # a leased job has no last cause


def test_a_jobs_page_explains_it_and_lists_every_attempt(
    tmp_path: Path, queue: Path, children: Children, browser: Browser
) -> None:
    url = start_web(children, tmp_path, queue, "--refresh-s", "0")
    browser.get(url)
    browser.click("#job-k-1 a")
    browser.wait_for("#headline")
    shot(browser, tmp_path, "job-leased")
    said = browser.text("#headline")
    assert said.startswith("leased to c7 (token 1, 1 of 3 attempts made)")
    assert "claimable again by any courier from" in said and "(reclaim)" in said
    transitions = browser.text("#transitions")
    assert "row 6 reclaim -> leased (by any claim): lease_expired fails now" in transitions
    assert "row 7 finish_ok -> done (by the holder's finish): can fire now until" in transitions
    attempts = browser.text("#attempts")
    assert "c7" in attempts and "no outcome recorded" in attempts
    browser.get(url + "job?id=d-1")
    shot(browser, tmp_path, "job-dead")
    assert browser.text("#headline").startswith("dead (permanent): stays dead until an operator")
    assert "permanent dead HTTP 409" in browser.text("#attempts")
    assert browser.find_all("#redrive") == [], "read-only: no form"


def test_a_redrive_from_a_jobs_page_writes_one_audit_row_and_says_so(
    tmp_path: Path, queue: Path, children: Children, browser: Browser
) -> None:
    url = start_web(children, tmp_path, queue, "--allow-redrive", "--refresh-s", "0")
    browser.get(url + "job?id=d-1")
    browser.type("#redrive input[name=note]", "ticket-4711")
    browser.click("#redrive button")
    browser.wait_for("#message")  # the redirect to the job's page, with the banner
    shot(browser, tmp_path, "job-redriven")
    assert browser.text("#message") == "redriven d-1: audit row #1 (note ticket-4711)"
    assert [(row["id"], row["note"]) for row in audit_rows(queue)] == [("d-1", "ticket-4711")]
    assert browser.text("#field-status") == "pending"
    assert browser.text("#audit").endswith("ticket-4711")
    browser.get(browser.current_url())  # reloading repeats nothing
    assert len(audit_rows(queue)) == 1


def test_a_bulk_redrive_shows_how_many_it_touches_asks_and_writes_one_row_each(
    tmp_path: Path, queue: Path, children: Children, browser: Browser
) -> None:
    url = start_web(children, tmp_path, queue, "--allow-redrive", "--refresh-s", "0")
    browser.get(url)
    browser.click("#cause-1 a:nth-of-type(2)")  # exhausted, HTTP 503: redrive all...
    browser.wait_for("#preview-count")
    shot(browser, tmp_path, "bulk-preview")
    assert "This redrives 3 dead jobs (reason exhausted, last cause HTTP 503)" in browser.text(
        "#preview-count"
    )
    assert browser.text("#preview-ids") == "x-1, x-2, x-3"
    assert audit_rows(queue) == [], "the preview changes nothing"
    browser.type("#confirm input[name=note]", "incident-9")
    browser.click("#confirm button")
    browser.wait_for("#message")
    assert browser.text("#message") == "redriven 3 jobs: audit rows #1 to #3 (note incident-9)"
    rows = audit_rows(queue)
    assert sorted(str(row["id"]) for row in rows) == ["x-1", "x-2", "x-3"]
    assert {row["note"] for row in rows} == {"incident-9"}
    assert int(browser.text("#count-dead")) == 3


def test_filters_and_pages_reach_every_job(
    tmp_path: Path, children: Children, browser: Browser
) -> None:
    queue = tmp_path / "many.sqlite"
    enqueue(queue, *(f"job-{n:03d}" for n in range(1, 261)), max_attempts=3)
    enqueue(queue, "other-1")
    url = start_web(children, tmp_path, queue, "--refresh-s", "0")
    browser.get(url)
    assert browser.text("#shown") == "50 of 261 matching jobs, seq 1 to 50"
    for _ in range(5):
        browser.click("#next")
        browser.wait_for("#shown")
    assert browser.text("#shown") == "11 of 261 matching jobs, seq 251 to 261"
    assert browser.find_all("#next") == []
    browser.click("#prev")
    browser.wait_for("#shown")
    assert browser.text("#shown") == "50 of 261 matching jobs, seq 201 to 250"
    browser.get(url)
    browser.type("#filters input[name=prefix]", "other")
    browser.click("#filters button")
    browser.wait_for("#shown")
    shot(browser, tmp_path, "filtered")
    assert browser.text("#shown") == "1 of 1 matching jobs, seq 261 to 261"
    status, _, body = fetch(url + "?status=bogus")
    assert status == 400 and "status must be one of" in body


def test_times_are_local_iso_and_the_page_refreshes_itself_but_not_while_hidden(
    tmp_path: Path, queue: Path, children: Children, browser: Browser
) -> None:
    url = start_web(children, tmp_path, queue, "--refresh-s", "0.3")
    browser.time_zone("Asia/Kolkata")  # +05:30 all year
    try:
        browser.get(url)
        shown = browser.execute(
            "const t = document.querySelector('#read-at time');"
            " return [t.textContent, Number(t.dataset.ms)];"
        )
        moment = datetime.datetime.fromtimestamp(
            shown[1] / 1000, datetime.timezone(datetime.timedelta(hours=5, minutes=30))
        )
        assert shown[0] == moment.isoformat(timespec="milliseconds")
        assert shown[0].endswith("+05:30")
    finally:
        browser.time_zone("UTC")
    enqueue(queue, "fresh-1")
    wait_until(lambda: live_text(browser, "#count-pending") == "3")  # no reload: in place
    refreshes = "return Number(document.body.dataset.refreshes)"
    browser.execute(
        "Object.defineProperty(document, 'hidden', {configurable: true, get: () => true});"
        " document.dispatchEvent(new Event('visibilitychange'));"
    )
    assert browser.execute("return document.body.dataset.refreshing") == "no"
    before = browser.execute(refreshes)
    enqueue(queue, "fresh-2")
    time.sleep(1.5)  # five periods
    assert browser.execute(refreshes) == before and live_text(browser, "#count-pending") == "3"
    browser.execute(
        "Object.defineProperty(document, 'hidden', {configurable: true, get: () => false});"
        " document.dispatchEvent(new Event('visibilitychange'));"
    )
    wait_until(lambda: live_text(browser, "#count-pending") == "4")
