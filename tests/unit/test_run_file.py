"""Section 8: run_file(path, owner, clock, send, jitter, lease_ms=1000)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

import worker
from tests.support import RecordingSend, ScriptedClock, open_descriptors, read_file_rows


@pytest.fixture
def queue_file(queue_path: Path) -> Path:
    """An existing queue file holding one pending job "a"."""
    con = worker.open_queue(queue_path)
    worker.enqueue(con, {"id": "a", "qty": 3}, 0, 5000)
    con.close()
    return queue_path


def test_runs_one_job_on_the_file_and_closes_the_connection(queue_file: Path) -> None:
    result = worker.run_file(queue_file, "courier-1", ScriptedClock(10, 20), RecordingSend(), 1)
    assert result == {"id": "a", "token": 1, "status": "done"}
    assert open_descriptors(queue_file) == []
    assert read_file_rows(queue_file)["jobs"][0][3] == "done"


def test_accepts_a_str_path(queue_file: Path) -> None:
    result = worker.run_file(str(queue_file), "c", ScriptedClock(10, 20), RecordingSend(), 1)
    assert result is not None


def test_an_empty_queue_returns_none_and_closes(queue_file: Path) -> None:
    worker.run_file(queue_file, "courier-1", ScriptedClock(10, 20), RecordingSend(), 1)
    clock, send = ScriptedClock(30), RecordingSend()
    assert worker.run_file(queue_file, "courier-1", clock, send, 1) is None
    assert send.deliveries == []
    assert open_descriptors(queue_file) == []


@pytest.mark.parametrize("error", [RuntimeError("boom"), KeyboardInterrupt()])
def test_closes_the_connection_when_send_fails(queue_file: Path, error: BaseException) -> None:
    with pytest.raises(type(error)):
        worker.run_file(queue_file, "courier-1", ScriptedClock(10), RecordingSend(error), 1)
    assert open_descriptors(queue_file) == []
    assert read_file_rows(queue_file)["jobs"][0][3] == "leased"


def test_closes_the_connection_when_the_second_clock_is_invalid(queue_file: Path) -> None:
    with pytest.raises(ValueError):
        worker.run_file(queue_file, "courier-1", ScriptedClock(10, 5), RecordingSend(), 1)
    assert open_descriptors(queue_file) == []


def test_a_missing_file_raises_file_not_found_and_is_not_created(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere.sqlite"
    clock, send = ScriptedClock(10, 20), RecordingSend()
    with pytest.raises(FileNotFoundError):
        worker.run_file(missing, "courier-1", clock, send, 1)
    assert not missing.exists()
    assert clock.calls == 0


@pytest.mark.parametrize("path", ["", ":memory:"])
def test_an_empty_or_in_memory_name_is_no_queue_file(tmp_path: Path, path: str) -> None:
    with pytest.raises(FileNotFoundError):
        worker.run_file(path, "courier-1", ScriptedClock(10, 20), RecordingSend(), 1)


def test_a_directory_is_not_a_queue_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        worker.run_file(tmp_path, "courier-1", ScriptedClock(10, 20), RecordingSend(), 1)


def test_a_dangling_symlink_is_not_a_queue_file(tmp_path: Path) -> None:
    link = tmp_path / "link.sqlite"
    os.symlink(tmp_path / "gone.sqlite", link)
    with pytest.raises(FileNotFoundError):
        worker.run_file(link, "courier-1", ScriptedClock(10, 20), RecordingSend(), 1)
    assert not (tmp_path / "gone.sqlite").exists()


def test_each_call_reopens_the_same_file(queue_file: Path) -> None:
    con = worker.open_queue(queue_file)
    worker.enqueue(con, {"id": "b", "qty": 1}, 0, 5000)
    con.close()
    results = [
        worker.run_file(queue_file, f"courier-{n}", ScriptedClock(10, 20), RecordingSend(), 1)
        for n in (1, 2, 3)
    ]
    assert results == [
        {"id": "a", "token": 1, "status": "done"},
        {"id": "b", "token": 1, "status": "done"},
        None,
    ]


@pytest.mark.parametrize(
    ("argument", "value"),
    [("path", v) for v in [None, 5, b"queue.sqlite"]]
    + [("owner", "bad owner"), ("jitter", 2), ("lease_ms", 0), ("clock", None), ("send", 1)],
)
def test_rejects_malformed_arguments(queue_file: Path, argument: str, value: object) -> None:
    before = read_file_rows(queue_file)
    arguments: dict[str, object] = {
        "path": queue_file,
        "owner": "courier-1",
        "clock": ScriptedClock(10, 20),
        "send": RecordingSend(),
        "jitter": 0.5,
        "lease_ms": 100,
        argument: value,
    }
    with pytest.raises(ValueError, match=argument):
        worker.run_file(**arguments)  # type: ignore[arg-type]
    assert read_file_rows(queue_file) == before


@pytest.mark.parametrize(("lease_ms", "expected"), [(None, 1010), (1, 11), (250, 260)])
def test_passes_the_lease_on_to_the_claim(
    queue_file: Path, lease_ms: int | None, expected: int
) -> None:
    seen: list[int] = []

    def look(_: object) -> None:
        seen.append(read_file_rows(queue_file)["jobs"][0][10])

    send = RecordingSend(True, during=look)
    extra = {} if lease_ms is None else {"lease_ms": lease_ms}
    worker.run_file(queue_file, "c1", ScriptedClock(10, 10), send, 1, **extra)
    assert seen == [expected]
