"""Run the lockstep machine under the active hypothesis profile (``ci`` by default)."""

from tests.stateful.lockstep import QueueLockstep

TestQueueLockstep = QueueLockstep.TestCase
