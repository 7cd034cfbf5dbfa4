"""The ``queue`` fixture: each contract example runs once per backend (``backends.py``).

``queue`` is parametrized by ``BACKENDS`` (worker, pgworker, model); ``database``
by ``DATABASES`` (worker, pgworker), for the examples about the borrowed
connection itself, which the model does not have. A PostgreSQL database is
asked for only when a ``pgworker`` example runs, so ``-k "not pgworker"`` needs
no server. Every example fails if a call left a transaction open.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.contract.backends import (
    BACKENDS,
    DATABASES,
    Bound,
    Modelled,
    Queue,
    postgres_queue,
    sqlite_queue,
)


def _open(name: str, request: pytest.FixtureRequest, tmp_path: Path) -> Queue:
    if name == "worker":
        return sqlite_queue(tmp_path / "queue.sqlite")
    if name == "pgworker":
        return postgres_queue(request.getfixturevalue("pg_conninfo"))
    return Modelled()


def _opened(queue: Queue) -> Iterator[Queue]:
    try:
        yield queue
        assert not queue.in_transaction(), "a call left a transaction open"
    finally:
        queue.close()


@pytest.fixture(params=BACKENDS)
def queue(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Queue]:
    """A new, empty queue on one backend."""
    yield from _opened(_open(request.param, request, tmp_path))


@pytest.fixture(params=DATABASES)
def database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Bound]:
    """A new, empty queue on a backend with a real connection (``queue.con``)."""
    opened = _open(request.param, request, tmp_path)
    assert isinstance(opened, Bound)
    yield from _opened(opened)  # type: ignore[misc]
