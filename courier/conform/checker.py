"""The replay: each committed transaction of the feed explained as one model step.

``Checker.check(block)`` takes the changes one writer committed (a ``Block``) and
finds, for each transaction in it, the model operation that explains it
(``courier.conform.inference`` proposes, ``courier.conform.judge`` decides), then
applies the changes to its tables whatever the verdict: what committed is the truth the
next transaction starts from. On PostgreSQL a block is one transaction. On SQLite it is
one connection's run of statements, and the checker also finds where its transactions
begin and end: it grows a transaction statement by statement while some kind of
operation can still take it, and ends it after the last statement at which one could
conclude (a claim's quarantine may take three statements before its lease, a redrive two).
Two calls of one connection that one batch call would also explain (two enqueues in the
same millisecond with the same ttl) are then counted as that batch call.

``Feed`` reads a queue's feed from the start (the rows when the feed began: its baseline
events) and then, on each ``poll``, the transactions committed since; it rebuilds each
change's row before from the row's previous event (``courier.conform.feed.Images``),
block by block in the order the checker replays them.
"""

from __future__ import annotations

import contextlib
import sqlite3
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from courier import backend
from courier.conform import postgres_feed, sqlite_feed
from courier.conform.feed import Block, Event, Images, NotInstalled
from courier.conform.inference import DRAFTS, Draft, Miss, Rules, Step
from courier.conform.judge import Difference, Nearest, judge, nearest, row_name
from courier.conform.tables import Change, Tables, net_changes
from courier.transient import is_busy

__all__ = ["Checker", "Feed", "Finding", "check_all", "rules_for"]

READ_LIMIT = 20_000
POLL_PATIENCE_S = 1.0  # a poll of a file gives up after this long busy (the next one reads)
_A = {"enqueue": "an enqueue", "claim": "a claim", "finish": "a finish", "redrive": "a redrive"}


@dataclass
class Finding:
    """One transaction checked: the step that explains it, or why none does."""

    label: str
    clock_ms: int
    changes: list[Change]
    statements: int
    writer: dict[str, Any]
    step: Step | None = None
    problems: list[str] = field(default_factory=list)
    differences: list[Difference] = field(default_factory=list)
    nearest: Nearest | None = None

    @property
    def explained(self) -> bool:
        return self.step is not None and not self.problems and not self.differences


def rules_for(target: backend.Target, simulated: bool, skew_ms: int) -> Rules:
    """The rules a queue is held to: its backend's claim order and seq numbers, and its
    time base (``simulated``: the writers pass times of their own)."""
    postgres = backend.is_conninfo(target)
    return Rules(
        claim_order="relaxed" if postgres else "strict",
        dense_seq=not postgres,
        skew_ms=None if simulated else skew_ms,
    )


