"""The inbox's committer (``courier.inbox`` rule 4), on a real file with real threads.

Writes submitted while the committer runs return at once and come back to
``on_settled``, a group at a time, only after the transaction that holds them
committed: in arrival order, each judged after the ones before it, one that fails
alone failing alone, and all of them failing when the file stays locked.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from courier.delivery_request import RequestLine
from courier.inbox import Inbox, Submitted

REQUEST = RequestLine("POST", "/deliveries")
WAIT_S = 20.0


class Settled:
    """An ``on_settled`` that keeps each group, with what another connection saw of the
    file when it came (the effects already committed)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.groups: list[list[tuple[Any, Any]]] = []
        self.effects_seen: list[int] = []
        self.came = threading.Condition()

    def __call__(self, writes: list[Submitted]) -> None:
        con = sqlite3.connect(self.path)
        try:
            (effects,) = con.execute("SELECT count(*) FROM effects").fetchone()
        finally:
            con.close()
        group = []
        for write in writes:
            try:
                group.append((write.tag, write.outcome()))
            except Exception as error:
                group.append((write.tag, error))
        with self.came:
            self.groups.append(group)
            self.effects_seen.append(effects)
            self.came.notify_all()

    def wait_for(self, count: int) -> list[tuple[Any, Any]]:
        """Every write settled, once ``count`` of them have come."""
        with self.came:
            assert self.came.wait_for(
                lambda: sum(map(len, self.groups)) >= count, timeout=WAIT_S
            ), self.groups
            return [each for group in self.groups for each in group]


