"""The plant runner's own modes, on a few programs: what docs/testing.md's tables come
from must run (the tables themselves are measured by ``python -m tests.parallel.planted``)."""

from __future__ import annotations

from pathlib import Path

from tests.parallel.planted import BY_NAME, rates


def test_rates_runs_the_same_programs_in_both_modes(tmp_path: Path) -> None:
    result = rates(BY_NAME["claim-chooses-then-leases"], tmp_path, 3)
    assert result["plant"] == "claim-chooses-then-leases"
    assert result["programs"] == 3
    for mode in ("scheduled", "real"):
        count = result[mode]  # a name, so that isinstance narrows its type for mypy
        assert isinstance(count, int) and 0 <= count <= 3
