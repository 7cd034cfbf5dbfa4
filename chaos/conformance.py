"""The soak's queue held to the model: every transaction it committed, one model step.

``chaos.store`` installs the change feed (``courier conform --install``) on the soak's
queue before the first job; once the run is over and checked, ``add_conformance``
replays the feed against ``model/`` (``courier.conform``), as ``courier conform`` does,
and adds to the report how many transactions it checked, by operation, and the ones no
step explains: each is a must-be-zero figure and a failure. The soak's other checks
read the files at the end and the couriers' logs; this one reads every change any
process committed in between (couriers, the intake, the operator's redrives), on the
queue's own clock (the host's for a file, the server's on PostgreSQL).
"""

from __future__ import annotations

from typing import Any

from courier import backend
from courier.conform.checker import check_all, rules_for
from courier.conform.report import summary_dict

__all__ = ["UNEXPLAINED", "add_conformance", "conformance"]

UNEXPLAINED = "transactions no model step explains"
SHOWN = 20  # unexplained transactions kept in the report, the first ones


def conformance(target: str) -> dict[str, Any]:
    """``courier conform``'s summary of the queue at ``target``, its feed read whole."""
    rules = rules_for(target, simulated=False, skew_ms=0)
    checker, position = check_all(target, rules)
    summary = summary_dict(checker, backend.describe(target), rules, position)
    summary["findings"] = summary["findings"][:SHOWN]
    return summary


def add_conformance(report: dict[str, Any], target: str) -> dict[str, Any]:
    """Add the conformance of the queue at ``target`` to a soak's ``report`` (and its
    failures); return the report."""
    summary = conformance(target)
    report["conformance"] = summary
    report["must_be_zero"][UNEXPLAINED] = summary["unexplained"]
    if summary["unexplained"]:
        first = summary["findings"][0]
        report["failures"].append(
            f"{UNEXPLAINED} = {summary['unexplained']} of {summary['transactions']} "
            f"(must be 0; the first: {first['transaction']}: {'; '.join(first['problems'][:2])})"
        )
        report["ok"] = False
    return report
