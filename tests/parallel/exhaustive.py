"""Every interleaving of small programs, each run and explained.

    python -m tests.parallel.exhaustive                  # both passes below
    python -m tests.parallel.exhaustive --calls 2 --verbs claim,finish,enqueue,redrive,run_once
    python -m tests.parallel.exhaustive --plant enqueue-reads-first

The programs are every pair of branches of 0 to ``--calls`` calls (at least one call in
all) drawn from a small vocabulary, after one prefix that leaves a job whose lease has
run out, a pending one and a dead one:

    p0 = enqueue_many([a, b, x with a budget of 1], now_ms=1000, ttl_ms=1000)
    p1 = claim(owner='c0', now_ms=1000, lease_ms=5)       # a, its lease ends at 1005
    p2 = claim(owner='c0', now_ms=1000)                   # b ...
    p3 = finish(ticket=p2[0], outcome='permanent', now_ms=1000)   # ... and dead

and each branch (owner ``c1`` or ``c2``, every call at 1010) may ``claim``, ``finish``
the ticket of its last claim (or the prefix's stale one of ``a``), ``enqueue`` the new
job ``c``, ``redrive`` ``b``, or ``run_once`` with a send that answers at once. Two
branches that only swap their calls and owners are the same program: each pair is
run once. With no option the search makes two passes (``PASSES``): up to 3 calls of
the four transactional verbs, then up to 2 calls with ``run_once`` too (its send
between two transactions multiplies the interleavings: a pair of three ``run_once``
calls each has up to some two thousand).

For each program the search runs every interleaving at the scheduler's steps
(``Forced``: depth first, each run re-made from the empty queue; a step where a branch
would only be refused a lock and change nothing is not an interleaving of its own) and
judges each run as the suite does. The report says how many programs and
interleavings were run, that all of them were explained (or the first that was not,
saved as a case to replay), and how long it took. ``make fuzz MODE=exhaustive`` runs
it; ``tests/parallel/test_exhaustive.py`` runs a slice of it in ``make test``.
"""

from __future__ import annotations

import argparse
import itertools
import multiprocessing
import os
import sys
import time
from collections.abc import Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.parallel.case import Case, judged, report
from tests.parallel.judge import Judgement
from tests.parallel.planted import BY_NAME, plant
from tests.parallel.program import PREFIX, Call, Program, Send, TicketRef
from tests.parallel.runner import scratch_folder
from tests.parallel.schedule import Forced, Pruned, number_of
from tests.stores import Store
from tests.stores.sqlite import SQLiteStore

START_MS, LEASE_MS, AT_MS, TTL_MS = 1000, 5, 1010, 1000
VERBS = ("claim", "finish", "enqueue", "redrive", "run_once")
PASSES = ((3, VERBS[:4]), (2, VERBS))
OWNERS = {"b1": "c1", "b2": "c2"}

PREFIX_CALLS = (
    Call(
        "enqueue_many",
        (
            ("events", [{"id": "a", "qty": 1}, {"id": "b", "qty": 1}, {"id": "x", "qty": 1}]),
            ("now_ms", START_MS),
            ("ttl_ms", TTL_MS),
            ("max_attempts", None),
        ),
    ),
    Call("claim", (("owner", "c0"), ("now_ms", START_MS), ("lease_ms", LEASE_MS), ("fault", None))),
    Call("claim", (("owner", "c0"), ("now_ms", START_MS), ("lease_ms", None), ("fault", None))),
    Call(
        "finish",
        (
            ("ticket", TicketRef(PREFIX, 2)),
            ("outcome", "permanent"),
            ("now_ms", START_MS),
            ("delay_ms", 0),
            ("fault", None),
        ),
    ),
)


def call(lane: str, verb: str, last_claim: int | None) -> Call:
    """The vocabulary's call ``verb`` in ``lane``; ``last_claim``: the index of the
    lane's last claim before it, if any (what its finish finishes)."""
    owner = OWNERS[lane]
    arguments: tuple[tuple[str, Any], ...]
    if verb == "claim":
        return Call(
            verb, (("owner", owner), ("now_ms", AT_MS), ("lease_ms", None), ("fault", None))
        )
    if verb == "finish":
        ticket = TicketRef(PREFIX, 1) if last_claim is None else TicketRef(lane, last_claim)
        arguments = (("outcome", "ok"), ("now_ms", AT_MS), ("delay_ms", 0), ("fault", None))
        return Call(verb, (("ticket", ticket), *arguments))
    if verb == "enqueue":
        event = {"id": "c", "qty": 1}
        return Call(
            verb, (("event", event), ("now_ms", AT_MS), ("ttl_ms", TTL_MS), ("max_attempts", None))
        )
    if verb == "redrive":
        arguments = (("now_ms", AT_MS), ("ttl_ms", TTL_MS), ("note", "ops"), ("fault", None))
        return Call(verb, (("job_id", "b"), *arguments))
    assert verb == "run_once"
    return Call(
        verb,
        (
            ("owner", owner),
            ("readings", (AT_MS, AT_MS)),
            ("send", Send("ack")),
            ("jitter", 0.5),
            ("lease_ms", None),
        ),
    )


