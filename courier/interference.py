"""The receiver's one plug-in point: what a drill may do to its well-formed deliveries.

A receiver (``courier.receiver.Receiver``) runs without interference unless it is
given an ``Interference``; then, for each well-formed delivery (routed, its
sender and body valid):

1. ``before_apply(id, sender)`` is asked once, before the inbox is touched, for an
   ``Intervention`` in this delivery (``None``: none).
2. If the intervention's ``refusal()`` is a ``Problem``, that is the answer: the
   request is logged with its status and nothing else changes.
3. Otherwise the delivery is applied. After an ``applied`` or ``duplicate``
   verdict has committed, and before the answer is written, ``after_commit(verdict)``
   is called: the moment to act on a sender that is still waiting. The time it
   takes delays the answer; ``False`` closes the connection with no answer at all,
   as a crash after the commit would. A ``conflict`` gets its 409 without a call.

``before_apply`` and ``refusal`` run on the receiver's event loop, which serves every
connection: they must answer at once and never wait. ``after_commit`` runs on a
thread of its own for each delivery, many at once, so it must be thread-safe and
bounded in time (the answer waits for it; ``MAX_REPLY_DELAY_MS`` is the longest a
shipped one waits). ``ReplyDelay`` is the one that ships
(``courier serve --reply-delay-ms``); the soak's faults are ``chaos.faults``.
Nothing reaches an interference over HTTP.
"""

from __future__ import annotations

import time
from typing import Protocol

from courier.delivery_request import Problem
from courier.inbox import Verdict

__all__ = ["MAX_REPLY_DELAY_MS", "Interference", "Intervention", "ReplyDelay"]

MAX_REPLY_DELAY_MS = 10_000


class Intervention(Protocol):
    """What an ``Interference`` does to one delivery (rules 2 and 3)."""

    def refusal(self) -> Problem | None:
        """The answer to give instead of applying the delivery, or ``None`` to apply it."""
        ...

    def after_commit(self, verdict: Verdict) -> bool:
        """Called once the delivery committed, before its answer: ``True`` to answer it,
        ``False`` to close the connection without an answer."""
        ...


class Interference(Protocol):
    """A receiver's plug-in: asked once per well-formed delivery (rule 1)."""

    def before_apply(self, delivery_id: str, sender: str | None) -> Intervention | None:
        """The intervention in the delivery of ``delivery_id`` by ``sender``, if any."""
        ...


class ReplyDelay:
    """An interference that answers every committed delivery ``reply_delay_ms`` late.

    A courier whose timeout is shorter sees a timeout for work that was in fact
    done. Zero is no interference at all.
    """

    def __init__(self, reply_delay_ms: int) -> None:
        """Raises ``ValueError`` unless ``reply_delay_ms`` is an int in 0..MAX_REPLY_DELAY_MS."""
        if type(reply_delay_ms) is not int or not 0 <= reply_delay_ms <= MAX_REPLY_DELAY_MS:
            raise ValueError(
                f"'reply_delay_ms' must be an int in 0..{MAX_REPLY_DELAY_MS}, "
                f"got {reply_delay_ms!r}"
            )
        self.reply_delay_ms = reply_delay_ms

    def before_apply(self, delivery_id: str, sender: str | None) -> ReplyDelay | None:
        """Itself for every delivery, or ``None`` if there is no delay."""
        return self if self.reply_delay_ms else None

    def refusal(self) -> Problem | None:
        """Never refuses: ``None``."""
        return None

    def after_commit(self, verdict: Verdict) -> bool:
        """Sleep the delay; then answer (``True``)."""
        time.sleep(self.reply_delay_ms / 1000)
        return True
