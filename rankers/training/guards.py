"""Callbacks that keep a run from silently selecting a meaningless checkpoint.

:class:`ValidationSignalCheck` warns, before the first training step, when the validation split
cannot tell epochs apart (no relevant document, or no query with two distinct labels): the
monitored metric is then the same at every epoch, so the best checkpoint stays at the first
validated epoch and early stopping ends the run after ``patience`` epochs.

:class:`FiniteGuard` stops the run at the first non-finite training loss, or at a validation
that would score with non-finite weights, raising :class:`NonFiniteRunError` with the epoch,
step, learning rate and a hint. It stops before anything is saved, so the checkpoints already
written (each from a validation of finite weights) are kept as they are.

Both are in ``conf/callbacks/default.yaml``; the rules are in ``docs/data.md``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytorch_lightning as pl
import torch

log = logging.getLogger(__name__)


class ValidationSignalCheck(pl.Callback):
    """Warn when no ranking of the validation split scores better than another.

    Reads the labels and query grouping of ``trainer.datamodule.split_data("val")`` (a data
    module without ``split_data`` is not checked). Relevance is ``label > 0``, as in the
    metrics (:mod:`differank.rankers.metrics.letor`).
    """

    def __init__(self, monitor: str = "val/map") -> None:
        self.monitor = monitor

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        split_data = getattr(trainer.datamodule, "split_data", None)
        if split_data is None or not trainer.is_global_zero:
            return
        message = validation_signal_problem(split_data("val"), self.monitor)
        if message is not None:
            log.warning(message)


def validation_signal_problem(split, monitor: str) -> str | None:
    """What the monitor will do on a split (``labels`` [N], ``query_rows``) whose rankings
    all score alike; ``None`` when some ranking scores better than another."""
    labels = torch.as_tensor(split.labels)
    files = ", ".join(str(path) for path in getattr(split, "files", [])) or "the validation split"
    consequence = (
        f"so the best checkpoint stays at epoch 0 (the first validation; a later epoch must "
        f"score higher to replace it) and early stopping on {monitor} ends the run after its "
        "patience. Validate on a split with graded labels (data.fold, or another vali file)"
    )
    if not bool((labels > 0).any()):
        return (
            f"the validation split ({files}) has no relevant document (every label is 0): "
            f"{monitor} is 0 at every epoch, whatever the model, {consequence}"
        )
    if not any(len(torch.unique(labels[torch.as_tensor(rows)])) > 1 for rows in split.query_rows):
        return (
            f"the validation split ({files}) has no preference pair (no query has two distinct "
            f"labels): every ranking scores the same, so {monitor} is the same at every epoch, "
            f"{consequence}"
        )
    return None


class NonFiniteRunError(RuntimeError):
    """A run stopped because its loss or weights stopped being finite."""


class FiniteGuard(pl.Callback):
    """Stop at the first non-finite training loss (checked before its backward pass, so the
    weights are not updated with it) or non-finite weight at the start of a validation."""

    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor
    ) -> None:
        finite = bool(torch.isfinite(loss.detach()).all())
        # Every process stops together (one stopping alone would leave the others waiting).
        if not trainer.strategy.reduce_boolean_decision(finite, all=True):
            value = float(loss.detach().float().sum())
            elsewhere = " here, not finite in another process," if finite else ""
            self._stop(trainer, f"the training loss is {value}{elsewhere}")

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        for name, parameter in pl_module.named_parameters():
            if not bool(torch.isfinite(parameter.detach()).all()):
                self._stop(trainer, f"weight {name} is not finite, so validation scores are not")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        loss = trainer.callback_metrics.get("train/loss")  # full-batch solvers: no backward
        if loss is not None and not math.isfinite(float(loss)):
            self._stop(trainer, f"the epoch's training loss is {float(loss)}")

    @staticmethod
    def _stop(trainer: pl.Trainer, what: str) -> None:
        rates = [group["lr"] for opt in trainer.optimizers for group in opt.param_groups]
        rate = f"{rates[0]:g}" if rates else "none"
        hint = (
            f"lower model.optimizer.lr (now {rate}), e.g. by 10x, "
            if rates and rates[0] > 0
            else ""
        )
        saver = trainer.checkpoint_callback
        paths = {getattr(saver, "last_model_path", ""), getattr(saver, "best_model_path", "")}
        kept = [path for path in paths if path and Path(path).is_file()]
        checkpoints = (
            f"the checkpoints saved so far are kept unchanged: {', '.join(sorted(kept))}"
            if kept
            else "no checkpoint had been saved yet (no validation had finished)"
        )
        raise NonFiniteRunError(
            f"{what} at epoch {trainer.current_epoch}, step {trainer.global_step} (learning "
            f"rate {rate}): the run is stopped. {hint}or check the features "
            f"(data.nan_policy, data.normalization) and the loss. {checkpoints}"
        )
