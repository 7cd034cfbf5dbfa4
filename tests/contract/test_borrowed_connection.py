"""Common rules, on both implementations with a database: a borrowed ``con`` starts with no open
transaction, is never closed, and no call leaves a transaction open (on success or
on failure). The model has no connection, so these take the ``database`` fixture."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import Any

import pytest

from tests.contract.implementations import Bound

TICKET = {"id": "a", "qty": 1, "owner": "c1", "token": 1, "attempt": 1, "lease_until": 100}

CALLS: dict[str, Callable[[Any, Any], object]] = {
    "enqueue": lambda m, con: m.enqueue(con, {"id": "n", "qty": 1}, 0, 10),
    "enqueue_many": lambda m, con: m.enqueue_many(con, [], 0, 10),
    "claim": lambda m, con: m.claim(con, "c1", 0),
    "claim_many": lambda m, con: m.claim_many(con, "c1", 0, 1),
    "finish": lambda m, con: m.finish(con, dict(TICKET), "ok", 1),
    "finish_many": lambda m, con: m.finish_many(con, [], 1),
    "redrive": lambda m, con: m.redrive(con, "a", 0, 10, "ops"),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_rejects_something_that_is_not_a_connection(database: Bound, name: str) -> None:
    for not_a_connection in [None, "queue.sqlite", object()]:
        with pytest.raises(ValueError, match="con"):
            CALLS[name](database.module, not_a_connection)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_refuses_to_run_inside_the_callers_transaction_and_leaves_it_alone(
    database: Bound, name: str
) -> None:
    con = database.con
    database.enqueue({"id": "a", "qty": 1}, 0, 1000)
    con.execute("BEGIN")
    con.execute("UPDATE jobs SET qty = 7 WHERE id = 'a'")
    with pytest.raises(ValueError, match="transaction"):
        CALLS[name](database.module, con)
    assert database.in_transaction(), "the caller's transaction must not be ended"
    assert con.execute("SELECT qty FROM jobs").fetchone() == (7,)
    con.execute("ROLLBACK")
    assert con.execute("SELECT qty FROM jobs").fetchone() == (1,)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_never_closes_the_borrowed_connection(database: Bound, name: str) -> None:
    database.enqueue({"id": "a", "qty": 1}, 0, 1000)
    with contextlib.suppress(ValueError):  # redrive of a job that is not dead
        CALLS[name](database.module, database.con)
    assert database.rows()["jobs"], "the connection still answers"
    assert not database.in_transaction()
