"""The tasks of ``train.py``: fit, test, predict, export, simulate (see train.py's docstring
for what each writes). Imported only when a task runs, so ``python train.py --help`` and a mistyped
override answer without loading Lightning.

Public API::

    run_task(cfg, run_dir, *, overrides=(), multirun=False) -> float
        # fit: the best monitored validation value, else NaN
    build_run(cfg, checkpoint=None) -> (datamodule, model)   # None: cfg is the user's own
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytorch_lightning as pl
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from differank.datamodules.atomic_files import write_files
from differank.losses.unbiased import Naive
from differank.rankers.checkpoints import (
    build_restored,
    check_data_root,
    data_fingerprint,
    load_checkpoint,
    resolved,
    restore_run,
    scorer_from_checkpoint,
    serving_record,
    serving_scorer,
)
from differank.rankers.run.click_runs import click_datamodule, simulate
from differank.rankers.run.curves import plot_run_curves
from differank.rankers.run.export_formats import ExportOptions, check_formats, export_files
from differank.rankers.run.scoring import (
    metrics_table,
    read_letor_files,
    score_split,
    write_predictions,
)
from differank.rankers.training.callbacks import NOISY_WARNINGS

TASKS = ("fit", "test", "predict", "export", "simulate")
_NEED_CHECKPOINT = ("test", "predict", "export")
log = logging.getLogger(__name__)


def _not_a_tip(record: logging.LogRecord) -> bool:
    return not record.getMessage().startswith("💡 Tip")  # Lightning's litlogger advert


def quiet_third_party() -> None:
    for message in NOISY_WARNINGS:
        warnings.filterwarnings("ignore", message=message)
    logging.getLogger("pytorch_lightning.utilities.rank_zero").addFilter(_not_a_tip)
    # An ONNX export logs ~12 lines: "torchvision is not installed" warnings of the exporter's
    # registry and the graph passes' INFO ("No unused functions to remove", "PassManager: ...").
    logging.getLogger("torch.onnx._internal.exporter._registration").setLevel(logging.ERROR)
    for name in ("torch.onnx", "onnxscript", "onnx_ir"):
        logging.getLogger(name).setLevel(logging.WARNING)


def run_task(
    cfg: DictConfig, run_dir: Path, *, overrides: Sequence[str] = (), multirun: bool = False
) -> float:
    """Run ``cfg.task`` and write the outputs into ``run_dir``. ``cfg`` is ``conf/train.yaml``
    composed with ``overrides`` (the command line's, in Hydra's grammar: they win over a
    restored checkpoint's config); ``multirun``: the run is one job of a sweep (``-m``)."""
    files = cfg.get("files")
    if cfg.task not in TASKS or (cfg.task in _NEED_CHECKPOINT and not cfg.ckpt_path):
        raise ValueError(
            f"task must be one of {TASKS} ({', '.join(_NEED_CHECKPOINT)} need ckpt_path=...), "
            f"got task={cfg.task} ckpt_path={cfg.ckpt_path}"
        )
    if files and cfg.task not in ("test", "predict"):
        raise ValueError(f"files=... is scored by task=test or task=predict, not task={cfg.task}")
    quiet_third_party()
    if cfg.task == "fit":
        return fit(cfg, run_dir, multirun)
    if cfg.task == "simulate":
        pl.seed_everything(cfg.seed, workers=True, verbose=False)
        simulate(cfg, run_dir)
        return float("nan")
    checkpoint = load_checkpoint(cfg.ckpt_path)
    serving = checkpoint.get("differank", {}).get("serving")
    if cfg.task == "export" and serving is not None:  # the checkpoint alone: no data read
        export(scorer_from_checkpoint(checkpoint, cfg.ckpt_path)[0], run_dir, cfg.get("export"))
    elif files:
        paths = [files] if isinstance(files, str) else list(files)
        score_files(cfg, checkpoint, run_dir, paths, overrides)
    else:
        evaluate_restored(cfg, checkpoint, run_dir, overrides, multirun)
    return float("nan")


def fit(cfg: DictConfig, run_dir: Path, multirun: bool = False) -> float:
    """Train (resuming from ``ckpt_path``), then test the best epoch and write the outputs."""
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
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
    saver = trainer.checkpoint_callback
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
    if not trainer.is_global_zero or trainer.fast_dev_run:
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
    datamodule = click_datamodule(cfg, instantiate(cfg.data))  # clicks=none: the data itself
    loss = instantiate(cfg.loss)
    model = instantiate(cfg.model, loss=loss, n_features=datamodule.n_features, **metrics)
    return datamodule, model


def click_estimator(cfg: DictConfig) -> dict[str, Any]:
    """``{"estimator": the instantiated cfg.ultr}`` when the run trains from clicks, else
    ``{}``. A click run without ``ultr`` trains with the naive estimator (clicks as labels,
    said in the log); an estimator without clicks is refused with the fix."""
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
    return {"estimator": instantiate(ultr)}


def distill_teacher(cfg: DictConfig):
    """The teacher's scores of the training and validation splits (cached with the data):
    the teacher built from the user's ``teacher`` config, scoring the run's data read raw (no
    normalization, no transform), as every teacher scores raw features."""
    from differank.datamodules.reader import default_cache_dir
    from differank.rankers.run.teacher_scores import teacher_scores

    teacher = instantiate(cfg.teacher)
    raw = instantiate(cfg.data, normalization="none", **transform_none(cfg.data))
    cache_dir = Path(raw.cache_dir or default_cache_dir()).expanduser()
    return teacher_scores(teacher, raw, cache_dir)


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
    """test / predict / export on the data the checkpoint was trained with (its fold layout,
    command-line ``overrides`` winning), rebuilt from the checkpoint's config."""
    record = checkpoint.get("differank")
    cfg = restore_run(cfg, checkpoint, cfg.ckpt_path, overrides)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    datamodule, model = build_run(cfg, checkpoint if record is not None else None)
    model.load_state_dict(checkpoint["state_dict"])
    if cfg.task == "export":  # a checkpoint without a serving record: statistics from the data
        scorer = serving_scorer(model.ranker, serving_record(datamodule))
        export(scorer, run_dir, cfg.get("export"))
        return
    trainer = make_trainer(cfg, multirun)
    if cfg.task == "predict":
        trainer.predict(model, datamodule=datamodule, return_predictions=False)
    else:
        trainer.test(model, datamodule=datamodule, verbose=False, weights_only=True)
    write_lightning_outputs(
        cfg, trainer, model, datamodule, run_dir, describe_checkpoint(checkpoint, cfg.monitor)
    )


def score_files(
    cfg: DictConfig,
    checkpoint: dict,
    run_dir: Path,
    files: list[str],
    overrides: Sequence[str] = (),
) -> None:
    """test / predict on LETOR files given on the command line, with the checkpoint's own
    feature transform and statistics (no fold layout, no training data)."""
    scorer, module = scorer_from_checkpoint(checkpoint, cfg.ckpt_path)
    restored = restore_run(cfg, checkpoint, cfg.ckpt_path, overrides)
    data = restored.data  # the run's reading options, the command line's winning
    nan_policy, null_value = data.get("nan_policy", "error"), data.get("null_value")
    split = read_letor_files(files, scorer.n_features, nan_policy, null_value)
    scores = score_split(scorer, split, batch_size=data.get("eval_batch_size", 128))
    weights = describe_checkpoint(checkpoint, cfg.monitor)
    metrics = write_predictions(
        run_dir,
        scores,
        split,
        evaluate=cfg.task == "test",
        ks=module.test_metrics.ks,
        convention=cfg.metrics.convention,
    )
    report(run_dir, metrics, weights, cfg.metrics.convention)


def make_trainer(cfg: DictConfig, multirun: bool = False) -> pl.Trainer:
    """The Lightning trainer of ``cfg`` (its callbacks and loggers); ``multirun``: the run is
    one job of a sweep, where local DDP cannot start (:func:`check_ddp_launch`)."""
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
    torch.utils.deterministic.fill_uninitialized_memory = False
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


def report(run_dir: Path, metrics: dict[str, float] | None, weights: str, convention: str) -> None:
    if metrics is None:
        log.info("predictions of %s: %s", weights, run_dir / "predictions")
    else:
        table = metrics_table(metrics, convention)
        log.info("test metrics of %s:\n%s\noutputs: %s", weights, table, run_dir)


def describe_checkpoint(checkpoint: dict, monitor: str) -> str:
    """Which weights were scored: the checkpoint's epoch and validation value."""
    value = checkpoint.get("differank", {}).get("validation", {}).get(monitor)
    shown = "" if value is None else f", {monitor} {value:.4f}"
    return f"epoch {checkpoint.get('epoch', '?')}{shown}"


def check_ddp_launch(trainer: pl.Trainer, multirun: bool) -> None:
    """Lightning starts local DDP ranks by re-running the command line, which under ``-m``
    (``multirun``) is the whole sweep; a SLURM launcher starts the ranks itself."""
    spawns = trainer.world_size > 1
    spawns = spawns and not trainer.strategy.cluster_environment.creates_processes_externally
    if spawns and multirun:
        raise ValueError(
            "local multi-process DDP cannot run inside a sweep (-m): sweep with "
            "hydra/launcher=slurm_gpu (SLURM starts one process per GPU)"
        )


def export(scorer, run_dir: Path, options: DictConfig | None = None) -> None:
    """The formats of ``export.format`` under ``run_dir/export`` (rankers/run/export_formats.py),
    all written or none. The default, ``export/scorer.pt`` and ``export/scorer.onnx``, skips ONNX
    with a warning when the ``export`` extra is missing; a format asked for by name fails."""
    chosen = {} if options is None else dict(options)
    asked = chosen.get("format")
    formats = check_formats(asked)
    names = chosen.get("feature_names")
    settings = ExportOptions(
        name=str(chosen.get("name") or "differank"),
        feature_names=None if names is None else [str(name) for name in names],
    )
    folder = run_dir / "export"
    try:
        files = export_files(scorer, folder, formats, settings)
    except ImportError as error:  # onnx / onnxscript are the optional "export" extra
        if asked is not None:
            raise ImportError(f"{error}: pip install 'differank[export]'") from error
        log.warning("ONNX export skipped (pip install 'differank[export]'): %s", error)
        files = export_files(scorer, folder, ["torchscript"], settings)
    write_files(files)
    for path in sorted(files):
        log.info("export: %s", path)
