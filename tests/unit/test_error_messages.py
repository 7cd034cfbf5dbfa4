"""Clear errors for what only worker.py has: a SQLite connection, a path, a file.

The messages every backend shares are checked in ``tests/contract/test_error_messages.py``."""

from __future__ import annotations

import errno
from collections.abc import Callable
from pathlib import Path

import pytest

import worker
from tests.support import RecordingSend, ScriptedClock


def test_the_connection_and_the_path_are_named() -> None:
    calls: list[tuple[Callable[[], object], str]] = [
        (
            lambda: worker.claim("queue.sqlite", "c1", 0),  # type: ignore[arg-type]
            "'con' must be a sqlite3.Connection (got 'queue.sqlite' that is a 'str')",
        ),
        (
            lambda: worker.open_queue(":memory:"),
            "'path' must be a local file path (not in-memory, not empty) "
            "(got ':memory:' that is a 'str')",
        ),
        (
            lambda: worker.open_queue(7),  # type: ignore[arg-type]
            "'path' must be a str or os.PathLike naming a local file (got 7 that is a 'int')",
        ),
    ]
    for call, expected in calls:
        with pytest.raises(ValueError) as raised:
            call()
        assert str(raised.value) == expected


def test_a_missing_queue_file_is_reported_as_enoent_with_its_path(tmp_path: Path) -> None:
    missing = tmp_path / "missing.sqlite"
    with pytest.raises(FileNotFoundError) as raised:
        worker.run_file(missing, "c1", ScriptedClock(0), RecordingSend(), 1)
    assert raised.value.errno == errno.ENOENT
    assert raised.value.filename == str(missing)
    assert raised.value.strerror == "no queue file (run open_queue to create one)"
