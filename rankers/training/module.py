"""Where rankers, losses, metrics and Lightning meet: the training and evaluation modules.

``RankingModule`` trains any :class:`~differank.rankers.scorers.base.Ranker` with any loss by
gradient steps; ``FullBatchModule`` trains with a full-batch solver (coordinate descent, cutting
planes). Both share :class:`EvaluationModule`: LETOR-exact validation/test metrics and the test
scores that ``train.py`` writes as a prediction file. The console callbacks (``RunConsole``,
``ProgressBar``) are in :mod:`differank.rankers.training.callbacks`.
"""

from __future__ import annotations

import inspect
import logging
import math
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, cast

import pytorch_lightning as pl
import torch
from pytorch_lightning.core.optimizer import LightningOptimizer
from pytorch_lightning.utilities.types import OptimizerLRScheduler
from torch import nn

from differank.losses.inputs import compute_dtype, finite_label_mask, float_labels
from differank.losses.module_form import LossModule
from differank.rankers.checkpoints import load_checkpoint, rebuild_module
from differank.rankers.metrics.clicks import ClickValidation
from differank.rankers.metrics.letor import LetorMetric
from differank.rankers.scorers.base import FullBatchSolver, Ranker
from differank.rankers.training.list_memory import check_batch_memory
from differank.rankers.training.row_order import scores_in_row_order

log = logging.getLogger(__name__)


# A loss taking this input (loss=distill) gets the run's teacher scores of the batch's
# documents (:mod:`differank.rankers.run.teacher_scores`), not the ranker's output.
TEACHER_INPUT = "teacher_scores"


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
    missing = sorted(set(required) - offered - {TEACHER_INPUT})  # the run gives the teacher's
    if extra or missing:
        problem = f"does not take {extra}" if extra else f"needs {missing}"
        raise ValueError(
            f"{type(loss).__name__} {problem}, which {type(ranker).__name__} "
            f"{'gives' if extra else 'does not give'}: feature-space losses (loss=cone) pair with "
            "model=conerank, scalar losses with scalar models (model=linear, model=mlp)"
        )


def weighted_reduction(loss: nn.Module) -> str:
    """The reduction (``"mean"`` or ``"sum"``) that :func:`weighted_query_loss` weights for
    ``loss``; a ValueError naming the loss when it gives no per-query values to weight.

    Every differank loss gives one value per query with ``reduction="none"``, except
    ``DominationLoss(pool=True)``, which pools the batch into one list (one value per batch).
    """
    reduction = getattr(loss, "reduction", None)
    pooled = bool(getattr(loss, "pool", False))
    if reduction not in ("mean", "sum") or pooled:
        setting = "pool=True" if pooled else f"reduction={reduction!r}"
        raise ValueError(
            f"{type(loss).__name__} ({setting}) gives no per-query loss values, and query "
            "weights (sample_weight) need a per-query loss: one with reduction 'mean' or 'sum' "
            "whose reduction='none' gives one value per query (DominationLoss: pool=False)"
        )
    return reduction


@contextmanager
def per_query_values(loss: nn.Module) -> Iterator[None]:
    """``loss`` computes with ``reduction="none"`` inside the block, then as before. The same
    module is switched, not a copy, so a loss's state (ConeLoss' warm start, ConvexLoss' sample
    refresh) stays one. A :class:`LossModule` reads its options, the other losses their
    ``reduction`` attribute."""

    def set_reduction(reduction: str) -> None:
        # nn.Module types the attributes it does not know as tensors
        loss.reduction = reduction  # type: ignore[assignment]
        if isinstance(loss, LossModule):
            loss.options["reduction"] = reduction

    saved = cast(str, loss.reduction)  # nn.Module types attributes it does not know as tensors
    set_reduction("none")
    try:
        yield
    finally:
        set_reduction(saved)


