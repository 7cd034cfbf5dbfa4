"""Which model operation, with which arguments, could have made a transaction.

A transaction's rows before and after say a lot about the call that made them, but
not everything: the model *chooses* what they leave open. For each kind of operation
a ``Draft`` reads the changed rows, one statement or one transaction at a time
(``add``), and keeps what they allow of the arguments; ``conclude`` picks values
that satisfy every rule, or says which rule no value satisfies. The model itself
then judges the step it proposes (``courier.conform.judge``): this module only does
the arithmetic of the guards, so that a group of statements can be grown one at a
time without firing the model each time.

What is **inferred** (any value the rules allow is taken):

- ``now``: pinned by ``available_at`` for an enqueue, a redrive and a finish other than
  a retry; for a retry, ``now = available_at - delay_ms`` for some ``delay_ms`` in
  0..60000; for a claim, a range: each quarantined job's guard (deadline passed, or
  budget spent before it), each leased job's (due or lease expired, before its
  deadline), ``lease_until = min(now + lease_ms, deadline)`` for one ``lease_ms`` in
  1..60000 shared by the whole call, and, in the ``strict`` claim order, every job the
  claim left alone (not one it had to quarantine, nor a lower-seq one it could have
  leased). The latest ``now`` in the range is taken.
- the claim's ``lease_ms`` (from ``lease_until``) and ``limit`` (the number leased), a
  finish's outcome (from the status and reason) and ``delay_ms``, an enqueue's
  ``ttl_ms`` and ``max_attempts``, a redrive's ``ttl_ms``; the owner is the leased
  rows' owner, a finish's ticket is the lease the row held (the only one ``finish``
  accepts), a redrive's note is the audit row's.

What is **checked** besides: one ``now`` for the whole call (a batch is the single
calls at one time), within the contract's range and, with a clock as time base, never
after the feed's own clock reading at the write (``bound``); new seqs above every seq
given before (on SQLite, the next ones: AUTOINCREMENT); one owner and one
``lease_ms`` per claim, its quarantine before its leases; a redrive's audit row first,
with the job's token.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from courier.conform.feed import COLUMNS, JOBS, REDRIVES, Row
from courier.conform.tables import (
    ALWAYS,
    ATTEMPTS,
    AVAILABLE_AT,
    DEADLINE,
    ID,
    LEASE_UNTIL,
    MAX_ATTEMPTS,
    OWNER,
    QTY,
    REASON,
    STATUS,
    TOKEN,
    Change,
    Tables,
)
from model.rules import MAX_BATCH, MAX_DURATION_MS, MAX_TIME_MS

__all__ = ["DRAFTS", "Draft", "Miss", "Rules", "Step", "feasible_latest"]

OUTCOME_OF = {
    ("done", None): "ok",
    ("dead", "permanent"): "permanent",
    ("dead", "exhausted"): "retry",
    ("dead", "deadline"): "retry",
    ("pending", "retry"): "retry",
}


class Miss(Exception):
    """No value of the arguments explains the changes: the message says which rule."""


@dataclass(frozen=True)
class Rules:
    """What the checker holds a queue to: its claim order (``strict`` on SQLite,
    ``relaxed`` on PostgreSQL), whether new seqs come densely (SQLite's
    AUTOINCREMENT), and the latest ``now`` the time base allows beyond the feed's clock
    (``skew_ms``; ``None``: the writers pass times of their own, only the range holds)."""

    claim_order: str = "strict"
    dense_seq: bool = True
    skew_ms: int | None = 0


@dataclass(frozen=True)
class Step:
    """A model operation with the arguments the checker chose; ``rows`` are the changed
    rows it is judged on (``Change``s), in order."""

    operation: str
    arguments: dict[str, Any]
    changes: tuple[Change, ...]
    now_range: tuple[int, int]
    unchanged: tuple[Row, ...] = ()  # strict claims: the live jobs it left alone, asked

    @property
    def now(self) -> int:
        return int(self.arguments["now_ms"])


def _int(value: object, what: str) -> int:
    if type(value) is not int:
        raise Miss(f"{what} is {value!r}, not an integer")
    return value


def _kept(change: Change, columns: tuple[int, ...], what: str) -> None:
    """Raise ``Miss`` if the change touched any of ``columns``, which ``what`` keeps."""
    before, after = change.before, change.after
    assert before is not None and after is not None
    for n in columns:
        if before[n] != after[n]:
            raise Miss(f"{what} keeps a job's {COLUMNS[JOBS][n]}, which changed")


_ROW_FIXED = (0, ID, QTY, MAX_ATTEMPTS)
QUARANTINE_KEEPS = (*_ROW_FIXED, ATTEMPTS, TOKEN, AVAILABLE_AT, DEADLINE)
LEASE_KEEPS = (*_ROW_FIXED, AVAILABLE_AT, DEADLINE)
FINISH_KEEPS = (*_ROW_FIXED, ATTEMPTS, TOKEN, DEADLINE)
REDRIVE_KEEPS = (*_ROW_FIXED, TOKEN)


def feasible_latest(lo: int, hi: int, holes: Iterable[tuple[int, int]]) -> int | None:
    """The latest integer in ``lo..hi`` outside every half-open interval ``[a, b)`` of
    ``holes``, or ``None``."""
    spans = sorted((a, b) for a, b in holes if a < b and b > lo and a <= hi)
    merged: list[tuple[int, int]] = []
    for a, b in spans:
        if merged and a <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], b))
        else:
            merged.append((a, b))
    candidate = hi
    for a, b in reversed(merged):
        if candidate >= b:
            break
        if candidate >= a:
            candidate = a - 1
    return candidate if candidate >= lo else None


class Draft:
    """One kind of operation being inferred over a growing group of changes.

    ``add`` takes the net changes of one more statement (or a whole transaction) with
    the feed's clock reading for them; it raises ``Miss`` when no operation of this
    kind can take them, whatever comes after (the draft is then dropped). ``conclude``
    returns the ``Step`` for the changes so far, or raises ``Miss``.
    """

    kind = ""

    def __init__(self, tables: Tables, rules: Rules) -> None:
        self.tables = tables
        self.rules = rules
        self.changes: list[Change] = []
        self.seqs: set[tuple[str, int]] = set()
        self.lo = 0
        self.hi = MAX_TIME_MS
        self.bound: int | None = None  # the feed's clock at the write (the earliest reading)

    def add(self, changes: list[Change], clock_ms: int) -> None:
        for change in changes:
            key = (change.table, change.seq)
            if key in self.seqs:
                raise Miss(f"{change.table} seq {change.seq} changed twice by one call")
            self.seqs.add(key)
        if self.rules.skew_ms is not None:
            self.bound = clock_ms if self.bound is None else min(self.bound, clock_ms)
            self.hi = min(self.hi, clock_ms + self.rules.skew_ms)
        self._take(changes)
        self.changes += changes
        if self.lo > self.hi:
            raise Miss(self._no_time())

    def _take(self, changes: list[Change]) -> None:
        raise NotImplementedError

    def conclude(self) -> Step:
        raise NotImplementedError

    def snapshot(self) -> Draft:
        """A copy of the draft as it is now, which later ``add``s leave alone."""
        twin = copy.copy(self)
        for name, value in vars(self).items():
            if isinstance(value, list | set | dict):
                setattr(twin, name, copy.copy(value))
        return twin

    def _at_least(self, value: int) -> None:
        self.lo = max(self.lo, value)

    def _at_most(self, value: int) -> None:
        self.hi = min(self.hi, value)

    def _no_time(self) -> str:
        why = f"no time fits every change of one {self.kind}: now would be in {self.lo}..{self.hi}"
        if self.bound is not None and self.lo > self.bound + (self.rules.skew_ms or 0):
            why += f", after the clock read at the write ({self.bound})"
        return why

    def _new_seq(self, table: str, seq: int, last: int | None) -> None:
        """A new row's seq: above every seq given before (SQLite: the very next one)."""
        top = self.tables.top.get(table, 0) if last is None else last
        dense = self.rules.dense_seq and (last is not None or self.tables.top_known[table])
        if seq <= top or (dense and seq != top + 1):
            expected = f"{top + 1}" if dense else f"above {top}"
            raise Miss(f"new {table} row has seq {seq}, the queue gives {expected}")


