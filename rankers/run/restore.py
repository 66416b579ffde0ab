"""Rebuilding a run from its checkpoint: the one guarded way from a checkpoint file to data,
model and scorer, for ``train.py``'s ``task=test|predict|export``, the ensemble and
:func:`load_ranker`.

A checkpoint is data, never code: its config is rebuilt only by
:func:`differank.rankers.training.checkpoints.build` (allowlisted classes, checked before
anything runs; docs/architecture.md#the-run-layer-and-its-trust-model). Every checkpoint carries
a fingerprint of its data (content sha256, feature count, normalization statistics) and a
serving record (feature count, fitted feature transform, float64 z-score statistics), so a
trained model scores raw LETOR features from the file alone.

Public API::

    load_ranker(path) -> Scorer                  # raw features [B, L, F], mask [B, L] -> scores
    scorer_from_checkpoint(checkpoint, path) -> (Scorer, module)
    restored_config(checkpoint, path) -> dict    # the run record's data/model/loss, for here
    restore_run(cfg, checkpoint, path) -> cfg    # data/model/loss of the checkpoint + overrides
    build_run(cfg, checkpoint=None) -> (datamodule, model)   # None: cfg is the user's own
    data_fingerprint(datamodule), check_same_data(saved, data, allow), check_data_root(data)
"""

from __future__ import annotations

import hashlib
import logging
import os
from pathlib import Path, PurePath
from typing import Any

import numpy as np
from hydra.core.hydra_config import HydraConfig
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf, open_dict

from differank.datamodules.download import data_home
from differank.losses.unbiased import Naive
from differank.rankers.run.click_runs import click_datamodule
from differank.rankers.run.export import Scorer, check_serving_record, serving_scorer
from differank.rankers.training.checkpoints import (
    LETOR,
    MACHINE_ARGUMENTS,
    RESTORED,
    TARGET,
    UnsafeCheckpointError,
    build,
    build_model,
    load_checkpoint,
    rebuild_module,
    restored_estimator,
    run_record,
    serving_statistics,
)

log = logging.getLogger(__name__)


def load_ranker(path: str | Path) -> Scorer:
    """The trained scorer of a ``train.py`` checkpoint, from the file alone: an ``nn.Module``
    in eval mode scoring raw LETOR features ``ranker(features [B, L, F], mask [B, L])``
    exactly as the exported scorer (``task=export``) does."""
    return scorer_from_checkpoint(load_checkpoint(path), path)[0]


def scorer_from_checkpoint(checkpoint: dict[str, Any], path: str | Path):
    """``(scorer, module)``: the raw-feature scorer of ``checkpoint`` and its trained module."""
    module = rebuild_module(checkpoint, path)
    serving = serving_statistics(run_record(checkpoint, path), path)
    check_serving_record(serving, path)
    return serving_scorer(module.ranker, serving).eval(), module