def weighted_query_loss(
    per_query: torch.Tensor, weights: torch.Tensor, valid: torch.Tensor, reduction: str
) -> torch.Tensor:
    """The batch loss with query weights: ``Σ_q w_q·ℓ_q / Σ_q w_q`` for ``"mean"`` (the weighted
    mean of the per-query losses), ``Σ_q w_q·ℓ_q`` for ``"sum"``, over the valid queries.

    Why this form: with every weight 1 it is the loss's own reduction, which divides by the
    number of valid queries (docs/architecture.md#validity-and-reduction), so all-ones weights
    train exactly as no weights; a query of weight w counts as w copies of itself; and scaling
    every weight by a constant leaves the mean unchanged. An invalid query's loss is 0 and its
    weight enters no denominator; a batch whose valid queries all weigh 0 gives a connected 0.

    Shape:
        per_query: [B] (``reduction="none"``, 0 where invalid); weights: [B] >= 0; valid: [B]
        bool -> a scalar.

    Example:
        >>> per_query = torch.tensor([2.0, 0.0, 5.0])
        >>> valid = torch.tensor([True, False, True])
        >>> weighted_query_loss(per_query, torch.tensor([3.0, 7.0, 1.0]), valid, "mean")
        tensor(2.7500)
    """
    weights = torch.where(valid, weights.to(per_query.dtype), 0.0)
    total = (weights * per_query).sum()
    if reduction == "sum":
        return total
    weight = weights.sum()
    return total / torch.where(weight > 0, weight, 1.0)


def warmup_cosine(
    optimizer: torch.optim.Optimizer, total_steps: int, warmup_fraction: float = 0.1
) -> torch.optim.lr_scheduler.LambdaLR:
    """Linear warm-up, then cosine decay (``conf/model/scheduler/warmup_cosine.yaml``): with
    ``W = round(warmup_fraction · total_steps)`` warm-up steps, the learning rate times
    ``(step + 1) / (W + 1)`` for the 0-based steps before W, then ``(1 + cos(π·t)) / 2``, t going
    from 0 to 1 over the remaining steps."""
    if not 0 <= warmup_fraction < 1:
        raise ValueError(f"warmup_fraction must be in [0, 1), got {warmup_fraction}")
    warmup_steps = round(warmup_fraction * total_steps)

    def factor(step: int) -> float:
        if step < warmup_steps:
            return (step + 1) / (warmup_steps + 1)  # never 0: the first step already moves
        t = (step - warmup_steps) / max(1, total_steps - warmup_steps)
        return 0.5 * (1.0 + math.cos(math.pi * min(t, 1.0)))

    return torch.optim.lr_scheduler.LambdaLR(optimizer, factor)


