"""Train a ranker, pick the best validation epoch, test it and write the run's outputs.

``task=fit`` (default) trains (resuming from ``ckpt_path``, e.g. ``RUN/checkpoints/last.ckpt``)
and tests the best epoch; ``task=test`` tests the weights of ``ckpt_path``; ``task=predict``
scores the test split without metrics; ``task=export`` writes ``export/scorer.pt``
(TorchScript) and ``export/scorer.onnx``. Every checkpoint carries the run's resolved config and
a fingerprint of its data (content sha256, feature count, normalization statistics): test,
predict and export rebuild data, model and loss from it, command-line overrides winning, and
refuse data whose features or normalization differ (``allow_data_mismatch=true`` accepts a
different normalization). Outputs in the Hydra run directory: ``checkpoints/{best,last}.ckpt``,
Lightning's CSV and TensorBoard logs, ``train.log`` (the console lines), ``predictions/test.txt``
(one ``%.17g`` score per line of the test file(s), scorable by ``Eval-Score-4.0.pl``),
``predictions/test.sources`` (those files, in order), ``predictions/test.run`` (a TREC run) and
``test_metrics.json`` (the test rows scored in memory by LETOR 4.0's rules: what
``python -m differank.rankers.metrics.evaluate`` gives for ``test.txt``). Under DDP only global rank
0 writes. ``ckpt_path=last`` resumes from the run folder's last checkpoint when there is one.
Returns the best monitored validation value (``task=fit``, for sweepers), else NaN.
"""

import hashlib
import io
import json
import logging
import os
import warnings
from pathlib import Path
from typing import Any

import hydra
import numpy as np
import pytorch_lightning as pl
import torch
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.types import RunMode
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict
from rich.console import Console
from rich.table import Table

from differank.datamodules.download import data_home
from differank.rankers.metrics.evaluate import convention_means, evaluate_arrays
from differank.rankers.run.export import (
    export_onnx,
    export_torchscript,
    serving_scorer,
    write_trec_run,
)
from differank.rankers.run.folders import claim_folder
from differank.rankers.training.callbacks import hide_progress

CONFIG_DIR = Path(__file__).resolve().parent / "conf"
TASKS = ("fit", "test", "predict", "export")
RESTORED = ("data", "model", "loss")  # what test / predict / export take from the checkpoint
log = logging.getLogger(__name__)
# ${data_dir:MQ2008}: $LETOR_DIR/MQ2008, else the project's default data folder (conf/data/)
OmegaConf.register_new_resolver("data_dir", lambda name: str(data_home() / name), replace=True)
# ${unique_dir:outputs/DATE/TIME}: that folder, created, or TIME_1, ... when another run has it
OmegaConf.register_new_resolver("unique_dir", claim_folder, use_cache=True, replace=True)

# Known third-party noise, filtered as pyproject.toml's pytest filterwarnings does. Only these
# exact messages: differank's own warnings (and any other) always show.
NOISY_WARNINGS = (
    r".*isinstance\(treespec, LeafSpec\)",  # pytorch_lightning's pytree vs newer torch
    r".*does not have many workers",  # the LETOR loaders are in-memory; workers do not help
    r"You are using a custom batch sampler",  # ours shards queries itself (DDP)
    r"The `srun` command is available",  # a SLURM login node running a local job
    r"MLFlow only allows",  # its '@' -> '' renaming of ndcg@k, p@k (conf/logger/mlflow.yaml)
)


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


