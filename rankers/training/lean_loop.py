"""A training epoch loop with less Python per step than Lightning's, for the runs it can serve.

Public API::

    LeanEpochLoop(trainer, min_steps=None, max_steps=-1)   # a Lightning training epoch loop
    install_lean_loop(trainer) -> LeanEpochLoop            # put it in ``trainer.fit_loop``

Why: Lightning runs about 1,700 Python calls around every training step (a profiler context
around each hook of each callback, closure and result objects, ...): about 0.5 ms a step on the
2-core CPU, a fifth of a linear model's step on a 1/8 MSLR-WEB30K batch (this loop: 0.2 ms), and
more than a small model's whole step on a GPU (benchmarks/results/epoch_overhead.md).

What it runs for a batch is what Lightning's automatic optimization runs, in the same order,
with the same progress counters (so checkpoints resume the same), loggers and learning-rate
schedulers:

    fetch, convert_input, on_before_batch_transfer, transfer_batch_to_device,
    on_after_batch_transfer, on_train_batch_start
    optimizer_step(closure)  # LightningModule hook -> optimizer.step -> the closure:
        training_step, on_before_zero_grad, optimizer_zero_grad,
        on_before_backward, backward, on_after_backward
      on_before_optimizer_step, configure_gradient_clipping, the step itself
    step-interval schedulers, on_train_batch_end, the step's logging

Only the hooks that a callback or the module overrides are called, each directly (Lightning
calls every callback's every hook, no-ops included, inside a profiler context). The loop takes
this path when the run has nothing it leaves out, checked at every epoch start
(:func:`lean_path_refusal`): automatic optimization with one optimizer, no gradient
accumulation, one device, no profiler, a module that does not override ``on_train_batch_start``
(whose ``-1`` skips the epoch), float32 or bf16 autocast without a gradient scaler, and not
resuming in the middle of an epoch. Any other run, or batch, goes through Lightning's own
``advance``; ``tests/rankers/training/test_lean_loop.py`` checks that both give the same hooks
in the same order, the same weights bit for bit and the same progress.
"""

from __future__ import annotations

from functools import partial

import pytorch_lightning as pl
import torch
from pytorch_lightning.loops.fetchers import _DataLoaderIterDataFetcher
from pytorch_lightning.loops.optimization.automatic import Closure, ClosureResult
from pytorch_lightning.loops.training_epoch_loop import _TrainingEpochLoop
from pytorch_lightning.plugins.precision import MixedPrecision, Precision
from pytorch_lightning.profilers import PassThroughProfiler
from pytorch_lightning.strategies import SingleDeviceStrategy

# The per-step hooks of automatic optimization, in the order they run.
_STEP_HOOKS = (
    "on_train_batch_start",
    "on_before_zero_grad",
    "on_before_backward",
    "on_after_backward",
    "on_before_optimizer_step",
    "on_train_batch_end",
)
_BATCH_HOOKS = ("on_before_batch_transfer", "transfer_batch_to_device", "on_after_batch_transfer")


def lean_path_refusal(trainer: pl.Trainer, data_fetcher) -> str | None:
    """Why this run's steps must go through Lightning's own loop, or ``None`` when the lean path
    serves it."""
    module = trainer.lightning_module
    precision = trainer.precision_plugin
    reasons = (
        (not module.automatic_optimization, "manual optimization"),
        (len(trainer.optimizers) != 1, "not exactly one optimizer"),
        (trainer.accumulate_grad_batches != 1, "gradient accumulation"),
        (type(trainer.strategy) is not SingleDeviceStrategy, "not a single-device strategy"),
        (trainer.strategy.model is not module, "a wrapped module"),
        (not isinstance(trainer.profiler, PassThroughProfiler), "a profiler"),
        (isinstance(data_fetcher, _DataLoaderIterDataFetcher), "a dataloader_iter step"),
        (_overrides(module, "on_train_batch_start"), "the module overrides on_train_batch_start"),
        (
            type(precision) not in _SERVED_PRECISION
            or getattr(precision, "scaler", None) is not None,
            f"precision plugin {type(precision).__name__}",
        ),
    )
    return next((reason for refused, reason in reasons if refused), None)


def _overrides(obj, hook: str) -> bool:
    base = pl.LightningModule if isinstance(obj, pl.LightningModule) else pl.Callback
    return getattr(type(obj), hook, None) is not getattr(base, hook, None)