def held(path: Path) -> sqlite3.Connection:
    """Another connection holding the file's write lock."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    return holder


def test_submitted_writes_commit_together_in_order_and_come_back_after_the_commit(
    tmp_path: Path,
) -> None:
    path = tmp_path / "inbox.sqlite"
    inbox = Inbox(path)
    settled = Settled(path)
    inbox.start_committing(settled)
    try:
        holder = held(path)
        try:
            for n, (job_id, qty) in enumerate([("a", 1), ("b", 2), ("a", 1), ("a", 3)]):
                inbox.submit_delivery(job_id, qty, "c1", REQUEST, n)
            inbox.submit_request(REQUEST, 422, None, "c1", 4)
            deadline = time.monotonic() + WAIT_S
            while inbox.waiting_writes() < 5 and time.monotonic() < deadline:
                time.sleep(0.005)
            assert inbox.waiting_writes() == 5 and settled.groups == []
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        outcomes = settled.wait_for(5)
    finally:
        inbox.stop_committing()
        inbox.close()
    verdicts = ["applied", "applied", "duplicate", "conflict", None]
    assert outcomes == list(enumerate(verdicts))
    assert settled.effects_seen == [2], "handed back only once committed"
    assert (inbox.commits, inbox.writes) == (1, 5)
    assert inbox.summary()["requests"] == 5


def test_a_group_is_judged_against_the_inbox_and_the_deliveries_before_it(
    tmp_path: Path,
) -> None:
    """One group, as the receiver's group commit writes it together: ids the inbox
    already holds and ids new to it, each judged after the ones before it in the
    group, their request rows in arrival order with their statuses."""
    path = tmp_path / "inbox.sqlite"
    inbox = Inbox(path)
    assert inbox.deliver("a", 1, "c1", REQUEST) == "applied"  # committed before the group
    settled = Settled(path)
    inbox.start_committing(settled)
    given = [("a", 1), ("a", 2), ("b", 1), ("b", 1), ("b", 2), ("c", 5)]
    try:
        holder = held(path)
        try:
            for n, (job_id, qty) in enumerate(given):
                inbox.submit_delivery(job_id, qty, f"s{n}", REQUEST, n)
            inbox.submit_request(REQUEST, 422, None, "s6", 6)
            deadline = time.monotonic() + WAIT_S
            while inbox.waiting_writes() < 7 and time.monotonic() < deadline:
                time.sleep(0.005)
            assert inbox.waiting_writes() == 7
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        outcomes = settled.wait_for(7)
    finally:
        inbox.stop_committing()
        inbox.close()
    verdicts = ["duplicate", "conflict", "applied", "duplicate", "conflict", "applied", None]
    assert outcomes == list(enumerate(verdicts))
    assert (inbox.commits, inbox.writes) == (2, 8), "the first delivery's commit, then one group"
    assert inbox.effects() == [("a", 1), ("b", 1), ("c", 5)]
    rows = [(r["delivery_id"], r["sender"], r["status"]) for r in inbox.requests()]
    assert rows == [
        ("a", "c1", 200),
        ("a", "s0", 200),
        ("a", "s1", 409),
        ("b", "s2", 200),
        ("b", "s3", 200),
        ("b", "s4", 409),
        ("c", "s5", 200),
        (None, "s6", 422),
    ]
    assert inbox.summary()["inbox_rows"] == 3


def test_a_write_that_fails_alone_fails_alone(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite"
    inbox = Inbox(path)
    settled = Settled(path)
    inbox.start_committing(settled)

    def broken(con: sqlite3.Connection) -> None:
        con.execute("INSERT INTO effects (id, qty, at_ms) VALUES ('ghost', 1, 0)")
        raise ValueError("this write fails")

    try:
        holder = held(path)  # so that the three come in one group
        try:
            inbox.submit_delivery("a", 1, None, REQUEST, "first")
            inbox.submit(broken, "broken")
            inbox.submit_delivery("b", 1, None, REQUEST, "last")
            deadline = time.monotonic() + WAIT_S
            while inbox.waiting_writes() < 3 and time.monotonic() < deadline:
                time.sleep(0.005)
        finally:
            holder.execute("ROLLBACK")
            holder.close()
        outcomes = dict(settled.wait_for(3))
    finally:
        inbox.stop_committing()
        inbox.close()
    assert (outcomes["first"], outcomes["last"]) == ("applied", "applied")
    assert isinstance(outcomes["broken"], ValueError)
    assert inbox.effects() == [("a", 1), ("b", 1)], "the failed write's own change is gone"


def test_a_file_that_stays_locked_fails_every_waiting_write(tmp_path: Path) -> None:
    path = tmp_path / "inbox.sqlite"
    inbox = Inbox(path, busy_timeout_s=0.2)
    settled = Settled(path)
    inbox.start_committing(settled)
    holder = held(path)
    try:
        inbox.submit_delivery("a", 1, None, REQUEST, 0)
        inbox.submit_delivery("b", 1, None, REQUEST, 1)
        outcomes = settled.wait_for(2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        inbox.stop_committing()
        inbox.close()
    assert [tag for tag, _ in outcomes] == [0, 1]
    assert all(isinstance(error, sqlite3.OperationalError) for _, error in outcomes)
    assert inbox.summary()["effects"] == 0


def test_blocking_writes_go_through_the_committer_and_lead_again_after_it(
    tmp_path: Path,
) -> None:
    path = tmp_path / "inbox.sqlite"
    inbox = Inbox(path)
    inbox.start_committing(Settled(path))
    try:
        with pytest.raises(RuntimeError, match="commits already"):
            inbox.start_committing(Settled(path))
        verdicts = []
        threads = [
            threading.Thread(target=lambda: verdicts.append(inbox.deliver("x", 5, None, REQUEST)))
            for _ in range(6)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=WAIT_S)
    finally:
        inbox.stop_committing()
    assert sorted(verdicts) == ["applied"] + ["duplicate"] * 5
    with pytest.raises(RuntimeError, match="no committer"):
        inbox.submit_delivery("y", 1, None, REQUEST, 0)
    assert inbox.deliver("y", 1, None, REQUEST) == "applied"  # no committer: it leads
    inbox.close()
    assert inbox.summary()["effects"] == 2
