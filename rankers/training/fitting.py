"""Training a module on a data module as a library call: the best validation epoch's weights
kept in memory, no checkpoint file, no logger, no console of a run, and the caller's process
left as it was found (random generators, torch's determinism flags and threads, warning filters,
the interrupt handler).
:class:`differank.Ranker` fits through it; ``python train.py`` runs the whole run layer instead.

Public API::

    fit_in_memory(build_module, datamodule, *, max_epochs, seed, monitor=None, mode="max",
                  patience=None, accelerator="auto", precision="32-true", deterministic=True,
                  callbacks=(), verbose=False, threads=None) -> FitResult
    FitResult(module, best_epoch, best_score, epochs, history)   # module: the kept weights
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import random
import signal
import sys
import threading
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import pytorch_lightning as pl
import torch

from differank.rankers.training.callbacks import RunConsole
from differank.rankers.training.console import NOISY_WARNINGS

# What Lightning's Trainer changes in the process (accelerator_connector._set_torch_flags and
# seed_everything): put back after every fit.
_ENVIRONMENT = ("CUBLAS_WORKSPACE_CONFIG", "PL_GLOBAL_SEED", "PL_SEED_WORKERS")
# Where Lightning logs its set-up lines (accelerator, TPU, the litlogger tip)
_LIGHTNING_LOGGERS = (
    "pytorch_lightning.utilities.rank_zero",
    "lightning_fabric.utilities.rank_zero",
)


# torch's random generators are the process's: fits in threads take turns, so that each draws
# from its own seed alone (processes fit in parallel)
_ONE_FIT_AT_A_TIME = threading.RLock()


@dataclass
class FitResult:
    """``module``: the trained module; ``best_epoch`` / ``best_score``: the validation epoch
    whose weights it holds (None without validation: the last epoch's weights); ``epochs``
    trained; ``history``: one dict per epoch (``epoch``, ``train/loss`` and the validation
    metrics)."""

    module: pl.LightningModule
    best_epoch: int | None
    best_score: float | None
    epochs: int
    history: list[dict[str, float]] = field(default_factory=list)


class KeepBestWeights(pl.Callback):
    """A copy of the module's weights after each validation that improves ``monitor`` (ties
    keep the earlier epoch, as Lightning's ModelCheckpoint does), held in memory."""

    def __init__(self, monitor: str, mode: str = "max") -> None:
        if mode not in ("max", "min"):
            raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
        self.monitor, self.mode = monitor, mode
        self.best: float | None = None
        self.epoch: int | None = None
        self.weights: dict[str, torch.Tensor] | None = None

    def _improves(self, value: float) -> bool:
        if self.best is None or math.isnan(self.best):
            return True
        return value > self.best if self.mode == "max" else value < self.best

    def on_validation_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        value = trainer.callback_metrics.get(self.monitor)
        if trainer.sanity_checking or value is None:
            return
        if self._improves(float(value)):
            self.best, self.epoch = float(value), trainer.current_epoch
            self.weights = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}


class EpochHistory(pl.Callback):
    """Each epoch's ``train/loss`` and validation metrics as plain floats. Lightning logs the
    epoch's training loss after every non-monitoring callback's epoch-end hook, so an epoch is
    recorded when the next one starts, or when training ends."""

    def __init__(self) -> None:
        self.epochs: list[dict[str, float]] = []
        self._recorded = -1

    def _record(self, trainer: pl.Trainer) -> None:
        epoch = trainer.current_epoch - 1
        if epoch <= self._recorded:
            return
        metrics = {k: float(v) for k, v in trainer.callback_metrics.items() if v.numel() == 1}
        self.epochs.append({"epoch": float(epoch), **metrics})
        self._recorded = epoch

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.current_epoch > 0:
            self._record(trainer)

    def on_train_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._record(trainer)