class Checker:
    """Explains each transaction of the blocks it is given, in commit order."""

    def __init__(self, tables: Tables, rules: Rules) -> None:
        self.tables = tables
        self.rules = rules
        self.operations: Counter[str] = Counter()
        self.transactions = 0
        self.changes = 0
        self.unexplained: list[Finding] = []

    def check(self, block: Block) -> list[Finding]:
        """The findings of ``block``'s transactions, in order; the tables move past it."""
        findings: list[Finding] = []
        if block.exact:
            if len(block.statements) == 1:  # most transactions: one statement
                whole = _Statement.of(block.statements[0])
            else:
                changes, odd = net_changes(block.events)
                whole = _Statement(changes, odd, block.clock_ms)
            findings.append(self._one(block, [whole], len(block.statements)))
        else:
            statements = [_Statement.of(events) for events in block.statements]
            start = 0
            while start < len(statements):
                end, finding = self._grow(block, statements, start)
                findings.append(finding)
                start = end
        return findings

    def _grow(self, block: Block, statements: list[_Statement], start: int) -> tuple[int, Finding]:
        """The transaction starting at ``statements[start]``: its end and its finding.

        The drafts take statement after statement while any of them can, and the
        transaction is the longest run of statements some draft concludes on. Usually
        that is the run the drafts took whole, so that one is concluded first (after
        taking it again with fresh drafts, if a statement after it left the drafts
        half-changed); only if no draft concludes there are the shorter runs tried
        (``_shorter``). A conclusion may cost a look at every live job (a strict
        claim), so it is asked for once per transaction, not once per statement.
        """
        misses: dict[str, str] = {}
        end, drafts, clean = self._take(statements, start, len(statements), misses)
        if not clean:
            end, drafts, _ = self._take(statements, start, end, {})
        steps = self._conclusions(drafts, misses) if end > start else []
        if steps:
            return end, self._judged(block, statements[start:end], steps)
        return self._shorter(block, statements, start, misses)

    def _take(
        self, statements: list[_Statement], start: int, limit: int, misses: dict[str, str]
    ) -> tuple[int, list[Draft], bool]:
        """Fresh drafts given ``statements[start:limit]`` in turn, until none can take the
        next: where they stopped, the drafts that took every statement up to there, and
        whether those are as they were there (no statement after it half-changed them)."""
        drafts = [make(self.tables, self.rules) for make in DRAFTS]
        end = start
        while end < limit:
            statement = statements[end]
            if statement.odd:
                return end, drafts, True
            alive = []
            for draft in drafts:
                try:
                    draft.add(statement.changes, statement.clock_ms)
                    alive.append(draft)
                except Miss as miss:
                    misses.setdefault(draft.kind, f"not {_A[draft.kind]}: {miss}")
            if not alive:
                return end, drafts, False
            drafts, end = alive, end + 1
        return end, drafts, True

    def _shorter(
        self, block: Block, statements: list[_Statement], start: int, misses: dict[str, str]
    ) -> tuple[int, Finding]:
        """``_grow`` when no draft concludes on the longest run: a copy of the drafts is
        kept at each end, and the ends are tried from the longest down."""
        drafts = [make(self.tables, self.rules) for make in DRAFTS]
        ends: list[tuple[int, list[Draft]]] = []
        end = start
        while end < len(statements) and drafts and not statements[end].odd:
            statement = statements[end]
            alive = []
            for draft in drafts:
                try:
                    draft.add(statement.changes, statement.clock_ms)
                    alive.append(draft)
                except Miss:
                    pass
            if not alive:
                break
            drafts, end = alive, end + 1
            ends.append((end, [draft.snapshot() for draft in drafts]))
        for stop, concluding in reversed(ends):
            steps = self._conclusions(concluding, misses)
            if steps:
                return stop, self._judged(block, statements[start:stop], steps)
        stop = max(end, start + 1)
        return stop, self._unexplained(block, statements[start:stop], list(misses.values()))

    @staticmethod
    def _conclusions(drafts: list[Draft], misses: dict[str, str]) -> list[Step]:
        """The steps the drafts conclude, in the drafts' order (``DRAFTS``)."""
        steps = []
        for draft in drafts:
            try:
                steps.append(draft.conclude())
            except Miss as miss:
                misses[draft.kind] = f"not {_A[draft.kind]}: {miss}"
        return steps

    def _one(self, block: Block, statements: list[_Statement], count: int) -> Finding:
        """The finding of a block that is one transaction (PostgreSQL)."""
        (whole,) = statements
        misses: dict[str, str] = {}
        drafts: list[Draft] = []
        if not whole.odd:
            for make in DRAFTS:
                draft = make(self.tables, self.rules)
                try:
                    draft.add(whole.changes, whole.clock_ms)
                except Miss as miss:
                    misses[draft.kind] = f"not {_A[draft.kind]}: {miss}"
                    continue
                drafts.append(draft)
        steps = self._conclusions(drafts, misses)
        if steps:
            finding = self._judged(block, statements, steps)
        else:
            finding = self._unexplained(block, statements, list(misses.values()))
        finding.statements = count
        return finding

    def _finding(self, block: Block, statements: list[_Statement]) -> Finding:
        changes = [change for statement in statements for change in statement.changes]
        clock = min(statement.clock_ms for statement in statements)
        label = block.label
        if not block.exact and len(statements) < len(block.statements):
            label = _label(statements)
        return Finding(label, clock, changes, len(statements), dict(block.writer))

    def _judged(self, block: Block, statements: list[_Statement], steps: list[Step]) -> Finding:
        """The finding of the first of ``steps`` the model accepts, or of the first one."""
        finding = self._finding(block, statements)
        finding.problems += self._out_of_step(finding.changes)
        verdicts = [judge(step, self.rules.claim_order) for step in steps]
        verdict = next((v for v in verdicts if v.explained), verdicts[0])
        finding.step = verdict.step
        finding.problems += verdict.problems
        finding.differences += verdict.differences
        return self._record(finding)

    def _unexplained(
        self, block: Block, statements: list[_Statement], misses: list[str]
    ) -> Finding:
        finding = self._finding(block, statements)
        finding.problems += self._out_of_step(finding.changes)
        for statement in statements:
            finding.problems += statement.odd
        finding.problems += misses or ["no operation of the model makes these changes"]
        return self._record(finding)

    def _out_of_step(self, changes: list[Change]) -> list[str]:
        """Changes whose row before is not the row the replay holds. The feed's reader
        rebuilds each row before from the row's previous event, so the two agree unless
        the rebuild and the replay took the feed's transactions in different orders; a
        change the feed did not record shows as a row with no earlier image
        (``net_changes``), or as a step of the model that explains nothing."""
        found = []
        for change in changes:
            held = self.tables.row(change.table, change.seq)
            if held != change.before:
                name = row_name(change.table, change.before or change.after or (change.seq,))
                found.append(f"{name}: the row before is not the row the replay holds ({held})")
        return found

    def _record(self, finding: Finding) -> Finding:
        if not finding.explained:
            finding.nearest = nearest(finding.changes, finding.clock_ms)
            self.unexplained.append(finding)
        else:
            assert finding.step is not None
            operation = finding.step.operation
            if operation == "claim" and "limit" not in finding.step.arguments:
                leased = any(
                    c.after is not None and c.after[3] == "leased" for c in finding.changes
                )
                operation = "claim" if leased else "claim (quarantine only)"
            self.operations[operation] += 1
        self.transactions += 1
        self.changes += len(finding.changes)
        self.tables.apply(finding.changes)
        return finding


