"""An executable specification of lease-queue: the job lifecycle as a state machine.

``model`` is the document a new engineer reads to learn how a job moves through
the queue, and the oracle a stateful test compares ``worker.py`` against, step
by step. It keeps no SQLite and no clock: the whole queue is in memory and
time is always an argument.

- ``model.lifecycle``: the states, the transitions in decision order and their
  effects, as data (start here), and the claim order of each backend
  (``CLAIM_ORDERS``: ``strict`` on SQLite, ``relaxed`` on PostgreSQL);
- ``model.job``: ``Job``, one row of the jobs table, whose methods are the
  guards and effects the tables name; the ``transitions`` machine built from
  the tables;
- ``model.rules``: every argument rule, as data (the batches' lists and their
  items included);
- ``model.queue``: ``QueueModel``, with ``worker.py``'s operations, results and
  exceptions, and ``retry_delay``; the batch operations of ``docs/batches.md``
  (``enqueue_many``, ``claim_many``, ``finish_many``) are the single operations
  one after another in one write;
- ``model.explore``: a bounded model checker (``python -m model.explore``):
  every state ``QueueModel`` reaches within small bounds, breadth first, each
  checked against ``model.properties`` (``always`` invariants and properties of
  steps, ``sometimes`` goals), with the shortest trace to each finding printed
  as a program of the lockstep machine's rules;
- ``model.diagram``: renders ``docs/state-machine.md`` from all of the above
  (``python -m model.diagram``, ``--check`` to verify).
"""

from model.job import Call, Job, machine_config, new_machine
from model.lifecycle import (
    CLAIM_ORDERS,
    CLAIM_TRIGGERS,
    EFFECTS,
    FINISH_TRIGGERS,
    QUARANTINE_TRIGGERS,
    REDRIVE_TRIGGERS,
    STATES,
    TRANSITIONS,
)
from model.queue import QueueModel, Rows, retry_delay
from model.rules import ARGUMENT_RULES, MAX_BATCH, check_arguments
from worker import BadAck, Conflict, Permanent, Retryable

__all__ = [
    "ARGUMENT_RULES",
    "CLAIM_ORDERS",
    "CLAIM_TRIGGERS",
    "EFFECTS",
    "FINISH_TRIGGERS",
    "MAX_BATCH",
    "QUARANTINE_TRIGGERS",
    "REDRIVE_TRIGGERS",
    "STATES",
    "TRANSITIONS",
    "BadAck",
    "Call",
    "Conflict",
    "Job",
    "Permanent",
    "QueueModel",
    "Retryable",
    "Rows",
    "check_arguments",
    "machine_config",
    "new_machine",
    "retry_delay",
]
