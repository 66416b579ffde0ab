"""Checkpoints are data, never code: reading one, and rebuilding the module it holds.

A checkpoint written by ``train.py`` carries the run's config (``checkpoint["differank"]
["config"]``). Whoever hands you a checkpoint file chooses that config, so it is rebuilt only
by :func:`build`, never by Hydra: every ``_target_`` at any depth must name one of
:data:`ALLOWED_TARGETS` (differank's own classes, which ``conf/`` names, every loss class in
``losses/``, and the optimizers and learning-rate schedulers the docs offer), ``_partial_`` is
the only other special key, and no string may hold an interpolation (``${...}``: resolvers such
as ``oc.decode`` build new config nodes). Everything is checked before anything is imported or
called; an error names the config node and the value. Files are read with
``torch.load(weights_only=True)`` only, and a corrupt or truncated file is reported as such,
never with advice to load it unsafely.

Public API::

    ALLOWED_TARGETS                       # the classes a checkpoint may name
    UnsafeCheckpointError                 # a ValueError: a config node that is refused
    load_checkpoint(path) -> dict         # torch.load(weights_only=True) with clear errors
    check_restorable(node, where)         # raises UnsafeCheckpointError, runs nothing
    build(node, where, **extra)           # check, then instantiate (``_partial_`` -> partial)
    run_record(checkpoint, path) -> dict  # checkpoint["differank"], checked
    rebuild_module(checkpoint, path)      # the trained Lightning module, weights loaded, eval
"""

from __future__ import annotations

import functools
import importlib
import pickle
import zipfile
from pathlib import Path
from typing import Any

import torch

from differank.losses.module_form import loss_classes

_DATA = "differank.datamodules"
_OPTIM = "torch.optim"
_SCHEDULERS = ("StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LinearLR")
_SCHEDULERS += ("ReduceLROnPlateau", "OneCycleLR", "CosineAnnealingWarmRestarts")
ALLOWED_TARGETS = frozenset(
    {
        f"{_DATA}.letor.LetorDataModule",
        f"{_DATA}.synthetic.SyntheticLetorDataModule",
        # every loss class in losses/*.py: a new loss file is allowed without editing this list
        *(f"{cls.__module__}.{cls.__qualname__}" for cls in loss_classes()),
        "differank.rankers.scorers.conerank.ConeRank",
        "differank.rankers.scorers.linear.LinearRanker",
        "differank.rankers.scorers.mlp.MLPRanker",
        "differank.rankers.scorers.transformer.TransformerRanker",
        "differank.rankers.solvers.domination_cd.DominationCD",
        "differank.rankers.solvers.hinge_cutting_plane.HingeCuttingPlane",
        "differank.rankers.training.module.RankingModule",
        "differank.rankers.training.module.FullBatchModule",
        "differank.rankers.training.module.warmup_cosine",  # a _partial_ scheduler factory
        *(f"{_OPTIM}.{name}" for name in ("SGD", "Adam", "AdamW", "Adagrad", "RMSprop")),
        *(f"{_OPTIM}.{name}" for name in ("Adamax", "NAdam", "RAdam")),
        *(f"{_OPTIM}.lr_scheduler.{name}" for name in _SCHEDULERS),
    }
)
# Arguments a restored config never sets: where a class writes files (the synthetic data module
# writes its fold into ``root``; its data depends only on its sizes and seed, so the run is
# reproduced in the cache all the same). The command line may still set them.
WRITE_LOCATIONS = {f"{_DATA}.synthetic.SyntheticLetorDataModule": ("root",)}
TARGET, PARTIAL = "_target_", "_partial_"
RESTORED = ("data", "model", "loss")  # the config groups a checkpoint's run is rebuilt from


class UnsafeCheckpointError(ValueError):
    """A restored config node that could run code (or is not a plain config value)."""


