"""Reading a checkpoint and trusting nothing in it: the file read as data, its run record
checked against an allowlist, and the guarded builder that alone instantiates what it names.

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

A checkpoint describes a model, never the machine: the :data:`MACHINE_ARGUMENTS` of its classes
(places, process counts, batch sizes) are dropped from the record at any depth, so the command
line or the defaults set them (:mod:`differank.rankers.checkpoints.restore`: a LETOR set is read
by its folder's name from this machine's data folder). The sizes that shape a model
(:data:`SIZE_ARGUMENTS` and the feature count) must not exceed the number of values its weights
hold; the model is then built on the meta device and its shapes must equal the weights', all
before anything is allocated (:func:`build_model`). Weights and serving statistics must be
finite and well-formed. A refusal names the file, the entry and the value.

Public API (also from :mod:`differank.rankers.checkpoints`)::

    ALLOWED_TARGETS                       # the classes a checkpoint may name
    UnsafeCheckpointError                 # a ValueError: a config node that is refused
    CheckpointReadError                   # an OSError: a file that is not a readable checkpoint
    load_checkpoint(path) -> dict         # torch.load(weights_only=True) with clear errors
    MACHINE_ARGUMENTS, SIZE_ARGUMENTS     # what a restore drops / checks against the weights
    check_restorable(node, where)         # raises UnsafeCheckpointError, runs nothing
    build(node, where, **extra)           # check, then instantiate (``_partial_`` -> partial)
    build_model(node, weights, path, (name, F), **extra)  # sizes, shapes checked; then built
    build_ranker(node, weights, path, (name, F))  # the module's ranker alone, checked the same
    RANKER_FACTORIES, RANKER_PREFIX       # how each training module makes its ranker
    run_record(checkpoint, path) -> dict  # checkpoint["differank"], checked, machine-free
    without_machine_arguments(node)       # what run_record applies to data, model and loss
    serving_statistics(record, path)      # its serving record, its feature count checked
    check_weights(weights, path), check_finite(entry, tensor, path, why)
"""

from __future__ import annotations

import functools
import importlib
import pickle
import re
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import torch
from torch import nn

from differank.losses.module_form import loss_classes
from differank.losses.unbiased import ESTIMATORS
from differank.rankers.scorers.base import Ranker

Built = TypeVar("Built", bound=nn.Module)

