"""The crash drill: a courier that stalls right after an acknowledged delivery.

``StallAfterAcks`` wraps a courier's ``send`` (``courier run --stall-after-acks``):
after the N-th acknowledged delivery it writes a report, with the ticket it
captured before sending, and waits to be killed, so a supervisor can SIGKILL it
between the receiver's commit and the queue's ``finish`` deterministically, not
by timing luck. The report is written atomically (``write_json_atomically``): a
supervisor polling for it reads all of it or nothing.
"""

from __future__ import annotations

import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from courier.backend import Target
from courier.clock import clock_ms
from courier.delivery import Send
from courier.queueview import leased_ticket
from courier.stop_signal import pause

__all__ = ["StallAfterAcks", "write_json_atomically"]


def write_json_atomically(path: Path, payload: dict[str, Any]) -> None:
    """Write ``payload`` to ``path`` so that a reader sees all of it or nothing."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(payload), encoding="utf-8")
    os.replace(partial, path)


@dataclass
class StallAfterAcks:
    """Wrap a ``send``: after the N-th acknowledged delivery, report and stall.

    Before each send it captures this courier's ticket from the queue. After the
    ``after_acks``-th ``True`` it writes ``{"pid", "owner", "event", "ticket",
    "acked_at_ms"}`` to ``report_path`` (atomically) and sleeps up to
    ``stall_seconds``: the receiver has committed and the queue has not been told,
    which is the moment a supervisor kills it. If nobody does, it carries on as a
    late courier whose ``finish`` will find its lease gone (status ``stale``).
    """

    send: Send
    queue_path: Target
    owner: str
    after_acks: int
    report_path: Path
    stall_seconds: float
    acks: int = 0

    def __post_init__(self) -> None:
        if type(self.after_acks) is not int or self.after_acks < 1:
            raise ValueError(f"'after_acks' must be a positive int, got {self.after_acks!r}")
        if not 0 < self.stall_seconds <= 600:
            raise ValueError(f"'stall_seconds' must be in (0, 600], got {self.stall_seconds!r}")

    def __call__(self, event: dict[str, Any]) -> bool:
        ticket = leased_ticket(self.queue_path, event["id"], self.owner)
        acked = self.send(event)
        self.acks += 1
        if self.acks == self.after_acks:
            report = {
                "pid": os.getpid(),
                "owner": self.owner,
                "event": event,
                "ticket": ticket,
                "acked_at_ms": clock_ms(),
            }
            write_json_atomically(self.report_path, report)
            pause(self.stall_seconds, threading.Event())
        return acked
