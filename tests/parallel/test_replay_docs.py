"""The parallel part of ``docs/debugging.md`` runs as printed.

Its Python snippet, saved as a file at the repository's root and run on the case of a
real failure, reports the failure and exits 1; on the same case without its plant it
says "explained" and exits 0. Its replay command reproduces a failure 10 times out of 10.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from courier.procs import project_root
from tests.parallel.case import Case
from tests.parallel.test_regressions import CASES

ROOT = project_root()
RUN_TIMEOUT_S = 120.0


def parallel_part() -> str:
    page = (ROOT / "docs" / "debugging.md").read_text(encoding="utf-8")
    return page.partition("## A parallel failure")[2]


def snippet() -> str:
    (block,) = re.findall(r"```python\n(.*?)```", parallel_part(), flags=re.DOTALL)
    return "\n".join(line.removeprefix("   ") for line in block.splitlines())


def a_case(folder: Path, planted: bool) -> Path:
    """The regression case of the plant the page shows (``claim-many-lets-go``'s is the
    one kept with its schedule in test_regressions; any real case serves)."""
    bug, program, schedule = CASES[0]
    assert schedule is not None
    return Case("sqlite", program, schedule, bug if planted else None).save(folder)


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], cwd=ROOT, capture_output=True, text=True, timeout=RUN_TIMEOUT_S
    )


def test_the_snippet_reports_a_failure_and_says_explained_otherwise(tmp_path: Path) -> None:
    script = ROOT / f"replay_case_{tmp_path.name}.py"  # the page says: at the root
    script.write_text(snippet(), encoding="utf-8")
    try:
        failed = run(script.name, str(a_case(tmp_path / "planted", planted=True)))
        assert failed.returncode == 1, failed.stdout + failed.stderr
        assert "broken:" in failed.stdout and "the run:" in failed.stdout
        passed = run(script.name, str(a_case(tmp_path / "queue", planted=False)))
        assert (passed.returncode, passed.stdout.strip()) == (0, "explained"), passed.stderr
    finally:
        script.unlink()


def test_the_replay_command_reproduces_ten_times_out_of_ten(tmp_path: Path) -> None:
    case = a_case(tmp_path, planted=True)
    done = run("-m", "tests.parallel.replay", str(case), "--runs", "10")
    assert done.returncode == 1, done.stdout + done.stderr
    assert "REPRODUCED: failed 10 of 10 runs" in done.stdout
    assert json.loads(case.read_text(encoding="utf-8"))["plant"] == CASES[0][0]
