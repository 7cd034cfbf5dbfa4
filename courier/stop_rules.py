"""When a courier stops by itself: its stop rules.

``courier.runner.run_courier`` checks them between rounds and reports the first
that held as its ``stop_reason``: ``max-runs``, ``max-seconds``, ``idle``,
``drained`` (or ``stopped``, by a signal, which is no rule of these). The CLI's
``courier run`` builds them from its "stop rules" options.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["StopRules"]


@dataclass(frozen=True)
class StopRules:
    """When a courier stops. ``max_runs`` and ``max_seconds`` bound it unless ``None``.

    ``None`` for both is a courier that runs until it is stopped (a service
    manager's SIGTERM). ``max_idle_ms``: stop once nothing was claimable for that
    long (``None``: never). ``until_drained``: stop as soon as nothing is claimable
    and no job is pending or leased any more.

    Raises ``ValueError`` for a value outside its range.
    """

    max_runs: int | None = 10_000
    max_seconds: float | None = 60.0
    max_idle_ms: int | None = None
    until_drained: bool = False

    def __post_init__(self) -> None:
        runs = self.max_runs
        if runs is not None and (type(runs) is not int or not 1 <= runs <= 10**7):
            raise ValueError(f"'max_runs' must be an int in 1..10**7, got {runs!r}")
        if self.max_seconds is not None and not 0 < self.max_seconds <= 86_400:
            raise ValueError(f"'max_seconds' must be in (0, 86400], got {self.max_seconds!r}")
        if self.max_idle_ms is not None and not 0 <= self.max_idle_ms <= 86_400_000:
            raise ValueError(f"'max_idle_ms' must be in 0..86400000, got {self.max_idle_ms!r}")
