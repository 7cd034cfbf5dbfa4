"""The soak's operator: redrives of dead jobs, and a write lock held too long.

``Operator`` redrives one dead job at a time, each job at most once per run, so
that an unlucky job does not bounce between dead and pending for ever: on a
queue file with the real CLI (``python -m courier redrive``), on PostgreSQL with
``pgworker.redrive`` at the server's clock (the CLI's options are the courier
package's business). ``LockHolder`` is someone (a backup, a careless script)
holding the queue's write lock past the couriers' busy timeout (on PostgreSQL:
the ``jobs`` table in EXCLUSIVE mode, which every claim and finish waits for); it
rolls back, changing nothing.
"""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path
from typing import Any

from chaos.intake import Intake
from chaos.store import FileQueue, Store
from chaos.tally import ChaosCounts
from courier.procs import Children, courier_command

__all__ = ["LockHolder", "Operator"]

OPERATOR_TIMEOUT_S = 20.0
REDRIVE_TTL_MS = 30_000


class LockHolder:
    """Holds the write lock of the queue ``store`` for a while, then rolls back."""

    def __init__(self, store: Store, counts: ChaosCounts) -> None:
        self.store = store
        self.counts = counts
        self._con: Any = None
        self._until = 0.0

    @property
    def held(self) -> bool:
        return self._con is not None

    def hold(self, duration_ms: int) -> bool:
        """Take the write lock for ``duration_ms``; ``False`` if held already or busy."""
        if self._con is not None:
            return False
        try:
            con = self.store.hold_lock()
        except Exception as error:
            if not self.store.is_busy(error):
                raise
            self.counts.lock_holds["could not take the lock"] += 1
            return False
        self._con = con
        self._until = time.monotonic() + duration_ms / 1000
        self.counts.lock_holds["held"] += 1
        return True

    def tick(self, now: float) -> None:
        """Release the lock once its time is up."""
        if self._con is not None and now >= self._until:
            self.release()

    def release(self) -> None:
        """Roll back and close the holding connection, if any (changes nothing)."""
        if self._con is not None:
            self._con.execute("ROLLBACK")
            self._con.close()
            self._con = None


class Operator:
    """Redrives dead jobs of the queue ``store``, logging each CLI run in ``logs``."""

    def __init__(self, children: Children, store: Store, logs: Path, counts: ChaosCounts) -> None:
        self.children = children
        self.store = store
        self.logs = logs
        self.counts = counts
        self.redriven: set[str] = set()
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: Path | None = None

    def redrive(self, target: int, intake: Intake) -> bool:
        """Redrive one dead job (or start the CLI that does); ``False`` if none or busy."""
        if self._proc is not None:
            return False
        candidates = [job["id"] for job in intake.dead_jobs() if job["id"] not in self.redriven]
        if not candidates:
            return False
        job_id = candidates[target % len(candidates)]
        self.redriven.add(job_id)
        note = f"soak-redrive-{len(self.redriven)}"
        if not isinstance(self.store, FileQueue):
            self._redrive_here(job_id, note)
            return True
        self._log = self.logs / f"operator-{len(self.redriven)}.log"
        argv = courier_command(
            "redrive", self.store.path, job_id, "--note", note, "--ttl-ms", str(REDRIVE_TTL_MS)
        )
        self._proc = self.children.start(argv, self._log)
        return True

    def _redrive_here(self, job_id: str, note: str) -> None:
        """``pgworker.redrive`` at the server's clock, here, waiting for a lock 1 s at most.

        The bound matters: the lock holder is in this process too, and a redrive
        that waited for its table lock would wait for ever.
        """
        con = self.store.connect(bounded=True)
        try:
            self.store.module.redrive(con, job_id, self.store.now_ms(con), REDRIVE_TTL_MS, note)
            self.counts.redrives["redriven"] += 1
        except ValueError:
            self.counts.redrives["no longer dead"] += 1
        except Exception as error:
            if not self.store.is_busy(error):
                raise
            self.counts.redrives["queue busy (lock timeout)"] += 1
        finally:
            con.close()

    def tick(self) -> None:
        """Record the redrive that just ended, if any."""
        if self._proc is None or self._proc.poll() is None:
            return
        self._record(self._proc.returncode)

    def _record(self, code: int) -> None:
        text = self._log.read_text(encoding="utf-8", errors="replace") if self._log else ""
        if code == 0:
            self.counts.redrives["redriven"] += 1
        elif "locked" in text:
            self.counts.redrives["queue busy (lock timeout)"] += 1
        else:
            self.counts.redrives[f"failed (exit {code})"] += 1
        self._proc = None

    def finish(self) -> None:
        """Wait for a redrive still running (bounded), then record it."""
        if self._proc is None:
            return
        try:
            self._record(self._proc.wait(timeout=OPERATOR_TIMEOUT_S))
        except subprocess.TimeoutExpired:
            self.children.kill(self._proc)
            self._record(-signal.SIGKILL)
