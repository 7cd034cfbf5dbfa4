"""Common rules: a borrowed ``con`` starts with no open transaction, is never closed,
and no call leaves a transaction open (on success or on failure)."""

from __future__ import annotations

import contextlib
import sqlite3
from collections.abc import Callable
from typing import Any

import pytest

import worker
from tests.support import read_rows

TICKET = {"id": "a", "qty": 1, "owner": "c1", "token": 1, "attempt": 1, "lease_until": 100}

CALLS: dict[str, Callable[[Any], object]] = {
    "enqueue": lambda con: worker.enqueue(con, {"id": "n", "qty": 1}, 0, 10),
    "claim": lambda con: worker.claim(con, "c1", 0),
    "finish": lambda con: worker.finish(con, dict(TICKET), "ok", 1),
    "redrive": lambda con: worker.redrive(con, "a", 0, 10, "ops"),
}


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("not_a_connection", [None, "queue.sqlite", object()])
def test_rejects_something_that_is_not_a_connection(name: str, not_a_connection: object) -> None:
    with pytest.raises(ValueError, match="con"):
        CALLS[name](not_a_connection)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_refuses_to_run_inside_the_callers_transaction_and_leaves_it_alone(
    con: sqlite3.Connection, name: str
) -> None:
    worker.enqueue(con, {"id": "a", "qty": 1}, 0, 1000)
    con.execute("BEGIN")
    con.execute("UPDATE jobs SET qty = 7 WHERE id = 'a'")
    with pytest.raises(ValueError, match="transaction"):
        CALLS[name](con)
    assert con.in_transaction, "the caller's transaction must not be committed or rolled back"
    assert con.execute("SELECT qty FROM jobs").fetchone() == (7,)
    con.execute("ROLLBACK")
    assert con.execute("SELECT qty FROM jobs").fetchone() == (1,)


@pytest.mark.parametrize("name", sorted(CALLS))
def test_never_closes_the_borrowed_connection(con: sqlite3.Connection, name: str) -> None:
    worker.enqueue(con, {"id": "a", "qty": 1}, 0, 1000)
    with contextlib.suppress(ValueError):  # redrive of a job that is not dead
        CALLS[name](con)
    assert read_rows(con)["jobs"], "the connection still answers"
    assert not con.in_transaction