class EnqueueDraft(Draft):
    """``enqueue`` or ``enqueue_many``: new pending jobs, one ``now``, ``ttl_ms`` and budget."""

    kind = "enqueue"

    def __init__(self, tables: Tables, rules: Rules) -> None:
        super().__init__(tables, rules)
        self.args: tuple[int, int, int] | None = None  # now, ttl_ms, max_attempts
        self.last_seq: int | None = None
        self.ids: set[object] = set()

    def _take(self, changes: list[Change]) -> None:
        for change in changes:
            if change.table != JOBS or change.before is not None or change.after is None:
                raise Miss("an enqueue only inserts jobs")
            row = change.after
            now = _int(row[AVAILABLE_AT], "available_at")
            args = (
                now,
                _int(row[DEADLINE], "deadline") - now,
                _int(row[MAX_ATTEMPTS], "max_attempts"),
            )
            if self.args is not None and args != self.args:
                raise Miss("jobs enqueued at another time or with another ttl or budget")
            self.args = args
            if row[ID] in self.ids or self.tables.job_by_id(row[ID]) is not None:
                raise Miss(f"job {row[ID]!r} inserted although the queue holds that id")
            self.ids.add(row[ID])
            self._new_seq(JOBS, change.seq, self.last_seq)
            self.last_seq = change.seq
            self._at_least(now)
            self._at_most(now)
        if len(self.changes) + len(changes) > MAX_BATCH:
            raise Miss(f"more than {MAX_BATCH} jobs in one enqueue_many")

    def conclude(self) -> Step:
        if self.args is None:
            raise Miss("nothing enqueued")
        now, ttl_ms, max_attempts = self.args
        events = [{"id": c.after[ID], "qty": c.after[QTY]} for c in self.changes if c.after]
        single = len(events) == 1
        arguments: dict[str, Any] = {"event": events[0]} if single else {"events": events}
        arguments |= {"now_ms": now, "ttl_ms": ttl_ms, "max_attempts": max_attempts}
        return Step(
            "enqueue" if single else "enqueue_many", arguments, tuple(self.changes), (now, now)
        )


