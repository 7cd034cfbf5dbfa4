"""Section 2: open_queue(path) creates the tables once, with the contract's settings."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

import worker
from tests.support import JOB_COLUMNS, REDRIVE_COLUMNS, open_descriptors, read_rows

# A deliberate copy of the contract's DDL (docs/spec/CONTRACT.md), not an import of
# worker.SCHEMA: the tests hold worker.py against the contract's text, not against itself.
CONTRACT_DDL = [
    """CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL UNIQUE, qty INTEGER NOT NULL,
  status TEXT NOT NULL CHECK(status IN ('pending','leased','done','dead')),
  attempts INTEGER NOT NULL, max_attempts INTEGER NOT NULL, token INTEGER NOT NULL,
  available_at INTEGER NOT NULL, deadline INTEGER NOT NULL,
  owner TEXT, lease_until INTEGER, reason TEXT)""",
    """CREATE TABLE redrives (seq INTEGER PRIMARY KEY AUTOINCREMENT,
  id TEXT NOT NULL, token INTEGER NOT NULL, at_ms INTEGER NOT NULL, note TEXT NOT NULL)""",
]


def columns(con: sqlite3.Connection, table: str) -> list[tuple[str, str, int, int]]:
    """(name, type, notnull, pk) of each column, in order."""
    return [(r[1], r[2], r[3], r[5]) for r in con.execute(f"PRAGMA table_info({table})")]


def test_creates_the_file_and_both_tables_with_the_contract_schema(queue_path: Path) -> None:
    con = worker.open_queue(queue_path)
    try:
        assert queue_path.is_file()
        assert [c[0] for c in columns(con, "jobs")] == list(JOB_COLUMNS)
        assert [c[0] for c in columns(con, "redrives")] == list(REDRIVE_COLUMNS)
        reference = sqlite3.connect(":memory:")
        for ddl in CONTRACT_DDL:
            reference.execute(ddl)
        assert columns(con, "jobs") == columns(reference, "jobs")
        assert columns(con, "redrives") == columns(reference, "redrives")
        reference.close()
    finally:
        con.close()


def test_connection_has_autocommit_one_second_timeout_delete_journal_full_sync(
    queue_path: Path,
) -> None:
    con = worker.open_queue(queue_path)
    try:
        assert isinstance(con, sqlite3.Connection)
        assert con.isolation_level is None
        assert not con.in_transaction
        assert con.execute("PRAGMA busy_timeout").fetchone() == (1000,)
        assert con.execute("PRAGMA journal_mode").fetchone() == ("delete",)
        assert con.execute("PRAGMA synchronous").fetchone() == (2,)  # FULL
    finally:
        con.close()


def test_switches_a_wal_file_back_to_delete_journal(queue_path: Path) -> None:
    other = sqlite3.connect(queue_path)
    other.execute("PRAGMA journal_mode=WAL")
    other.close()
    con = worker.open_queue(queue_path)
    try:
        assert con.execute("PRAGMA journal_mode").fetchone() == ("delete",)
    finally:
        con.close()


def leave_a_redriven_job(queue: ModuleType, con: Any) -> None:
    """Enqueue job ``a``, claim it, finish it ``permanent`` and redrive it, with
    ``queue`` (``worker`` or ``pgworker``): a row in each table to survive a reopen."""
    assert queue.enqueue(con, {"id": "a", "qty": 2}, 0, 10) is True
    ticket = queue.claim(con, "courier-1", 0)
    assert ticket is not None and queue.finish(con, ticket, "permanent", 1) == "dead"
    assert queue.redrive(con, "a", 2, 10, "checked") is True


def test_reopening_preserves_existing_jobs_and_audit_rows(queue_path: Path) -> None:
    con = worker.open_queue(queue_path)
    leave_a_redriven_job(worker, con)
    before = read_rows(con)
    con.close()

    again = worker.open_queue(queue_path)
    try:
        assert read_rows(again) == before
        assert len(before["redrives"]) == 1
    finally:
        again.close()


def test_accepts_a_file_created_by_someone_else_with_only_the_two_tables(
    queue_path: Path,
) -> None:
    other = sqlite3.connect(queue_path)
    for ddl in CONTRACT_DDL:
        other.execute(ddl)
    other.commit()
    other.close()
    con = worker.open_queue(queue_path)
    try:
        assert worker.enqueue(con, {"id": "a", "qty": 1}, 0, 10) is True
        assert worker.claim(con, "courier-1", 0) is not None
    finally:
        con.close()


def test_accepts_str_and_pathlike(queue_path: Path) -> None:
    for path in (str(queue_path), queue_path):
        con = worker.open_queue(path)
        con.close()


@pytest.mark.parametrize("path", ["", ":memory:", Path(":memory:"), None, 3, b"queue.sqlite"])
def test_rejects_in_memory_empty_or_non_path(path: object) -> None:
    with pytest.raises(ValueError, match="path"):
        worker.open_queue(path)  # type: ignore[arg-type]


def test_closes_the_connection_when_initialisation_fails(tmp_path: Path) -> None:
    not_a_db = tmp_path / "garbage.sqlite"
    not_a_db.write_bytes(b"this is not a database file, it is sixteen+ bytes long" * 50)
    with pytest.raises(sqlite3.DatabaseError):
        worker.open_queue(not_a_db)
    assert open_descriptors(not_a_db) == []
    assert not_a_db.read_bytes().startswith(b"this is not a database")


def test_a_locked_file_fails_after_the_busy_timeout_and_keeps_its_rows(
    queue_path: Path,
) -> None:
    con = worker.open_queue(queue_path)
    worker.enqueue(con, {"id": "a", "qty": 1}, 0, 10)
    before = read_rows(con)
    con.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            worker.open_queue(queue_path)
    finally:
        con.execute("ROLLBACK")
    descriptors = open_descriptors(queue_path)
    assert len(descriptors) == 1, "only the first connection may still hold the file"
    assert read_rows(con) == before
    con.close()


@pytest.fixture
def sqlite_3_31(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """This Python as if its SQLite were 3.31.1 (Ubuntu 20.04's), which lacks
    UPDATE ... FROM; the answer of the version check is asked again on each side."""
    worker._sqlite_problem.cache_clear()
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 31, 1))
    monkeypatch.setattr(sqlite3, "sqlite_version", "3.31.1")
    yield
    worker._sqlite_problem.cache_clear()


def test_an_sqlite_older_than_3_33_is_refused_before_anything_is_created(
    sqlite_3_31: None, queue_path: Path
) -> None:
    with pytest.raises(RuntimeError, match=r"needs SQLite 3\.33\.0 or later; .* has 3\.31\.1"):
        worker.open_queue(queue_path)
    assert not queue_path.exists()


def test_an_sqlite_older_than_3_33_is_refused_by_each_call_before_any_change(
    queue_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    con = worker.open_queue(queue_path)
    worker.enqueue(con, {"id": "a", "qty": 1}, 0, 10)
    before = read_rows(con)
    worker._sqlite_problem.cache_clear()
    monkeypatch.setattr(sqlite3, "sqlite_version_info", (3, 31, 1))
    try:
        for call in (
            lambda: worker.claim(con, "c1", 0),
            lambda: worker.claim_many(con, "c1", 0, 2),
            lambda: worker.enqueue(con, {"id": "b", "qty": 1}, 0, 10),
        ):
            with pytest.raises(RuntimeError, match=r"3\.33\.0"):
                call()
            assert not con.in_transaction
        assert read_rows(con) == before
    finally:
        worker._sqlite_problem.cache_clear()
        con.close()


def test_this_pythons_sqlite_runs_the_queue() -> None:
    worker._sqlite_problem.cache_clear()
    assert worker._sqlite_problem() is None
