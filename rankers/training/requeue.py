"""SLURM's requeue signal handled between steps, never in the middle of a checkpoint save.

Lightning's SLURM handler (``SLURMEnvironment(auto_requeue=True)``) saves ``hpc_ckpt_N.ckpt``
from inside the signal handler. When the signal lands while another checkpoint is being written,
the two saves nest fsspec transactions on one cached file system, the outer save fails
(``'NoneType' object has no attribute '_intrans'``) and the job dies instead of requeueing; with
epochs of a few milliseconds that is most signals. :class:`DeferredRequeue` records the signal
and runs Lightning's handler at the next batch or validation end, before any checkpoint is saved
there (Lightning runs checkpoint callbacks last).
"""

from __future__ import annotations

import signal
from collections.abc import Callable
from types import FrameType
from typing import Any

import pytorch_lightning as pl
from lightning_fabric.plugins.environments import SLURMEnvironment


class DeferredRequeue(pl.Callback):
    """Defer the SLURM requeue handler to the next batch end, validation end or train end."""

    def __init__(self) -> None:
        # the requeue signal and Lightning's handler of it, while ours stands in for it
        self._lightning: tuple[int, Callable[[int, FrameType | None], Any]] | None = None
        self._pending: tuple[int, FrameType | None] | None = None

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        environment = getattr(trainer.strategy, "cluster_environment", None)
        if not isinstance(environment, SLURMEnvironment) or not environment.auto_requeue:
            return
        requeue = environment.requeue_signal  # None only where there is no SIGUSR1 (Windows)
        if requeue is None:
            return
        handler = signal.getsignal(requeue)
        if callable(handler) and handler != self._defer:  # Lightning's, set before training
            self._lightning = requeue, handler
            signal.signal(requeue, self._defer)

    def _defer(self, signum: int, frame: FrameType | None) -> None:
        self._pending = (signum, frame)

    def _run_pending(self) -> None:
        if self._pending is not None and self._lightning is not None:
            pending, self._pending = self._pending, None
            self._lightning[1](*pending)

    def on_train_batch_end(self, trainer: pl.Trainer, *args, **kwargs) -> None:
        self._run_pending()

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._run_pending()

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._run_pending()
        if self._lightning is not None:
            signal.signal(*self._lightning)
            self._lightning = None
