"""A tuning run's time budget (``tune.budget=30m``) and how it is split between rows.

The split, in the order the rows run (the references first, so every other row is compared with
the trials they got): each row gets an equal share of the time left, ``left / rows left``, so a
row that finishes early hands its unused time on. Within its share a row searches, then trains
its chosen setting's extra seeds: a new trial starts only while the share still holds it and
those seeds at the row's mean trial time so far; the seeds run while the share holds them (fewer
seeds when it does not, never none: seed 0 is the chosen trial's own run). Trial 0 (the row's
defaults) always runs (with ``tune.jobs`` > 1 trials run two at a time: the first two). A trial
is never cut: one that finishes past its row's share is kept and marked ``over budget`` in the
report, and so is a row whose share is spent before its seeds. The greedy ensemble and the
report come after the budget (seconds: they read scores).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass, field

_UNITS = {"s": 1, "m": 60, "h": 3600}
_BUDGET = re.compile(r"(\d+(?:\.\d+)?)([smh])")


def parse_budget(text) -> float | None:
    """Seconds of ``30m``, ``2h``, ``90s`` (``1h30m`` too); None for null / ``none``; any other
    value is refused, naming the accepted forms."""
    if text is None or str(text).strip().lower() in ("", "none", "null"):
        return None
    spec = str(text).strip().lower()
    parts = _BUDGET.findall(spec)
    if not parts or "".join(number + unit for number, unit in parts) != spec:
        raise ValueError(
            f"tune.budget={text!r} is not a duration: write a number with a unit, s, m or h "
            "(90s, 30m, 2h, 1h30m), or null for no time limit"
        )
    seconds = sum(float(number) * _UNITS[unit] for number, unit in parts)
    if seconds <= 0:
        raise ValueError(f"tune.budget={text!r} must be longer than 0 s")
    return seconds


@dataclass
class Budget:
    """The wall time a tuning run may take (``seconds``; None: unlimited), from ``start``."""

    seconds: float | None
    start: float = field(default_factory=time.perf_counter)

    def left(self) -> float:
        if self.seconds is None:
            return float("inf")
        return self.seconds - (time.perf_counter() - self.start)

    def share(self, rows_left: int) -> RowBudget:
        """The next row's share: an equal part of the time left."""
        return RowBudget(max(0.0, self.left()) / max(1, rows_left))


@dataclass
class RowBudget:
    """One row's share of the budget, from when it was handed out."""

    seconds: float
    start: float = field(default_factory=time.perf_counter)

    def left(self) -> float:
        return self.seconds - (time.perf_counter() - self.start)

    def holds(self, seconds: float) -> bool:
        """Whether ``seconds`` more work still ends within the share."""
        return seconds <= self.left()