class RedriveDraft(Draft):
    """``redrive``: the audit row first, then the dead job pending again."""

    kind = "redrive"

    def __init__(self, tables: Tables, rules: Rules) -> None:
        super().__init__(tables, rules)
        self.audit: Row | None = None
        self.job: Change | None = None

    def _take(self, changes: list[Change]) -> None:
        for change in changes:
            if change.table == REDRIVES and change.before is None and change.after is not None:
                if self.audit is not None:
                    raise Miss("two audit rows in one redrive")
                self.audit = change.after
                self._new_seq(REDRIVES, change.seq, None)
                now = _int(self.audit[3], "the audit row's at_ms")
            elif change.table == JOBS and change.before is not None and change.after is not None:
                if self.audit is None:
                    raise Miss("a redrive writes its audit row first")
                if self.job is not None:
                    raise Miss("two jobs in one redrive")
                self.job = change
                if change.before[STATUS] != "dead":
                    raise Miss(
                        f"only a dead job can be redriven, this one was {change.before[STATUS]}"
                    )
                _kept(change, REDRIVE_KEEPS, "a redrive")
                now = _int(change.after[AVAILABLE_AT], "available_at")
            else:
                raise Miss("a redrive inserts one audit row and updates one job")
            self._at_least(now)
            self._at_most(now)

    def conclude(self) -> Step:
        if self.audit is None or self.job is None or self.job.after is None:
            raise Miss("a redrive writes an audit row and the job's update, together")
        before, after = self.job.before, self.job.after
        assert before is not None
        if self.audit[1] != before[ID] or self.audit[2] != before[TOKEN]:
            raise Miss("the audit row names another job or another token than the job redriven")
        now = int(after[AVAILABLE_AT])
        arguments = {
            "job_id": before[ID],
            "now_ms": now,
            "ttl_ms": _int(after[DEADLINE], "deadline") - now,
            "note": self.audit[4],
        }
        return Step("redrive", arguments, tuple(self.changes), (now, now))


