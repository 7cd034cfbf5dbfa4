"""The replay step of ``docs/debugging.md`` replays, or fails: it never passes in silence.

The snippet is taken from the page as printed and run in a child interpreter (the
decorator it applies stays on the machine class for the rest of the process), with a
blob that fits no failure of this machine: hypothesis must refuse it.
"""

from __future__ import annotations

import re
import subprocess
import sys

from courier.procs import project_root

ROOT = project_root()
RUN_TIMEOUT_S = 120.0


def replay_snippet() -> str:
    """The Python block of the lockstep's ``@reproduce_failure`` step."""
    page = (ROOT / "docs" / "debugging.md").read_text(encoding="utf-8")
    blocks = re.findall(r"```python\n(.*?)```", page, flags=re.DOTALL)
    (snippet,) = [block for block in blocks if "reproduce_failure(" in block]
    return "\n".join(line.removeprefix("   ") for line in snippet.splitlines())


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
