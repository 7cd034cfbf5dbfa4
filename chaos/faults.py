"""Faults the soak injects into a receiver's deliveries, through its one plug-in point.

A receiver (``courier.receiver.Receiver``) takes an ``Interference``
(``courier.interference``); ``FaultInjector`` is the soak's. For each well-formed
delivery it asks a ``FaultPlan`` for a ``Fault``: refuse the delivery with a
given 4xx/5xx status without touching the inbox (``injected_fault``), or apply
it and then answer late, or drop the connection without any answer, as a crash
after the commit would. Its ``on_commit`` hook is called right after a
delivery's inbox transaction has committed and before the answer is written:
the moment to kill or pause the sender that is still waiting for it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from http import HTTPStatus

from courier.delivery_request import Problem
from courier.inbox import Verdict
from courier.interference import MAX_REPLY_DELAY_MS, Intervention

__all__ = ["NO_FAULT", "CommitHook", "Fault", "FaultInjector", "FaultPlan"]


def _is_error_status(status: object) -> bool:
    """True for an exact int that names a 4xx or 5xx ``HTTPStatus``."""
    if type(status) is not int or not 400 <= status <= 599:
        return False
    try:
        HTTPStatus(status)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class Fault:
    """A fault injected into one well-formed delivery.

    ``status``: answer this 4xx or 5xx status and change nothing (the request is
    logged). Otherwise the delivery is applied as usual, then the answer waits
    ``delay_ms`` (at most ``MAX_REPLY_DELAY_MS``), and with ``drop`` the connection
    is closed with no answer at all, as a crash after the commit would.

    Raises ``ValueError`` for a status that is not a known 4xx or 5xx, or a delay
    out of its range.
    """

    status: int | None = None
    delay_ms: int = 0
    drop: bool = False

    def __post_init__(self) -> None:
        if self.status is not None and not _is_error_status(self.status):
            raise ValueError(f"'status' must be a known 4xx or 5xx status, got {self.status!r}")
        if type(self.delay_ms) is not int or not 0 <= self.delay_ms <= MAX_REPLY_DELAY_MS:
            raise ValueError(
                f"'delay_ms' must be an int in 0..{MAX_REPLY_DELAY_MS}, got {self.delay_ms!r}"
            )


NO_FAULT = Fault()
FaultPlan = Callable[[str, str | None], Fault | None]
"""Asked once per well-formed delivery with ``(id, sender)``; ``None`` means no fault."""
CommitHook = Callable[[str, str | None, Verdict], None]
"""Called with ``(id, sender, verdict)`` after an applied or duplicate delivery committed."""


@dataclass(frozen=True)
class _Faulted:
    """One delivery's intervention: its fault, and the hook to call at its commit."""

    delivery_id: str
    sender: str | None
    fault: Fault
    on_commit: CommitHook | None

    def refusal(self) -> Problem | None:
        """The fault's status as the answer, or ``None`` if it has none."""
        if self.fault.status is None:
            return None
        refused = f"chaos: refused {self.delivery_id!r}"
        return Problem(HTTPStatus(self.fault.status), "injected_fault", refused)

    def after_commit(self, verdict: Verdict) -> bool:
        """Call the hook, wait the fault's delay; ``False`` if the answer is dropped."""
        if self.on_commit is not None:
            self.on_commit(self.delivery_id, self.sender, verdict)
        if self.fault.delay_ms:
            time.sleep(self.fault.delay_ms / 1000)
        return not self.fault.drop


class FaultInjector:
    """The soak's ``Interference``: ``faults`` picks each delivery's fault, ``on_commit``
    hears of each commit (both optional; without either it changes nothing).

    ``faults`` is called on the receiver's event loop and ``on_commit`` on a thread of
    its own per delivery, so both must be thread-safe and quick (a ``Fault``'s delay is
    the injector's to sleep, on that thread).
    """

    def __init__(
        self, faults: FaultPlan | None = None, on_commit: CommitHook | None = None
    ) -> None:
        self.faults = faults
        self.on_commit = on_commit

    def before_apply(self, delivery_id: str, sender: str | None) -> Intervention:
        """The delivery's fault (``NO_FAULT`` if the plan has none) and the hook."""
        fault = None if self.faults is None else self.faults(delivery_id, sender)
        return _Faulted(delivery_id, sender, NO_FAULT if fault is None else fault, self.on_commit)
