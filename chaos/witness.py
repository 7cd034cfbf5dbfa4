"""A forced event's witness: the courier it is done to, followed until it shows the effect.

The first round of chaos is forced (``chaos.schedule``). Three of its events are
done to one courier incarnation whose own event log must then show what the
checker counts; that courier is the event's **witness**. Until it has shown it
(or exited) the supervisor leaves it alone (no kill, pause or cut) and the chaos
phase does not end (``chaos.fleet.Fleet.at_rest``). What each witness shows, and
why it must:

- ``drill`` (``schedule.FORCED_DRILL``): the first courier's first incarnation,
  whose drill is armed from its first round at ``claim:after-claim``: it
  SIGKILLs itself inside its first claim, and nothing else may kill it first.
  Shown: it exited.
- ``pause-in-flight``: a courier asked to freeze (``chaos.child.FreezeOnRequest``)
  stops itself right after its next delivery's answer and before the queue's
  ``finish``, holding its ticket; it stays stopped for 1.5-3 leases. Its finish
  reads the clock only after it is resumed, past the ticket's ``lease_until``,
  so the queue must refuse it (``stale``). A refused finish is only seen if the
  finish runs at all: on a queue file a write lock held past the 1 s busy timeout
  would make it fail as busy instead (a lock holder, a courier paused inside a
  write, a long burst of enqueues). So it is resumed only once no other courier
  is paused and no lock is held, and from the moment it is due until it has
  finished nobody else is paused, nobody takes the lock and the intake waits
  (``Fleet.quiet``). Shown: its log holds its finish of that job.
- ``partition`` (simulated hosts only): a courier asked to freeze the same way,
  holding a job that has budget and time left for another claim (``Store.
  can_be_taken_over``; otherwise it is resumed at once and asked again); its host
  is cut off and it is resumed, so its finish meets the dead link. The host is
  healed only once its time is up, the courier lost its connection (a
  ``disconnect`` line) and a courier on another host claimed the job with a later
  token (``taken_over``), or after ``HEAL_BOUND_S`` whatever it waits for. Shown:
  its log holds its late finish of that job, after a reconnect, refused as stale.

The checker (``chaos.report``) reads each witness's outcome back from the event
logs; the supervisor only follows them. The logs are read as they grow
(``EventTail``), complete lines only.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from chaos.schedule import PARTITION, ChaosEvent

__all__ = ["DRILL", "HEAL_BOUND_S", "RESUME_BOUND_S", "EventTail", "Witness", "is_stopped"]

DRILL = "drill"
HEAL_BOUND_S = 20.0  # a forced partition is healed by then past its time, whatever it waits for
RESUME_BOUND_S = 10.0  # a frozen witness is resumed by then past its time, quiet or not


def is_stopped(pid: int) -> bool | None:
    """Whether process ``pid`` is stopped (SIGSTOP); ``None`` if this system cannot say."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = text.rpartition(")")[2].split()
    return bool(fields) and fields[0] in ("T", "t")


class EventTail:
    """The complete lines an event log gained since the last ``new_lines`` call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._offset = 0

    def new_lines(self) -> list[dict[str, Any]]:
        """Each new complete line that holds a JSON object (a missing file has none)."""
        try:
            with self.path.open("rb") as file:
                file.seek(self._offset)
                data = file.read()
        except FileNotFoundError:
            return []
        complete = data[: data.rfind(b"\n") + 1]
        self._offset += len(complete)
        lines: list[dict[str, Any]] = []
        for line in complete.splitlines():
            try:
                value = json.loads(line)
            except ValueError:
                continue
            if isinstance(value, dict):
                lines.append(value)
        return lines


@dataclass
class Witness:
    """One forced event (``event``; ``None`` for the drill) and the courier it is done to.

    ``job`` and ``token`` are the job it froze on and its ticket's token (from its
    ``claimed`` line, on PostgreSQL); ``frozen_at`` (monotonic) is when the
    supervisor saw it frozen. ``finished`` says its log holds a result for
    ``job`` after that; ``lost_link`` that it logged a ``disconnect`` after it.
    """

    kind: str
    event: ChaosEvent | None
    owner: str
    incarnation: int
    host: int
    tail: EventTail
    job: str | None = None
    token: int = 0
    frozen_at: float | None = None
    resumed: bool = False
    finished: bool = False
    exited: bool = False
    lost_link: bool = False
    taken_over: bool = False
    _claimed: dict[str, int] = field(default_factory=dict)
    _others: dict[Path, EventTail] = field(default_factory=dict)

    @property
    def settled(self) -> bool:
        """It has shown what it was for, or it cannot any more (it exited)."""
        return self.exited or (self.kind != DRILL and self.finished)

    def record(self) -> dict[str, Any]:
        """What the checker needs of it (``ChaosCounts.witnesses``)."""
        return {
            "kind": self.kind,
            "owner": self.owner,
            "incarnation": self.incarnation,
            "job": self.job,
            "token": self.token,
        }

    def follow(self, exited: bool, others: Iterable[tuple[int, Path]]) -> None:
        """Read what it logged since the last call (and, for a partition waiting for
        its takeover, what the couriers on other hosts did); ``exited`` says its
        process has ended, so its log is complete."""
        for line in self.tail.new_lines():
            kind, job = line.get("event"), line.get("id")
            if kind == "claimed" and isinstance(job, str):
                self._claimed[job] = int(line.get("token", 0))
            elif kind == "frozen" and self.job is None and isinstance(job, str):
                self.job, self.token = job, self._claimed.get(job, 0)
            elif kind == "disconnect" and self.job is not None:
                self.lost_link = True
            elif kind == "result" and self.job is not None and job == self.job:
                self.finished = True
        if self.kind == PARTITION and self.frozen_at is not None and not self.taken_over:
            self.taken_over = self._claimed_elsewhere(others)
        self.exited = exited

    def _claimed_elsewhere(self, others: Iterable[tuple[int, Path]]) -> bool:
        found = False
        for host, path in others:
            if host == self.host:
                continue
            tail = self._others.setdefault(path, EventTail(path))
            for line in tail.new_lines():
                if (
                    line.get("event") in ("claimed", "result")
                    and line.get("id") == self.job
                    and int(line.get("token", 0)) > self.token
                ):
                    found = True
        return found

    def forget_job(self) -> None:
        """Drop the job it froze on (it was resumed at once, to be asked again)."""
        self.job, self.token, self.frozen_at, self.lost_link = None, 0, None, False