class FinishDraft(Draft):
    """``finish`` or ``finish_many``: live leases settled at one ``now``."""

    kind = "finish"

    def __init__(self, tables: Tables, rules: Rules) -> None:
        super().__init__(tables, rules)
        self.items: list[tuple[Change, str]] = []

    def _take(self, changes: list[Change]) -> None:
        for change in changes:
            before, after = change.before, change.after
            if change.table != JOBS or before is None or after is None:
                raise Miss("a finish only updates jobs")
            if before[STATUS] != "leased":
                raise Miss(f"a finish settles a leased job, this one was {before[STATUS]}")
            _kept(change, FINISH_KEEPS, "a finish")
            outcome = OUTCOME_OF.get((after[STATUS], after[REASON]))
            if outcome is None:
                raise Miss(f"no outcome of a finish leaves a job {after[STATUS]}/{after[REASON]}")
            available_at = _int(after[AVAILABLE_AT], "available_at")
            if after[STATUS] == "pending":
                self._at_least(available_at - MAX_DURATION_MS)
                self._at_most(available_at)
            else:
                self._at_least(available_at)
                self._at_most(available_at)
            # The ticket is live: before its lease ends and before the deadline.
            self._at_most(_int(before[LEASE_UNTIL], "lease_until") - 1)
            self._at_most(_int(before[DEADLINE], "deadline") - 1)
            self.items.append((change, outcome))
        if len(self.items) > MAX_BATCH:
            raise Miss(f"more than {MAX_BATCH} results in one finish_many")

    def conclude(self) -> Step:
        if not self.items:
            raise Miss("nothing finished")
        now = self.hi
        results = []
        for change, outcome in self.items:
            before, after = change.before, change.after
            assert before is not None and after is not None
            if after[STATUS] == "pending":
                delay = int(after[AVAILABLE_AT]) - now
            elif after[REASON] == "deadline":
                delay = max(0, int(before[DEADLINE]) - now)  # the least that reaches it
            else:
                delay = 0
            ticket = {
                "id": before[ID],
                "qty": before[QTY],
                "owner": before[OWNER],
                "token": before[TOKEN],
                "attempt": before[ATTEMPTS],
                "lease_until": before[LEASE_UNTIL],
            }
            results.append({"ticket": ticket, "outcome": outcome, "delay_ms": delay})
        if len(results) == 1:
            only = results[0]
            arguments: dict[str, Any] = {
                "ticket": only["ticket"],
                "outcome": only["outcome"],
                "now_ms": now,
                "delay_ms": only["delay_ms"],
            }
            return Step("finish", arguments, tuple(self.changes), (self.lo, self.hi))
        arguments = {"results": results, "now_ms": now}
        return Step("finish_many", arguments, tuple(self.changes), (self.lo, self.hi))


