"""Fixtures and report hooks shared by every suite; the hypothesis profile named by
``HYPOTHESIS_PROFILE`` (default ``ci``) is loaded here (profiles: ``tests/profiles.py``).

The hooks: a failure is printed divergence first when it is a state machine's and kept in
``failures/`` whatever it is (``tests/failures.py``); the stateful suite's model coverage
reaches the terminal summary, under pytest-xdist too (``tests/stateful/coverage.py``).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

import worker
from tests import profiles  # noqa: F401  (registers the profiles)
from tests.failures import report_and_record, saved_files
from tests.postgres import pg_con, pg_conninfo, pg_server  # noqa: F401  (PostgreSQL fixtures)
from tests.stateful import coverage

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


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    report_and_record(item, call, report)
    return report


def pytest_sessionfinish(session: pytest.Session) -> None:
    """On an xdist worker: send the model coverage counted here to the controller."""
    workeroutput: dict[str, Any] | None = getattr(session.config, "workeroutput", None)
    if workeroutput is not None:
        workeroutput[coverage.WORKER_OUTPUT_KEY] = coverage.as_sent(coverage.REACHED)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object) -> None:
    """On the xdist controller: add up each worker's model coverage."""
    sent = getattr(node, "workeroutput", {}).get(coverage.WORKER_OUTPUT_KEY, [])
    coverage.REACHED.update(coverage.received(sent))


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if coverage.REACHED:
        terminalreporter.section("model coverage of the stateful suite")
        for line in coverage.coverage_lines(coverage.REACHED):
            terminalreporter.write_line(line)
    files = saved_files(terminalreporter.stats.get("failed", []))
    if files:
        terminalreporter.section("failures saved (report and replay of each)")
        for name in files:
            terminalreporter.write_line(name)