def branch(lane: str, verbs: Sequence[str]) -> tuple[Call, ...]:
    calls = []
    last_claim = None
    for index, verb in enumerate(verbs):
        calls.append(call(lane, verb, last_claim))
        if verb == "claim":
            last_claim = index
    return tuple(calls)


def programs(calls: int, verbs: Sequence[str] = VERBS) -> Iterator[Program]:
    """Every program of two branches of up to ``calls`` calls of ``verbs`` each, at least
    one call in all, each pair of branch shapes once (the branches are alike but for
    their owner)."""
    shapes = [shape for size in range(calls + 1) for shape in itertools.product(verbs, repeat=size)]
    for first, second in itertools.combinations_with_replacement(shapes, 2):
        if first or second:
            yield Program(PREFIX_CALLS, (branch("b1", first), branch("b2", second)))


@dataclass
class Search:
    """The interleavings of programs on ``store``, each run and judged."""

    store: Store
    plant: str | None = None
    explicit: bool = False  # every write an explicit transaction (PostgreSQL)
    programs: int = 0
    interleavings: int = 0
    pruned: int = 0
    unexplained: list[tuple[Program, str, Judgement]] = field(default_factory=list)

    def program(self, program: Program, stop_at_first: bool = True) -> int:
        """Run every interleaving of ``program``; how many there were."""
        self.programs += 1
        found = 0
        stack = [""]
        while stack:
            forced = stack.pop()
            policy = Forced(prefix=forced, explicit=self.explicit)
            try:
                judgement = judged(program, self.store, policy)
            except Pruned:
                self.pruned += 1
                continue
            found += 1
            if judgement.failed:
                self.unexplained.append((program, policy.text, judgement))
                if stop_at_first:
                    break
            for step in range(len(forced), len(policy.options)):
                taken = policy.steps[step]
                for lane in policy.options[step]:
                    if number_of(lane) != taken:
                        stack.append("".join(policy.steps[:step]) + number_of(lane))
        self.interleavings += found
        return found


def searched(job: tuple[int, int, int, tuple[str, ...], str | None]) -> dict[str, Any]:
    """One worker's share of a pass: every ``every``-th program from ``start``."""
    start, every, calls, verbs, planted = job
    started = time.monotonic()
    with scratch_folder() as folder:
        store: Store = SQLiteStore(folder)
        if planted:
            store = plant(BY_NAME[planted], Path(folder))
        search = Search(store, planted)
        for number, program in enumerate(programs(calls, verbs)):
            if number % every == start:
                search.program(program)
                if search.unexplained:
                    break
    found: dict[str, Any] = {
        "programs": search.programs,
        "interleavings": search.interleavings,
        "pruned": search.pruned,
        "seconds": time.monotonic() - started,
    }
    if search.unexplained:
        program, schedule, judgement = search.unexplained[0]
        case = Case(store.name, program, schedule, planted)
        found["report"] = report(judgement, case, case.save(), None)
    return found


def run_pass(calls: int, verbs: Sequence[str], planted: str | None, workers: int) -> dict[str, Any]:
    """Every program of a pass, spread over ``workers`` processes; the totals."""
    jobs = [(start, workers, calls, tuple(verbs), planted) for start in range(workers)]
    started = time.monotonic()
    if workers == 1:
        shares = [searched(jobs[0])]
    else:
        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(workers, mp_context=context) as pool:
            shares = list(pool.map(searched, jobs))
    total: dict[str, Any] = {
        key: sum(share[key] for share in shares) for key in ("programs", "interleavings", "pruned")
    }
    total["seconds"] = time.monotonic() - started
    total["reports"] = [share["report"] for share in shares if "report" in share]
    return total


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.parallel.exhaustive", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--calls", type=int, help="calls per branch at most (else both passes)")
    parser.add_argument("--verbs", default=",".join(VERBS), help="the vocabulary, with --calls")
    plants = sorted(bug.name for bug in BY_NAME.values() if bug.store == "sqlite")
    parser.add_argument("--plant", choices=plants, help="search a planted copy of worker.py")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="processes")
    args = parser.parse_args(argv)
    verbs = tuple(args.verbs.split(","))
    unknown = set(verbs) - set(VERBS)
    if unknown:
        parser.error(f"unknown verbs {sorted(unknown)}: choose among {', '.join(VERBS)}")
    passes = PASSES if args.calls is None else ((args.calls, verbs),)
    unexplained = False
    for calls, pass_verbs in passes:
        total = run_pass(calls, pass_verbs, args.plant, max(1, args.workers))
        what = f"{total['programs']} programs of 2 branches of up to {calls} calls of"
        what += f" {', '.join(pass_verbs)} ({total['seconds']:.1f} s, {args.workers} processes)"
        if total["reports"]:
            print(total["reports"][0])
            print(f"\nNOT ALL EXPLAINED: {what}")
            unexplained = True
            continue
        print(f"all {total['interleavings']} interleavings explained: {what}", flush=True)
    return 1 if unexplained else 0


if __name__ == "__main__":
    sys.exit(main())