@dataclass
class _Statement:
    """One statement's net changes, what no replay follows in it, and its clock."""

    changes: list[Change]
    odd: list[str]
    clock_ms: int

    @classmethod
    def of(cls, events: tuple[Event, ...]) -> _Statement:
        changes, odd = net_changes(events)
        return cls(changes, odd, min(event.clock_ms for event in events))


def _label(statements: list[_Statement]) -> str:
    numbers = [c.first for s in statements for c in s.changes] or [0]
    first, last = min(numbers), max(numbers)
    return f"feed #{first}" if first == last else f"feed #{first}-#{last}"


class Feed:
    """A queue's feed, read from its start and then polled for what commits next.

    ``start()`` returns the ``Checker`` (its tables as they were when the feed began)
    and the blocks committed so far; ``poll()`` the blocks committed since. What has
    been read is kept here, not in the connection: after a connection is lost
    (``drop``), the next ``poll`` opens a new one and reads on from the same place.
    """

    def __init__(self, target: backend.Target, rules: Rules) -> None:
        self.target = target
        self.rules = rules
        self.postgres = backend.is_conninfo(target)
        self._con: Any = None
        self.position = 0
        self.cursor = postgres_feed.Cursor()  # PostgreSQL: what has been read
        self.images = Images()  # each row as its last event read left it
        self._connect()

    @property
    def con(self) -> Any:
        """The feed's connection, opened again if it was dropped."""
        return self._con if self._con is not None else self._connect()

    def _connect(self) -> Any:
        con = backend.connect_existing(self.target)
        if not self.postgres:
            con.execute(sqlite_feed.READER_BUSY_TIMEOUT)  # it waits itself
        self._con = con
        return con

    def drop(self) -> None:
        """Let go of a connection that was lost (a server restart, a cut): the next
        ``poll`` reads on with a new one."""
        con, self._con = self._con, None
        if con is not None:
            with contextlib.suppress(Exception):  # already broken: nothing to close cleanly
                con.close()

    def close(self) -> None:
        if self._con is not None:
            self._con.close()
            self._con = None

    def start(self) -> tuple[Checker, list[Block]]:
        """The checker, with the tables when the feed began, and every block since.

        Raises:
            NotInstalled: the queue has no feed (or only part of one, or an earlier
                version's).
        """
        if self.postgres:
            baseline, blocks = postgres_feed.snapshot(self.con, self.cursor)
        else:
            baseline, blocks = sqlite_feed.snapshot(self.con)
            if baseline:
                self.position = baseline[-1].number
        tables = Tables.before_feed(self.images.start(baseline))
        self._advance(blocks)
        return Checker(tables, self.rules), blocks

    def poll(self) -> list[Block]:
        """The blocks committed since the last read, in commit order."""
        if self.postgres:
            blocks = postgres_feed.read_blocks(self.con, self.cursor)
        else:
            blocks = self._sqlite_blocks()
        self._advance(blocks)
        return blocks

    def _sqlite_blocks(self) -> list[Block]:
        """What committed since the last read; nothing when writers kept the file's lock
        for ``POLL_PATIENCE_S``: the next poll reads it."""
        limit = READ_LIMIT

        def read(con: sqlite3.Connection) -> list[Event]:
            if not sqlite_feed.installed(con):
                raise NotInstalled("the change feed was removed from this queue")
            return sqlite_feed.read_events(con, self.position, limit)

        while True:
            try:
                events = sqlite_feed.read_transaction(self.con, read, POLL_PATIENCE_S)
            except sqlite3.OperationalError as error:
                if is_busy(error):
                    return []
                raise
            blocks = sqlite_feed.blocks(events)
            if len(events) < limit:
                return blocks
            if len(blocks) > 1:
                return blocks[:-1]  # the last one may go on past what was read
            limit *= 2

    def _advance(self, blocks: list[Block]) -> None:
        for block in blocks:
            self.images.rebuild(block.events)
        if self.postgres:
            self.position = self.cursor.top
        elif blocks:
            self.position = blocks[-1].position


def check_all(target: backend.Target, rules: Rules) -> tuple[Checker, int]:
    """Check the whole feed of the queue at ``target``; the checker and where the feed
    ended (``courier conform QUEUE`` without ``--follow``).

    Raises:
        NotInstalled: the queue has no feed.
    """
    feed = Feed(target, rules)
    try:
        checker, blocks = feed.start()
        for block in blocks:
            checker.check(block)
        return checker, feed.position
    finally:
        feed.close()
