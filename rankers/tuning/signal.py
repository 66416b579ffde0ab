"""What a tune chooses by: the monitor every trial's epoch is chosen on, and so the value the
search compares settings and rows by (docs/tuning.md#tuning-from-clicks).

A tune chooses by validation MAP on the labels (``val/map``, train.yaml's monitor), or, under
``ultr.select=clicks``, by the click monitor of held-out click sessions (``val/click_dcg@10``,
``val/click_loglik``: rankers/run/click_selection.py), which reads no validation label. A
click-chosen tune refuses what only labels can choose: the LightGBM/XGBoost references (their
trees are fitted and stopped on validation MAP). Its greedy ensemble, chosen on validation MAP
too, is skipped (the report says so).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from omegaconf import DictConfig

from differank.rankers.run.click_selection import DEFAULT_MONITOR, click_selection
from differank.rankers.tuning.space import Row


@dataclass(frozen=True)
class Signal:
    """The monitor that chooses (its best value over a run's epochs is the run's value) and
    whether it is computed from held-out click sessions rather than validation labels."""

    monitor: str
    clicks: bool = False

    @property
    def label(self) -> str:
        """The report's column name: ``val MAP``, else the monitor's own."""
        return "val MAP" if self.monitor == DEFAULT_MONITOR else self.monitor

    @property
    def description(self) -> str:
        """The report's words for what chose: ``val/click_dcg@10 on held-out click sessions``."""
        if self.clicks:
            return f"{self.monitor} on held-out click sessions (no validation label read)"
        return f"{self.monitor} on the validation labels"

    def to_json(self) -> dict:
        return {"monitor": self.monitor, "clicks": self.clicks, "description": self.description}


LABELS = Signal(DEFAULT_MONITOR)  # validation MAP: every tune before click selection


def selection_signal(cfg: DictConfig) -> Signal:
    """The signal of the trials' composed config ``cfg``: the click monitor under
    ``ultr.select=clicks`` (its options checked by :func:`click_selection`), else ``val/map``.
    Another label monitor (``monitor=val/ndcg@10``) is refused: the references, the ensemble
    and the report choose by validation MAP."""
    selection = click_selection(cfg)
    if selection is not None:
        return Signal(selection.monitor, clicks=True)
    if cfg.monitor != DEFAULT_MONITOR:
        raise ValueError(
            f"differank tune chooses by {DEFAULT_MONITOR} on validation labels or, with "
            f"ultr.select=clicks, by held-out click sessions; monitor={cfg.monitor} is neither: "
            "drop monitor="
        )
    return LABELS


def refuse_label_rows(signal: Signal, rows: Sequence[Row]) -> None:
    """A click-chosen tune with a reference row is a ValueError naming ``tune.rows``: a
    reference is chosen on validation labels, which such a tune never reads."""
    references = [row.name for row in rows if row.peer]
    if signal.clicks and references:
        ours = ",".join(row.name for row in rows if not row.peer) or "listmle/linear"
        raise ValueError(
            f"tune.rows has {', '.join(references)}: a reference's trees are fitted and chosen "
            f"on validation labels, and a tune chosen by {signal.monitor} (ultr.select=clicks) "
            f"reads none; drop them (tune.rows=[{ours}]) or use ultr.select=labels"
        )
