"""The verdict on one run: the model explains the history, and nothing else went wrong.

``judge(run, store)`` asks the checker for an order of the run's calls that the model
explains and that ends in the rows found after the run (``tests.parallel.checker``,
``tests.parallel.spec``), and checks two promises no order can show, because they are
about how the calls behaved rather than what they returned:

- ``send_outside_transactions``: ``run_once`` sends with no transaction open (the
  contract: "never hold a DB transaction while waiting for the outside answer");
- ``locks_wait_their_turn`` (SQLite): a call refused the write lock only after waiting
  out the busy timeout. A refusal much sooner is a deadlock that SQLite broke at once:
  a transaction that read before it wrote (a ``BEGIN`` that is not ``IMMEDIATE``) asked
  for the write lock while another writer waited for its read lock to go;
- ``claims_never_wait`` (PostgreSQL): no claim waited for a row lock another call
  held (claims run with a short lock timeout, ``PostgresStore.watching_waits``):
  claimers on many hosts must not queue up behind one another.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from tests.parallel.checker import Operation, Verdict, check
from tests.parallel.history import Record, Run, not_granted, operations
from tests.parallel.spec import QueueSpec, State
from tests.stores import Store

DEFAULT_BUDGET = 100_000
# A refusal sooner than this share of the busy timeout did not wait its turn.
PATIENCE = 0.5


@dataclass
class Judgement:
    """A run, the checker's verdict on it and the promises it broke."""

    run: Run
    verdict: Verdict[State]
    ops: list[Operation]
    problems: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.verdict.outcome == "illegal" or bool(self.problems)

    @property
    def unknown(self) -> bool:
        return self.verdict.outcome == "unknown" and not self.problems


def judge(run: Run, store: Store, budget: int = DEFAULT_BUDGET) -> Judgement:
    """Check one run (see the module docstring)."""
    ops = operations(run.records, store.lock_not_granted)
    spec = QueueSpec(run.rows, store.claim_order, ops)
    verdict = check(ops, spec, budget)
    problems = send_outside_transactions(run.records)
    if store.lock_wait_s:
        problems += locks_wait_their_turn(run.records, store)
    else:
        problems += claims_never_wait(run.records, store)
    return Judgement(run, verdict, ops, problems)


def send_outside_transactions(records: list[Record]) -> list[str]:
    return [
        f"{record.label} run_once: send was called with a transaction open on the connection"
        for record in records
        if record.send is not None and record.send.in_transaction
    ]


def locks_wait_their_turn(records: list[Record], store: Store) -> list[str]:
    problems = []
    for record in records:
        if record.returned is None or not not_granted(record, store.lock_not_granted):
            continue
        started = record.send.left if record.send and record.send.left else record.invoked
        waited_s = (record.returned - started) / 1e9
        if store.lock_wait_s is not None and waited_s < PATIENCE * store.lock_wait_s:
            problems.append(
                f"{record.label} {record.verb}: the write lock was refused after"
                f" {waited_s * 1000:.1f} ms, without waiting out the"
                f" {store.lock_wait_s:g} s busy timeout (a deadlock: a transaction"
                " that read before it wrote)"
            )
    return problems


def claims_never_wait(records: list[Record], store: Store) -> list[str]:
    return [
        f"{record.label} {record.verb}: waited for a row lock another call held, past the"
        " lock timeout (a claim must pass over locked rows, FOR UPDATE SKIP LOCKED)"
        for record in records
        if record.verb in ("claim", "claim_many") and not_granted(record, store.lock_not_granted)
    ]
