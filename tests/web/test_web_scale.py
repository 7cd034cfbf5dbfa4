"""The page an operator keeps open stays usable at 100,000 jobs.

A queue file of 100,000 jobs (90,000 pending, 10,000 dead, written through
``enqueue_many``, ``claim_many`` and ``finish_many``, each dead one with its claimed
and outcome rows in the attempt log: 20,000 rows) behind ``courier web``: the
front page, a filtered list, the next page and a job's page all load in Chromium
and show what the file holds. The browser's Navigation Timing figures (time to
first byte, whole page) are printed for each view, never asserted (no test asserts
a duration); ``-s`` shows them.
"""

from __future__ import annotations

from pathlib import Path

import worker
from courier.attempts import Attempt, AttemptLog
from courier.clock import clock_ms
from courier.delivery import Cause
from courier.procs import Children
from tests.web.queues import keep, kept, start_web
from tests.web.webdriver import Browser

JOBS = 100_000
DEAD = 10_000
BATCH = worker.MAX_BATCH


def big_queue(path: Path) -> Path:
    con = worker.open_queue(path)
    try:
        now = clock_ms()
        for start in range(0, JOBS, BATCH):
            events = [
                {"id": f"order-{n:06d}", "qty": 1 + n % 9} for n in range(start, start + BATCH)
            ]
            assert all(r is True for r in worker.enqueue_many(con, events, now, 60_000, 3))
        log = AttemptLog(path)
        for _ in range(DEAD // BATCH):
            tickets = worker.claim_many(con, "c1", now, BATCH)
            results = [{"ticket": t, "outcome": "permanent", "delay_ms": 0} for t in tickets]
            assert set(worker.finish_many(con, results, now)) == {"dead"}
            for n, ticket in enumerate(tickets):
                log.claimed(ticket["id"], "c1")
                cause = CAUSES[n % len(CAUSES)]
                log.record(Attempt(ticket["id"], 1, "c1", now, "permanent", "dead", cause))
        log.close()
    finally:
        con.close()
    return path


CAUSES = [
    Cause("answer", '{"error": "conflict"}', 409),
    Cause("answer", '{"error": "invalid_delivery"}', 422),
    Cause("answer", "", 404),
]


TIMING = """const t = performance.getEntriesByType('navigation')[0];
return [t.responseStart - t.requestStart, t.loadEventEnd - t.startTime];"""


def test_the_page_at_100000_jobs(tmp_path: Path, children: Children, browser: Browser) -> None:
    queue = big_queue(tmp_path / "big.sqlite")
    url = start_web(children, tmp_path, queue, "--refresh-s", "0")
    views = {
        "front": "",
        "dead": "?status=dead",
        "dead, page 3": "?status=dead&after=2100",
        "prefix": "?prefix=order-0999",
        "job": "job?id=order-054321",
    }
    timings = {}
    for name, path in views.items():
        browser.get(url + path)
        timings[name] = browser.execute(TIMING)
        if name == "front":
            shot = keep(tmp_path, "scale-front.png")
            browser.screenshot(shot)
            kept(shot)
    browser.get(url)
    assert browser.text("#count-pending") == "90,000" and browser.text("#count-dead") == "10,000"
    assert browser.text("#shown") == "50 of 100,000 matching jobs, seq 1 to 50"
    assert [browser.text(f"#cause-{n}") for n in (1, 2, 3)] == [
        "permanent HTTP 409 3,340 list",
        "permanent HTTP 404 3,330 list",
        "permanent HTTP 422 3,330 list",
    ]
    browser.get(url + views["dead, page 3"])
    assert browser.text("#shown") == "50 of 10,000 matching jobs, seq 2101 to 2150"
    browser.get(url + views["prefix"])
    assert browser.text("#shown") == "50 of 100 matching jobs, seq 99901 to 99950"
    browser.get(url + views["job"])
    assert browser.text("#headline").startswith("pending (0 of 3 attempts made)")
    for name, (first_byte, whole) in timings.items():
        print(f"100,000 jobs, {name}: first byte {first_byte:.0f} ms, whole page {whole:.0f} ms")
