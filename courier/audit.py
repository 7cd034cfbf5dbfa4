"""The check of a queue file against a receiver's inbox file: was each job's effect applied once?

The queue knows which jobs are done; the receiver's inbox knows which effects were
applied. Neither alone can say that nothing was lost or applied twice, so this
module reads both files (never writing either) and holds them against each other.
It is the one check of the story, used by the demo, the chaos soak, the process
tests and ``python -m courier audit QUEUE INBOX``. Run it once the couriers have
stopped; the rules, one figure each:

1. **lost** = 0: every expected job is in the queue, and every job is ``done`` or
   ``dead`` (with ``in_flight_ok``, jobs still ``pending`` or ``leased`` are in
   flight, not lost).
2. **jobs nobody enqueued** = 0: with the expected jobs given, the queue holds no
   other job.
3. **effects applied twice** = 0: no id has two effect rows (the inbox has no
   ``UNIQUE`` on effects, on purpose, so that a deduplication bug shows here).
4. **done jobs without an inbox effect** = 0: ``done`` means the effect happened.
5. **effects not matching an enqueued job** = 0: each effect names a job of the
   queue, with that job's qty (and the expected qty, when given).
6. **token faults** = 0: a job's fencing token never went down, as far as the file
   shows: no audit row carries a token above its job's, and no job has fewer
   tokens than attempts (each attempt is a claim, each claim a new token).

A **dead job with an effect** is allowed and only counted: the send succeeded, then
the courier died before ``finish`` or finished too late, and the retries ran out.
That is the gap between an external effect and its completion record, which the
contract does not claim to close.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from courier.delivery_request import DELIVERIES_PATH
from courier.inbox import Inbox
from courier.queueview import read_queue

__all__ = ["Audit", "Files", "audit_files", "check", "read_files"]

UNFINISHED = ("pending", "leased")


@dataclass(frozen=True)
class Files:
    """What the check reads: the queue's two tables and the inbox's effects and requests.

    ``jobs`` and ``redrives`` are rows as dicts (``courier.queueview.read_queue``);
    ``effects`` are ``(id, qty)`` in the order applied; ``answers`` are the status
    of every delivery request the receiver logged, in arrival order.
    """

    jobs: list[dict[str, Any]]
    redrives: list[dict[str, Any]]
    effects: list[tuple[str, int]]
    answers: list[int]


def read_files(queue: str | os.PathLike[str], inbox: str | os.PathLike[str]) -> Files:
    """Read the queue file and the inbox file, neither of which is created or changed.

    Raises:
        FileNotFoundError: either file is missing.
        ValueError: a file is not a queue file or not an inbox file.
    """
    tables = read_queue(queue)
    received = Inbox(inbox, create=False)
    answers = [
        int(request["status"])
        for request in received.requests()
        if request["path"] == DELIVERIES_PATH
    ]
    return Files(tables["jobs"], tables["redrives"], received.effects(), answers)


@dataclass(frozen=True)
class Audit:
    """The figures of one check; ``must_be_zero`` and ``failures`` say what broke.

    Job ids are listed (sorted) where a rule is broken, so that a failure names them.
    """

    jobs: int
    done: int
    dead: dict[str, int]  # by reason
    unfinished: list[str]
    missing: list[str]
    strays: list[str]
    effects: int
    applied_twice: list[str]
    done_without_effect: list[str]
    effects_without_job: list[str]
    token_faults: list[str]
    dead_with_effect: list[str]
    deliveries: int
    answers: dict[str, int]  # delivery requests by answered status
    largest_token: int
    in_flight_ok: bool = False

    @property
    def lost(self) -> list[str]:
        """Expected jobs missing from the queue, and (unless in flight is fine) unfinished ones."""
        return sorted(self.missing + ([] if self.in_flight_ok else self.unfinished))

    def broken(self) -> dict[str, list[str]]:
        """Each rule of the module docstring and the jobs that break it (sorted ids)."""
        return {
            "lost": self.lost,
            "jobs nobody enqueued": self.strays,
            "effects applied twice": self.applied_twice,
            "done jobs without an inbox effect": self.done_without_effect,
            "effects not matching an enqueued job": self.effects_without_job,
            "token faults": self.token_faults,
        }

    def must_be_zero(self) -> dict[str, int]:
        """Each rule and how many jobs break it."""
        return {rule: len(ids) for rule, ids in self.broken().items()}

    def failures(self) -> list[str]:
        """One line per broken rule: ``'<rule> = <count> (must be 0): <first ids>'``."""
        return [
            f"{rule} = {len(ids)} (must be 0): {', '.join(ids[:10])}"
            + (" ..." if len(ids) > 10 else "")
            for rule, ids in self.broken().items()
            if ids
        ]

    @property
    def ok(self) -> bool:
        """True if every must-be-zero figure is zero."""
        return not any(self.must_be_zero().values())

    def as_dict(self) -> dict[str, Any]:
        """Every figure as JSON, with ``lost``, ``must_be_zero`` and ``ok``."""
        return {
            **asdict(self),
            "lost": self.lost,
            "must_be_zero": self.must_be_zero(),
            "ok": self.ok,
        }


def _token_faults(files: Files) -> list[str]:
    """Jobs whose token went down, as far as the file shows (rule 6)."""
    token = {job["id"]: int(job["token"]) for job in files.jobs}
    faults = {job["id"] for job in files.jobs if int(job["token"]) < int(job["attempts"])}
    faults |= {row["id"] for row in files.redrives if int(row["token"]) > token.get(row["id"], 0)}
    return sorted(faults)


def check(
    files: Files, expected: Mapping[str, int] | None = None, in_flight_ok: bool = False
) -> Audit:
    """Hold the queue against the inbox (and against ``expected``: id -> qty, if given)."""
    jobs = {job["id"]: job for job in files.jobs}
    effects = Counter(job_id for job_id, _ in files.effects)
    wanted = dict(expected) if expected is not None else {}

    def ids(status: tuple[str, ...], effect: bool | None = None) -> list[str]:
        """The jobs in ``status`` (with an effect, without one, or either)."""
        return sorted(
            job_id
            for job_id, job in jobs.items()
            if job["status"] in status and (effect is None or bool(effects[job_id]) == effect)
        )

    def matches(job_id: str, qty: int) -> bool:
        job = jobs.get(job_id)
        return job is not None and job["qty"] == qty and wanted.get(job_id, qty) == qty

    dead = Counter(str(job["reason"]) for job in files.jobs if job["status"] == "dead")
    return Audit(
        jobs=len(jobs),
        done=len(ids(("done",))),
        dead=dict(sorted(dead.items())),
        unfinished=ids(UNFINISHED),
        missing=sorted(job_id for job_id in wanted if job_id not in jobs),
        strays=sorted(job_id for job_id in jobs if expected is not None and job_id not in wanted),
        effects=len(files.effects),
        applied_twice=sorted(job_id for job_id, count in effects.items() if count > 1),
        done_without_effect=ids(("done",), effect=False),
        effects_without_job=sorted({i for i, qty in files.effects if not matches(i, qty)}),
        token_faults=_token_faults(files),
        dead_with_effect=ids(("dead",), effect=True),
        deliveries=len(files.answers),
        answers={str(code): n for code, n in sorted(Counter(files.answers).items())},
        largest_token=max((int(job["token"]) for job in files.jobs), default=0),
        in_flight_ok=in_flight_ok,
    )


def audit_files(
    queue: str | os.PathLike[str],
    inbox: str | os.PathLike[str],
    expected: Mapping[str, int] | None = None,
    in_flight_ok: bool = False,
) -> Audit:
    """``check(read_files(queue, inbox), expected, in_flight_ok)``: the whole audit."""
    return check(read_files(queue, inbox), expected, in_flight_ok)