class EvaluationModule(pl.LightningModule):
    """Validation and test with LETOR-exact metrics; keeps the test (or predict) scores per
    source row, gathered from every process under DDP."""

    def __init__(
        self, ranker: Ranker, loss: nn.Module, ks: Sequence[int], metric_convention: str = "letor"
    ) -> None:
        super().__init__()
        check_loss_fits_ranker(ranker, loss)
        self.ranker = ranker
        self.loss = loss
        # train.py passes metrics.convention (docs/metrics.md#conventions): val/* and test/*
        self.val_metrics = LetorMetric(ks, convention=metric_convention)
        self.test_metrics = LetorMetric(ks, convention=metric_convention)
        self.test_rows: list[torch.Tensor] = []
        self.test_scores: list[torch.Tensor] = []
        # What train.py saves with every checkpoint (resolved config, data fingerprint); it must
        # hold only what ``torch.load(weights_only=True)`` reads: containers, numbers, strings.
        self.run_record: dict[str, Any] = {}
        # loss=distill: the teacher's scores per split (TeacherScores), set by the fit task from
        # the user's teacher=... config; never saved with a checkpoint
        self.teacher: Any = None
        self.loss_takes_teacher = TEACHER_INPUT in inspect.signature(loss.forward).parameters

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

    def batch_loss(
        self, batch: dict[str, torch.Tensor], target: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The only place a ranker's output meets a loss; ``target``: the batch's
        ``loss_target``, when already computed."""
        check_batch_memory(self.loss, batch["mask"], batch["features"].dtype)  # before allocating
        if target is None:
            target = self.loss_target(batch)
        inputs = self.ranker.loss_inputs()
        if self.loss_takes_teacher:
            if self.teacher is None:
                raise ValueError(
                    f"{type(self.loss).__name__} distils a teacher, and this run has none: give "
                    "teacher=checkpoint|ensemble|lightgbm|xgboost teacher.path=FILE "
                    "(docs/objectives/distill.md)"
                )
            teacher = self.teacher.for_batch(batch["doc_index"], training=self.training)
            inputs = {**inputs, TEACHER_INPUT: teacher}
        return self.loss(target, batch["labels"], batch["mask"], **inputs)

    def loss_target(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        features = batch["features"]
        if self.ranker.uses_mask:
            # uses_mask rankers take (features, mask); Ranker declares the one-argument form
            return self.ranker.loss_target(features, batch["mask"])  # type: ignore[call-arg]
        return self.ranker.loss_target(features)

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        target = self.loss_target(batch)
        # a scalar ranker's loss target is its scores [B, L]; a feature-space one's is [B, L, D]
        scores = target if target.dim() == 2 else self(batch["features"], batch["mask"])
        self.val_metrics.update(scores, batch["labels"], batch["mask"])
        # the training objective on the validation queries (without the weight penalty)
        size = batch["mask"].shape[0]
        self.log("val/loss", self.batch_loss(batch, target), batch_size=size, sync_dist=True)

    def on_fit_start(self) -> None:
        """Every logger gets the run's resolved config as its hyperparameters (TensorBoard's
        hparams.yaml, W&B's config, MLflow's params), flattened to ``group.key`` names."""
        if self.run_record:
            for logger in self.trainer.loggers:
                logger.log_hyperparams(self.run_record["config"])

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
        # all_gather_object fills each slot with one process's (rows, scores)
        shards: list[Any] = [None] * torch.distributed.get_world_size()
        torch.distributed.all_gather_object(shards, mine)
        self.test_rows = [shard_rows for shard_rows, _ in shards]
        self.test_scores = [shard_scores for _, shard_scores in shards]

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
        scheduler: ``None`` (a constant learning rate) or a factory
            ``scheduler(optimizer, total_steps=N) -> LRScheduler`` (a Hydra partial, e.g.
            :func:`warmup_cosine`), stepped after every optimizer step; N is the run's
            ``trainer.estimated_stepping_batches``.
        metric_convention: the rules of ``val/*`` and ``test/*`` (docs/metrics.md#conventions);
            ``train.py`` passes ``metrics.convention``.
        estimator: ``None``, or a click estimator of :mod:`differank.losses.unbiased` (config
            group ``ultr``): training batches then carry clicks (``clicks``, ``positions``,
            optionally ``propensities``) and the estimator turns them into the training loss
            over ``loss``; validation and test use the true labels as always. Its parameters
            (DLA's propensities, the two-tower bias) train with the ranker, at the optimizer's
            learning rate times the estimator's ``lr_scale``, and are saved in checkpoints, but
            never belong to the served or exported scorer (``ranker`` alone).
        click_validation: ``None`` (validation on the true labels), or the click metrics of
            ``ultr.select=clicks`` (:class:`~differank.rankers.metrics.clicks.ClickValidation`):
            validation batches are then held-out click sessions without labels
            (docs/clicks.md#choosing-a-model-without-labels), and ``val/click_dcg@k`` (and,
            for an estimator that fits a click model, ``val/click_loglik``) replace ``val/*``
            and ``val/loss``.
        query_weights: whether the training batches will carry query weights (``"weights"``
            [B], :class:`~differank.datamodules.split_tensors.SplitTensors`); ``True`` checks
            here, at set-up, that ``loss`` gives per-query values (:func:`weighted_reduction`),
            so a loss that cannot be weighted is refused before any training. A batch with
            weights is weighted either way (without this check, its first weighted batch
            refuses such a loss).

    Query weights (``sample_weight``): a training batch with ``"weights"`` has the loss
    :func:`weighted_query_loss` of the loss's ``reduction="none"`` values: the weighted mean
    ``Σ_q w_q·ℓ_q / Σ_q w_q`` over the batch's valid queries (a query of weight 2 counts as two
    copies of it; all-ones weights give exactly the unweighted loss). A batch without weights
    takes the unweighted path, unchanged. Validation and test (``val/*``, ``val/loss``,
    ``test/*``) are unweighted, as LightGBM's eval metrics are unless ``eval_sample_weight`` is
    given. ``train/loss`` stays the epoch's batch losses averaged by queries per batch. XGBoost's
    ranking ``sample_weight`` is one weight per query group, this weight; LightGBM's is one per
    row, and a query's weight there is the mean of its rows' weights.
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
        scheduler: Callable[..., torch.optim.lr_scheduler.LRScheduler] | None = None,
        metric_convention: str = "letor",
        estimator: nn.Module | None = None,
        query_weights: bool = False,
        click_validation: ClickValidation | None = None,
    ) -> None:
        if l1 < 0 or l2 < 0:
            raise ValueError(f"l1 and l2 must be >= 0, got l1={l1}, l2={l2}")
        if not augment_noise >= 0:
            raise ValueError(f"augment_noise must be >= 0, got {augment_noise}")
        super().__init__(ranker(n_features=n_features), loss, ks, metric_convention)
        self.make_optimizer = optimizer
        self.make_scheduler = scheduler
        self.l1, self.l2 = float(l1), float(l2)
        self.augment_noise = float(augment_noise)
        self.estimator = estimator
        self.click_validation = click_validation
        if query_weights:
            weighted_reduction(loss)
        self._epoch_loss_sum: torch.Tensor | None = None  # Σ queries · loss of this epoch
        self._epoch_loss_queries = 0

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
        batch = self.augment(batch)
        if "weights" in batch:
            loss = self.weighted_batch_loss(batch)
        elif "clicks" in batch:
            loss = self.click_loss(batch)
        else:
            loss = self.batch_loss(batch)
        self._add_to_epoch_loss(loss, batch["mask"].shape[0])
        return loss + self.penalty()

    def weighted_batch_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The training loss of a batch with query weights (the class docstring's weighted
        mean): the loss's per-query values, weighted by ``batch["weights"]``."""
        reduction = weighted_reduction(self.loss)
        if "clicks" in batch:
            raise ValueError(
                "a click batch carries query weights, and click estimators (ultr=...) take "
                "none: train on clicks without sample_weight"
            )
        with per_query_values(self.loss):
            per_query = self.batch_loss(batch)
        queries = batch["mask"].shape[0]
        if per_query.shape != (queries,):
            raise ValueError(
                f"{type(self.loss).__name__} with reduction='none' gave shape "
                f"{tuple(per_query.shape)} for {queries} queries: query weights (sample_weight) "
                "need a per-query loss, one value per query"
            )
        return weighted_query_loss(
            per_query, batch["weights"], self.counted_queries(batch), reduction
        )

    def counted_queries(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """[B] bool: the batch's queries the loss counts: those with a preference pair (the
        losses' validity rule), or the loss's own choice where it has one (``loss=distill``
        counts every query with a document: the teacher orders it whatever its labels)."""
        own_rule = getattr(self.loss, "counted_queries", None)
        if own_rule is not None:
            return own_rule(batch["labels"], batch["mask"])
        labels = float_labels(batch["labels"], compute_dtype(batch["features"].dtype))
        return finite_label_mask(labels, batch["mask"])[1]

    def click_loss(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        """The estimator's loss on a click batch (``clicks``, ``positions``, ``mask``, optional
        ``propensities``: the contract of docs/objectives/unbiased.md#click-batches)."""
        if self.estimator is None:
            raise ValueError(
                "the training batches carry clicks but the model has no click estimator: choose "
                "one with ultr=naive|ips|dla|rem|pairwise|twotower|dr"
            )
        return self.estimator(
            self.loss,
            self.loss_target(batch),
            batch["clicks"],
            batch["positions"],
            batch["mask"],
            batch.get("propensities"),
        )

    def validation_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        """The true-label metrics, or on a held-out click batch (``ultr.select=clicks``: it
        has ``clicks`` [B, S, L] and no ``labels``) the click metrics."""
        if "clicks" not in batch:
            return super().validation_step(batch, batch_idx)
        if self.click_validation is None:
            raise ValueError(
                "the validation batches are click sessions but the model has no click "
                "validation: build it with click_validation= (train.py: ultr.select=clicks)"
            )
        scores = self(batch["features"], batch["mask"])
        self.click_validation.update(scores, batch, self.estimator)

    def on_validation_epoch_end(self) -> None:
        if self.click_validation is None:
            return super().on_validation_epoch_end()
        strategy = self.trainer.strategy
        values = self.click_validation.compute(lambda v: strategy.reduce(v, reduce_op="sum"))
        self.click_validation.reset()
        for name, value in values.items():  # summed over processes already
            self.log(f"val/{name}", value.float(), prog_bar=name == self.click_validation.dcg_name)

    def _add_to_epoch_loss(self, loss: torch.Tensor, size: int) -> None:
        """Sum ``size · loss`` on the loss's device: one op per step, no host read. (A
        ``self.log`` per step cost about 0.8 ms of Lightning bookkeeping per step on the CPU,
        more than the gather of the batch: benchmarks/results/epoch_overhead.md.)"""
        if self._epoch_loss_sum is None:
            self._epoch_loss_sum = torch.zeros((), dtype=torch.float32, device=loss.device)
        self._epoch_loss_sum.add_(loss.detach(), alpha=size)
        self._epoch_loss_queries += size

    def on_train_epoch_start(self) -> None:
        self._epoch_loss_sum, self._epoch_loss_queries = None, 0

    def on_train_epoch_end(self) -> None:
        """``train/loss``: the epoch's mean batch loss weighted by queries per batch (over every
        process under DDP), the value a per-step ``self.log(on_epoch=True)`` gave."""
        if self._epoch_loss_queries:
            assert self._epoch_loss_sum is not None  # _add_to_epoch_loss counted the queries
            mean = self._epoch_loss_sum / self._epoch_loss_queries
            queries = self._epoch_loss_queries
            self.log("train/loss", mean, batch_size=queries, sync_dist=True, prog_bar=True)
        self._epoch_loss_sum, self._epoch_loss_queries = None, 0

    def optimizer_step(self, *args, **kwargs) -> None:
        super().optimizer_step(*args, **kwargs)
        self.ranker.constrain()

    def configure_optimizers(self) -> OptimizerLRScheduler:
        optimizer = self.make_optimizer(self.parameters())
        estimator = [] if self.estimator is None else list(self.estimator.parameters())
        if estimator:  # its own group: the learning rate times the estimator's lr_scale
            mine = {id(parameter) for parameter in estimator}
            ranker = [p for p in self.parameters() if id(p) not in mine]
            optimizer = self.make_optimizer([{"params": ranker}, {"params": estimator}])
            scale = float(getattr(self.estimator, "lr_scale", 1.0))
            optimizer.param_groups[1]["lr"] = optimizer.defaults["lr"] * scale
        if self.make_scheduler is None:
            return optimizer
        steps = int(self.trainer.estimated_stepping_batches)
        schedule = self.make_scheduler(optimizer, total_steps=steps)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}


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
        metric_convention: str = "letor",
    ) -> None:
        fitted = solver(n_features=n_features)
        super().__init__(fitted.ranker, loss, ks, metric_convention)
        self.solver = fitted
        self.automatic_optimization = False
        self.train_batch: dict[str, torch.Tensor] | None = None

    def on_fit_start(self) -> None:
        super().on_fit_start()
        # Lightning sets trainer.datamodule when fitting; its Trainer class does not declare it
        batch = self.trainer.datamodule.full_batch("train")  # type: ignore[attr-defined]
        if "weights" in batch:  # refused, not dropped: a solver's objective has no weights
            raise ValueError(
                f"{type(self.solver).__name__} fits the unweighted objective and the training "
                "split carries query weights (sample_weight): train with a gradient model "
                "(model=linear|mlp|transformer|conerank) or without weights"
            )
        self.train_batch = {key: value.to(self.device) for key, value in batch.items()}
        # One solver step per epoch: the loader's batches only pace the epochs, so draw just one
        # (the fit loop sizes its epochs after this hook; validation still runs every epoch).
        self.trainer.limit_train_batches = 1

    def training_step(self, batch: dict[str, torch.Tensor], batch_idx: int) -> None:
        full = self.train_batch
        assert full is not None  # on_fit_start moved the training split here
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
        # configure_optimizers gives one optimizer, which Lightning hands back alone
        optimizer = cast(LightningOptimizer, self.optimizers())
        optimizer.step()  # moves nothing; advances the step count checkpointing keys on
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
