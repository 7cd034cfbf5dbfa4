"""Child courier processes: start them, wait for their signals, kill and reap them.

Used by the demo and the process tests. Every wait here is bounded by a timeout,
and ``Children`` kills whatever is still running when its block ends, so no
courier outlives the code that started it.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType
from typing import IO, Any

__all__ = [
    "Children",
    "courier_command",
    "module_command",
    "pid_alive",
    "project_root",
    "wait_for_report",
]

POLL_S = 0.01


def project_root() -> Path:
    """The directory holding ``worker.py`` and the ``courier`` package."""
    return Path(__file__).resolve().parents[1]


def module_command(module: str, *args: object) -> list[str]:
    """The argv of ``python -m MODULE ARGS...`` with this interpreter."""
    return [sys.executable, "-m", module, *(str(arg) for arg in args)]


def courier_command(*args: str | Path) -> list[str]:
    """The argv of ``python -m courier ARGS...`` with this interpreter."""
    return module_command("courier", *args)


def pid_alive(pid: int) -> bool:
    """Whether a process ``pid`` exists (``True`` also when it is another user's)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _child_env() -> dict[str, str]:
    """This environment, with the project importable and output unbuffered."""
    env = dict(os.environ)
    paths = [str(project_root()), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(paths)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class Children:
    """The child processes of one block: started with logs, killed and reaped at the end."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[bytes]] = []
        self._logs: list[IO[bytes]] = []

    def start(self, argv: list[str], log_path: Path) -> subprocess.Popen[bytes]:
        """Start ``argv`` with stdout and stderr going to ``log_path``."""
        log = log_path.open("wb")
        self._logs.append(log)
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=_child_env(),
            cwd=project_root(),
        )
        self.procs.append(proc)
        return proc

    @staticmethod
    def kill(proc: subprocess.Popen[bytes], timeout_s: float = 10) -> int:
        """SIGKILL ``proc`` (if still running) and reap it; returns its exit code."""
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        return proc.wait(timeout=timeout_s)

    def close(self) -> None:
        """Kill and reap every child still running and close the log files."""
        for proc in self.procs:
            if proc.poll() is None:
                self.kill(proc)
        for log in self._logs:
            log.close()

    def __enter__(self) -> Children:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        trace: TracebackType | None,
    ) -> None:
        self.close()


def wait_for_report(
    path: Path, proc: subprocess.Popen[bytes], timeout_s: float
) -> dict[str, Any] | None:
    """Wait until ``path`` exists and return its JSON, while ``proc`` keeps running.

    Returns ``None`` if ``proc`` exits or ``timeout_s`` passes first. The writer
    replaces the file atomically, so an existing file is always complete.
    """
    until = time.monotonic() + timeout_s
    for _ in range(int(timeout_s / POLL_S) + 1):
        if path.exists():
            report: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
            return report
        if proc.poll() is not None or time.monotonic() >= until:
            return None
        time.sleep(POLL_S)
    return None