def fit_in_memory(
    build_module: Callable[[], pl.LightningModule],
    datamodule: pl.LightningDataModule,
    *,
    max_epochs: int,
    seed: int,
    monitor: str | None = None,
    mode: str = "max",
    patience: int | None = None,
    accelerator: str = "auto",
    precision: str = "32-true",
    deterministic: bool = True,
    callbacks: Sequence[pl.Callback] = (),
    verbose: bool = False,
    threads: int | None = None,
) -> FitResult:
    """Seed every generator with ``seed``, build the module (its initial weights drawn from
    that seed, as ``train.py`` draws them) and train it for ``max_epochs`` (stopping after
    ``patience`` validations without improvement when given); the module returned holds the
    weights of the best validation epoch by ``monitor`` (``mode``), or of the last epoch when
    ``monitor`` is None (no validation runs).
    ``verbose`` prints one line per epoch to stdout; otherwise nothing is printed. A
    ``KeyboardInterrupt`` reaches the caller as itself (Lightning turns it into ``SystemExit``).
    Fits in threads of one process run one at a time (the random generators are shared).
    ``threads``: torch's intra-op threads during the fit (None: as the process has them);
    small per-document models on a shared CPU train several times faster on one than on two
    that wait for each other (benchmarks/results/doors.md)."""
    keep = None
    history = EpochHistory()
    chosen: list[pl.Callback] = [history, *callbacks]
    if monitor is not None:
        keep = KeepBestWeights(monitor, mode)
        chosen.append(keep)
        if patience is not None:
            chosen.append(pl.callbacks.EarlyStopping(monitor=monitor, mode=mode, patience=patience))
    if verbose:
        chosen.append(RunConsole(monitor, mode, write=_print_line))
    with _ONE_FIT_AT_A_TIME, caller_state_kept(), lightning_banners_hidden():
        for message in NOISY_WARNINGS:  # within caller_state_kept's catch_warnings
            warnings.filterwarnings("ignore", message=message)
        if threads is not None:
            torch.set_num_threads(threads)
        pl.seed_everything(seed, workers=True, verbose=False)
        module = build_module()
        trainer = pl.Trainer(
            max_epochs=max_epochs,
            accelerator=accelerator,
            devices=1,
            precision=precision,  # type: ignore[arg-type]  # a config's string; Lightning checks it
            deterministic=deterministic,
            logger=False,
            enable_checkpointing=False,
            enable_progress_bar=False,
            enable_model_summary=False,
            limit_val_batches=None if monitor is not None else 0,
            num_sanity_val_steps=0,
            callbacks=chosen,
        )
        # trainer.deterministic=true also makes torch fill each new tensor (rankers/run/tasks.py)
        torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]
        try:
            trainer.fit(module, datamodule=datamodule)
        except SystemExit:
            if trainer.interrupted:  # Lightning's answer to Ctrl-C
                raise KeyboardInterrupt from None
            raise
        if trainer.interrupted:
            raise KeyboardInterrupt
    if keep is not None and keep.weights is not None:
        module.load_state_dict(keep.weights)
        return FitResult(module, keep.epoch, keep.best, trainer.current_epoch, history.epochs)
    return FitResult(module, None, None, trainer.current_epoch, history.epochs)


def _print_line(line: str) -> None:
    print(line, file=sys.stdout, flush=True)


@contextlib.contextmanager
def caller_state_kept() -> Iterator[None]:
    """Random generators (Python, NumPy, torch), torch's determinism flags and thread count,
    the warning filters, the environment variables Lightning sets and the SIGINT handler, as
    they were before."""
    python_state, numpy_state = random.getstate(), np.random.get_state()
    flags = (
        torch.are_deterministic_algorithms_enabled(),
        torch.is_deterministic_algorithms_warn_only_enabled(),
        torch.utils.deterministic.fill_uninitialized_memory,  # type: ignore[attr-defined]
        torch.backends.cudnn.deterministic,
        torch.backends.cudnn.benchmark,
        torch.get_num_threads(),
    )
    environment = {name: os.environ.get(name) for name in _ENVIRONMENT}
    in_main_thread = threading.current_thread() is threading.main_thread()
    handler = signal.getsignal(signal.SIGINT) if in_main_thread else None
    try:
        with torch.random.fork_rng(devices=[]), warnings.catch_warnings():
            yield
    finally:
        random.setstate(python_state)
        np.random.set_state(numpy_state)
        torch.use_deterministic_algorithms(flags[0], warn_only=flags[1])
        torch.utils.deterministic.fill_uninitialized_memory = flags[2]  # type: ignore[attr-defined]
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = flags[3], flags[4]
        torch.set_num_threads(flags[5])
        for name, value in environment.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        if in_main_thread and handler is not None:
            signal.signal(signal.SIGINT, handler)


class _ThisThreadsBanners(logging.Filter):
    """Drops Lightning's INFO lines (accelerator, TPU, seed) logged by the threads inside a
    quiet fit; warnings and every other thread's lines pass."""

    def __init__(self) -> None:
        super().__init__()
        self.threads: dict[int, int] = {}
        self.lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or record.thread not in self.threads


_BANNERS = _ThisThreadsBanners()


@contextlib.contextmanager
def lightning_banners_hidden() -> Iterator[None]:
    """Lightning's set-up lines hidden for this thread while the block runs; the filter is
    removed from Lightning's loggers once no fit runs, so they are left as they were."""
    thread = threading.get_ident()
    loggers = [logging.getLogger(name) for name in _LIGHTNING_LOGGERS]
    with _BANNERS.lock:
        if not _BANNERS.threads:
            for logger in loggers:
                logger.addFilter(_BANNERS)
        _BANNERS.threads[thread] = _BANNERS.threads.get(thread, 0) + 1
    try:
        yield
    finally:
        with _BANNERS.lock:
            _BANNERS.threads[thread] -= 1
            if not _BANNERS.threads[thread]:
                del _BANNERS.threads[thread]
            if not _BANNERS.threads:
                for logger in loggers:
                    logger.removeFilter(_BANNERS)
