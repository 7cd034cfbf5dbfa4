"""The stateful suite's coverage of the model, beside what the explorer found reachable.

While ``tests/stateful``'s tests run, ``model.job``'s recorder counts in ``REACHED``
every (source state, trigger, guard outcome) the model is made to try
(``tests/stateful/conftest.py``). The terminal summary (``tests/conftest.py``) prints
them beside the reachable set of ``docs/state-machine.json`` (the run of
``python -m model.explore`` on its default bounds) and names each reachable combination
the random search never reached: a gap in the fuzzing shows up by name. Under
pytest-xdist each worker counts its own; they send their counts to the controller
(``as_sent``, ``received``), which adds them up and prints the one report.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from model.explore import Combo, coverage_report, load_record

__all__ = ["REACHED", "as_sent", "coverage_lines", "received"]

REACHED: Counter[Combo] = Counter()
WORKER_OUTPUT_KEY = "lease_queue_model_coverage"


def as_sent(reached: Counter[Combo]) -> list[list[Any]]:
    """The counts as plain lists, for xdist's ``workeroutput``."""
    return [[*combo, count] for combo, count in sorted(reached.items())]


def received(sent: list[list[Any]]) -> Counter[Combo]:
    """The counts ``as_sent`` made, back as a Counter."""
    return Counter({(source, trigger, outcome): count for source, trigger, outcome, count in sent})


def coverage_lines(reached: Counter[Combo]) -> list[str]:
    """The lines of the summary's section: what was reached beside the explorer's record."""
    try:
        recorded = load_record()
    except FileNotFoundError as missing:
        return [f"no explorer record to compare with ({missing.filename})"]
    return coverage_report(reached, recorded)
