"""A bounded model checker of the queue: every state ``QueueModel`` reaches within bounds.

What TLC does for a TLA+ specification and Stateright for a Rust model, for ``model/``::

    python -m model.explore                    # the default bounds (docs/state-machine.md)
    python -m model.explore --budgets 1,2      # larger bounds: every bound is an option
    python -m model.explore --trace NAME       # also print the shortest trace for NAME
    python -m model.explore --record PATH      # write the run's numbers as JSON

Theory of operation:

1. A *world* is what the lockstep machine's world holds between two steps: the
   queue's two tables, the tickets the couriers hold and the clock.
2. The search is breadth first from the empty queue at time 0. Every step of the
   lockstep's vocabulary, with every argument from ``Bounds``, is a successor:
   ``enqueue``, ``claim``, ``finish`` of each held ticket, ``finish_forged`` of each
   live one, ``redrive`` and ``advance_clock_to`` (the clock moves only onto a
   boundary among the rows, or one ms beside it, so time is finite without losing
   a boundary). Each hook point a call reaches is a successor too, failing there:
   before COMMIT the model must be left as it was, after COMMIT the write must
   stay (a point the call never reaches is the call without a fault). The
   composite operations are left to the lockstep: a batch is the single calls in
   one write (``QueueModel``'s rule 6) and ``run_once`` a claim and a finish at a
   second clock reading, so neither reaches a state the single calls do not.
3. Worlds are deduplicated by a fingerprint (``canonical``): the tables, the live
   tickets and every time relative to the clock, under a renaming of ids and
   owners chosen alike for worlds that differ only in names. Each merge is sound:
   see ``fingerprint`` (times), ``Bounds.symmetry`` (names) and point 4 (stale
   tickets). Each new state keeps the first world found for it, as TLC keeps
   states, and is expanded from that world; ``Bounds.depth`` bounds the search.
4. A ticket is held from its claim until the step after it goes stale, so every
   stale ticket is presented to ``finish`` once more, but it is not part of the
   fingerprint: a stale ticket stays stale (its lease is behind the clock for good,
   or its token below its job's, which never goes down), and each presentation is
   checked (``only_a_live_ticket_finishes``). ``Bounds.keep_stale`` holds every
   ticket for ever and fingerprints it, as the lockstep's bundle holds it.
5. Each edge is checked against every ``always`` property of steps and every
   ``sometimes`` goal not yet witnessed, each new state against every invariant
   of states (``model.properties``). Breadth first, the first edge that breaks or
   witnesses a property ends the shortest trace to it; a trace is printed as a
   runnable program of ``tests/stateful/lockstep.py``'s rules.
6. The rows are the model's whole state (``QueueModel.from_rows``): the model a
   world's steps share is built when a step first calls it, and again only after
   a step changed it.

The package, one noun per module: ``bounds`` (``Bounds``), ``vocabulary`` (the
lockstep's ``Step`` and its ``forged`` rule), ``world`` (``Snapshot``), ``state``
(``fingerprint``, the symmetries, ``canonical``), ``edge`` (the steps out of a
world and their ``Edge``), ``search`` (``explore``, ``Exploration``), ``trace``
(``Trace``, ``replay``), ``verdict`` (the verdicts, the report, the record),
``coverage`` (a random run's coverage beside the explorer's) and ``cli`` (the
command).
"""

from model.explore.bounds import BOUND_HELP, Bounds
from model.explore.cli import main
from model.explore.coverage import counting, coverage_report
from model.explore.edge import Combo, Edge, QueueFactory, steps, successors
from model.explore.search import Exploration, Finding, explore
from model.explore.state import State, Symmetry, canonical, fingerprint
from model.explore.trace import Trace, replay
from model.explore.verdict import (
    RECORD_PATH,
    describe_finding,
    failures,
    load_record,
    record,
    report,
    verdicts,
)
from model.explore.vocabulary import BOUNDARIES, TICKET_FIELDS, Held, Step, forged, step
from model.explore.world import EMPTY, AuditView, JobView, Snapshot

__all__ = [
    "BOUNDARIES",
    "BOUND_HELP",
    "EMPTY",
    "RECORD_PATH",
    "TICKET_FIELDS",
    "AuditView",
    "Bounds",
    "Combo",
    "Edge",
    "Exploration",
    "Finding",
    "Held",
    "JobView",
    "QueueFactory",
    "Snapshot",
    "State",
    "Step",
    "Symmetry",
    "Trace",
    "canonical",
    "counting",
    "coverage_report",
    "describe_finding",
    "explore",
    "failures",
    "fingerprint",
    "forged",
    "load_record",
    "main",
    "record",
    "replay",
    "report",
    "step",
    "steps",
    "successors",
    "verdicts",
]
