"""Callbacks that keep a run from silently selecting a meaningless checkpoint.

:class:`ValidationSignalCheck` warns, before the first training step, when the validation split
cannot tell epochs apart (no relevant document, or no query with two distinct labels): the
monitored metric is then the same at every epoch, so the best checkpoint stays at the first
validated epoch and early stopping ends the run after ``patience`` epochs.

:class:`FiniteGuard` stops the run at the first non-finite training loss, or at a validation
that would score with non-finite weights, raising :class:`NonFiniteRunError` with the epoch,
step, learning rate and a hint. It reads the losses every ``check_every_n_steps`` steps (not at
every step: a host read is a GPU sync) and always before a validation or checkpoint, so the
checkpoints already written (each from a validation of finite weights) are kept as they are.

Both are in ``conf/callbacks/default.yaml``; the rules are in ``docs/data.md``.
"""

from __future__ import annotations

import logging
import math
from pathlib import Path

import pytorch_lightning as pl
import torch
from pytorch_lightning.callbacks import ModelCheckpoint

log = logging.getLogger(__name__)


class ValidationSignalCheck(pl.Callback):
    """Warn when no ranking of the validation split scores better than another.

    Reads the labels and query grouping of ``trainer.datamodule.split_data("val")`` (a data
    module without ``split_data`` is not checked, nor one that validates on held-out click
    sessions, ``ultr.select=clicks``, which reads no validation label). Relevance is
    ``label > 0``, as in the metrics (:mod:`differank.rankers.metrics.letor`).
    """

    def __init__(self, monitor: str = "val/map") -> None:
        self.monitor = monitor

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        # Lightning sets trainer.datamodule when fitting; its Trainer class does not declare it
        split_data = getattr(trainer.datamodule, "split_data", None)  # type: ignore[attr-defined]
        if split_data is None or not trainer.is_global_zero:
            return
        if getattr(trainer.datamodule, "held_out", None) is not None:  # type: ignore[attr-defined]
            return  # validation on click sessions (ultr.select=clicks): labels are not read
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
    """Stop at a non-finite training loss, or a non-finite weight at the start of a validation,
    before anything is validated or saved from it.

    Each training loss is copied into a buffer of ``check_every_n_steps`` values on its own
    device (no host read: on a GPU a read waits for the step to finish, one sync per step, and
    under DDP each check is also an all-reduce). The buffer is read when it is full, before
    every validation and at the end of every training epoch; a non-finite loss is thus found at
    most ``check_every_n_steps`` steps after it occurred, and the error names the step it
    occurred at (and where it was found). The weights may have taken that many updates since,
    but no checkpoint is written from them: Lightning's checkpoints are saved after a
    validation or at the epoch end, after this guard's check.

    Args:
        check_every_n_steps: losses between two reads (``conf/callbacks/finite_guard.yaml``:
            50; 1 reads every loss, as before its backward pass).
    """

    def __init__(self, check_every_n_steps: int = 50) -> None:
        if isinstance(check_every_n_steps, bool) or not (
            isinstance(check_every_n_steps, int) and check_every_n_steps >= 1
        ):
            raise ValueError(
                f"check_every_n_steps must be an integer >= 1, got {check_every_n_steps!r}"
            )
        self.check_every_n_steps = check_every_n_steps
        self._losses: torch.Tensor | None = None  # the unread losses, on the loss's device
        self._steps: list[int] = []  # the global step of each unread loss

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._steps = []

    def on_before_backward(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, loss: torch.Tensor
    ) -> None:
        value = loss.detach()
        if self._losses is None or self._losses.device != value.device:
            self._losses = torch.zeros(self.check_every_n_steps, device=value.device)
            self._steps = []
        self._losses[len(self._steps)] = value if value.dim() == 0 else value.sum()
        self._steps.append(trainer.global_step)
        if len(self._steps) == self.check_every_n_steps:
            self._check_losses(trainer)

    def _check_losses(self, trainer: pl.Trainer) -> None:
        """Read the unread losses (one host read); stop at the first non-finite one."""
        if not self._steps or self._losses is None:  # (no unread step: no buffer is needed)
            return
        steps, self._steps = self._steps, []
        losses = self._losses[: len(steps)]
        finite = bool(torch.isfinite(losses).all())
        # Every process stops together (one stopping alone would leave the others waiting).
        if trainer.strategy.reduce_boolean_decision(finite, all=True):
            return
        if finite:
            where = f"steps {steps[0]}-{steps[-1]}"
            self._stop(trainer, f"the training loss of {where} is finite here, not elsewhere,")
        first = int(torch.isfinite(losses).logical_not().nonzero()[0, 0])
        found = (
            ""
            if steps[first] == trainer.global_step
            else f" (found at step {trainer.global_step}: the losses are read every "
            f"{self.check_every_n_steps} steps)"
        )
        self._stop(trainer, f"the training loss is {float(losses[first])}", steps[first], found)

    def on_validation_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        self._check_losses(trainer)
        for name, parameter in pl_module.named_parameters():
            if not bool(torch.isfinite(parameter.detach()).all()):
                self._stop(trainer, f"weight {name} is not finite, so validation scores are not")

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._check_losses(trainer)
        loss = trainer.callback_metrics.get("train/loss")  # full-batch solvers: no backward
        if loss is not None and not math.isfinite(float(loss)):
            self._stop(trainer, f"the epoch's training loss is {float(loss)}")

    @staticmethod
    def _stop(trainer: pl.Trainer, what: str, step: int | None = None, found: str = "") -> None:
        rates = [group["lr"] for opt in trainer.optimizers for group in opt.param_groups]
        rate = f"{rates[0]:g}" if rates else "none"
        hint = (
            f"lower model.optimizer.lr (now {rate}), e.g. by 10x, "
            if rates and rates[0] > 0
            else ""
        )
        paths = {  # best.ckpt and last.ckpt (conf/callbacks/last_checkpoint.yaml)
            path
            for saver in trainer.checkpoint_callbacks
            if isinstance(saver, ModelCheckpoint)
            for path in (saver.last_model_path, saver.best_model_path)
        }
        kept = [path for path in paths if path and Path(path).is_file()]
        checkpoints = (
            f"the checkpoints saved so far are kept unchanged: {', '.join(sorted(kept))}"
            if kept
            else "no checkpoint had been saved yet (no validation had finished)"
        )
        raise NonFiniteRunError(
            f"{what} at epoch {trainer.current_epoch}, step "
            f"{trainer.global_step if step is None else step}{found} (learning "
            f"rate {rate}): the run is stopped. {hint}or check the features "
            f"(data.nan_policy, data.normalization) and the loss. {checkpoints}"
        )
