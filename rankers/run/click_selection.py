"""How a click run chooses its epoch: ``ultr.select=labels`` (the monitor on the true validation
labels, the semi-synthetic protocol's assumption) or ``ultr.select=clicks`` (held-out click
sessions, no validation label read: simulated on the validation queries, or, from a click log,
the sessions of a share of its queries held out of training;
docs/clicks.md#choosing-a-model-without-labels). The options live in the group ``ultr``
(conf/ultr/selection/default.yaml) beside the estimator's.

Public API::

    click_selection(cfg) -> ClickSelection | None   # None: the epoch is chosen on labels
    ClickSelection.monitor, .validation() -> ClickValidation
    select_by_clicks(cfg, selection)                 # cfg.monitor becomes the click metric
    estimator_config(ultr) -> DictConfig             # ultr without the selection options
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from omegaconf import DictConfig, OmegaConf

from differank.rankers.checkpoints.reading import SELECTION_OPTIONS, estimator_node
from differank.rankers.metrics.clicks import ClickValidation

log = logging.getLogger(__name__)
SELECTIONS = ("labels", "clicks")
METRICS = ("ips_dcg", "loglik")
DEFAULT_MONITOR = "val/map"  # train.yaml's: replaced by the click metric under select=clicks


@dataclass(frozen=True)
class ClickSelection:
    """``ultr.select=clicks``'s settings (conf/ultr/selection/default.yaml)."""

    metric: str
    k: int
    sessions: int
    clip: float
    holdout: float  # a click log's share of queries held out (datamodules/clicks/held_out.py)
    holdout_sessions: int  # a Parquet log's cap on the held-out sessions kept in memory

    @property
    def monitor(self) -> str:
        """The validation metric the epoch is chosen by."""
        return "val/click_loglik" if self.metric == "loglik" else f"val/click_dcg@{self.k}"

    def validation(self) -> ClickValidation:
        return ClickValidation(self.k, self.clip)


def estimator_config(ultr: DictConfig) -> DictConfig:
    """The estimator's own config: group ``ultr`` without :data:`SELECTION_OPTIONS`."""
    node = OmegaConf.to_container(ultr, resolve=True)
    return OmegaConf.create(estimator_node(node))


def click_selection(cfg: DictConfig) -> ClickSelection | None:
    """The run's :class:`ClickSelection` under ``ultr.select=clicks``; None with ``labels``
    (or no ``ultr``). A value outside the choices, or a run without clicks, is a ValueError
    naming the option and its fix."""
    ultr = cfg.get("ultr")
    if ultr is None:
        return None
    select = ultr.get("select", "labels")
    if select not in SELECTIONS:
        raise ValueError(f"ultr.select must be one of {SELECTIONS}, got {select!r}")
    if select == "labels":
        return None
    metric = ultr.get("select_metric", "ips_dcg")
    if metric not in METRICS:
        raise ValueError(f"ultr.select_metric must be one of {METRICS}, got {metric!r}")
    clicks = cfg.get("clicks")
    if clicks is None or clicks.get("mode") not in ("online", "offline"):
        raise ValueError(
            "ultr.select=clicks chooses the epoch from held-out click sessions: it needs a click "
            "run, simulated online (clicks=pbm|cascade|dcm|ubm|trust|cbcm) or on a click log "
            "(clicks=log clicks.log=PATH)"
        )
    missing = [name for name in SELECTION_OPTIONS[1:] if ultr.get(name) is None]
    if missing:
        raise ValueError(f"ultr.select=clicks needs {', '.join(f'ultr.{m}' for m in missing)}")
    return ClickSelection(
        metric=metric,
        k=ultr.select_k,
        sessions=ultr.select_sessions,
        clip=ultr.select_clip,
        holdout=ultr.select_holdout,
        holdout_sessions=ultr.select_holdout_sessions,
    )


def select_by_clicks(cfg: DictConfig, selection: ClickSelection) -> None:
    """Make ``cfg.monitor`` (checkpointing, early stopping, the sweepers' value) the click
    metric: train.yaml's default is replaced, in the callbacks that monitor it too (their
    ``${monitor}`` is resolved by now); another label metric is refused, since choosing by it
    would read validation labels."""
    if cfg.monitor == selection.monitor:
        return
    if cfg.monitor != DEFAULT_MONITOR:
        raise ValueError(
            f"monitor={cfg.monitor} reads validation labels, and ultr.select=clicks reads none: "
            f"drop monitor= (it becomes {selection.monitor}) or use ultr.select=labels"
        )
    log.info("ultr.select=clicks: the epoch is chosen by %s", selection.monitor)
    for callback in (cfg.get("callbacks") or {}).values():
        if callback is not None and callback.get("monitor") == cfg.monitor:
            callback.monitor = selection.monitor
    cfg.monitor = selection.monitor
