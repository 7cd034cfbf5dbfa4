"""A recorded bench at quick sizes, run in a child process.

The run's folder is the bench's own kind (under /var/tmp, on a disk), not pytest's
tmp_path: as root the PostgreSQL server runs as a user of its own, which must reach its
data folder, and pytest makes /tmp/pytest-of-<user> private again at the start of every
session (so another pytest on the machine would cut the server off mid-run).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from courier.procs import project_root

__all__ = ["RUN_TIMEOUT_S", "quick_record"]

RUN_TIMEOUT_S = 120.0


def quick_record(module: str, *options: str) -> Iterator[tuple[dict[str, Any], str]]:
    """Yield the JSON record and the stdout of ``python -m MODULE --quick OPTIONS...``.

    The child must exit 0 within ``RUN_TIMEOUT_S``; its folder is removed afterwards.
    """
    prefix = f"{module.replace('.', '-').replace('_', '-')}-smoke-"
    folder = Path(tempfile.mkdtemp(prefix=prefix, dir="/var/tmp"))
    try:
        out = folder / "record.json"
        argv = [sys.executable, "-m", module, "--quick", "--dir", str(folder), *options]
        done = subprocess.run(
            [*argv, "--json", str(out)],
            cwd=project_root(),
            capture_output=True,
            text=True,
            timeout=RUN_TIMEOUT_S,
            check=False,
        )
        assert done.returncode == 0, done.stderr
        yield json.loads(out.read_text(encoding="utf-8")), done.stdout
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def generated_section(page: Path, marks: tuple[str, str]) -> str:
    """What stands between the generated-section ``marks`` of ``page``."""
    begin, end = marks
    return page.read_text(encoding="utf-8").split(begin + "\n", 1)[1].split(end, 1)[0]
