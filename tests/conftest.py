"""Fixtures shared by every suite; the hypothesis profile named by
``HYPOTHESIS_PROFILE`` (default ``ci``) is loaded here (profiles: ``tests/profiles.py``)."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from hypothesis import settings

import worker
from tests import profiles  # noqa: F401  (registers the profiles)
from tests.postgres import pg_con, pg_conninfo, pg_server  # noqa: F401  (PostgreSQL fixtures)

settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))


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