_DATA = "differank.datamodules"
_OPTIM = "torch.optim"
_SCHEDULERS = (
    *("StepLR", "MultiStepLR", "ExponentialLR", "CosineAnnealingLR", "LinearLR"),
    *("ReduceLROnPlateau", "OneCycleLR", "CosineAnnealingWarmRestarts"),
)
# How each training module (the model node's class) makes its ranker, so that serving builds
# the ranker alone: the node's key holding a factory f(n_features=F), and the attribute of what
# the factory makes that is the ranker (None: the ranker itself). The module keeps it as
# ``ranker``, so its weights are the state dict's RANKER_PREFIX entries.
_MODULE = "differank.rankers.training.module"
RANKER_FACTORIES: dict[str, tuple[str, str | None]] = {
    f"{_MODULE}.RankingModule": ("ranker", None),
    f"{_MODULE}.FullBatchModule": ("solver", "ranker"),
}
RANKER_PREFIX = "ranker."
ALLOWED_TARGETS = frozenset(
    {
        f"{_DATA}.letor.LetorDataModule",
        f"{_DATA}.synthetic.SyntheticLetorDataModule",
        # every loss class in losses/*.py: a new loss file is allowed without editing this list
        *(f"{cls.__module__}.{cls.__qualname__}" for cls in loss_classes()),
        # the click estimators (config group ultr): their weights are in a run's checkpoints
        *(f"{cls.__module__}.{cls.__qualname__}" for cls in ESTIMATORS),
        "differank.rankers.scorers.conerank.ConeRank",
        "differank.rankers.scorers.linear.LinearRanker",
        "differank.rankers.scorers.mlp.MLPRanker",
        "differank.rankers.scorers.transformer.TransformerRanker",
        "differank.rankers.solvers.domination_cd.DominationCD",
        "differank.rankers.solvers.hinge_cutting_plane.HingeCuttingPlane",
        *RANKER_FACTORIES,  # the training modules
        f"{_MODULE}.warmup_cosine",  # a _partial_ scheduler factory
        *(f"{_OPTIM}.{name}" for name in ("SGD", "Adam", "AdamW", "Adagrad", "RMSprop")),
        *(f"{_OPTIM}.{name}" for name in ("Adamax", "NAdam", "RAdam")),
        *(f"{_OPTIM}.lr_scheduler.{name}" for name in _SCHEDULERS),
    }
)
# Arguments that describe the machine, never the model: where files are read or written, how
# many processes run, how large a batch is. A restored record never sets them, at any depth; the
# command line or the defaults do. tests/rankers/training/test_checkpoint_contents.py walks every
# allowed class's signature for such names: a class with one fails there until it is listed here.
_DATA_MACHINE = (
    *("root", "cache_dir", "verify_cache_hash", "num_workers", "batches_on_device"),
    *("batch_size", "eval_batch_size"),
)
LETOR = f"{_DATA}.letor.LetorDataModule"
MACHINE_ARGUMENTS: dict[str, tuple[str, ...]] = {
    LETOR: _DATA_MACHINE,
    f"{_DATA}.synthetic.SyntheticLetorDataModule": _DATA_MACHINE,
}
# Arguments that size a model's tensors (besides n_features): no int in them may exceed the
# number of values the checkpoint's weights hold, checked before the model is built at all.
_SCORERS = "differank.rankers.scorers"
SIZE_ARGUMENTS: dict[str, tuple[str, ...]] = {
    f"{_SCORERS}.mlp.MLPRanker": ("hidden",),
    f"{_SCORERS}.conerank.ConeRank": ("n_basis", "encoder_hidden", "embed_dim", "transformer"),
    f"{_SCORERS}.transformer.TransformerRanker": (
        *("d_model", "num_layers", "num_heads", "dim_feedforward"),
    ),
}
MAX_CONFIG_DEPTH = 32  # train.py's configs nest 4 deep: a deeper record is refused, not recursed
TARGET, PARTIAL = "_target_", "_partial_"
RESTORED = ("data", "model", "loss")  # the config groups a checkpoint's run is rebuilt from
ESTIMATOR = "ultr"  # the click estimator's group: rebuilt with the model when the run had one
# How a click run chooses its epoch (ultr.select=labels|clicks and its settings,
# rankers/run/click_selection.py): options of the group ultr that are not the estimator's
SELECTION_OPTIONS = (
    "select",
    "select_metric",
    "select_k",
    "select_sessions",
    "select_clip",
    "select_holdout",
    "select_holdout_sessions",
)


def estimator_node(node: Any) -> Any:
    """The config node of the click estimator in group ``ultr``'s ``node``: without its
    :data:`SELECTION_OPTIONS` (a run record from before them has none)."""
    if not isinstance(node, dict):
        return node
    return {key: value for key, value in node.items() if key not in SELECTION_OPTIONS}


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
    except pickle.UnpicklingError as error:
        foreign = re.search(r"Unsupported global: GLOBAL (\S+)", str(error))
        if foreign is None:
            raise _unreadable(path, size, error) from None
        raise CheckpointReadError(
            f"{path} holds a {foreign.group(1)}, which a checkpoint may not hold: only tensors "
            "and plain values (numbers, strings, lists, dicts) are read. Save plain Python "
            "values (float(x), int(x), x.tolist()) in the checkpoint instead"
        ) from None
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile) as error:
        raise _unreadable(path, size, error) from None
    if not isinstance(checkpoint, dict) or "state_dict" not in checkpoint:
        raise CheckpointReadError(f"{path} holds no Lightning checkpoint (no state_dict)")
    return checkpoint


def _unreadable(path: Path, size: int, error: Exception) -> CheckpointReadError:
    return CheckpointReadError(
        f"{path} ({size} bytes) is not a readable checkpoint: the file is truncated or "
        f"corrupt, or was not written by torch.save ({type(error).__name__}). Copy it again "
        "from where it was trained; differank only ever loads checkpoints as data "
        "(weights_only=True)"
    )


def target_of(node: dict[str, Any]) -> str:
    """The class a config node names (its ``_target_``), or "" when it names none."""
    target = node.get(TARGET)
    return target if isinstance(target, str) else ""


