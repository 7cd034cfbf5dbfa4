"""``courier.run_parts``: what ``courier run`` hands the loop, one job or a batch a round."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import worker
from courier.attempts import CLAIMED, attempts_of
from courier.batch_rounds import BatchRounds
from courier.clock import clock_ms
from courier.run_parts import run_parts


def _ack(_: dict[str, Any]) -> bool:
    return True


@pytest.fixture
def queue(tmp_path: Path) -> str:
    path = tmp_path / "q.sqlite"
    con = worker.open_queue(path)
    try:
        worker.enqueue(con, {"id": "a", "qty": 1}, clock_ms(), 60_000)
        worker.claim(con, "c1", clock_ms(), 60_000)
    finally:
        con.close()
    return str(path)


def test_one_job_a_round_writes_each_claimed_row_before_its_delivery(queue: str) -> None:
    parts = run_parts(queue, _ack, "c1", 1, 1, 750, print)
    try:
        assert parts.rounds is None, "the runner's own rounds"
        assert not parts.attempts.outcomes_with_claims
        assert parts.send({"id": "a", "qty": 1}) is True
        assert [(r["outcome"], r["token"]) for r in attempts_of(queue, "a")] == [(CLAIMED, 1)]
    finally:
        parts.close()


def test_batches_take_the_send_as_given_and_hold_outcome_rows_back(queue: str) -> None:
    parts = run_parts(queue, _ack, "c1", 4, 2, 750, print)
    try:
        assert isinstance(parts.rounds, BatchRounds)
        assert (parts.rounds.batch, parts.rounds.in_flight, parts.rounds.timeout_ms) == (4, 2, 750)
        assert parts.send is _ack, "the batch's claimed rows are written by its rounds"
        assert parts.attempts.outcomes_with_claims
    finally:
        parts.close()


def test_settings_batches_cannot_take_are_refused(queue: str) -> None:
    with pytest.raises(ValueError, match="in_flight"):
        run_parts(queue, _ack, "c1", 4, 5, 750, print)
