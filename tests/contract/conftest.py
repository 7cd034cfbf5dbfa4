"""The ``queue`` fixture: each contract example runs once per implementation
(``implementations.py``).

``queue`` is parametrized by ``IMPLEMENTATIONS`` (worker, pgworker, model);
``database`` by ``DATABASES`` (worker, pgworker), for the examples about the
borrowed connection itself, which the model does not have. A PostgreSQL database
is asked for only when a ``pgworker`` example runs, so ``-k "not pgworker"`` needs
no server. Every example fails if a call left a transaction open.

With ``LEASE_QUEUE_CONFORM_FEED=1`` every queue file and database gets the change
feed of ``courier conform --install`` first: the examples must pass unchanged, since
the contract cannot see the feed (``docs/testing.md``, the conformance monitor).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from courier.commands.conform import install_feed
from tests.contract.implementations import DATABASES, IMPLEMENTATIONS, Bound, Modelled, Queue
from tests.stores.postgres import PostgresStore
from tests.stores.sqlite import SQLiteStore

WITH_FEED = os.environ.get("LEASE_QUEUE_CONFORM_FEED") == "1"


def _open(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Queue:
    if name == "worker":
        files = SQLiteStore(str(tmp_path))
        path = files.fresh("queue")
        if WITH_FEED:
            install_feed(path)
        return Bound(name, files, path)
    if name == "pgworker":
        conninfo = request.getfixturevalue("pg_conninfo")  # a fresh database with the queue
        if WITH_FEED:
            install_feed(conninfo)
        return Bound(name, PostgresStore(conninfo), conninfo)
    return Modelled()


def _opened(queue: Queue) -> Iterator[Queue]:
    try:
        yield queue
        assert not queue.in_transaction(), "a call left a transaction open"
    finally:
        queue.close()


@pytest.fixture(params=IMPLEMENTATIONS)
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Queue]:
    """A new, empty queue of one implementation."""
    yield from _opened(_open(request.param, request, tmp_path))


@pytest.fixture(params=DATABASES)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bound]:
    """A new, empty queue of an implementation with a real connection (``queue.con``)."""
    opened = _open(request.param, request, tmp_path)
    assert isinstance(opened, Bound)
    yield from _opened(opened)  # type: ignore[misc]
