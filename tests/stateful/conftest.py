"""The stateful suite's coverage of the model, beside what the explorer found reachable.

While this package's tests run, ``model.job``'s recorder counts every (source state,
trigger, guard outcome) the model is made to try. The terminal summary then prints
them beside the reachable set of ``docs/state-machine.json`` (the run of
``python -m model.explore`` on its default bounds) and names each reachable
combination the random search never reached: a gap in the fuzzing shows up by name.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pytest

from model.explore import Combo, counting, coverage_report, load_record
from model.job import recording

REACHED: Counter[Combo] = Counter()


@pytest.fixture(scope="package", autouse=True)
def model_coverage() -> Iterator[Counter[Combo]]:
    """Count what the model tries while this package's tests run."""
    with recording(counting(REACHED)):
        yield REACHED


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not REACHED:
        return
    terminalreporter.section("model coverage of the stateful suite")
    try:
        recorded = load_record()
    except FileNotFoundError as missing:
        terminalreporter.write_line(f"no explorer record to compare with ({missing.filename})")
        return
    for line in coverage_report(REACHED, recorded):
        terminalreporter.write_line(line)
