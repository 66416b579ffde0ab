"""The tasks that run a Lightning Trainer or read a data module: ``task=fit``, ``task=test |
predict`` on the data a checkpoint was trained with, ``task=simulate``, and the export of a
checkpoint saved without a serving record. :func:`differank.rankers.run.tasks.run_task` imports
this module only for them, so scoring files and exporting load no Lightning.

Public API::

    build_run(cfg, checkpoint=None) -> (datamodule, model)   # None: cfg is the user's own
    make_trainer(cfg, multirun=False) -> pl.Trainer
    fit(cfg, run_dir, multirun) -> float, evaluate_restored(cfg, checkpoint, run_dir, ...),
    simulate_clicks(cfg, run_dir), restored_scorer(cfg, checkpoint, overrides) -> Scorer
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from differank.datamodules.path_components import path_component
from differank.losses.unbiased import Naive
from differank.rankers.checkpoints import (
    Scorer,
    build_restored,
    check_data_root,
    data_fingerprint,
    load_checkpoint,
    resolved,
    restore_run,
    serving_record,
    serving_scorer,
)
from differank.rankers.run.click_runs import click_datamodule, simulate
from differank.rankers.run.click_selection import (
    click_selection,
    estimator_config,
    select_by_clicks,
)
from differank.rankers.run.curves import plot_run_curves
from differank.rankers.run.scoring import describe_checkpoint, report, write_predictions

log = logging.getLogger(__name__)


def seed_run(cfg: DictConfig) -> None:
    """Seed every generator with ``cfg.seed`` (Python, NumPy, torch, the loaders' workers)."""
    pl.seed_everything(cfg.seed, workers=True, verbose=False)


def simulate_clicks(cfg: DictConfig, run_dir: Path) -> None:
    """``task=simulate``: the click log of ``clicks=...`` (rankers/run/click_runs.py), seeded."""
    seed_run(cfg)
    simulate(cfg, run_dir)


def fit(cfg: DictConfig, run_dir: Path, multirun: bool = False) -> float:
    """Train (resuming from ``ckpt_path``), then test the best epoch and write the outputs."""
    seed_run(cfg)
    selection = click_selection(cfg)
    if selection is not None:  # before the callbacks read the monitor
        select_by_clicks(cfg, selection)
    if cfg.ckpt_path and Path(cfg.ckpt_path).is_file():  # a damaged file is named, not read by
        load_checkpoint(cfg.ckpt_path)  # Lightning (whose error would not name it)
    datamodule, model = build_run(cfg)
    if cfg.get("teacher") is not None:  # loss=distill: the user's teacher, never a checkpoint's
        model.teacher = distill_teacher(cfg)
    trainer = make_trainer(cfg, multirun)
    model.run_record = {
        "config": resolved(cfg),
        "monitor": cfg.monitor,
        "data": data_fingerprint(datamodule),
        "serving": serving_record(datamodule),
    }
    trainer.fit(model, datamodule=datamodule, ckpt_path=cfg.ckpt_path, weights_only=True)
    # conf's ModelCheckpoint (best_model_path, mode), which Lightning types as its base class
    saver: Any = trainer.checkpoint_callback
    best = saver.best_model_path if saver and saver.best_model_path else None
    score = saver.best_model_score if saver else None
    value = float(score if score is not None else trainer.callback_metrics[cfg.monitor])
    trainer.test(model, datamodule=datamodule, ckpt_path=best, verbose=False, weights_only=True)
    if best:
        weights = describe_checkpoint(load_checkpoint(best), cfg.monitor)
    else:
        metric = trainer.callback_metrics.get(cfg.monitor)
        shown = "" if metric is None else f", {cfg.monitor} {float(metric):.4f}"
        weights = f"last epoch {trainer.current_epoch - 1}{shown}"
    write_lightning_outputs(cfg, trainer, model, datamodule, run_dir, weights)
    write_curves(trainer, run_dir, cfg.monitor, saver.mode if saver else "max")
    return value


def write_curves(trainer: pl.Trainer, run_dir: Path, monitor: str, mode: str) -> None:
    """``curves.png``: the run's training loss and validation metrics per epoch, the best epoch
    marked (rank 0 only; a run without a CSV log is told why it has none)."""
    if not trainer.is_global_zero or trainer.fast_dev_run:  # type: ignore[attr-defined]  # set untyped by Trainer.__init__
        return
    try:
        plot_run_curves(run_dir, run_dir / "curves.png", monitor=monitor, mode=mode)
    except FileNotFoundError as error:
        log.warning("no curves.png: %s", error)


def build_run(cfg: DictConfig, checkpoint: dict | None = None):
    """``(datamodule, model)`` of ``cfg``: Hydra instantiates a config the user composed
    (``checkpoint`` None); one restored from ``checkpoint`` is built only by the checkpoint
    room's guarded builder (:func:`differank.rankers.checkpoints.build_restored`)."""
    if checkpoint is not None:
        return build_restored(cfg, checkpoint)
    check_data_root(cfg.data)
    metrics = {"metric_convention": cfg.metrics.convention, **click_estimator(cfg)}
    data = instantiate(cfg.data, **distilled_data(cfg))
    datamodule = click_datamodule(cfg, data)  # clicks=none: the data itself
    loss = instantiate(cfg.loss)
    model = instantiate(cfg.model, loss=loss, n_features=datamodule.n_features, **metrics)
    return datamodule, model


def distilled_data(cfg: DictConfig) -> dict[str, Any]:
    """The data options a distilled run (``teacher=...``) changes: the teacher orders every
    training query, labels all equal or not, so the queries that
    ``data.drop_train_queries_without_pairs=true`` would drop are kept (said in the log)."""
    if cfg.get("teacher") is None or not cfg.data.get("drop_train_queries_without_pairs"):
        return {}
    log.warning(
        "teacher=... scores every training query: the queries whose labels are all equal are "
        "kept for distillation (data.drop_train_queries_without_pairs=true is not applied)"
    )
    return {"drop_train_queries_without_pairs": False}


def click_estimator(cfg: DictConfig) -> dict[str, Any]:
    """``{"estimator": the instantiated cfg.ultr}`` when the run trains from clicks, else
    ``{}``, with ``"click_validation"`` under ``ultr.select=clicks``. A click run without
    ``ultr`` trains with the naive estimator (clicks as labels, said in the log); an estimator
    without clicks is refused with the fix."""
    ultr, clicks = cfg.get("ultr"), cfg.get("clicks")
    clicking = clicks is not None and clicks.get("mode") is not None
    if ultr is None:
        if clicking:
            log.info("clicks without ultr=...: the naive estimator (clicks as labels) trains")
            return {"estimator": Naive()}
        return {}
    if not clicking:
        raise ValueError(
            f"ultr ({ultr.get('_target_')}) debiases training on clicks, but clicks=none "
            "trains on the true labels: add a click model (clicks=pbm, ...) or drop ultr"
        )
    if "solver" in cfg.model:
        raise ValueError(
            "ultr=... trains by gradient steps: it needs a gradient-trained model "
            "(model=linear, mlp, transformer), not a full-batch solver"
        )
    estimator = instantiate(estimator_config(ultr))
    selection = click_selection(cfg)
    if selection is None:
        return {"estimator": estimator}
    if selection.metric == "loglik" and not estimator.fits_click_model:
        raise ValueError(
            f"ultr.select_metric=loglik: {type(estimator).__name__} fits no click model to give "
            "held-out clicks a likelihood; use ultr.select_metric=ips_dcg, or ultr=twotower|"
            "dla|rem"
        )
    return {"estimator": estimator, "click_validation": selection.validation()}


def distill_teacher(cfg: DictConfig):
    """The teacher's scores of the training and validation splits (cached with the data):
    the teacher built from the user's ``teacher`` config, scoring the run's data read raw (no
    normalization, no transform), as every teacher scores raw features."""
    from differank.rankers.run.teacher_scores import teacher_scores

    teacher = instantiate(cfg.teacher)
    raw, cache_dir = raw_data(cfg)
    return teacher_scores(teacher, raw, cache_dir)


def raw_data(cfg: DictConfig):
    """``(data module, its cache folder)``: the run's data read raw (no normalization, no
    transform), as a teacher scores it and a tree student learns from it."""
    from differank.datamodules.reader import default_cache_dir

    check_data_root(cfg.data)
    raw = instantiate(cfg.data, normalization="none", **transform_none(cfg.data))
    return raw, Path(raw.cache_dir or default_cache_dir()).expanduser()


def transform_none(data: DictConfig) -> dict:
    """``transform="none"`` for data modules that take a feature transform."""
    return {"transform": "none"} if "transform" in data else {}


def evaluate_restored(
    cfg: DictConfig,
    checkpoint: dict,
    run_dir: Path,
    overrides: Sequence[str] = (),
    multirun: bool = False,
) -> None:
    """test / predict on the data the checkpoint was trained with (its fold layout,
    command-line ``overrides`` winning), rebuilt from the checkpoint's config."""
    datamodule, model = restored_run(cfg, checkpoint, overrides)
    trainer = make_trainer(cfg, multirun)
    if cfg.task == "predict":
        trainer.predict(model, datamodule=datamodule, return_predictions=False)
    else:
        trainer.test(model, datamodule=datamodule, verbose=False, weights_only=True)
    write_lightning_outputs(
        cfg, trainer, model, datamodule, run_dir, describe_checkpoint(checkpoint, cfg.monitor)
    )


def restored_scorer(cfg: DictConfig, checkpoint: dict, overrides: Sequence[str] = ()) -> Scorer:
    """The raw-feature scorer of a checkpoint saved without a serving record (before
    checkpoints carried one): its ranker behind the statistics of its run's data, read again."""
    datamodule, model = restored_run(cfg, checkpoint, overrides)
    return serving_scorer(model.ranker, serving_record(datamodule))


def restored_run(cfg: DictConfig, checkpoint: dict, overrides: Sequence[str] = ()):
    """``(datamodule, model)`` of the run that saved ``checkpoint`` (command-line
    ``overrides`` winning), its weights loaded, seeded."""
    record = checkpoint.get("differank")
    cfg = restore_run(cfg, checkpoint, cfg.ckpt_path, overrides)
    seed_run(cfg)
    datamodule, model = build_run(cfg, checkpoint if record is not None else None)
    model.load_state_dict(checkpoint["state_dict"])
    return datamodule, model


def make_trainer(cfg: DictConfig, multirun: bool = False) -> pl.Trainer:
    """The Lightning trainer of ``cfg`` (its callbacks and loggers); ``multirun``: the run is
    one job of a sweep, where local DDP cannot start (:func:`check_ddp_launch`)."""
    for key, logger in cfg.logger.items():  # a logger's folder inside the run folder
        for option in ("name", "version"):
            if isinstance(logger.get(option), str):
                path_component(logger[option], f"logger.{key}.{option}")
    callbacks = [instantiate(callback) for callback in cfg.callbacks.values()]
    if cfg.quiet:
        callbacks = [c for c in callbacks if not isinstance(c, pl.callbacks.ProgressBar)]
    trainer = instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=[instantiate(logger) for logger in cfg.logger.values()],
        enable_progress_bar=any(isinstance(c, pl.callbacks.ProgressBar) for c in callbacks),
    )
    check_ddp_launch(trainer, multirun)
    warn_removed_options(cfg)
    # trainer.deterministic=true also makes torch fill every new tensor with NaN (so that a
    # read of uninitialised memory is reproducible): a write of every batch's bytes before the
    # gather writes them again (a quarter of the gather's time: benchmarks/epoch_overhead.py).
    # Nothing here reads memory it has not written, so the deterministic kernels stay, the
    # fill goes.
    torch.utils.deterministic.fill_uninitialized_memory = False  # type: ignore[attr-defined]  # a module property torch's stubs lack
    return trainer


