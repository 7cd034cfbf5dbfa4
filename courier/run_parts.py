"""What ``courier run`` hands ``courier.runner.run_courier`` besides the queue: its
attempt log, its rounds and the send its rounds call, made one way for the command and
for the benchmark that measures it (``bench.delivery``).

- One job a round (``batch`` 1): the runner's own rounds (``courier.runner.rounds_for``),
  and a send that writes each delivery's claimed row first
  (``AttemptLog.announcing``); each round's outcome rows go at once.
- Batches (``batch`` > 1): ``courier.batch_rounds.batch_rounds_for`` with the log's
  ``announcing_batches`` (a batch's claimed rows at once, before its deliveries), the
  send as given, and a log that holds a round's outcome rows back for the next batch's
  claimed rows (``courier.attempts``, rule 3).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from courier.attempts import AttemptLog
from courier.backend import Target
from courier.batch_rounds import BatchRounds, batch_rounds_for
from courier.delivery import Send

__all__ = ["RunParts", "run_parts"]


@dataclass
class RunParts:
    """The attempt log, the rounds (``None``: the runner makes its own, one job a
    round) and the send to give ``run_courier``; ``close`` them once it returned."""

    attempts: AttemptLog
    rounds: BatchRounds | None
    send: Send

    def close(self) -> None:
        """Close the rounds, if any, then the log (rows it still holds are dropped:
        the runner flushes them when it stops)."""
        try:
            if self.rounds is not None:
                self.rounds.close()
        finally:
            self.attempts.close()


def run_parts(
    target: Target,
    send: Send,
    owner: str,
    batch: int,
    in_flight: int,
    timeout_ms: int,
    log: Callable[[str], None],
) -> RunParts:
    """The parts of ``courier run --batch batch --in-flight in_flight`` on the queue at
    ``target`` for ``owner``, whose ``send`` times out after ``timeout_ms``; a claimed
    row that cannot be written costs ``log`` a line, never the delivery.

    Raises:
        ValueError: as ``courier.batch_rounds.BatchRounds`` (``batch`` > 1).
    """
    attempts = AttemptLog(target, outcomes_with_claims=batch > 1)
    if batch == 1:
        return RunParts(attempts, None, attempts.announcing(send, owner, log))
    announce = attempts.announcing_batches(owner, log)
    rounds = batch_rounds_for(target, batch, in_flight, timeout_ms, announce)
    return RunParts(attempts, rounds, send)