def restored_config(checkpoint: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """The run record's config, checked and without machine arguments (``run_record``), a
    LETOR data module's ``root`` replaced by :func:`local_data_root` of the saved one."""
    config = run_record(checkpoint, path)["config"]
    saved = checkpoint["differank"]["config"].get("data")
    if isinstance(saved, dict) and saved.get(TARGET) == LETOR:
        root = local_data_root(saved.get("root"))
        config["data"] = {**config["data"], **({} if root is None else {"root": root})}
    return config


def local_data_root(saved_root: Any) -> str | None:
    """Where a restored LETOR data module reads its set: the folder named as the saved root's
    last component under this machine's data folder (``$LETOR_DIR``, else the project's, as
    ``${data_dir:NAME}`` finds it), never the checkpoint's path; None when it names none."""
    name = PurePath(saved_root).name if isinstance(saved_root, str) else ""
    return None if name in ("", ".", "..") else str(data_home() / name)


def resolved(cfg: DictConfig) -> dict[str, Any]:
    """The run's config without Hydra's own node, every interpolation resolved."""
    return OmegaConf.to_container(
        OmegaConf.masked_copy(cfg, [key for key in cfg if key != "hydra"]), resolve=True
    )


def restore_run(cfg: DictConfig, checkpoint: dict, path: str | Path) -> DictConfig:
    """``cfg`` with data, model and loss of the run that saved ``checkpoint``, except what the
    command line sets: a group choice (``data=letor``) replaces the saved node, a key
    (``data.fold=2``) is set on it. The saved nodes are checked (allowlisted targets, no
    interpolation) before they join ``cfg``; their machine arguments (places, workers, batch
    sizes: ``MACHINE_ARGUMENTS``) are never the checkpoint's but ``cfg``'s own, which are the
    defaults or the command line's."""
    record = checkpoint.get("differank")
    if record is None:
        log.warning(
            "%s carries no run config (saved by an older differank): data, model and "
            "loss come from the command line",
            path,
        )
        return cfg
    config = restored_config(checkpoint, path)  # checked before it joins cfg
    chosen = OverridesParser.create().parse_overrides(list(HydraConfig.get().overrides.task))
    cfg = cfg.copy()
    with open_dict(cfg):
        for group in RESTORED:
            if any(override.key_or_group == group for override in chosen):
                continue
            cfg[group] = {**_machine_arguments(cfg.get(group), config[group]), **config[group]}
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


def _machine_arguments(composed: DictConfig | None, saved: Any) -> dict[str, Any]:
    """The values ``composed`` (this command's node of the group) gives the machine arguments
    of the class the checkpoint's ``saved`` node names, when it names that class too (another
    class may use a place otherwise: the synthetic data module writes into its ``root``)."""
    target = saved.get(TARGET) if isinstance(saved, dict) else None
    if composed is None or target not in MACHINE_ARGUMENTS or composed.get(TARGET) != target:
        return {}
    return {name: composed[name] for name in MACHINE_ARGUMENTS[target] if name in composed}


def build_run(cfg: DictConfig, checkpoint: dict[str, Any] | None = None):
    """``(datamodule, model)`` of ``cfg``: Hydra instantiates a config the user composed
    (``checkpoint`` None); one restored from ``checkpoint`` is built only by the guarded
    builder: the data checked against the checkpoint's (:func:`check_same_data`), then the model
    checked against its weights before it is built (weights not loaded)."""
    check_data_root(cfg.data)
    metrics = {"metric_convention": cfg.metrics.convention}  # the command line's, never restored
    if checkpoint is None:
        metrics |= click_estimator(cfg)
        datamodule = click_datamodule(cfg, instantiate(cfg.data))  # clicks=none: the data itself
        loss = instantiate(cfg.loss)
        model = instantiate(cfg.model, loss=loss, n_features=datamodule.n_features, **metrics)
        return datamodule, model
    nodes = {group: OmegaConf.to_container(cfg[group], resolve=True) for group in RESTORED}
    try:
        datamodule = build(nodes["data"], "data")
    except UnsafeCheckpointError:
        raise
    except ValueError as error:  # a value of the checkpoint's, or of the command line's
        raise ValueError(f"{cfg.ckpt_path}: the restored data: {error}") from error
    saved = checkpoint["differank"].get("data")
    check_same_data(saved, data_fingerprint(datamodule), cfg.allow_data_mismatch)
    loss = build(nodes["loss"], "loss")
    features = ("the data's feature count", datamodule.n_features)
    weights = checkpoint["state_dict"]
    metrics |= restored_estimator(checkpoint["differank"].get("config", {}))
    model = build_model(nodes["model"], weights, cfg.ckpt_path, features, loss=loss, **metrics)
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
        f"python -m differank.datamodules.download {where.name} [--dir DIR]; to score LETOR "
        "files with a checkpoint alone: task=test|predict ckpt_path=CKPT files=[a.txt,...]"
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
    to: another feature count (always), another normalization (unless ``allow``: the data's
    own statistics are then refitted and used)."""
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
            raise ValueError(
                f"{message}; score files with the checkpoint's own statistics "
                "(files=[a.txt,...]), or pass allow_data_mismatch=true to refit them on this "
                "data's training split"
            )
        log.warning("%s (allow_data_mismatch=true)", message)
    if saved["content_sha256"] != data["content_sha256"]:
        log.info(
            "scoring other data than the checkpoint's (sha256 %s..., trained on %s...)",
            data["content_sha256"][:12],
            saved["content_sha256"][:12],
        )
