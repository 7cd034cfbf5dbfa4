"""The queue's two tables as the checker replays them, with what a claim's check asks.

``Tables`` starts from the rows the queue had when the feed began (``before_feed``: the
rows of the feed's baseline events, which ``--install`` wrote) and applies each
transaction's changes as they were committed, whatever the checker thought of them: the
truth is what committed. A change's row before is the one the feed's reader rebuilt from
the row's previous event (``courier.conform.feed.Images``). Beside the rows it keeps two
indexes over the *live* jobs (``pending`` and ``leased``), the only ones a claim looks at:

- the live seqs in order, for "was a lower-seq job claimable?" (``live_below``);
- a heap of the moment each live job becomes quarantinable (``quarantine_at``), for
  "was any job left alone that the quarantine had to take?" (``first_quarantinable``).

Both answer in time that grows with the jobs asked about, not with the whole queue's
history of done and dead jobs.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Iterable
from dataclasses import dataclass

from courier.conform.feed import BASELINE, JOBS, REDRIVES, Event, Row

__all__ = ["ALWAYS", "LIVE", "Change", "Tables", "net_changes", "quarantine_at"]

LIVE = ("pending", "leased")
ALWAYS = -1  # quarantinable whatever the time: a pending job whose budget is spent
# Column positions in a jobs row (the contract's column order).
SEQ, ID, QTY, STATUS, ATTEMPTS, MAX_ATTEMPTS, TOKEN = 0, 1, 2, 3, 4, 5, 6
AVAILABLE_AT, DEADLINE, OWNER, LEASE_UNTIL, REASON = 7, 8, 9, 10, 11


@dataclass(frozen=True, slots=True)
class Change:
    """One row's net change in a transaction: the row before its first event and after
    its last (``None`` where it did not exist)."""

    table: str
    seq: int
    before: Row | None
    after: Row | None
    first: int  # the number of its first event, for the order of the changes


def net_changes(events: Iterable[Event]) -> tuple[list[Change], list[str]]:
    """The net change of each row ``events`` touched, in the order of their first events,
    and what in them no replay can follow: a truncation, a baseline event after the
    feed's start, and an update or deletion of a row the feed holds no earlier image of
    (the feed did not record a change of it: a trigger was dropped for a while, or the
    row's seq was changed in place)."""
    changes: dict[tuple[str, int], Change] = {}
    odd: list[str] = []
    for event in events:
        op = event.op
        if op == "T" or op == BASELINE:
            what = "truncated" if op == "T" else "given a baseline event again"
            odd.append(f"table {event.table} {what}")
            continue
        key = (event.table, event.seq)
        known = changes.get(key)
        if known is None:
            if event.before is None and op != "I":
                odd.append(
                    f"{event.table} seq {event.seq}: the feed holds no earlier image of "
                    "this row (a change of it was not recorded)"
                )
            changes[key] = Change(event.table, event.seq, event.before, event.after, event.number)
        else:
            changes[key] = Change(event.table, event.seq, known.before, event.after, known.first)
    if len(changes) < 2:  # most statements change one row
        return list(changes.values()), odd
    return sorted(changes.values(), key=lambda change: change.first), odd


def quarantine_at(row: Row) -> int:
    """The first ``now`` at which a claim's quarantine takes this live job (``ALWAYS``:
    whatever the time), from the model's guards: a pending job once its deadline has
    passed or at once if its budget is spent; a leased one once its lease has expired
    and either its deadline has passed or its budget is spent."""
    spent = row[ATTEMPTS] >= row[MAX_ATTEMPTS]
    if row[STATUS] == "pending":
        return ALWAYS if spent else int(row[DEADLINE])
    lease_until = int(row[LEASE_UNTIL])
    return lease_until if spent else max(lease_until, int(row[DEADLINE]))


def _is_live(row: Row | None) -> bool:
    return row is not None and row[STATUS] in LIVE and _well_typed(row)


def _well_typed(row: Row) -> bool:
    """Whether the columns a claim's check reads hold integers (a hand-made row may not)."""
    columns = (ATTEMPTS, MAX_ATTEMPTS, DEADLINE, AVAILABLE_AT)
    if any(type(row[n]) is not int for n in columns):
        return False
    return row[STATUS] != "leased" or type(row[LEASE_UNTIL]) is int


class Tables:
    """Both tables, replayed; ``top`` is the highest seq each table has given, as far as
    the replay knows: until a table's first new row, only that no seq above its rows'
    was given (``top_known`` is false: rows deleted before the feed began may have
    taken higher ones)."""

    def __init__(self, rows: dict[str, list[Row]], top: dict[str, int]) -> None:
        self.jobs: dict[int, Row] = {}
        self.ids: dict[str, int] = {}
        self.redrives: dict[int, Row] = {}
        self.top = {JOBS: 0, REDRIVES: 0}
        self.top_known = {JOBS: False, REDRIVES: False}
        self._live: list[int] = []
        self._heap: list[tuple[int, int]] = []
        for row in rows.get(JOBS, []):
            self._put_job(int(row[SEQ]), row)
        for row in rows.get(REDRIVES, []):
            self.redrives[int(row[0])] = row
        for table, seqs in ((JOBS, self.jobs), (REDRIVES, self.redrives)):
            self.top[table] = max([top.get(table, 0), *seqs])

    @classmethod
    def before_feed(cls, rows: dict[str, list[Row]]) -> Tables:
        """The tables as they were when the feed began: the rows of its baseline events
        (``courier.conform.feed.Images.start``)."""
        return cls(rows, {})

    # --- rows ------------------------------------------------------------------------

    def row(self, table: str, seq: int) -> Row | None:
        """The row ``seq`` of ``table`` now, or ``None``."""
        return (self.jobs if table == JOBS else self.redrives).get(seq)

    def job_by_id(self, job_id: object) -> Row | None:
        """The job whose id is ``job_id`` now, or ``None``."""
        seq = self.ids.get(job_id) if isinstance(job_id, str) else None
        return None if seq is None else self.jobs.get(seq)

    def apply(self, changes: Iterable[Change]) -> None:
        """Apply committed changes (each row as it was after)."""
        for change in changes:
            if change.table == JOBS:
                self._drop_job(change.seq)
                if change.after is not None:
                    self._put_job(change.seq, change.after)
            elif change.after is None:
                self.redrives.pop(change.seq, None)
            else:
                self.redrives[change.seq] = change.after
            if change.after is not None and change.before is None:
                self.top_known[change.table] = True
            self.top[change.table] = max(self.top.get(change.table, 0), change.seq)

    def _put_job(self, seq: int, row: Row) -> None:
        self.jobs[seq] = row
        if isinstance(row[ID], str):
            self.ids[row[ID]] = seq
        if _is_live(row):
            bisect.insort(self._live, seq)
            heapq.heappush(self._heap, (quarantine_at(row), seq))
            if len(self._heap) > 2 * len(self._live) + 1024:  # mostly stale entries: rebuild
                self._heap = [(quarantine_at(self.jobs[s]), s) for s in self._live]
                heapq.heapify(self._heap)

    def _drop_job(self, seq: int) -> None:
        row = self.jobs.pop(seq, None)
        if row is None:
            return
        if isinstance(row[ID], str) and self.ids.get(row[ID]) == seq:
            del self.ids[row[ID]]
        if _is_live(row):
            index = bisect.bisect_left(self._live, seq)
            if index < len(self._live) and self._live[index] == seq:
                del self._live[index]

    # --- what a claim's check asks ------------------------------------------------------

    def live_below(self, seq: int | None) -> list[Row]:
        """The live jobs with a seq below ``seq`` (every live job for ``None``), by seq."""
        end = len(self._live) if seq is None else bisect.bisect_left(self._live, seq)
        return [self.jobs[s] for s in self._live[:end]]

    def live_count(self) -> int:
        """How many jobs are live (pending or leased)."""
        return len(self._live)

    def first_quarantinable(self, leaving_out: set[int]) -> tuple[int, Row] | None:
        """The live job, other than those of ``leaving_out``, that the quarantine takes
        first as time goes on, with the moment it does (``quarantine_at``); ``None``
        if there is none."""
        kept: list[tuple[int, int]] = []
        found: tuple[int, Row] | None = None
        while self._heap:
            at, seq = self._heap[0]
            row = self.jobs.get(seq)
            if row is None or not _is_live(row) or quarantine_at(row) != at:
                heapq.heappop(self._heap)  # stale: the job changed since
                continue
            if seq in leaving_out:
                kept.append(heapq.heappop(self._heap))
                continue
            found = (at, row)
            break
        for entry in kept:
            heapq.heappush(self._heap, entry)
        return found