def warn_removed_options(cfg: DictConfig) -> None:
    """Config keys accepted for one more release although they no longer do anything."""
    if cfg.get("lean_loop") is not None:
        log.warning(
            "lean_loop=%s has no effect and will be removed in the next release: training "
            "always runs through Lightning's own loop; drop lean_loop from your command line "
            "or config",
            cfg.lean_loop,
        )


def write_lightning_outputs(cfg, trainer, model, datamodule, run_dir: Path, weights: str) -> None:
    """The run's prediction files (and metrics, except for predict) of the test split that
    ``trainer`` just scored; under DDP only global rank 0 writes."""
    if not trainer.is_global_zero or trainer.fast_dev_run:  # fast_dev_run: one batch only
        return
    scores = model.scores_by_row(datamodule.num_rows("test"))
    split = datamodule.split_data("test")
    metrics = write_predictions(
        run_dir,
        scores,
        split,
        evaluate=cfg.task != "predict",
        ks=model.test_metrics.ks,
        convention=model.test_metrics.convention,
    )
    report(run_dir, metrics, weights, cfg.metrics.convention)


def check_ddp_launch(trainer: pl.Trainer, multirun: bool) -> None:
    """Lightning starts local DDP ranks by re-running the command line, which under ``-m``
    (``multirun``) is the whole sweep; a SLURM launcher starts the ranks itself."""
    spawns = trainer.world_size > 1  # then the strategy is DDP's, which has an environment
    if spawns:
        environment = trainer.strategy.cluster_environment  # type: ignore[attr-defined]
        spawns = not environment.creates_processes_externally
    if spawns and multirun:
        raise ValueError(
            "local multi-process DDP cannot run inside a sweep (-m): sweep with "
            "hydra/launcher=slurm_gpu (SLURM starts one process per GPU)"
        )
