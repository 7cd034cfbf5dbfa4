"""``make demo`` installs what the demo needs and nothing more.

The demo is the project's main job and runs on the standard library: from a fresh
clone it must not install the test toolchain (pytest, hypothesis, mypy, ruff, the
PostgreSQL wheels: about 195 MB), nor anything else. ``make -n`` (print, run
nothing) in a folder with the Makefile and no virtualenv shows every command a fresh
clone would run; the demo itself runs as a process in ``tests/processes/test_cli.py``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from courier.procs import project_root

OUTER_MAKE = ("MAKEFLAGS", "MAKELEVEL", "MFLAGS", "MAKEOVERRIDES", "PYTHON")


@pytest.mark.skipif(shutil.which("make") is None, reason="no make on this machine")
def test_make_demo_on_a_fresh_clone_installs_nothing(tmp_path: Path) -> None:
    for name in ("Makefile", "pyproject.toml"):
        shutil.copy(project_root() / name, tmp_path / name)
    # Run under make test, the outer make's variables would print "Entering directory"
    # lines and pass its flags on: the child gets an environment without them.
    env = {k: v for k, v in os.environ.items() if k not in OUTER_MAKE}
    done = subprocess.run(
        ["make", "-n", "demo"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    commands = done.stdout.splitlines()
    assert [line for line in commands if "pip" in line or "venv" in line] == [], commands
    assert commands == ["python3 -m courier demo"], commands