def train(cfg: DictConfig, run_dir: Path) -> float:
    """Run ``cfg.task`` and write the outputs into ``run_dir``; ``cfg`` is the composed
    ``conf/train.yaml``."""
    if cfg.task not in TASKS or (cfg.task != "fit" and not cfg.ckpt_path):
        raise ValueError(
            f"task must be one of {TASKS} (all but fit need ckpt_path=...), "
            f"got task={cfg.task} ckpt_path={cfg.ckpt_path}"
        )
    quiet_third_party()
    checkpoint = None
    if cfg.task != "fit":
        checkpoint = torch.load(cfg.ckpt_path, map_location="cpu", weights_only=True)
        cfg = restore_run(cfg, checkpoint, cfg.ckpt_path)
    pl.seed_everything(cfg.seed, workers=True, verbose=False)
    check_data_root(cfg.data)
    datamodule = instantiate(cfg.data)
    fingerprint = data_fingerprint(datamodule)
    if checkpoint is not None:
        check_same_data(
            checkpoint.get("differank", {}).get("data"), fingerprint, cfg.allow_data_mismatch
        )
    model = instantiate(
        cfg.model,
        loss=instantiate(cfg.loss),
        n_features=datamodule.n_features,
        metric_convention=cfg.metrics.convention,
    )
    callbacks = [instantiate(callback) for callback in cfg.callbacks.values()]
    if cfg.quiet:
        callbacks = [c for c in callbacks if not isinstance(c, pl.callbacks.ProgressBar)]
    trainer = instantiate(
        cfg.trainer,
        callbacks=callbacks,
        logger=[instantiate(logger) for logger in cfg.logger.values()],
        enable_progress_bar=any(isinstance(c, pl.callbacks.ProgressBar) for c in callbacks),
    )
    check_ddp_launch(trainer)
    best, value = None, float("nan")
    if cfg.task == "fit":
        model.run_record = {"config": resolved(cfg), "monitor": cfg.monitor, "data": fingerprint}
        trainer.fit(model, datamodule=datamodule, ckpt_path=cfg.ckpt_path, weights_only=True)
        saver = trainer.checkpoint_callback
        best = saver.best_model_path if saver and saver.best_model_path else None
        score = saver.best_model_score if saver else None
        value = float(score if score is not None else trainer.callback_metrics[cfg.monitor])
        if best:
            checkpoint = torch.load(best, map_location="cpu", weights_only=True)
    else:
        model.load_state_dict(checkpoint["state_dict"])
    if cfg.task == "export":
        export(model, datamodule, run_dir)
        return value
    if cfg.task == "predict":
        trainer.predict(model, datamodule=datamodule, return_predictions=False)
    else:
        trainer.test(model, datamodule=datamodule, ckpt_path=best, verbose=False, weights_only=True)
    if trainer.is_global_zero and not trainer.fast_dev_run:  # fast_dev_run: one batch only
        weights = describe_weights(checkpoint, trainer, cfg.monitor)
        write_outputs(run_dir, model, datamodule, metrics=cfg.task != "predict", weights=weights)
    return value


def resolved(cfg: DictConfig) -> dict[str, Any]:
    """The run's config without Hydra's own node, every interpolation resolved."""
    return OmegaConf.to_container(
        OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"]), resolve=True
    )


def restore_run(cfg: DictConfig, checkpoint: dict, path: str) -> DictConfig:
    """``cfg`` with data, model and loss of the run that saved ``checkpoint``, except what the
    command line sets: a group choice (``data=letor``) replaces the saved node, a key
    (``data.fold=2``) is set on it."""
    record = checkpoint.get("differank")
    if record is None:
        log.warning(
            "%s carries no run config (saved by an older differank): data, model and "
            "loss come from the command line",
            path,
        )
        return cfg
    chosen = OverridesParser.create().parse_overrides(list(HydraConfig.get().overrides.task))
    cfg = cfg.copy()
    with open_dict(cfg):
        for group in RESTORED:
            if any(override.key_or_group == group for override in chosen):
                continue
            cfg[group] = record["config"][group]
            for override in chosen:
                if not override.key_or_group.startswith(f"{group}."):
                    continue
                if override.is_delete():
                    parent, _, leaf = override.key_or_group.rpartition(".")
                    OmegaConf.select(cfg, parent).pop(leaf, None)
                else:
                    OmegaConf.update(cfg, override.key_or_group, override.value(), merge=True)
    log.info("data, model and loss restored from %s", path)
    return cfg