class CheckpointReadError(OSError):
    """A checkpoint file that cannot be read as one (missing, truncated, not a checkpoint)."""


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """``torch.load(path, weights_only=True)`` on the CPU; a missing, truncated or foreign file
    raises :class:`CheckpointReadError` naming the path (never advice to load it unsafely)."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointReadError(f"checkpoint not found: {path}")
    size = path.stat().st_size
    try:
        checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except (pickle.UnpicklingError, RuntimeError, EOFError, OSError, zipfile.BadZipFile) as error:
        raise CheckpointReadError(
            f"{path} ({size} bytes) is not a readable checkpoint: the file is truncated or "
            f"corrupt, or was not written by torch.save ({type(error).__name__}). Copy it again "
            "from where it was trained; differank only ever loads checkpoints as data "
            "(weights_only=True)"
        ) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointReadError(f"{path} holds no Lightning checkpoint (no state_dict)")
    return checkpoint


def check_restorable(node: Any, where: str) -> None:
    """Raise :class:`UnsafeCheckpointError` unless ``node`` (a plain container) is a config
    :func:`build` may instantiate: allowed targets, ``_partial_`` bools, plain values."""
    if isinstance(node, dict):
        for key in node:
            if not (isinstance(key, str) and key.isascii() and key.isidentifier()):
                raise UnsafeCheckpointError(f"{where}: key {key!r} is not a plain name")
            if key.startswith("_") and key.endswith("_") and key not in (TARGET, PARTIAL):
                raise UnsafeCheckpointError(f"{where}.{key}: special key {key} is refused")
        if PARTIAL in node and (TARGET not in node or not isinstance(node[PARTIAL], bool)):
            raise UnsafeCheckpointError(
                f"{where}.{PARTIAL}: must be true or false beside a _target_, got {node[PARTIAL]!r}"
            )
        if TARGET in node:
            target = node[TARGET]
            if not isinstance(target, str) or target not in ALLOWED_TARGETS:
                raise UnsafeCheckpointError(
                    f"{where}.{TARGET}: {target!r} is not a class a checkpoint may name (only "
                    "differank's own models, losses, data modules and torch optimizers and "
                    "schedulers: differank.rankers.training.checkpoints.ALLOWED_TARGETS)"
                )
        for key, value in node.items():
            if key not in (TARGET, PARTIAL):
                check_restorable(value, f"{where}.{key}")
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            check_restorable(value, f"{where}[{index}]")
    elif isinstance(node, str):
        if "${" in node:
            raise UnsafeCheckpointError(
                f"{where}: interpolation {node!r} is refused (a saved config is resolved)"
            )
    elif not (node is None or isinstance(node, (bool, int, float))):
        raise UnsafeCheckpointError(f"{where}: a {type(node).__name__} is not a config value")


def build(node: Any, where: str, **extra: Any) -> Any:
    """Instantiate the config ``node`` after :func:`check_restorable` accepted all of it:
    a dict with ``_target_`` becomes ``target(**children, **extra)`` (a ``functools.partial``
    with ``_partial_: true``), other containers are rebuilt, values kept."""
    check_restorable(node, where)
    return _make(node, extra)


def _make(node: Any, extra: dict[str, Any]) -> Any:
    if isinstance(node, (list, tuple)):
        return [_make(value, {}) for value in node]
    if not isinstance(node, dict):
        return node
    kwargs = {k: _make(v, {}) for k, v in node.items() if k not in (TARGET, PARTIAL)}
    if TARGET not in node:
        return kwargs
    module, _, name = node[TARGET].rpartition(".")
    target = getattr(importlib.import_module(module), name)
    if node.get(PARTIAL, False):
        return functools.partial(target, **kwargs, **extra)
    return target(**kwargs, **extra)


def run_record(checkpoint: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """The run record ``train.py`` saved with ``checkpoint``, its data, model and loss configs
    checked by :func:`check_restorable` (the whole record is refused if any is tampered with,
    whichever of them a task needs) and their :data:`WRITE_LOCATIONS` reset to None; a clear
    error when it has none."""
    record = checkpoint.get("differank")
    if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
        raise ValueError(
            f"{path} carries no run record (saved by an older differank or outside train.py): "
            "its model cannot be rebuilt from the file alone"
        )
    config = dict(record["config"])
    for group in RESTORED:
        check_restorable(config.get(group), group)
        node = config.get(group)
        if isinstance(node, dict) and node.get(TARGET) in WRITE_LOCATIONS:
            config[group] = {**node, **dict.fromkeys(WRITE_LOCATIONS[node[TARGET]])}
    return {**record, "config": config}


def serving_statistics(record: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """What scoring raw features needs besides the weights (feature count, transform, z-score
    statistics), or an error saying it is missing."""
    serving = record.get("serving")
    if not isinstance(serving, dict):
        raise ValueError(
            f"{path} was saved before checkpoints carried their feature statistics: it lacks "
            "the serving record (feature count, feature transform and normalization "
            "statistics). Score it with the data it was trained on (task=test "
            "ckpt_path=... with that data's fold folder), or train it again"
        )
    return serving


def rebuild_module(checkpoint: dict[str, Any], path: str | Path):
    """The trained module of ``checkpoint`` (its model and loss rebuilt by :func:`build`, the
    weights loaded), in eval mode, on the CPU."""
    record = run_record(checkpoint, path)
    n_features = int(serving_statistics(record, path)["n_features"])
    config = record["config"]
    for group in ("model", "loss"):
        if not isinstance(config.get(group), dict) or TARGET not in config[group]:
            raise ValueError(f"{path}: the run record has no {group} config to rebuild")
    loss = build(config["loss"], "loss")
    module = build(config["model"], "model", loss=loss, n_features=n_features)
    module.load_state_dict(checkpoint["state_dict"])
    return module.eval()
