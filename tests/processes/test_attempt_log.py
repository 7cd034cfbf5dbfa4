"""The attempt log's writer (``courier.attempts``, rule 3): a batched courier's outcome rows.

A batched courier holds a round's outcome rows back and writes them with the next
batch's claimed rows, in one statement and in that order; the loop flushes what is
held when a round claims nothing, so an idle courier has written every outcome. On a
real queue file (its sidecar) and on a real PostgreSQL database; every wait is for a
state, and bounded.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pgworker
import worker
from courier import backend
from courier.attempts import CLAIMED, Attempt, AttemptLog, attempts_of
from courier.batch_rounds import batch_rounds_for
from courier.clock import clock_ms
from courier.runner import run_courier
from courier.stop_rules import StopRules

WAIT_S = 20.0
LEASE_MS, TIMEOUT_MS = 30_000, 750


@pytest.fixture(params=["file", "postgres"])
def target(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A queue with jobs j1..j8 (qty 1) enqueued now: a file, or a PostgreSQL database."""
    events = [{"id": f"j{n}", "qty": 1} for n in range(1, 9)]
    if request.param == "file":
        path = tmp_path / "queue.sqlite"
        file = worker.open_queue(path)
        assert worker.enqueue_many(file, events, clock_ms(), 60_000) == [True] * 8
        file.close()
        return str(path)
    conninfo: str = request.getfixturevalue("pg_conninfo")
    with psycopg.connect(conninfo, autocommit=True) as con:
        now = backend.server_clock_ms(con)
        assert pgworker.enqueue_many(con, events, now, 60_000) == [True] * 8
    return conninfo


def _rows(target: str, job_id: str) -> list[tuple[Any, ...]]:
    return [(r["outcome"], r["token"], r["status"]) for r in attempts_of(target, job_id)]


def test_outcome_rows_held_back_go_before_the_next_claimed_rows(target: str) -> None:
    """Held back until the next claimed rows, then written first: a job retried and
    claimed again reads in the order it happened."""
    log = AttemptLog(target, outcomes_with_claims=True)
    try:
        log.record_many([Attempt("j1", 1, "c1", 5, "retry", "pending", None)])
        assert _rows(target, "j1") == [], "held back"
        log.claimed_many([("j1", 2), ("j2", 1)], "c1", 6)
        assert _rows(target, "j1") == [("retry", 1, "pending"), (CLAIMED, 2, "leased")]
        assert _rows(target, "j2") == [(CLAIMED, 1, "leased")]
        retried, claimed = attempts_of(target, "j1")
        assert retried["at_ms"] == 5, "an outcome row keeps the time it was recorded at"
        assert claimed["at_ms"] == 6, "a claimed row has the time of its claim"
        log.record_many([Attempt("j2", 1, "c1", 7, "ok", "done", None)])
        log.flush()
        assert _rows(target, "j2") == [(CLAIMED, 1, "leased"), ("ok", 1, "done")]
    finally:
        log.close()


def test_without_outcomes_with_claims_the_rows_are_written_at_once(target: str) -> None:
    log = AttemptLog(target)
    try:
        log.record_many([Attempt("j1", 1, "c1", 5, "ok", "done", None)])
        assert _rows(target, "j1") == [("ok", 1, "done")]
    finally:
        log.close()


def test_an_idle_batched_courier_has_written_every_outcome_row(target: str) -> None:
    """``courier run --batch``'s log on a queue that runs dry: once a round claims
    nothing, every outcome row is in the log while the courier still runs (without the
    loop's flush they would wait for the courier to stop)."""
    log = AttemptLog(target, outcomes_with_claims=True)
    rounds = batch_rounds_for(target, 4, 2, TIMEOUT_MS, log.announcing_batches("c1", print))
    stop = threading.Event()
    ids = [f"j{n}" for n in range(1, 9)]
    seen: list[bool] = []

    def watch() -> None:
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline and not stop.is_set():
            if all(_rows(target, job_id)[-1:] == [("ok", 1, "done")] for job_id in ids):
                seen.append(True)
                break
            time.sleep(0.02)
        stop.set()

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        report = run_courier(
            target,
            "c1",
            lambda event: True,
            lease_ms=LEASE_MS,
            stop_rules=StopRules(max_seconds=WAIT_S),
            stop=stop,
            log=lambda line: None,
            attempts=log,
            rounds=rounds,
        )
    finally:
        stop.set()
        watcher.join(WAIT_S)
        rounds.close()
        log.close()
    assert seen == [True], "every outcome row was in the log before the courier stopped"
    assert report.stop_reason == "stopped" and report.idle >= 1
    for job_id in ids:
        assert _rows(target, job_id) == [(CLAIMED, 1, "leased"), ("ok", 1, "done")]