class _Hooks:
    """The callbacks' and the module's overriding implementations of each per-step hook."""

    def __init__(self, trainer: pl.Trainer):
        module = trainer.lightning_module
        self.trainer, self.module = trainer, module
        # ``_current_fx_name`` (read by ``self.log``) is a plain attribute: set in the module's
        # __dict__, not through nn.Module.__setattr__, which checks parameters, modules and
        # buffers on every assignment (a fifth of this loop's own Python, two per hook call).
        self._state = module.__dict__
        self.callbacks = {
            hook: [getattr(c, hook) for c in trainer.callbacks if _overrides(c, hook)]
            for hook in _STEP_HOOKS
        }
        self.module_hooks = {
            hook: getattr(module, hook) if _overrides(module, hook) else None
            for hook in _STEP_HOOKS
        }
        # The batch hooks' owner, as Lightning picks it: the datamodule's when it overrides one,
        # else the module's.
        selector = trainer._data_connector._datahook_selector
        self.batch_hooks = {
            hook: getattr(selector.get_instance(hook), hook) for hook in _BATCH_HOOKS
        }

    def __call__(self, hook: str, *args) -> None:
        """Lightning's order: the callbacks, then the module, with ``_current_fx_name`` set
        (``self.log`` reads it)."""
        callbacks, own = self.callbacks[hook], self.module_hooks[hook]
        if not callbacks and own is None:
            return
        module, state = self.module, self._state
        previous = state["_current_fx_name"]
        state["_current_fx_name"] = hook
        for callback in callbacks:
            callback(self.trainer, module, *args)
        if own is not None:
            own(*args)
        state["_current_fx_name"] = previous

    def transfer(self, batch):
        """The batch through on_before_batch_transfer, transfer_batch_to_device (to the
        strategy's device) and on_after_batch_transfer."""
        device = self.trainer.strategy.root_device
        batch = self.batch_hook("on_before_batch_transfer", batch, 0)
        batch = self.batch_hook("transfer_batch_to_device", batch, device, 0)
        return self.batch_hook("on_after_batch_transfer", batch, 0)

    def batch_hook(self, hook: str, *args):
        implementation = self.batch_hooks[hook]
        if implementation.__self__ is not self.module:
            return implementation(*args)
        state = self._state
        previous = state["_current_fx_name"]
        state["_current_fx_name"] = hook
        try:
            return implementation(*args)
        finally:
            state["_current_fx_name"] = previous

    def module_hook(self, hook: str, *args, **kwargs):
        """A LightningModule hook every step calls (training_step, optimizer_step, ...)."""
        state = self._state
        previous = state["_current_fx_name"]
        state["_current_fx_name"] = hook
        try:
            return getattr(self.module, hook)(*args, **kwargs)
        finally:
            state["_current_fx_name"] = previous


