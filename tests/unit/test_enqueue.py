"""Section 3: enqueue(con, event, now_ms, ttl_ms, max_attempts=3)."""

from __future__ import annotations

import copy
import sqlite3
from collections import OrderedDict
from pathlib import Path

import pytest

import worker
from tests.support import (
    BAD_IDENTIFIERS,
    GOOD_IDENTIFIERS,
    MAX_NOW,
    DictSubclass,
    bad_ints,
    job,
    read_rows,
)


def test_inserts_a_new_pending_job_and_returns_true(con: sqlite3.Connection) -> None:
    assert worker.enqueue(con, {"id": "order-1", "qty": 5}, 1000, 250, max_attempts=4) is True
    assert read_rows(con)["jobs"] == [
        (1, "order-1", 5, "pending", 0, 4, 0, 1000, 1250, None, None, None)
    ]


def test_default_budget_is_three_attempts(con: sqlite3.Connection) -> None:
    worker.enqueue(con, {"id": "a", "qty": 1}, 0, 10)
    assert job(con, "a")["max_attempts"] == 3


def test_jobs_get_increasing_seq_in_enqueue_order(con: sqlite3.Connection) -> None:
    for n, name in enumerate(["c", "a", "b"]):
        worker.enqueue(con, {"id": name, "qty": 1}, n, 10)
    assert [(r[0], r[1]) for r in read_rows(con)["jobs"]] == [(1, "c"), (2, "a"), (3, "b")]


def test_same_id_same_qty_returns_false_and_keeps_the_whole_row(
    con: sqlite3.Connection,
) -> None:
    worker.enqueue(con, {"id": "a", "qty": 7}, 0, 100, max_attempts=2)
    before = read_rows(con)
    assert worker.enqueue(con, {"id": "a", "qty": 7}, 50, 60000, max_attempts=16) is False
    assert read_rows(con) == before


def test_an_intake_retry_does_not_reset_a_leased_or_finished_job(
    con: sqlite3.Connection,
) -> None:
    worker.enqueue(con, {"id": "a", "qty": 7}, 0, 100)
    ticket = worker.claim(con, "courier-1", 0)
    assert ticket is not None
    leased = read_rows(con)
    assert worker.enqueue(con, {"id": "a", "qty": 7}, 5, 100) is False
    assert read_rows(con) == leased
    worker.finish(con, ticket, "ok", 6)
    done = read_rows(con)
    assert worker.enqueue(con, {"id": "a", "qty": 7}, 7, 100) is False
    assert read_rows(con) == done


def test_same_id_other_qty_raises_conflict_and_changes_nothing(
    con: sqlite3.Connection,
) -> None:
    worker.enqueue(con, {"id": "a", "qty": 7}, 0, 100)
    before = read_rows(con)
    with pytest.raises(worker.Conflict):
        worker.enqueue(con, {"id": "a", "qty": 8}, 0, 100)
    assert read_rows(con) == before
    assert not con.in_transaction


def test_does_not_mutate_the_event(con: sqlite3.Connection) -> None:
    event = {"qty": 3, "id": "a"}
    worker.enqueue(con, event, 0, 10)
    worker.enqueue(con, event, 0, 10)
    assert event == {"qty": 3, "id": "a"}
    assert list(event) == ["qty", "id"]


@pytest.mark.parametrize("job_id", GOOD_IDENTIFIERS)
def test_accepts_every_identifier_shape(con: sqlite3.Connection, job_id: str) -> None:
    assert worker.enqueue(con, {"id": job_id, "qty": 1}, 0, 10) is True


@pytest.mark.parametrize(
    ("qty", "now_ms", "ttl_ms", "max_attempts"),
    [(1, 0, 1, 1), (1000, MAX_NOW, 60000, 16)],
)
def test_accepts_the_range_edges(
    con: sqlite3.Connection, qty: int, now_ms: int, ttl_ms: int, max_attempts: int
) -> None:
    assert worker.enqueue(con, {"id": "edge", "qty": qty}, now_ms, ttl_ms, max_attempts)
    assert job(con, "edge")["deadline"] == now_ms + ttl_ms


VALID: dict[str, object] = {
    "event": {"id": "a", "qty": 1},
    "now_ms": 0,
    "ttl_ms": 10,
    "max_attempts": 3,
}

INVALID_CASES = (
    [
        ("event", v)
        for v in [
            None,
            [("id", "a"), ("qty", 1)],
            DictSubclass(id="a", qty=1),
            OrderedDict(id="a", qty=1),
            {"id": "a"},
            {"qty": 1},
            {"id": "a", "qty": 1, "ttl": 5},
            {},
        ]
    ]
    + [("event", {"id": v, "qty": 1}) for v in BAD_IDENTIFIERS]
    + [("event", {"id": "a", "qty": v}) for v in bad_ints(1, 1000)]
    + [("now_ms", v) for v in bad_ints(0, MAX_NOW)]
    + [("ttl_ms", v) for v in bad_ints(1, 60000)]
    + [("max_attempts", v) for v in bad_ints(1, 16)]
)


@pytest.mark.parametrize(("argument", "value"), INVALID_CASES)
def test_rejects_malformed_argument_before_any_change(
    con: sqlite3.Connection, argument: str, value: object
) -> None:
    worker.enqueue(con, {"id": "existing", "qty": 2}, 0, 10)
    before = read_rows(con)
    arguments = {**VALID, argument: value}
    snapshot = copy.deepcopy(arguments)
    with pytest.raises(ValueError):
        worker.enqueue(con, **arguments)  # type: ignore[arg-type]
    assert read_rows(con) == before
    assert arguments == snapshot
    assert not con.in_transaction


def test_rejects_a_malformed_argument_even_for_a_known_id(con: sqlite3.Connection) -> None:
    worker.enqueue(con, {"id": "a", "qty": 2}, 0, 10)
    with pytest.raises(ValueError):
        worker.enqueue(con, {"id": "a", "qty": 2}, 0, 0)
    with pytest.raises(ValueError):
        worker.enqueue(con, {"id": "a", "qty": 3}, 0, 10, max_attempts=0)


def test_a_busy_database_raises_and_leaves_no_transaction_open(
    con: sqlite3.Connection, queue_path: Path
) -> None:
    other = sqlite3.connect(queue_path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            worker.enqueue(con, {"id": "a", "qty": 1}, 0, 10)
        assert not con.in_transaction
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert read_rows(con)["jobs"] == []
