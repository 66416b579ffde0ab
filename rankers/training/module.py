"""Where rankers, losses, metrics and Lightning meet: the training and evaluation modules.

``RankingModule`` trains any :class:`~differank.rankers.scorers.base.Ranker` with any loss by
gradient steps; ``FullBatchModule`` trains with a full-batch solver (coordinate descent, cutting
planes). Both share :class:`EvaluationModule`: LETOR-exact validation/test metrics and the test
scores that ``train.py`` writes as a prediction file. :class:`RunConsole` and :class:`ProgressBar`
are the callbacks that make a run readable while it trains (``conf/callbacks/default.yaml``).
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Sequence
from typing import Any

import pytorch_lightning as pl
import torch
from torch import nn

from differank.rankers.metrics.letor import LetorMetric
from differank.rankers.scorers.base import FullBatchSolver, Ranker
from differank.rankers.training.checkpoints import load_checkpoint, rebuild_module

log = logging.getLogger(__name__)


def check_loss_fits_ranker(ranker: Ranker, loss: nn.Module) -> None:
    """Fail at construction, with the fix named, when a loss cannot take what a ranker gives.

    A ranker hands the loss ``loss_target(features)`` plus ``loss_inputs()`` by keyword (ConeRank
    gives a basis); the loss's ``forward`` signature says what it takes.
    """
    parameters = inspect.signature(loss.forward).parameters
    offered = set(ranker.loss_inputs())
    extra = sorted(offered - set(parameters))
    required = [
        name
        for name, parameter in list(parameters.items())[3:]
        if parameter.default is inspect.Parameter.empty
        and parameter.kind in (parameter.POSITIONAL_OR_KEYWORD, parameter.KEYWORD_ONLY)
    ]
    missing = sorted(set(required) - offered)
    if extra or missing:
        problem = f"does not take {extra}" if extra else f"needs {missing}"
        raise ValueError(
            f"{type(loss).__name__} {problem}, which {type(ranker).__name__} "
            f"{'gives' if extra else 'does not give'}: feature-space losses (loss=cone) pair with "
            "model=conerank, scalar losses with scalar models (model=linear, model=mlp)"
        )


def scores_in_row_order(
    rows: Sequence[torch.Tensor], scores: Sequence[torch.Tensor], num_rows: int
) -> torch.Tensor:
    """Scores given in pieces with the source row of each, as one float64 [num_rows] vector in
    row order. Raises if a row got no score or two, so a prediction file never misaligns."""
    rows_ = torch.cat(list(rows)) if rows else torch.empty(0, dtype=torch.long)
    values = torch.cat(list(scores)) if scores else torch.empty(0)
    hits = torch.bincount(rows_, minlength=num_rows) if rows_.numel() else torch.zeros(num_rows)
    if hits.numel() != num_rows or bool((hits != 1).any()):
        missing, doubled = int((hits == 0).sum()), int((hits > 1).sum())
        raise RuntimeError(
            f"scores cover the {num_rows} rows badly: {missing} rows without a score, "
            f"{doubled} with several (was the loader sharded or capped?)"
        )
    by_row = torch.empty(num_rows, dtype=torch.float64)
    by_row[rows_] = values.to(torch.float64)
    return by_row


class EvaluationModule(pl.LightningModule):
    """Validation and test with LETOR-exact metrics; keeps the test (or predict) scores per
    source row, gathered from every process under DDP."""

    def __init__(self, ranker: Ranker, loss: nn.Module, ks: Sequence[int]) -> None:
        super().__init__()
        check_loss_fits_ranker(ranker, loss)
        self.ranker = ranker
        self.loss = loss
        self.val_metrics = LetorMetric(ks)
        self.test_metrics = LetorMetric(ks)
        self.test_rows: list[torch.Tensor] = []
        self.test_scores: list[torch.Tensor] = []
        # What train.py saves with every checkpoint (resolved config, data fingerprint); it must
        # hold only what ``torch.load(weights_only=True)`` reads: containers, numbers, strings.
        self.run_record: dict[str, Any] = {}

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Adds ``checkpoint["differank"]``: the run record and the validation metrics of the
        saved epoch (for ``best.ckpt``, the best epoch's)."""
        if self.run_record:
            metrics = self.trainer.callback_metrics
            validation = {k: float(v) for k, v in metrics.items() if k.startswith("val/")}
            checkpoint["differank"] = {**self.run_record, "validation": validation}

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Scores [B, L]; ``mask`` reaches the ranker only if it declares ``uses_mask``."""
        if self.ranker.uses_mask:
            return self.ranker(features, mask)
        return self.ranker(features)

    def batch_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The only place a ranker's output meets a loss."""
        if self.ranker.uses_mask:
            target = self.ranker.loss_target(batch["features"], batch["mask"])
        else:
            target = self.ranker.loss_target(batch["features"])
        return self.loss(target, batch["labels"], batch["mask"], **self.ranker.loss_inputs())

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        scores = self(batch["features"], batch["mask"])
        self.val_metrics.update(scores, batch["labels"], batch["mask"])

    def on_validation_epoch_end(self) -> None:
        self._log_metrics("val", self.val_metrics)

    def on_test_epoch_start(self) -> None:
        self.test_rows, self.test_scores = [], []

    def test_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        scores = self._keep_scores(batch)
        self.test_metrics.update(scores, batch["labels"], batch["mask"])

    def on_test_epoch_end(self) -> None:
        self._log_metrics("test", self.test_metrics)
        self._gather_scores()

    def on_predict_epoch_start(self) -> None:
        self.test_rows, self.test_scores = [], []

    def predict_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        return self._keep_scores(batch)  # train.py predicts with return_predictions=False

    def on_predict_epoch_end(self) -> None:
        self._gather_scores()

    def _keep_scores(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        scores = self(batch["features"], batch["mask"])
        self.test_rows.append(batch["doc_index"][batch["mask"]].cpu())
        self.test_scores.append(scores.detach()[batch["mask"]].cpu())
        return scores

    def _gather_scores(self) -> None:
        """Under DDP each process scored its shard of the queries; every process gets them all."""
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return
        empty = [torch.empty(0, dtype=torch.long)], [torch.empty(0)]
        rows, scores = (self.test_rows, self.test_scores) if self.test_rows else empty
        mine = (torch.cat(rows), torch.cat(scores))
        shards = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(shards, mine)
        self.test_rows = [rows for rows, _ in shards]
        self.test_scores = [scores for _, scores in shards]

    def scores_by_row(self, num_rows: int) -> torch.Tensor:
        """The last test run's scores as a float64 [num_rows] vector in source-file row order."""
        return scores_in_row_order(self.test_rows, self.test_scores, num_rows)

    @classmethod
    def load_from_checkpoint(cls, checkpoint_path, map_location=None, **kwargs):
        """The trained module of a ``train.py`` checkpoint, rebuilt from the config it carries
        (allowlisted classes only) with its weights, in eval mode on the CPU: nothing else is
        needed (Lightning's version would want the constructor's arguments)."""
        if kwargs:
            raise TypeError(f"the run's own config rebuilds the module; got {sorted(kwargs)}")
        module = rebuild_module(load_checkpoint(checkpoint_path), checkpoint_path)
        if not isinstance(module, cls):
            raise TypeError(
                f"{checkpoint_path} holds a {type(module).__name__}, not a {cls.__name__}"
            )
        return module if map_location is None else module.to(map_location)

    def _log_metrics(self, stage: str, metric: LetorMetric) -> None:
        values = metric.compute()
        # Synced already (equal on every process): sync_dist only averages equal values.
        logged = {f"{stage}/{key}": value.float() for key, value in values.items()}
        shown = logged.pop(f"{stage}/map")  # the progress bar shows MAP
        self.log(f"{stage}/map", shown, sync_dist=True, prog_bar=stage == "val")
        self.log_dict(logged, sync_dist=True)
        metric.reset()


class RankingModule(EvaluationModule):
    """A ranker trained by gradient steps on a loss, plus optional ℓ1 / ℓ2² weight penalties.

    Args:
        ranker: a factory ``ranker(n_features=F) -> Ranker`` (a Hydra partial).
        loss: the objective, called as ``loss(ranker.loss_target(X), labels, mask,
            **ranker.loss_inputs())``.
        optimizer: a factory ``optimizer(params) -> torch.optim.Optimizer`` (a Hydra partial).
        n_features: F, read from the data by ``train.py``.
        l1, l2: penalty ``l1·Σ|w| + l2·Σw²`` over ``ranker.regularized_weights()``, added to
            every batch loss (the thesis' λ‖w‖₁ and λ‖w‖₂²,
            docs/objectives/domination.md#regularisation).
        ks: cut-offs of NDCG@k and P@k.
        augment_noise: standard deviation of Gaussian noise added to the (normalised) features
            of the real documents of every training batch; validation, test and prediction see
            the data as it is. 0 (default): no noise.
    """

    def __init__(
        self,
        ranker: Callable[..., Ranker],
        loss: nn.Module,
        optimizer: Callable[..., torch.optim.Optimizer],
        n_features: int,
        l1: float = 0.0,
        l2: float = 0.0,
        ks: Sequence[int] = (1, 3, 5, 10),
        augment_noise: float = 0.0,
    ) -> None:
        if l1 < 0 or l2 < 0:
            raise ValueError(f"l1 and l2 must be >= 0, got l1={l1}, l2={l2}")
        if not augment_noise >= 0:
            raise ValueError(f"augment_noise must be >= 0, got {augment_noise}")
        super().__init__(ranker(n_features=n_features), loss, ks)
        self.make_optimizer = optimizer
        self.l1, self.l2 = float(l1), float(l2)
        self.augment_noise = float(augment_noise)

    def penalty(self) -> torch.Tensor:
        total = torch.zeros((), device=self.device)
        for weight in self.ranker.regularized_weights():
            if self.l1:
                total = total + self.l1 * weight.abs().sum()
            if self.l2:
                total = total + self.l2 * weight.square().sum()
        return total

    def augment(self, batch: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """The training batch with ``augment_noise`` Gaussian noise on its real documents'
        features (padding untouched); the batch itself when there is no noise."""
        if not self.augment_noise:
            return batch
        features, real = batch["features"], batch["mask"].unsqueeze(-1)
        noisy = features + self.augment_noise * torch.randn_like(features)
        return {**batch, "features": torch.where(real, noisy, features)}

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> torch.Tensor:
        loss = self.batch_loss(self.augment(batch))
        size = batch["mask"].shape[0]
        self.log(
            "train/loss",
            loss,
            batch_size=size,
            on_epoch=True,
            on_step=False,
            sync_dist=True,
            prog_bar=True,
        )
        return loss + self.penalty()

    def optimizer_step(self, *args, **kwargs) -> None:
        super().optimizer_step(*args, **kwargs)
        self.ranker.constrain()

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.make_optimizer(self.parameters())


class FullBatchModule(EvaluationModule):
    """A ranker fitted by a :class:`~differank.rankers.scorers.base.FullBatchSolver`, one outer
    iteration per epoch.

    Each epoch takes one solver step on the whole training split (``datamodule.full_batch``);
    training stops early once the solver reports convergence. Checkpoints, logging, validation
    and test outputs are the same as for :class:`RankingModule`; ``train/loss`` is the injected
    loss of the current ranker on the full training batch.
    """

    def __init__(
        self,
        solver: Callable[..., FullBatchSolver],
        loss: nn.Module,
        n_features: int,
        ks: Sequence[int] = (1, 3, 5, 10),
    ) -> None:
        fitted = solver(n_features=n_features)
        super().__init__(fitted.ranker, loss, ks)
        self.solver = fitted
        self.automatic_optimization = False
        self.train_batch: dict[str, torch.Tensor] | None = None

    def on_fit_start(self) -> None:
        batch = self.trainer.datamodule.full_batch("train")
        self.train_batch = {key: value.to(self.device) for key, value in batch.items()}
        # One solver step per epoch: the loader's batches only pace the epochs, so draw just one
        # (the fit loop sizes its epochs after this hook; validation still runs every epoch).
        self.trainer.limit_train_batches = 1

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        full = self.train_batch
        stats = self.solver.fit_step(full["features"], full["labels"], full["mask"])
        with torch.no_grad():
            loss = self.batch_loss(full)
        size = full["mask"].shape[0]
        self.log("train/loss", loss, batch_size=size, on_step=False, on_epoch=True, prog_bar=True)
        self.log_dict(
            {f"train/{k}": float(v) for k, v in stats.items()},
            batch_size=size,
            on_step=False,
            on_epoch=True,
        )
        self.optimizers().step()  # moves nothing; advances the step count checkpointing keys on
        if self.solver.converged:
            self.trainer.should_stop = True
            log.info(
                "  %s converged: training stops after epoch %d",
                type(self.solver).__name__,
                self.current_epoch,
            )

    def configure_optimizers(self) -> torch.optim.Optimizer:
        # The solver writes the weights itself. Lightning counts steps (and ModelCheckpoint saves
        # best.ckpt) only through an optimizer's step: this one has lr 0 and sees no gradients.
        return torch.optim.SGD(self.ranker.parameters(), lr=0.0)


class ProgressBar(pl.callbacks.RichProgressBar):
    """Lightning's Rich progress bar showing the metrics logged with ``prog_bar=True``
    (``train/loss``, ``val/map``) and nothing else (no logger version ``v_num``)."""

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
