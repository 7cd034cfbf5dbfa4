"""``bench.conform`` at quick sizes: every section is there and measures real work.

No duration or rate is asserted (the bench reports them); the test checks that each
figure counts calls that ran, that the feeds it wrote were checked whole with nothing
unexplained, and that ``courier conform --follow`` followed the couriers to the end.
"""

from __future__ import annotations

from tests.bench.quick import quick_record

PHASES = ("enqueue", "claim", "finish", "cycle")


def test_quick_run_measures_every_section() -> None:
    for record, stdout in quick_record("bench.conform", "--no-postgres"):
        cost = record["sqlite"]
        for shape in ("single", "batch"):
            for phase in PHASES:
                figure = cost["rounds"][0][shape][phase]
                assert figure["jobs"] > 0 and figure["ratio"] > 0, (shape, phase, figure)
            assert set(cost["ratio_with_over_without"][shape]) == set(PHASES)
            check = cost["checker"][shape]
            assert check["changes"] > 0 and check["unexplained"] == 0, check
        follow = record["follow"]
        assert follow["exit_status"] == 0, follow
        assert follow["transactions"] > 0 and follow["unexplained"] == 0, follow
        assert follow["couriers"]["deliveries"] > 0, follow
        assert "lag at most" in stdout
