"""Restoring a run from its checkpoint: the record's config made this machine's, merged with
the command line, and the data, model and module it describes rebuilt by the guarded builder.

A checkpoint is data, never code: its config is rebuilt only by
:func:`differank.rankers.checkpoints.reading.build` (allowlisted classes, checked before
anything runs; docs/architecture.md#the-run-layer-and-its-trust-model). Every checkpoint carries
a fingerprint of its data (content sha256, feature count, normalization statistics), checked
against the data a restored run scores (:func:`check_same_data`).

Public API (also from :mod:`differank.rankers.checkpoints`)::

    rebuild_ranker(checkpoint, path)             # the trained ranker alone (no Lightning), eval
    rebuild_module(checkpoint, path)             # the trained module, weights loaded, eval mode
    restored_estimator(config)                   # the run's click estimator (or {}), built
    restored_config(checkpoint, path, data_root=None) -> dict  # the record's data/model/loss
    restore_run(cfg, checkpoint, path, overrides) -> cfg  # the checkpoint's data/model/loss + them
    build_restored(cfg, checkpoint) -> (datamodule, model)   # guarded, data and weights checked
    resolved(cfg) -> dict                        # a composed config as a run record saves it
    data_fingerprint(datamodule), check_same_data(saved, data, allow), check_data_root(data)
"""

from __future__ import annotations

import hashlib
import logging
import os
from collections.abc import Sequence
from pathlib import Path, PurePath
from typing import Any, cast

import numpy as np
from hydra.core.override_parser.overrides_parser import OverridesParser
from omegaconf import DictConfig, OmegaConf, open_dict

from differank.datamodules.download import data_home
from differank.rankers.checkpoints.reading import (
    ESTIMATOR,
    LETOR,
    MACHINE_ARGUMENTS,
    RANKER_PREFIX,
    RESTORED,
    TARGET,
    UnsafeCheckpointError,
    build,
    build_model,
    build_ranker,
    estimator_node,
    run_record,
    serving_statistics,
)
from differank.rankers.scorers.base import Ranker

log = logging.getLogger(__name__)


def restored_config(
    checkpoint: dict[str, Any], path: str | Path, data_root: str | Path | None = None
) -> dict[str, Any]:
    """The run record's config, checked and without machine arguments (``run_record``), a
    LETOR data module's ``root`` replaced by ``data_root`` when the caller knows it (a run
    scoring its own checkpoint: the folder it trained on, e.g. a LETOR folder given by path),
    else by :func:`local_data_root` of the saved one."""
    config = run_record(checkpoint, path)["config"]
    saved = checkpoint["differank"]["config"].get("data")
    if isinstance(saved, dict) and saved.get(TARGET) == LETOR:
        root = str(data_root) if data_root is not None else local_data_root(saved.get("root"))
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
    keys = [str(key) for key in cfg if key != "hydra"]
    record = OmegaConf.to_container(OmegaConf.masked_copy(cfg, keys), resolve=True)
    return cast("dict[str, Any]", record)  # a DictConfig's container: a dict of str keys


def restore_run(
    cfg: DictConfig, checkpoint: dict, path: str | Path, overrides: Sequence[str]
) -> DictConfig:
    """``cfg`` with data, model and loss of the run that saved ``checkpoint``, except what the
    command line's ``overrides`` (Hydra's override grammar, as composed into ``cfg``) set: a
    group choice (``data=letor``) replaces the saved node, a key (``data.fold=2``) is set on
    it, a deletion (``~data.num_workers``) removes it. The saved nodes are checked (allowlisted
    targets, no interpolation) before they join ``cfg``; their machine arguments (places,
    workers, batch sizes: ``MACHINE_ARGUMENTS``) are never the checkpoint's but ``cfg``'s own,
    which are the defaults or the command line's."""
    record = checkpoint.get("differank")
    if record is None:
        log.warning(
            "%s carries no run config (saved by an older differank): data, model and "
            "loss come from the command line",
            path,
        )
        return cfg
    config = restored_config(checkpoint, path)  # checked before it joins cfg
    chosen = OverridesParser.create().parse_overrides(list(overrides))
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


def build_restored(cfg: DictConfig, checkpoint: dict[str, Any]):
    """``(datamodule, model)`` of ``cfg`` restored from ``checkpoint`` (:func:`restore_run`),
    built only by the guarded builder: the data checked against the checkpoint's
    (:func:`check_same_data`), then the model checked against its weights before it is built
    (weights not loaded)."""
    check_data_root(cfg.data)
    metrics = {"metric_convention": cfg.metrics.convention}  # the command line's, never restored
    nodes: dict[str, Any] = {
        group: OmegaConf.to_container(cfg[group], resolve=True) for group in RESTORED
    }
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


def rebuild_ranker(checkpoint: dict[str, Any], path: str | Path) -> Ranker:
    """The trained ranker of ``checkpoint`` alone (built by :func:`build_ranker`, checked
    against the weights; its training module, loss and metrics are not built, so no Lightning
    loads), its weights loaded, in eval mode, on the CPU: what serving needs."""
    record = run_record(checkpoint, path)
    n_features = serving_statistics(record, path)["n_features"]
    model = record["config"].get("model")
    if not isinstance(model, dict) or TARGET not in model:
        raise ValueError(f"{path}: the run record has no model config to rebuild")
    weights = checkpoint["state_dict"]
    ranker = build_ranker(model, weights, path, ("serving['n_features']", n_features))
    prefix = len(RANKER_PREFIX)
    ranker.load_state_dict(
        {key[prefix:]: value for key, value in weights.items() if key.startswith(RANKER_PREFIX)}
    )
    return ranker.eval()


def rebuild_module(checkpoint: dict[str, Any], path: str | Path):
    """The trained module of ``checkpoint`` (its model and loss rebuilt by :func:`build`, the
    model checked against the weights by :func:`build_model`, the weights loaded), in eval
    mode, on the CPU."""
    record = run_record(checkpoint, path)
    n_features = serving_statistics(record, path)["n_features"]
    config = record["config"]
    for group in ("model", "loss"):
        if not isinstance(config.get(group), dict) or TARGET not in config[group]:
            raise ValueError(f"{path}: the run record has no {group} config to rebuild")
    loss = build(config["loss"], "loss")
    weights = checkpoint["state_dict"]
    features = ("serving['n_features']", n_features)
    module = build_model(
        config["model"], weights, path, features, loss=loss, **restored_estimator(config)
    )
    module.load_state_dict(weights)
    return module.eval()


def restored_estimator(config: dict[str, Any]) -> dict[str, Any]:
    """``{"estimator": module}`` for a run record's config that trained from clicks (group
    ``ultr``, allowlisted and checked by :func:`build`), else ``{}``: the estimator's weights
    (DLA's propensities, the two-tower bias) are in the checkpoint, so the module that loads
    them must have it; the served scorer is the ranker alone either way."""
    node = config.get(ESTIMATOR)
    return {} if node is None else {"estimator": build(estimator_node(node), ESTIMATOR)}
