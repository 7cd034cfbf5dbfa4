"""Section 3: enqueue(con, event, now_ms, ttl_ms, max_attempts=3), on every implementation."""

from __future__ import annotations

import copy
from collections import OrderedDict

import pytest

import worker
from tests.contract.cases import by_argument
from tests.contract.implementations import Queue
from tests.support import BAD_IDENTIFIERS, GOOD_IDENTIFIERS, MAX_NOW, DictSubclass, bad_ints


def test_inserts_a_new_pending_job_and_returns_true(queue: Queue) -> None:
    assert queue.enqueue({"id": "order-1", "qty": 5}, 1000, 250, max_attempts=4) is True
    assert queue.rows()["jobs"] == [
        (1, "order-1", 5, "pending", 0, 4, 0, 1000, 1250, None, None, None)
    ]


def test_default_budget_is_three_attempts(queue: Queue) -> None:
    queue.enqueue({"id": "a", "qty": 1}, 0, 10)
    assert queue.job("a")["max_attempts"] == 3


def test_jobs_get_increasing_seq_in_enqueue_order(queue: Queue) -> None:
    for n, name in enumerate(["c", "a", "b"]):
        queue.enqueue({"id": name, "qty": 1}, n, 10)
    assert [(r[0], r[1]) for r in queue.rows()["jobs"]] == [(1, "c"), (2, "a"), (3, "b")]


def test_same_id_same_qty_returns_false_and_keeps_the_whole_row(
    queue: Queue,
) -> None:
    queue.enqueue({"id": "a", "qty": 7}, 0, 100, max_attempts=2)
    before = queue.rows()
    assert queue.enqueue({"id": "a", "qty": 7}, 50, 60000, max_attempts=16) is False
    assert queue.rows() == before


def test_an_intake_retry_does_not_reset_a_leased_or_finished_job(
    queue: Queue,
) -> None:
    queue.enqueue({"id": "a", "qty": 7}, 0, 100)
    ticket = queue.claim("courier-1", 0)
    assert ticket is not None
    leased = queue.rows()
    assert queue.enqueue({"id": "a", "qty": 7}, 5, 100) is False
    assert queue.rows() == leased
    queue.finish(ticket, "ok", 6)
    done = queue.rows()
    assert queue.enqueue({"id": "a", "qty": 7}, 7, 100) is False
    assert queue.rows() == done


def test_same_id_other_qty_raises_conflict_and_changes_nothing(
    queue: Queue,
) -> None:
    queue.enqueue({"id": "a", "qty": 7}, 0, 100)
    before = queue.rows()
    with pytest.raises(worker.Conflict):
        queue.enqueue({"id": "a", "qty": 8}, 0, 100)
    assert queue.rows() == before
    assert not queue.in_transaction()


def test_does_not_mutate_the_event(queue: Queue) -> None:
    event = {"qty": 3, "id": "a"}
    queue.enqueue(event, 0, 10)
    queue.enqueue(event, 0, 10)
    assert event == {"qty": 3, "id": "a"}
    assert list(event) == ["qty", "id"]


@pytest.mark.parametrize("job_id", GOOD_IDENTIFIERS)
def test_accepts_every_identifier_shape(queue: Queue, job_id: str) -> None:
    assert queue.enqueue({"id": job_id, "qty": 1}, 0, 10) is True


@pytest.mark.parametrize(
    ("qty", "now_ms", "ttl_ms", "max_attempts"),
    [(1, 0, 1, 1), (1000, MAX_NOW, 60000, 16)],
)
def test_accepts_the_range_edges(
    queue: Queue, qty: int, now_ms: int, ttl_ms: int, max_attempts: int
) -> None:
    assert queue.enqueue({"id": "edge", "qty": qty}, now_ms, ttl_ms, max_attempts)
    assert queue.job("edge")["deadline"] == now_ms + ttl_ms


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


@pytest.mark.parametrize(("argument", "values"), by_argument(INVALID_CASES))
def test_rejects_malformed_argument_before_any_change(
    queue: Queue, argument: str, values: list[object]
) -> None:
    queue.enqueue({"id": "existing", "qty": 2}, 0, 10)
    before = queue.rows()
    for value in values:
        arguments = {**VALID, argument: value}
        snapshot = copy.deepcopy(arguments)
        with pytest.raises(ValueError, match=argument):
            queue.enqueue(**arguments)
        assert queue.rows() == before, value
        assert arguments == snapshot, value
        assert not queue.in_transaction()


def test_rejects_a_malformed_argument_even_for_a_known_id(queue: Queue) -> None:
    queue.enqueue({"id": "a", "qty": 2}, 0, 10)
    with pytest.raises(ValueError):
        queue.enqueue({"id": "a", "qty": 2}, 0, 0)
    with pytest.raises(ValueError):
        queue.enqueue({"id": "a", "qty": 3}, 0, 10, max_attempts=0)


def test_seq_numbers_follow_committed_inserts_only(queue: Queue) -> None:
    for job_id in ("a", "b"):
        queue.enqueue({"id": job_id, "qty": 2}, 0, 100)
    with pytest.raises(worker.Conflict):
        queue.enqueue({"id": "a", "qty": 9}, 0, 100)
    assert queue.enqueue({"id": "a", "qty": 2}, 0, 100) is False
    queue.enqueue({"id": "c", "qty": 1}, 0, 100)
    assert [row[:2] for row in queue.rows()["jobs"]] == [(1, "a"), (2, "b"), (3, "c")]


def test_the_event_is_not_kept(queue: Queue) -> None:
    event = {"id": "a", "qty": 2}
    queue.enqueue(event, 0, 100)
    event["qty"] = 7
    assert queue.job("a")["qty"] == 2
