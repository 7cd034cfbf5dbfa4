"""``tests/failures.py`` and the report hooks of ``tests/conftest.py``: a state machine's
failure reads from its divergence down, every failure leaves a file with its replay line
(named in the summary and a JUnit XML), and the model coverage reaches the terminal under
``-n 2``.

The end-to-end check runs pytest in a child on a small failing machine of its own (a
few milliseconds of hypothesis), with this suite's conftest as a plugin.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, rule, run_state_machine_as_test

from courier.procs import project_root
from tests.failures import (
    FAILURES_ENV,
    divergence_first,
    failure_file,
    forget_failure,
    record_failure,
    replay_lines,
    shrunk_program,
)

ROOT = project_root()
RUN_TIMEOUT_S = 180.0


class Counting(RuleBasedStateMachine):
    """Fails once the count reaches 2: a two-step program."""

    def __init__(self) -> None:
        super().__init__()
        self.count = 0

    @rule()
    def add(self) -> None:
        self.count += 1
        assert self.count < 2, f"count went past 1: worker.py {self.count}, model 1"


def failing_machine() -> pytest.ExceptionInfo[AssertionError]:
    quick = settings(max_examples=50, derandomize=True, database=None, print_blob=True)
    with pytest.raises(AssertionError) as caught:
        run_state_machine_as_test(Counting, settings=quick)
    return caught


def test_the_divergence_comes_first_then_the_program_then_the_replay() -> None:
    caught = failing_machine()
    notes = shrunk_program(caught.value)
    assert notes is not None and notes[0] == "Failing test case: <state machine>"
    replay = replay_lines("tests/x.py::test_counting", notes)
    text = str(divergence_first(caught, notes, replay, "failures/x.txt"))
    lines = text.splitlines()
    assert lines[0] == "AssertionError: count went past 1: worker.py 2, model 1"
    program = lines.index("state = Counting()")
    assert lines[program + 1 : program + 4] == ["state.add()", "state.add()", "state.teardown()"]
    assert lines[program + 5].startswith("replay: HYPOTHESIS_PROFILE=")
    assert lines[program + 6].startswith(
        "    or: run_state_machine_as_test(reproduce_failure('"
    ) and lines[program + 6].endswith(")(Counting))")
    assert lines[program + 7] == " saved: failures/x.txt"
    # The traceback follows, this file's frames only, without the message a second time.
    traceback = text[text.index("traceback (the project's frames") :]
    assert "test_failure_reports.py" in traceback and "hypothesis" not in traceback
    assert "count went past 1: worker.py 2" not in traceback
    assert "You can reproduce this test case" not in text  # said as the replay line instead


def test_a_failure_that_is_no_state_machine_has_no_program() -> None:
    assert shrunk_program(AssertionError("plain")) is None
    error = AssertionError("given")
    error.add_note("Falsifying example: test_x(n=1)")
    assert shrunk_program(error) is None


def test_replay_lines_give_the_pytest_command_and_the_decorator() -> None:
    notes = [
        "Falsifying example: test_x(n=1)",
        "\nYou can reproduce this test case by temporarily adding "
        "@reproduce_failure('6.170.17', b'AXic') as a decorator on your test function",
    ]
    command, decorator = replay_lines("tests/a b.py::test_x[1-2]", notes)
    assert command.endswith(" -m pytest 'tests/a b.py::test_x[1-2]'")
    assert command.startswith("HYPOTHESIS_PROFILE=")
    assert shlex.split(command)[-1] == "tests/a b.py::test_x[1-2]"
    assert decorator == "@reproduce_failure('6.170.17', b'AXic') on the test function"
    assert len(replay_lines("tests/x.py::test_y")) == 1


def test_a_failure_is_recorded_and_forgotten(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(FAILURES_ENV, str(tmp_path / "kept"))
    test_id = "tests/stateful/test_lockstep.py::TestQueueLockstep::runTest"
    path = record_failure(test_id, "AssertionError: rows differ\nstate = QueueLockstep()", "cmd")
    assert (
        path
        == tmp_path / "kept" / "tests-stateful-test_lockstep.py--TestQueueLockstep--runTest.txt"
    )
    assert path == failure_file(test_id)
    assert path.read_text("utf-8") == (
        f"{test_id} failed\n\nreplay:\ncmd\n\n"
        "AssertionError: rows differ\nstate = QueueLockstep()\n"
    )
    forget_failure(test_id)
    assert not path.exists()
    forget_failure(test_id)  # nothing to forget: no error


TINY_SUITE = """
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, rule

