"""The tasks of ``train.py``: fit, test, predict, export, simulate, tune (see train.py's docstring
for what each writes). Imported only when a task runs, so ``python train.py --help`` and a mistyped
override answer without loading torch. What a checkpoint alone does (``task=test | predict
files=[...]``, ``task=export``) is here and loads no Lightning; the tasks that run a Trainer or
read a fold are :mod:`differank.rankers.run.trainer_tasks`, imported only for them. A tree
student (``student=lightgbm|xgboost``) is fitted by :mod:`differank.rankers.students.fit_task`
and its model file exported by :mod:`differank.rankers.students.export_task`.

Public API::

    run_task(cfg, run_dir, *, overrides=(), multirun=False) -> float
        # fit: the best monitored validation value, else NaN
    export(scorer, run_dir, options)      # export.format's files under run_dir/export
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

from omegaconf import DictConfig

from differank.datamodules.atomic_files import write_files
from differank.rankers.checkpoints import (
    checkpoint_scorer,
    load_checkpoint,
    rebuild_module,
    restore_run,
)
from differank.rankers.checkpoints.old_paths import forward_moved
from differank.rankers.run.export_formats import ExportOptions, check_formats, export_files
from differank.rankers.run.scoring import (
    describe_checkpoint,
    read_letor_files,
    report,
    score_split,
    write_predictions,
)
from differank.rankers.students.export_task import export_student
from differank.rankers.students.model_files import student_library
from differank.rankers.training.console import NOISY_WARNINGS

TASKS = ("fit", "test", "predict", "export", "simulate", "tune")
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
    # task=tune: Optuna's storage imports alembic, whose plugins log "setup plugin ..." at INFO
    logging.getLogger("alembic").setLevel(logging.WARNING)


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
    if cfg.task == "fit" and cfg.get("student") is not None:  # a tree student: no Lightning loop
        from differank.rankers.students.fit_task import fit_student

        return fit_student(cfg, run_dir)
    if cfg.task == "fit":
        return trainer_tasks().fit(cfg, run_dir, multirun)
    if cfg.task == "simulate":
        trainer_tasks().simulate_clicks(cfg, run_dir)
        return float("nan")
    if cfg.task == "tune":  # the selection protocol (docs/tuning.md): Optuna, LightGBM load here
        from differank.rankers.tuning.tune import tune_task

        tune_task(cfg, run_dir, overrides)
        return float("nan")
    if student_library(cfg.ckpt_path) is not None:  # a tree student's model file
        if cfg.task != "export" or files:
            raise ValueError(
                f"{cfg.ckpt_path} is a tree student's model file: task=export writes its formats; "
                "its test metrics and predictions are written by the student's fit"
            )
        export_student(cfg.ckpt_path, run_dir, cfg.get("export"))
        return float("nan")
    checkpoint = load_checkpoint(cfg.ckpt_path)
    serving = checkpoint.get("differank", {}).get("serving")
    if files:
        paths = [files] if isinstance(files, str) else list(files)
        score_files(cfg, checkpoint, run_dir, paths, overrides)
    elif cfg.task == "export" and serving is not None:  # the checkpoint alone: no data read
        export(checkpoint_scorer(checkpoint, cfg.ckpt_path), run_dir, cfg.get("export"))
    elif cfg.task == "export":  # saved without a serving record: statistics from the data
        scorer = trainer_tasks().restored_scorer(cfg, checkpoint, overrides)
        export(scorer, run_dir, cfg.get("export"))
    else:
        trainer_tasks().evaluate_restored(cfg, checkpoint, run_dir, overrides, multirun)
    return float("nan")


def trainer_tasks() -> ModuleType:
    """:mod:`differank.rankers.run.trainer_tasks`, imported only by the tasks that run a Trainer
    or read a fold: scoring files and exporting load no Lightning."""
    from differank.rankers.run import trainer_tasks as tasks

    return tasks


def score_files(
    cfg: DictConfig,
    checkpoint: dict,
    run_dir: Path,
    files: list[str],
    overrides: Sequence[str] = (),
) -> None:
    """test / predict on LETOR files given on the command line, with the checkpoint's own
    feature transform and statistics (no fold layout, no training data)."""
    scorer = checkpoint_scorer(checkpoint, cfg.ckpt_path)
    restored = restore_run(cfg, checkpoint, cfg.ckpt_path, overrides)
    data = restored.data  # the run's reading options, the command line's winning
    nan_policy, null_value = data.get("nan_policy", "error"), data.get("null_value")
    split = read_letor_files(files, scorer.n_features, nan_policy, null_value)
    scores = score_split(scorer, split, batch_size=data.get("eval_batch_size", 128))
    weights = describe_checkpoint(checkpoint, cfg.monitor)
    evaluate = cfg.task == "test"
    # a test's cut-offs are its module's metrics': only a test builds the module (Lightning)
    ks = rebuild_module(checkpoint, cfg.ckpt_path).test_metrics.ks if evaluate else ()
    metrics = write_predictions(
        run_dir, scores, split, evaluate=evaluate, ks=ks, convention=cfg.metrics.convention
    )
    report(run_dir, metrics, weights, cfg.metrics.convention)


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


# what moved to trainer_tasks.py and scoring.py, importable from here for one release
__getattr__ = forward_moved(__name__)
