"""The callbacks that make a run readable on a console: :class:`ProgressBar` and
:class:`RunConsole` (``conf/callbacks/default.yaml``). The terminal's log handler and what
``quiet=true`` hides there are :mod:`differank.rankers.training.console` (no Lightning)."""

from __future__ import annotations

import importlib
import logging
import math
import time
import warnings
from typing import Any

import pytorch_lightning as pl

log = logging.getLogger(__name__)
# The terminal's logging pieces moved to the Lightning-free console module; importable from here
# for one release.
_MOVED_TO_CONSOLE = (
    *("PROGRESS_LOGGERS", "WIDE_COLUMNS", "is_progress", "hide_progress", "console_handler"),
)


def __getattr__(name: str) -> Any:
    """``differank.rankers.training.callbacks.console_handler`` and the other moved names."""
    if name in _MOVED_TO_CONSOLE:
        warnings.warn(
            f"differank.rankers.training.callbacks.{name} moved to "
            f"differank.rankers.training.console.{name}; the old name goes in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(importlib.import_module("differank.rankers.training.console"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class ProgressBar(pl.callbacks.RichProgressBar):
    """Lightning's Rich progress bar showing the metrics logged with ``prog_bar=True``
    (``train/loss``, ``val/map``) and nothing else (no logger version ``v_num``).

    The training bar is redrawn at most every ``min_interval`` seconds and at the epoch's last
    batch: Lightning's redraws it, with its metrics, after every batch, which cost 0.27 ms a
    step on the 2-core CPU, a seventh of a linear model's step on 1/8 MSLR
    (``benchmarks/results/epoch_overhead.md``); the screen refreshes only a few times a second.

    Args:
        min_interval: seconds between two redraws of the training bar (0: every batch).
        **options: :class:`~pytorch_lightning.callbacks.RichProgressBar`'s.
    """

    def __init__(self, min_interval: float = 0.1, **options: Any) -> None:
        if not min_interval >= 0:
            raise ValueError(f"min_interval must be >= 0 seconds, got {min_interval}")
        super().__init__(**options)
        self.min_interval = float(min_interval)
        self._drawn_at = -math.inf

    def on_train_batch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule, *args) -> None:
        now = time.monotonic()
        batch_idx = args[-1]
        last = batch_idx + 1 >= trainer.num_training_batches
        if last or now - self._drawn_at >= self.min_interval:
            self._drawn_at = now
            super().on_train_batch_end(trainer, pl_module, *args)

    def get_metrics(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items


class RunConsole(pl.Callback):
    """The run's console lines, through :mod:`logging` (so Hydra also writes them to the run's
    ``train.log``): one line per validation epoch with the monitored metric and the best so far,
    a line when the checkpoint of the best epoch improves and one when early stopping fires.

    ModelCheckpoint and EarlyStopping act at the end of the training epoch, after every other
    callback, so an epoch's lines are written when the next epoch starts or training ends.

    Args:
        monitor: the validation metric checkpointing and early stopping watch (``val/map``).
        mode: ``"max"`` or ``"min"``, as for those callbacks.
    """

    def __init__(self, monitor: str = "val/map", mode: str = "max") -> None:
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        self.monitor, self.mode = monitor, mode
        self.best: float | None = None
        self.best_epoch: int | None = None
        self.saved_score: float | None = None
        self.pending: tuple[int, float] | None = None  # (epoch, value) validated, not yet shown

    def state_dict(self) -> dict[str, Any]:  # a resumed run keeps its best so far
        return {"best": self.best, "best_epoch": self.best_epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best, self.best_epoch = state_dict["best"], state_dict["best_epoch"]

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.saved_score = _best_score(trainer)

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        metrics = trainer.callback_metrics
        if not trainer.sanity_checking and self.monitor in metrics:
            self.pending = (trainer.current_epoch, float(metrics[self.monitor]))

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._report(trainer)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._report(trainer)

    def _report(self, trainer: pl.Trainer) -> None:
        if self.pending is None or not trainer.is_global_zero:
            return
        (epoch, value), self.pending = self.pending, None
        if self.best is None or (value > self.best if self.mode == "max" else value < self.best):
            self.best, self.best_epoch = value, epoch
        metrics = trainer.callback_metrics
        loss = f"train/loss {float(metrics['train/loss']):.4f}  " if "train/loss" in metrics else ""
        log.info(
            "epoch %d/%d  %s%s %.4f  best %.4f (epoch %d)",
            epoch,
            trainer.max_epochs - 1,
            loss,
            self.monitor,
            value,
            self.best,
            self.best_epoch,
        )
        score = _best_score(trainer)
        if score is not None and score != self.saved_score:
            self.saved_score = score
            log.info(
                "  checkpoint: %s improved to %.4f, saved %s",
                self.monitor,
                score,
                trainer.checkpoint_callback.best_model_path,
            )
        for stopper in trainer.early_stopping_callbacks:
            if trainer.should_stop and stopper.stopped_epoch == epoch:
                waited = stopper.wait_count >= stopper.patience
                reason = (
                    f"has not improved for {stopper.wait_count} validations "
                    f"(patience {stopper.patience})"
                    if waited
                    else f"= {value:.4f}"
                )
                log.info(
                    "  early stopping: %s %s; best %.4f at epoch %d",
                    stopper.monitor,
                    reason,
                    self.best,
                    self.best_epoch,
                )


def _best_score(trainer: pl.Trainer) -> float | None:
    checkpoint = trainer.checkpoint_callback
    score = checkpoint.best_model_score if checkpoint is not None else None
    return None if score is None else float(score)