class ClaimDraft(Draft):
    """``claim`` or ``claim_many``: the quarantine, then leases to one owner at one ``now``."""

    kind = "claim"

    def __init__(self, tables: Tables, rules: Rules) -> None:
        super().__init__(tables, rules)
        self.quarantined: list[Change] = []
        self.leased: list[Change] = []
        self.owner: object = None
        self.lease_end: int | None = None  # now + lease_ms, from an uncapped lease
        self.capped: int | None = None  # the latest deadline a lease was capped at

    def _take(self, changes: list[Change]) -> None:
        leased_before = bool(self.leased)
        for change in changes:
            before, after = change.before, change.after
            if change.table != JOBS or before is None or after is None:
                raise Miss("a claim only updates jobs")
            if before[STATUS] not in ("pending", "leased"):
                raise Miss(f"a claim takes pending or expired jobs, this one was {before[STATUS]}")
            _kept(change, QUARANTINE_KEEPS if after[STATUS] == "dead" else LEASE_KEEPS, "a claim")
            deadline = _int(before[DEADLINE], "deadline")
            if before[STATUS] == "leased":
                self._at_least(_int(before[LEASE_UNTIL], "lease_until"))
            if after[STATUS] == "dead":
                if leased_before:
                    raise Miss("a claim quarantines before it leases")
                self._quarantined(change, deadline)
            elif after[STATUS] == "leased":
                self._leased(change, deadline)
            else:
                raise Miss(f"a claim makes a job dead or leased, not {after[STATUS]}")
        if len(self.leased) > MAX_BATCH:
            raise Miss(f"more than {MAX_BATCH} jobs leased by one claim_many")

    def _quarantined(self, change: Change, deadline: int) -> None:
        before, after = change.before, change.after
        assert before is not None and after is not None
        if after[REASON] == "deadline":
            self._at_least(deadline)
        elif after[REASON] == "exhausted":
            self._at_most(deadline - 1)
        else:
            raise Miss(
                f"the quarantine's reasons are deadline and exhausted, not {after[REASON]!r}"
            )
        self.quarantined.append(change)

    def _leased(self, change: Change, deadline: int) -> None:
        before, after = change.before, change.after
        assert before is not None and after is not None
        if self.owner is not None and after[OWNER] != self.owner:
            raise Miss("jobs leased to two owners in one claim")
        self.owner = after[OWNER]
        if before[STATUS] == "pending":
            self._at_least(_int(before[AVAILABLE_AT], "available_at"))
        self._at_most(deadline - 1)
        lease_until = _int(after[LEASE_UNTIL], "lease_until")
        if lease_until == deadline:
            self._at_least(deadline - MAX_DURATION_MS)
            self.capped = max(self.capped or deadline, deadline)
        else:
            if self.lease_end is not None and lease_until != self.lease_end:
                raise Miss("leases of two lengths in one claim (lease_until differs)")
            self.lease_end = lease_until
            self._at_least(lease_until - MAX_DURATION_MS)
            self._at_most(lease_until - 1)
        if self.lease_end is not None and self.capped is not None and self.capped > self.lease_end:
            raise Miss("a lease capped at a deadline later than the lease's own end")
        self.leased.append(change)

    def conclude(self) -> Step:
        if not self.changes:
            raise Miss("nothing claimed")
        lo, hi = self.lo, self.hi
        holes: list[tuple[int, int]] = []
        unchanged: list[Row] = []
        if self.rules.claim_order == "strict":
            hi, holes, unchanged = self._strict(hi)
        now = feasible_latest(lo, hi, holes)
        if now is None:
            if self.rules.claim_order == "strict" and unchanged:
                raise Miss(
                    f"no time fits the claim and every job it left alone (now in {lo}..{hi}, "
                    f"but a lower-seq job was claimable at each of them)"
                )
            raise Miss(self._no_time())
        if self.lease_end is not None:
            lease_ms = self.lease_end - now
        elif self.capped is not None:
            lease_ms = max(1, self.capped - now)
        else:
            lease_ms = 1000  # nothing leased: any lease would do
        arguments: dict[str, Any] = {
            "owner": self.owner if self.leased else "anyone",
            "now_ms": now,
            "lease_ms": lease_ms,
        }
        operation = "claim"
        if len(self.leased) > 1:
            operation = "claim_many"
            arguments["limit"] = len(self.leased)
        return Step(operation, arguments, tuple(self.changes), (lo, hi), tuple(unchanged))

    def _strict(self, hi: int) -> tuple[int, list[tuple[int, int]], list[Row]]:
        """The strict order's rules about the jobs the claim left alone: the latest
        ``now`` none of them was yet to be quarantined at, and the times at which a
        lower-seq one was claimable (holes)."""
        changed = {change.seq for change in self.changes}
        unchanged: list[Row] = []
        first = self.tables.first_quarantinable(changed)
        if first is not None:
            at, row = first
            if at == ALWAYS:
                raise Miss(
                    f"job {row[ID]!r} (seq {row[0]}) has spent its budget and the claim's "
                    "quarantine left it pending"
                )
            hi = min(hi, at - 1)
            unchanged.append(row)
        top = max((change.seq for change in self.leased), default=None)
        holes = []
        for row in self.tables.live_below(top):
            if row[0] in changed:
                continue
            unchanged.append(row)
            if row[ATTEMPTS] >= row[MAX_ATTEMPTS]:
                continue  # never claimable; the quarantine's rule above covers it
            start = row[AVAILABLE_AT] if row[STATUS] == "pending" else row[LEASE_UNTIL]
            holes.append((int(start), int(row[DEADLINE])))
        return hi, holes, unchanged


DRAFTS: tuple[Callable[[Tables, Rules], Draft], ...] = (
    EnqueueDraft,
    ClaimDraft,
    FinishDraft,
    RedriveDraft,
)
"""Every kind of operation, in the order a tie is settled (a change two kinds explain)."""