def check_data_root(data: DictConfig) -> None:
    """A data config's ``root`` must exist; say where it was looked for and how to set it."""
    root = data.get("root")
    if root is None or Path(root).expanduser().is_dir():
        return
    where = Path(root).expanduser().absolute()
    letor_dir = os.environ.get("LETOR_DIR")
    source = f"LETOR_DIR={letor_dir}" if letor_dir else "LETOR_DIR is not set"
    raise FileNotFoundError(
        f"data.root {where} does not exist ({source}). Set LETOR_DIR to the folder that holds "
        f"{where.name}/, pass data.root=/path/to/{where.name}, or download it: "
        f"python -m differank.datamodules.download {where.name} [--dir DIR]"
    )


def data_fingerprint(datamodule) -> dict[str, Any]:
    """What a checkpoint records about its data: a sha256 over the fold's files' own sha256
    (split by split, in order; the reader's cache has them, so no text is read again), the
    feature count, the normalization with its statistics and the feature transform (only when
    there is one, so fingerprints of untransformed data are unchanged)."""
    digest = hashlib.sha256()
    for split in ("train", "val", "test"):
        for file_digest in datamodule.file_sha256(split):
            digest.update(f"{split}\0{file_digest}".encode())
    stats = {}
    for name in ("feature_mean", "feature_std"):
        value = getattr(datamodule, name)
        stats[name] = None if value is None else np.asarray(value, dtype=np.float64).tolist()
    transform = getattr(datamodule, "feature_transform", None)
    if transform is not None:
        stats["transform"] = transform.describe()
    return {
        "content_sha256": digest.hexdigest(),
        "n_features": int(datamodule.n_features),
        "normalization": datamodule.normalization,
        **stats,
    }


def _normalization(data: dict[str, Any]) -> str:
    transform = f"{data['transform']} then " if data.get("transform") else ""
    if data["feature_mean"] is None:
        return transform + data["normalization"]
    stats = np.asarray([data["feature_mean"], data["feature_std"]], dtype=np.float64)
    return (
        f"{transform}{data['normalization']} (training mean/std sha256 "
        f"{hashlib.sha256(stats.tobytes()).hexdigest()[:12]})"
    )


def check_same_data(saved: dict[str, Any] | None, data: dict[str, Any], allow: bool) -> None:
    """Refuse to score data whose features the checkpoint's model cannot read as it was trained
    to: another feature count (always), another normalization (unless ``allow``)."""
    if saved is None:
        return
    if saved["n_features"] != data["n_features"]:
        raise ValueError(
            f"the checkpoint's model reads {saved['n_features']} features, the data has "
            f"{data['n_features']}: choose data with {saved['n_features']} features"
        )
    if _normalization(saved) != _normalization(data):
        message = (
            f"the checkpoint was trained on features normalized as "
            f"{_normalization(saved)}, the data is normalized as {_normalization(data)}"
        )
        if not allow:
            raise ValueError(f"{message}; pass allow_data_mismatch=true to score it anyway")
        log.warning("%s (allow_data_mismatch=true)", message)
    if saved["content_sha256"] != data["content_sha256"]:
        log.info(
            "scoring other data than the checkpoint's (sha256 %s..., trained on %s...)",
            data["content_sha256"][:12],
            saved["content_sha256"][:12],
        )


def describe_weights(checkpoint: dict | None, trainer: pl.Trainer, monitor: str) -> str:
    """Which weights were tested: the checkpoint's epoch and validation value, else the last."""
    if checkpoint is None:
        value = trainer.callback_metrics.get(monitor)
        shown = "" if value is None else f", {monitor} {float(value):.4f}"
        return f"last epoch {trainer.current_epoch - 1}{shown}"
    value = checkpoint.get("differank", {}).get("validation", {}).get(monitor)
    shown = "" if value is None else f", {monitor} {value:.4f}"
    return f"epoch {checkpoint['epoch']}{shown}"