from tests.stateful.coverage import REACHED


@settings(max_examples=50, database=None)
class Tiny(RuleBasedStateMachine):
    def __init__(self):
        super().__init__()
        self.count = 0

    @rule()
    def add(self):
        self.count += 1
        assert self.count < 2, f"add returned {self.count} on worker.py, 1 on the model"


TestTiny = Tiny.TestCase


def test_counts_a_transition():
    REACHED[("pending", "claim", "fires")] += 1


def test_plain_failure():
    assert 1 == 2, "plain"


def test_passes():
    pass
"""


def test_under_two_workers_reports_lead_with_the_divergence_and_leave_files(
    tmp_path: Path,
) -> None:
    (tmp_path / "test_tiny.py").write_text(textwrap.dedent(TINY_SUITE), "utf-8")
    folder = tmp_path / "failures"
    stale = folder / "test_tiny.py--test_passes.txt"
    stale.parent.mkdir()
    stale.write_text("an old failure", "utf-8")
    environment = os.environ | {FAILURES_ENV: str(folder), "HYPOTHESIS_PROFILE": "ci"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-p",
            "tests.conftest",
            "-p",
            "no:cacheprovider",
            "-n",
            "2",
            "--rootdir",
            str(tmp_path),
            f"--junitxml={tmp_path / 'junit.xml'}",
            str(tmp_path / "test_tiny.py"),
        ],
        cwd=ROOT,
        env=environment,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    output = done.stdout
    assert done.returncode == 1, output + done.stderr
    lines = output.splitlines()
    header = next(n for n, line in enumerate(lines) if "TestTiny.runTest" in line)
    assert lines[header + 1].startswith("[gw")  # the worker that ran it, then the report
    assert lines[header + 2] == "AssertionError: add returned 2 on worker.py, 1 on the model"
    program = lines.index("Failing test case: <state machine>", header)
    assert program < header + 10  # after the message (pytest adds its "where" lines to it)
    assert lines[program + 1 : program + 5] == [
        "state = Tiny()",
        "state.add()",
        "state.add()",
        "state.teardown()",
    ]
    # A plain failure keeps pytest's own report.
    assert "    def test_plain_failure():" in lines
    # The coverage counted on a worker reaches the controller's summary.
    assert any("model coverage of the stateful suite" in line for line in lines), output
    # Each failure left a file; the test that passes now forgot its old one.
    machine_file = folder / "test_tiny.py--TestTiny--runTest.txt"
    kept = machine_file.read_text("utf-8")
    assert kept.startswith(
        "test_tiny.py::TestTiny::runTest failed\n\nreplay:\nHYPOTHESIS_PROFILE=ci"
    )
    assert "run_state_machine_as_test(reproduce_failure(" in kept and ")(Tiny))" in kept
    assert "AssertionError: add returned 2 on worker.py, 1 on the model" in kept
    assert "state.add()" in kept
    assert (folder / "test_tiny.py--test_plain_failure.txt").exists()
    junit = (tmp_path / "junit.xml").read_text("utf-8")
    assert f'<property name="failure file" value="{machine_file}" />' in junit
    assert not stale.exists()
    saved = lines.index(next(line for line in lines if "failures saved" in line))
    assert sorted(lines[saved + 1 : saved + 3]) == sorted(
        [str(machine_file), str(folder / "test_tiny.py--test_plain_failure.txt")]
    )
