# ruff: noqa: E501
# (The tables below are read as tables: one transition per line, however wide.)
"""The job lifecycle as data: states, transitions in decision order, and their effects.

Everything else is derived from these tables: the ``transitions`` machine that
moves every ``Job`` (``model.job``), the queue operations that fire the triggers
(``model.queue``) and the diagram and tables of ``docs/state-machine.md``
(``model.diagram``). Guard and effect names are methods of ``model.job.Job``;
each method's docstring is the rule it checks or the field change it makes.

Rules of the tables:

1. A row is one transition: ``trigger`` from ``source`` to ``dest``, allowed
   only when every guard in ``conditions`` holds. There are no lambdas and no
   hidden guards: a row says everything about *when*.
2. ``EFFECTS`` says *what changes*, per trigger, as callbacks run ``after`` the
   state change. Each field rule lives in exactly one callback.
3. Order is meaning. Rows are listed in the order the queue operations try
   them (``QUARANTINE_TRIGGERS``, ``CLAIM_TRIGGERS``, ``FINISH_TRIGGERS``), which
   is the order of the contract's prose. The guards of the triggers one step
   tries are also mutually exclusive, so no row wins merely by coming first.
"""

from __future__ import annotations

from typing import Final, NotRequired, TypedDict


class TransitionRow(TypedDict):
    """One row of ``TRANSITIONS``, in the shape ``transitions.Machine`` takes."""

    trigger: str
    source: str
    dest: str
    conditions: NotRequired[list[str]]


STATES: Final = ["pending", "leased", "done", "dead"]

# Every job is enqueued as pending (attempts 0, token 0, available now).
INITIAL: Final = "pending"

# fmt: off
TRANSITIONS: Final[list[TransitionRow]] = [
    # claim, step 1: quarantine every pending job and every expired lease that can no longer succeed
    {"trigger": "quarantine_deadline",  "source": "pending", "dest": "dead",    "conditions": ["deadline_passed"]},
    {"trigger": "quarantine_deadline",  "source": "leased",  "dest": "dead",    "conditions": ["lease_expired", "deadline_passed"]},
    {"trigger": "quarantine_exhausted", "source": "pending", "dest": "dead",    "conditions": ["before_deadline", "budget_spent"]},
    {"trigger": "quarantine_exhausted", "source": "leased",  "dest": "dead",    "conditions": ["lease_expired", "before_deadline", "budget_spent"]},
    # claim, step 2: lease the lowest-seq job that is claimable, with a new fencing token
    {"trigger": "claim",                "source": "pending", "dest": "leased",  "conditions": ["is_due", "before_deadline", "budget_left"]},
    {"trigger": "reclaim",              "source": "leased",  "dest": "leased",  "conditions": ["lease_expired", "before_deadline", "budget_left"]},
    # finish: a compare-and-set on the whole ticket; without a live ticket nothing fires (stale)
    {"trigger": "finish_ok",            "source": "leased",  "dest": "done",    "conditions": ["ticket_live"]},
    {"trigger": "finish_permanent",     "source": "leased",  "dest": "dead",    "conditions": ["ticket_live"]},
    {"trigger": "finish_exhausted",     "source": "leased",  "dest": "dead",    "conditions": ["ticket_live", "budget_spent"]},
    {"trigger": "finish_deadline",      "source": "leased",  "dest": "dead",    "conditions": ["ticket_live", "budget_left", "retry_past_deadline"]},
    {"trigger": "finish_retry",         "source": "leased",  "dest": "pending", "conditions": ["ticket_live", "budget_left", "retry_before_deadline"]},
    # redrive: an operator re-queues a quarantined job (the audit row is written first, by the queue)
    {"trigger": "redrive",              "source": "dead",    "dest": "pending"},
]

EFFECTS: Final[dict[str, list[str]]] = {
    "quarantine_deadline":  ["release_lease", "mark_deadline"],
    "quarantine_exhausted": ["release_lease", "mark_exhausted"],
    "claim":                ["take_lease", "clear_reason"],
    "reclaim":              ["take_lease", "clear_reason"],
    "finish_ok":            ["release_lease", "available_now", "clear_reason"],
    "finish_permanent":     ["release_lease", "available_now", "mark_permanent"],
    "finish_exhausted":     ["release_lease", "available_now", "mark_exhausted"],
    "finish_deadline":      ["release_lease", "available_now", "mark_deadline"],
    "finish_retry":         ["release_lease", "available_after_delay", "mark_retry"],
    "redrive":              ["release_lease", "renew_budget", "available_now", "clear_reason"],
}
# fmt: on

# Which triggers each queue operation tries, in decision order.
QUARANTINE_TRIGGERS: Final = ("quarantine_deadline", "quarantine_exhausted")
CLAIM_TRIGGERS: Final = ("claim", "reclaim")
FINISH_TRIGGERS: Final[dict[str, tuple[str, ...]]] = {
    "ok": ("finish_ok",),
    "permanent": ("finish_permanent",),
    "retry": ("finish_exhausted", "finish_deadline", "finish_retry"),
}
REDRIVE_TRIGGERS: Final = ("redrive",)

# Which jobs a claim's two steps look at, per backend: the one place where backends
# differ. ``QueueModel(claim_order=...)`` keeps it; the history checker of
# ``tests/parallel`` judges each backend's concurrent runs against its own row.
CLAIM_ORDERS: Final[dict[str, str]] = {
    "strict": "Every job, in seq order: no other call holds a row while a claim runs (SQLite: a claim holds the file's one write lock from its first read to its commit).",
    "relaxed": "Every job that no overlapping call holds: a claim passes over the rows other transactions have locked, in both steps, so it leases the lowest-seq claimable job among the rest, and returns nothing only if every claimable job was held (PostgreSQL: `FOR UPDATE SKIP LOCKED`). A row is held by a call that overlaps the claim in real time and locks it: a finish of its ticket, a redrive of its id, another claim that quarantines it or looks at it while choosing (the first `limit` claimable jobs of each of the three queues it searches: fresh, retried, expired leases). Alone, a relaxed claim is a strict one. Seq numbers come from a sequence when a row's insert runs, not when it commits, so the jobs of two overlapping enqueues may be numbered in the other order than they took effect in.",
}

OPERATION_STEPS: Final[list[tuple[str, tuple[str, ...]]]] = [
    ("claim, step 1: every job, in seq order", QUARANTINE_TRIGGERS),
    ("claim, step 2: the lowest-seq job that fires", CLAIM_TRIGGERS),
    ("finish, outcome 'ok'", FINISH_TRIGGERS["ok"]),
    ("finish, outcome 'permanent'", FINISH_TRIGGERS["permanent"]),
    ("finish, outcome 'retry'", FINISH_TRIGGERS["retry"]),
    ("redrive, after the audit row", REDRIVE_TRIGGERS),
]
"""Each queue operation's step and the triggers it tries there, first that fires wins."""