def check_restorable(node: Any, where: str, depth: int = 0) -> None:
    """Raise :class:`UnsafeCheckpointError` unless ``node`` (a plain container, at most
    :data:`MAX_CONFIG_DEPTH` deep) is a config :func:`build` may instantiate: allowed targets,
    ``_partial_`` bools, plain values."""
    if isinstance(node, (dict, list, tuple)) and depth >= MAX_CONFIG_DEPTH:
        raise UnsafeCheckpointError(f"{where}: nested deeper than {MAX_CONFIG_DEPTH} levels")
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
                    "schedulers: differank.rankers.checkpoints.ALLOWED_TARGETS)"
                )
        for key, value in node.items():
            if key not in (TARGET, PARTIAL):
                check_restorable(value, f"{where}.{key}", depth + 1)
    elif isinstance(node, (list, tuple)):
        for index, value in enumerate(node):
            check_restorable(value, f"{where}[{index}]", depth + 1)
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


def build_model(
    node: dict[str, Any],
    weights: dict[str, Any],
    path: str | Path,
    features: tuple[str, int],
    **extra: Any,
):
    """``build(node, "model", n_features=F, **extra)`` for the state dict ``weights`` (not
    loaded), ``features`` naming where F comes from and F: the weights must be finite
    (:func:`check_weights`); F and every int in the node's :data:`SIZE_ARGUMENTS` at most the
    number of values the weights hold; the module built on the meta device (which allocates
    nothing) must have the weights' names and shapes. Only then is it built for real."""
    check_sizes(node, weights, path, features)
    extra["n_features"] = features[1]
    return _built_as_weights(lambda: build(node, "model", **extra), weights, path)


def build_ranker(
    node: dict[str, Any], weights: dict[str, Any], path: str | Path, features: tuple[str, int]
) -> Ranker:
    """The ranker of the training module that the config ``node`` describes, the module itself
    not built (serving needs neither Lightning nor the loss nor the metrics): its factory of
    :data:`RANKER_FACTORIES` called with ``n_features=F``, checked as :func:`build_model`
    checks a module, against the module's ``ranker.`` weights of ``weights`` (not loaded)."""
    check_sizes(node, weights, path, features)
    target = target_of(node)
    if target not in RANKER_FACTORIES:
        raise ValueError(f"{path}: model._target_ {target!r} is not a training module")
    key, attribute = RANKER_FACTORIES[target]
    factory = node.get(key)
    if not (isinstance(factory, dict) and factory.get(PARTIAL) is True):
        raise ValueError(f"{path}: model.{key} is {factory!r}, not a factory (_partial_: true)")

    def make() -> Ranker:
        made = build(factory, f"model.{key}")(n_features=features[1])
        return made if attribute is None else getattr(made, attribute)

    held = {key: value for key, value in weights.items() if key.startswith(RANKER_PREFIX)}
    return _built_as_weights(make, held, path, prefix=RANKER_PREFIX)


def check_sizes(
    node: dict[str, Any], weights: dict[str, Any], path: str | Path, features: tuple[str, int]
) -> None:
    """The weights finite (:func:`check_weights`), and the feature count F of ``features``
    (where it comes from, F) and every int in ``node``'s :data:`SIZE_ARGUMENTS` at most the
    number of values they hold: a record cannot make a model larger than its weights."""
    check_weights(weights, path)
    budget = sum(tensor.numel() for tensor in weights.values())
    for where, value in [features, *_sizes(node, "model")]:
        for size in _ints(value):
            if size > budget:
                raise ValueError(
                    f"{path}: {where} holds {size!r}, more than the {budget} values the "
                    "checkpoint's weights hold: its run record cannot describe these weights "
                    "(the file was altered); nothing was allocated"
                )


def _built_as_weights(
    make: Callable[[], Built], weights: dict[str, Any], path: str | Path, prefix: str = ""
) -> Built:
    """``make()`` once on the meta device (which allocates nothing), its state dict's names
    (after ``prefix``) and shapes compared with ``weights``; only when they are equal, made for
    real."""
    with torch.device("meta"):
        planned = make().state_dict()
    shapes = {prefix + key: list(tensor.shape) for key, tensor in planned.items()}
    held = {key: list(tensor.shape) for key, tensor in weights.items()}
    differences = [
        f"{key}: the record's model has {shapes.get(key, 'none')}, the weights "
        f"{held.get(key, 'none')}"
        for key in sorted(shapes.keys() | held.keys())
        if shapes.get(key) != held.get(key)
    ]
    if differences:
        raise ValueError(
            f"{path}: the run record's model does not match its weights ("
            + "; ".join(differences[:6])
            + "): the file was altered or saved by another model; train it again"
        )
    return make()


