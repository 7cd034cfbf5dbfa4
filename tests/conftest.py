"""Fixtures shared by every suite: a real queue file in a temporary folder."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

import worker


@pytest.fixture
def queue_path(tmp_path: Path) -> Path:
    """A path for a fresh queue file (not created yet)."""
    return tmp_path / "queue.sqlite"


@pytest.fixture
def con(queue_path: Path) -> Iterator[sqlite3.Connection]:
    """An open queue; the test fails if any call left a transaction open."""
    connection = worker.open_queue(queue_path)
    yield connection
    assert not connection.in_transaction, "a call left a transaction open"
    connection.close()