def check_ddp_launch(trainer: pl.Trainer) -> None:
    """Lightning starts local DDP ranks by re-running the command line, which under ``-m`` is
    the whole sweep; a SLURM launcher starts the ranks itself."""
    spawns = trainer.world_size > 1
    spawns = spawns and not trainer.strategy.cluster_environment.creates_processes_externally
    if spawns and HydraConfig.initialized() and HydraConfig.get().mode == RunMode.MULTIRUN:
        raise ValueError(
            "local multi-process DDP cannot run inside a sweep (-m): sweep with "
            "hydra/launcher=slurm_gpu (SLURM starts one process per GPU)"
        )


def write_outputs(run_dir: Path, model, datamodule, metrics: bool, weights: str) -> None:
    """The prediction, sources and TREC run files of the test split, and its metrics."""
    out = run_dir / "predictions"
    out.mkdir(parents=True, exist_ok=True)
    scores = model.scores_by_row(datamodule.num_rows("test"))
    (out / "test.txt").write_text("".join(f"{score:.17g}\n" for score in scores.tolist()))
    sources = datamodule.split_files("test")  # the files the predictions align with, in order
    (out / "test.sources").write_text("".join(f"{path}\n" for path in sources))
    split = datamodule.split_data("test")
    write_trec_run(out / "test.run", split.qids.tolist(), split.docids.tolist(), scores)
    if not metrics:
        log.info("predictions of %s: %s", weights, out)
        return
    # scored from the rows in memory: the same reader, grouping and floats as the files
    ks, convention = model.test_metrics.ks, model.test_metrics.convention
    values = evaluate_arrays(scores, split.labels, split.qids, ks=ks, convention=convention)
    record = {**values, "conventions": convention_means(scores, split.labels, split.qids, ks=ks)}
    (run_dir / "test_metrics.json").write_text(json.dumps(record, indent=2) + "\n")
    table = Table("metric", f"test ({convention})")
    for key, value in values.items():
        table.add_row(key, f"{value:.4f}")
    text = io.StringIO()
    Console(file=text, width=100).print(table)
    log.info("test metrics of %s:\n%s\noutputs: %s", weights, text.getvalue().rstrip(), run_dir)


def export(model, datamodule, run_dir: Path) -> None:
    """``export/scorer.pt`` and ``export/scorer.onnx``: raw features in (and the mask, for a
    ranker that attends over the list), scores out."""
    scorer = serving_scorer(model.ranker, datamodule)
    log.info("TorchScript: %s", export_torchscript(scorer, run_dir / "export/scorer.pt"))
    try:
        log.info("ONNX: %s", export_onnx(scorer, run_dir / "export/scorer.onnx"))
    except ImportError as error:  # onnx / onnxscript are the optional "export" extra
        log.warning("ONNX export skipped (pip install 'differank[export]'): %s", error)


def compose_run(overrides: list[str], run_dir: Path) -> DictConfig:
    """``conf/train.yaml`` composed with command-line style ``overrides`` outside the CLI (tests,
    benchmarks), with ``run_dir`` as the Hydra run directory."""
    GlobalHydra.instance().clear()
    with initialize_config_dir(config_dir=str(CONFIG_DIR), version_base="1.3"):
        cfg = compose("train", overrides=overrides, return_hydra_config=True)
    with open_dict(cfg):
        cfg.hydra.runtime.output_dir = str(run_dir)
        cfg.hydra.job.num = 0
    HydraConfig.instance().set_config(cfg)
    return cfg


def console_logging(quiet: bool) -> None:
    """Under the CLI: Lightning's messages join the run's console (and ``train.log``); with
    ``quiet`` the terminal hides the progress lines (epochs, checkpoints, Lightning's set-up)
    and keeps warnings, the test table and the output folder; ``train.log`` keeps every line."""
    lightning = logging.getLogger("pytorch_lightning")
    lightning.handlers.clear()
    lightning.propagate = True
    if quiet:
        for handler in logging.getLogger().handlers:
            if not isinstance(handler, logging.FileHandler):
                handler.addFilter(hide_progress)


@hydra.main(version_base="1.3", config_path="conf", config_name="train")
def main(cfg: DictConfig) -> float:
    console_logging(cfg.quiet)
    return train(cfg, Path(HydraConfig.get().runtime.output_dir))


if __name__ == "__main__":
    main()