def _sizes(node: Any, where: str) -> Iterator[tuple[str, Any]]:
    """``(config path, value)`` of every :data:`SIZE_ARGUMENTS` entry in ``node``."""
    if isinstance(node, dict):
        sized = SIZE_ARGUMENTS.get(target_of(node), ())
        for key, value in node.items():
            if key in sized:
                yield f"{where}.{key}", value
            elif key not in (TARGET, PARTIAL):
                yield from _sizes(value, f"{where}.{key}")
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _sizes(value, f"{where}[{index}]")


def _ints(value: Any) -> Iterator[int]:
    """The ints (not bools) in ``value``: a size, or a list or dict of sizes."""
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, list):
        for item in value:
            yield from _ints(item)
    elif isinstance(value, int) and not isinstance(value, bool):
        yield value


def check_weights(weights: Any, path: str | Path) -> None:
    """Every entry of the state dict ``weights`` a tensor, every floating one finite."""
    if not isinstance(weights, dict):
        raise ValueError(f"{path}: state_dict is a {type(weights).__name__}, not tensors by name")
    for key, tensor in weights.items():
        if not isinstance(tensor, torch.Tensor):
            kind = type(tensor).__name__
            raise ValueError(f"{path}: state_dict[{key!r}] is a {kind}, not a tensor")
        if tensor.is_floating_point():
            check_finite(f"state_dict[{key!r}]", tensor, path, "non-finite weights score NaN")


def check_finite(entry: str, tensor: torch.Tensor, path: str | Path, why: str) -> None:
    """Raise ValueError naming ``path``, ``entry``, the index and value of ``tensor``'s first
    NaN or infinite value, and ``why`` it matters."""
    bad = (~torch.isfinite(tensor)).nonzero()
    if len(bad):
        index = bad[0].tolist()
        raise ValueError(
            f"{path}: {entry}{index} is {float(tensor[tuple(index)])!r} ({why}); the file was "
            "altered or its run diverged: train it again"
        )


def run_record(checkpoint: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """The run record ``train.py`` saved with ``checkpoint``, its data, model and loss configs
    checked by :func:`check_restorable` (the whole record is refused if any is tampered with,
    whichever of them a task needs) and stripped of their :data:`MACHINE_ARGUMENTS` at any
    depth; a clear error when it has none."""
    record = checkpoint.get("differank")
    if not isinstance(record, dict) or not isinstance(record.get("config"), dict):
        raise ValueError(
            f"{path} carries no run record (saved by an older differank or outside train.py): "
            "its model cannot be rebuilt from the file alone"
        )
    config = dict(record["config"])
    for group in RESTORED:
        check_restorable(config.get(group), group)
        config[group] = without_machine_arguments(config.get(group))
    return {**record, "config": config}


def without_machine_arguments(node: Any) -> Any:
    """``node`` without the :data:`MACHINE_ARGUMENTS` of any class it names, at any depth."""
    if isinstance(node, list):
        return [without_machine_arguments(value) for value in node]
    if not isinstance(node, dict):
        return node
    machine = MACHINE_ARGUMENTS.get(target_of(node), ())
    return {k: without_machine_arguments(v) for k, v in node.items() if k not in machine}


def serving_statistics(record: dict[str, Any], path: str | Path) -> dict[str, Any]:
    """What scoring raw features needs besides the weights (feature count, transform, z-score
    statistics), its feature count checked (an int >= 1; the rest:
    :func:`differank.rankers.checkpoints.serving.check_serving_record`), or an error saying it
    is missing."""
    serving = record.get("serving")
    if not isinstance(serving, dict):
        raise ValueError(
            f"{path} was saved before checkpoints carried their feature statistics: it lacks "
            "the serving record (feature count, feature transform and normalization "
            "statistics). Score it with the data it was trained on (task=test "
            "ckpt_path=... with that data's fold folder), or train it again"
        )
    n_features = serving.get("n_features")
    if isinstance(n_features, bool) or not isinstance(n_features, int) or n_features < 1:
        raise ValueError(
            f"{path}: serving['n_features'] is {n_features!r}, not a feature count (an int "
            ">= 1); the file was altered: train it again"
        )
    return serving
