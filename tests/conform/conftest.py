"""``fed``: a fresh queue with its change feed, once on SQLite and once on PostgreSQL."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conform.fed import Fed, open_fed


@pytest.fixture(params=["sqlite", "postgres"])
def fed(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Fed]:
    """A queue with its feed installed (a PostgreSQL database only for ``postgres``)."""
    conninfo = request.getfixturevalue("pg_conninfo") if request.param == "postgres" else None
    queue = open_fed(request.param, tmp_path, conninfo)
    try:
        yield queue
    finally:
        queue.close()
