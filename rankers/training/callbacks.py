"""The callbacks that make a run readable on a console: :class:`ProgressBar` and
:class:`RunConsole` (``conf/callbacks/default.yaml``). The terminal's log handler, what
``quiet=true`` hides there and the third-party noise a run filters are
:mod:`differank.rankers.training.console` (no Lightning)."""

from __future__ import annotations

import importlib
import logging
import math
import time
import warnings
from collections.abc import Callable
from typing import Any

import pytorch_lightning as pl
from pytorch_lightning.callbacks import ModelCheckpoint

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
        monitor: the validation metric checkpointing and early stopping watch (``val/map``);
            None: no validation runs, and each line shows the training loss alone.
        mode: ``"max"`` or ``"min"``, as for those callbacks.
        write: where a line goes (``print`` for :class:`differank.Ranker`'s ``verbose``);
            None: this module's logger at INFO, as a run's console and ``train.log`` read it.
    """

    def __init__(
        self,
        monitor: str | None = "val/map",
        mode: str = "max",
        write: Callable[[str], None] | None = None,
    ) -> None:
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        self.monitor, self.mode = monitor, mode
        self.write = write or log.info
        self.best: float | None = None
        self.best_epoch: int | None = None
        self.saved_score: float | None = None
        self.pending: tuple[int, float] | None = None  # (epoch, value) validated, not yet shown

    def state_dict(self) -> dict[str, Any]:  # a resumed run keeps its best so far
        return {"best": self.best, "best_epoch": self.best_epoch}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self.best, self.best_epoch = state_dict["best"], state_dict["best_epoch"]

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        saved = _best_checkpoint(trainer)
        self.saved_score = None if saved is None else saved[0]

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        metrics = trainer.callback_metrics
        if not trainer.sanity_checking and self.monitor in metrics:
            self.pending = (trainer.current_epoch, float(metrics[self.monitor]))

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if self.monitor is None:  # no validation: the epoch's line shows its training loss
            self.pending = (trainer.current_epoch, math.nan)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._report(trainer)

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._report(trainer)

    def _report(self, trainer: pl.Trainer) -> None:
        if self.pending is None or not trainer.is_global_zero:
            return
        (epoch, value), self.pending = self.pending, None
        metrics = trainer.callback_metrics
        # max_epochs is None when max_steps alone bounds the run
        last = "?" if trainer.max_epochs is None else trainer.max_epochs - 1
        line = f"epoch {epoch}/{last}"
        if "train/loss" in metrics:
            line += f"  train/loss {float(metrics['train/loss']):.4f}"
        if self.monitor is None:
            self.write(line)
            return
        if self.best is None or (value > self.best if self.mode == "max" else value < self.best):
            self.best, self.best_epoch = value, epoch
        self.write(
            f"{line}  {self.monitor} {value:.4f}  best {self.best:.4f} (epoch {self.best_epoch})"
        )
        saved = _best_checkpoint(trainer)
        if saved is not None and saved[0] != self.saved_score:
            self.saved_score = saved[0]
            self.write(f"  checkpoint: {self.monitor} improved to {saved[0]:.4f}, saved {saved[1]}")
        for stopper in trainer.early_stopping_callbacks:
            if trainer.should_stop and stopper.stopped_epoch == epoch:
                waited = stopper.wait_count >= stopper.patience
                reason = (
                    f"has not improved for {stopper.wait_count} validations "
                    f"(patience {stopper.patience})"
                    if waited
                    else f"= {value:.4f}"
                )
                self.write(
                    f"  early stopping: {stopper.monitor} {reason}; best {self.best:.4f} at "
                    f"epoch {self.best_epoch}"
                )


def _best_checkpoint(trainer: pl.Trainer) -> tuple[float, str] | None:
    """The score and path of the best checkpoint saved so far (None: none yet)."""
    checkpoint = trainer.checkpoint_callback
    if not isinstance(checkpoint, ModelCheckpoint) or checkpoint.best_model_score is None:
        return None
    return float(checkpoint.best_model_score), checkpoint.best_model_path
