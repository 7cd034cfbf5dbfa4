"""What a failing test prints and leaves behind.

Two things, both run from ``tests/conftest.py``'s ``pytest_runtest_makereport``:

- **A shrunk program reads from the top.** pytest prints a failure as its traceback
  first, the assertion message last; for a hypothesis state machine that put the line
  naming the divergence after some fifty lines of frames. ``divergence_first`` turns
  such a failure's report around: the exception's message (its first line names what
  differs), the shrunk program hypothesis printed, the replay lines, and only then the
  traceback, in short form and limited to the project's own frames. It applies to
  failures of a state machine (the lockstep on SQLite and PostgreSQL) under pytest's
  default ``--tb=auto``; any other ``--tb`` (or ``--fulltrace``) gets pytest's own report.
- **Every failure leaves a file.** ``record_failure`` writes the report as printed, the
  exact pytest command that replays it and, for hypothesis, its ``@reproduce_failure``
  line, to ``failures/<test id>.txt`` (the folder is ``$LEASE_QUEUE_FAILURES``, by
  default ``failures/`` at the repository root), so that a CI run leaves the shrunk
  program behind as an artifact. A test that passes removes its old file: the folder
  holds the tests whose last run failed.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
from _pytest._code.code import (
    ExceptionChainRepr,
    ExceptionInfo,
    ReprEntry,
    ReprTraceback,
    Traceback,
    TracebackEntry,
)

from courier.procs import project_root
from tests.profiles import profile_name

__all__ = [
    "FAILURES_ENV",
    "divergence_first",
    "failure_file",
    "failures_folder",
    "forget_failure",
    "record_failure",
    "replay_lines",
    "report_and_record",
    "saved_files",
    "shrunk_program",
]

ROOT = project_root()
FAILURES_ENV = "LEASE_QUEUE_FAILURES"
FILE_PROPERTY = "failure file"  # the report's user_properties name for the file written
_BLOB = re.compile(r"@reproduce_failure\((?P<arguments>.*?)\)")
_MACHINE = re.compile(r"^state = (?P<machine>\w+)\(\)$")


def failures_folder() -> Path:
    """``$LEASE_QUEUE_FAILURES`` (relative to the working directory) or ``failures/``."""
    named = os.environ.get(FAILURES_ENV)
    return Path(named) if named else ROOT / "failures"


def failure_file(test_id: str) -> Path:
    """Where the failure of ``test_id`` (a pytest node id) is kept: one file per test,
    named after the id with every character that is no letter, digit, ``.``, ``_`` or
    ``-`` replaced (``tests-stateful-test_lockstep.py--TestQueueLockstep--runTest.txt``)."""
    name = re.sub(r"[^\w.-]", "-", test_id.replace("::", "--"))[:200]
    return failures_folder() / f"{name}.txt"


def record_failure(test_id: str, text: str, replay: str) -> Path:
    """Write the failure of ``test_id``: its id, how to replay it, then its report."""
    path = failure_file(test_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"{test_id} failed\n\nreplay:\n{replay}\n\n{text.rstrip()}\n", "utf-8")
    return path


def forget_failure(test_id: str) -> None:
    """Remove the file of an earlier failure of ``test_id`` (it passes now)."""
    failure_file(test_id).unlink(missing_ok=True)


def shrunk_program(error: BaseException) -> list[str] | None:
    """The notes hypothesis attached to a state machine's failure (``Failing test case:
    <state machine>``, ``state = ...``, one line per step and note, the blob), or None
    when ``error`` is not one."""
    notes = [str(note) for note in getattr(error, "__notes__", ())]
    if notes and "<state machine>" in notes[0]:
        return notes
    return None


def _shown(path: str) -> str:
    """A path relative to the repository root, if it is inside it."""
    try:
        return str(Path(os.path.abspath(path)).relative_to(ROOT))
    except ValueError:
        return path


def replay_lines(test_id: str, notes: Sequence[str] = ()) -> list[str]:
    """How to run ``test_id`` again: the pytest command (the same profile: derandomized
    under ``ci``, the example database's saved failure first under ``dev``), and the
    ``@reproduce_failure`` blob of hypothesis' notes, if any, as the line of Python that
    replays a state machine with it (``docs/debugging.md``) or as the decorator."""
    python = _shown(sys.executable)
    command = f"HYPOTHESIS_PROFILE={profile_name()} {python} -m pytest {shlex.quote(test_id)}"
    lines = [command]
    blob = next((match for note in notes if (match := _BLOB.search(note))), None)
    if blob is not None:
        machine = next((match for note in notes if (match := _MACHINE.match(note))), None)
        if machine is not None:
            lines.append(
                f"run_state_machine_as_test(reproduce_failure({blob['arguments']})"
                f"({machine['machine']}))"
            )
        else:
            lines.append(f"@reproduce_failure({blob['arguments']}) on the test function")
    return lines


def _project_frames(info: ExceptionInfo[BaseException]) -> Traceback:
    """The frames of the project's code (not hypothesis', pytest's or the stdlib's),
    without those hidden by ``__tracebackhide__``; all of them if none is left."""
    unhidden = info.traceback.filter(info)

    def ours(entry: TracebackEntry) -> bool:
        path = Path(str(entry.path))
        return path.is_relative_to(ROOT) and not path.is_relative_to(sys.prefix)

    kept = unhidden.filter(ours)
    return kept if len(kept) else unhidden


def divergence_first(
    excinfo: ExceptionInfo[BaseException],
    notes: Sequence[str],
    replay: Sequence[str],
    saved: str = "",
) -> ExceptionChainRepr:
    """The report of a state machine's failure, read from the top: the exception and its
    message, the shrunk program (``notes`` without the blob's sentence), the ``replay``
    lines and the file it is ``saved`` in, then the project's frames in short form, each
    chained exception's message under its own frames."""
    error = excinfo.value
    program = [note for note in notes if not _BLOB.search(note)]
    head = [
        f"{type(error).__name__}: {error}",
        "",
        *program,
        "",
        *(f"replay: {line}" if n == 0 else f"    or: {line}" for n, line in enumerate(replay)),
        *([f" saved: {saved}"] if saved else []),
        "",
        "traceback (the project's frames; pytest --tb=long prints every frame):",
    ]
    traceback = excinfo.getrepr(style="short", chain=True, tbfilter=_project_frames)
    assert isinstance(traceback, ExceptionChainRepr)
    chain = list(traceback.chain)
    # The outermost exception's message and notes are printed at the top already.
    outermost, crash, description = chain[-1]
    entries = list(outermost.reprentries)
    if entries and isinstance(entries[-1], ReprEntry):
        last = entries[-1]
        cut = next((n for n, line in enumerate(last.lines) if line.startswith("E   ")), None)
        lines = [*last.lines[:cut], f"E   {type(error).__name__} (the message is at the top)"]
        entries[-1] = ReprEntry(
            lines, last.reprfuncargs, last.reprlocals, last.reprfileloc, last.style
        )
    chain[-1] = (ReprTraceback(entries, outermost.extraline, outermost.style), crash, description)
    top = ReprTraceback([ReprEntry(head, None, None, None, "value")], None, "value")
    return ExceptionChainRepr([(top, None, None), *chain])


def report_and_record(
    item: pytest.Item, call: pytest.CallInfo[None], report: pytest.TestReport
) -> None:
    """What ``pytest_runtest_makereport`` does with each report: a state machine's
    failure is printed divergence first; any failure is written to its file (named in
    the report's ``user_properties``, for the terminal summary, and in the test's, for a
    JUnit XML); a test that passed forgets its old failure."""
    if report.when == "call" and report.passed:
        forget_failure(report.nodeid)
        return
    if not report.failed:
        return
    notes: list[str] = []
    if call.excinfo is not None:
        notes = [str(note) for note in getattr(call.excinfo.value, "__notes__", ())]
    replay = replay_lines(report.nodeid, notes)
    program = shrunk_program(call.excinfo.value) if call.excinfo is not None else None
    config = item.config
    default_style = config.getoption("tbstyle", "auto") == "auto" and not config.getoption(
        "fulltrace", False
    )
    path = failure_file(report.nodeid)
    if program is not None and default_style and call.excinfo is not None:
        longrepr = divergence_first(call.excinfo, program, replay, _shown(str(path)))
        longrepr.sections.extend(getattr(report.longrepr, "sections", []))
        report.longrepr = longrepr
    sections = "".join(f"\n--- {title} ---\n{content}" for title, content in report.sections)
    try:
        record_failure(report.nodeid, report.longreprtext + sections, "\n".join(replay))
    except OSError as error:  # the report itself must still reach the terminal
        report.sections.append(("failure file", f"not written: {error}"))
        return
    saved = (FILE_PROPERTY, _shown(str(path)))
    report.user_properties.append(saved)
    item.user_properties.append(saved)  # the teardown report's, which a JUnit XML reads


def saved_files(reports: Sequence[pytest.TestReport]) -> list[str]:
    """The failure files named by ``reports`` (from the controller's stats under xdist)."""
    return [
        str(value)
        for report in reports
        for name, value in report.user_properties
        if name == FILE_PROPERTY
    ]