class LeanEpochLoop(_TrainingEpochLoop):
    """Lightning's training epoch loop, with :meth:`advance` taking the lean path (module
    docstring) whenever :func:`lean_path_refusal` finds nothing in the way."""

    def __init__(self, trainer: pl.Trainer, min_steps: int | None = None, max_steps: int = -1):
        super().__init__(trainer, min_steps=min_steps, max_steps=max_steps)
        self._hooks: _Hooks | None = None
        self.refusal: str | None = None  # why the last epoch ran Lightning's own steps

    def on_run_start(self, data_fetcher) -> None:
        super().on_run_start(data_fetcher)
        self.refusal = lean_path_refusal(self.trainer, data_fetcher)
        self._hooks = None if self.refusal else _Hooks(self.trainer)

    def advance(self, data_fetcher) -> None:
        if self._hooks is None or self.restarting:
            super().advance(data_fetcher)
            return
        trainer, hooks = self.trainer, self._hooks
        self.val_loop.restarting = False
        batch, _, _ = next(data_fetcher)
        batch_idx = self.batch_idx + 1
        self.batch_progress.is_last_batch = data_fetcher.done
        batch = trainer.precision_plugin.convert_input(batch)
        batch = hooks.transfer(batch)
        self.batch_progress.increment_ready()
        trainer._logger_connector.on_batch_start(batch)
        batch_output = None
        if batch is None:
            self._warning_cache.warn(
                "train_dataloader yielded None. If this was on purpose, ignore this warning..."
            )
        else:
            hooks("on_train_batch_start", batch, batch_idx)
            self.batch_progress.increment_started()
            batch_output = self._optimize(batch, batch_idx)
        self.batch_progress.increment_processed()
        self.update_lr_schedulers("step", update_plateau_schedulers=False)
        if self._num_ready_batches_reached():
            self.update_lr_schedulers("epoch", update_plateau_schedulers=False)
        hooks("on_train_batch_end", batch_output, batch, batch_idx)
        trainer._logger_connector.on_batch_end()
        self.batch_progress.increment_completed()
        trainer._logger_connector.update_train_step_metrics()

    def _optimize(self, batch, batch_idx: int) -> dict:
        """Automatic optimization of one batch: the module's ``optimizer_step`` hook with a
        closure that runs the training step, zero_grad and backward."""
        trainer, hooks = self.trainer, self._hooks
        progress = self.automatic_optimization.optim_progress.optimizer
        optimizer = trainer.strategy._lightning_optimizers[0]
        results: list[ClosureResult] = []
        closure = partial(self._closure, batch, batch_idx, optimizer, results)
        progress.step.increment_ready()
        hooks.module_hook("optimizer_step", trainer.current_epoch, batch_idx, optimizer, closure)
        progress.step.increment_completed()
        if not results or results[-1].loss is None:
            return {}
        return results[-1].asdict()

    @torch.enable_grad()
    def _closure(self, batch, batch_idx: int, optimizer, results: list) -> torch.Tensor | None:
        trainer, hooks = self.trainer, self._hooks
        progress = self.automatic_optimization.optim_progress.optimizer.zero_grad
        with trainer.precision_plugin.train_step_context():
            output = hooks.module_hook("training_step", batch, batch_idx)
        result = ClosureResult.from_training_step_output(output, 1)
        results.append(result)
        if result.closure_loss is None:
            Closure.warning_cache.warn(
                "`training_step` returned `None`. If this was on purpose, ignore this warning..."
            )
        progress.increment_ready()
        hooks("on_before_zero_grad", optimizer)
        progress.increment_started()
        hooks.module_hook("optimizer_zero_grad", trainer.current_epoch, batch_idx, optimizer)
        progress.increment_completed()
        if result.closure_loss is not None:
            hooks("on_before_backward", result.closure_loss)
            hooks.module_hook("backward", result.closure_loss)
            hooks("on_after_backward")
        return result.loss


class _LeanAfterClosure:
    """The precision plugin's step between the closure and the optimizer's update: the hooks
    ``on_before_optimizer_step`` and ``configure_gradient_clipping`` (Lightning's order), called
    directly while the lean loop serves the epoch, and by Lightning otherwise."""

    def _after_closure(self, model: pl.LightningModule, optimizer) -> None:
        hooks = getattr(model.trainer.fit_loop.epoch_loop, "_hooks", None)
        if hooks is None:
            super()._after_closure(model, optimizer)
            return
        trainer = model.trainer
        hooks("on_before_optimizer_step", optimizer)
        hooks.module_hook(
            "configure_gradient_clipping",
            optimizer,
            gradient_clip_val=trainer.gradient_clip_val,
            gradient_clip_algorithm=trainer.gradient_clip_algorithm,
        )


class LeanPrecision(_LeanAfterClosure, Precision):
    """``32-true`` with the lean loop's hook calls."""


class LeanMixedPrecision(_LeanAfterClosure, MixedPrecision):
    """``bf16-mixed`` / ``16-mixed`` with the lean loop's hook calls."""


_LEAN_PRECISION = {Precision: LeanPrecision, MixedPrecision: LeanMixedPrecision}
_SERVED_PRECISION = (*_LEAN_PRECISION, *_LEAN_PRECISION.values())


def install_lean_loop(trainer: pl.Trainer) -> LeanEpochLoop:
    """Replace ``trainer``'s training epoch loop by a :class:`LeanEpochLoop` (same limits), and
    its precision plugin's class by the lean subclass (the same object: the strategy and the
    accelerator connector both hold it, and it keeps its settings)."""
    current = trainer.fit_loop.epoch_loop
    loop = LeanEpochLoop(trainer, min_steps=current.min_steps, max_steps=current.max_steps)
    trainer.fit_loop.epoch_loop = loop
    plugin = trainer.strategy.precision_plugin
    if type(plugin) in _LEAN_PRECISION:
        plugin.__class__ = _LEAN_PRECISION[type(plugin)]
    return loop
