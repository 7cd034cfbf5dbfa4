"""The snippets of ``docs/debugging.md`` run as printed, and its figures are the profiles'.

The replay step replays, or fails: it never passes in silence. Its snippet is taken from
the page and run in a child interpreter (the decorator it applies stays on the machine
class for the rest of the process), with a blob that fits no failure of this machine:
hypothesis must refuse it. The regression test the page pastes runs as pasted, imports
included, and its steps are those of the failure the page prints. The profiles table
says what ``tests/profiles.py`` and the fuzz campaign set.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys

from hypothesis import settings

from courier.procs import project_root
from tests import profiles  # noqa: F401  (registers the profiles)
from tests.stateful import fuzz

ROOT = project_root()
TIMES = "\N{MULTIPLICATION SIGN}"  # the page writes "2,000 x up to 20" with it
RUN_TIMEOUT_S = 120.0


def page() -> str:
    return (ROOT / "docs" / "debugging.md").read_text(encoding="utf-8")


def sequential_part() -> str:
    """The page up to its parallel failure (that part has its own snippets)."""
    return page().partition("## A parallel failure")[0]


def python_block(containing: str) -> str:
    """The one Python block of the sequential part that contains ``containing``,
    without the indent of the list item it sits in."""
    blocks = re.findall(r"```python\n(.*?)```", sequential_part(), flags=re.DOTALL)
    (snippet,) = [block for block in blocks if containing in block]
    return "\n".join(line.removeprefix("   ") for line in snippet.splitlines())


def replay_snippet() -> str:
    """The Python block of the lockstep's ``@reproduce_failure`` step."""
    return python_block("reproduce_failure(")


def test_the_documented_replay_refuses_a_blob_that_fits_no_failure() -> None:
    snippet = replay_snippet()
    assert 'b"AXic..."' in snippet
    # A well-formed blob (base64 of zlib data) of a run this machine never makes.
    code = snippet.replace('b"AXic..."', 'b"AXicY2BgYGAAAAAFAAE="')
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT_S,
    )
    assert done.returncode != 0, "the replay passed: it replayed nothing"
    assert "DidNotReproduce" in done.stderr or "InvalidArgument" in done.stderr, done.stderr


def test_the_documented_regression_test_runs_as_pasted() -> None:
    snippet = python_block("def test_regression_")
    namespace: dict[str, object] = {}
    exec(compile(snippet, "docs/debugging.md", "exec"), namespace)
    (test,) = [value for name, value in namespace.items() if name.startswith("test_regression_")]
    assert callable(test)
    test()  # passes on worker.py; the page says it fails on the planted copy


def test_the_regression_test_pastes_the_printed_program() -> None:
    (printed,) = re.findall(r"```text\n(.*?)```", sequential_part(), flags=re.DOTALL)
    steps = [line for line in printed.splitlines() if re.match(r"(\w+ = )?state\.", line)]
    pasted = [line.strip() for line in python_block("def test_regression_").splitlines()]
    pasted_steps = [line for line in pasted if re.match(r"(\w+ = )?state\.", line)]
    # The program hypothesis printed, with the last step's invariant the page adds (the
    # same code: ruff formats the page's block with other quotes).
    printed_code = [ast.unparse(ast.parse(step)) for step in steps[:-1]]
    pasted_code = [ast.unparse(ast.parse(step)) for step in pasted_steps]
    assert [*printed_code, "state.promises_hold()", "state.teardown()"] == pasted_code


def test_the_profiles_table_has_the_profiles_figures() -> None:
    rows = {
        cells[1].strip("` "): cells[3].strip()
        for line in sequential_part().splitlines()
        if line.startswith("| `") and len(cells := line.split("|")) > 4
    }
    ci, dev = settings.get_profile("ci"), settings.get_profile("dev")
    ci_row = f"{ci.max_examples:,} {TIMES} up to {ci.stateful_step_count} steps"
    assert rows["ci"].startswith(ci_row), rows["ci"]
    assert rows["dev"] == f"{dev.max_examples} {TIMES} up to {dev.stateful_step_count} steps"
    assert rows["fuzz"] == (
        f"rounds of {fuzz.ROUND_EXAMPLES} {TIMES} {fuzz.STEPS_PER_EXAMPLE} steps until time is up"
    )
