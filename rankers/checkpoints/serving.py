"""Serving a checkpoint: the raw-feature scorer it holds, and the serving record that makes it.

``Scorer`` is the served function, raw LETOR features ``[B, L, F] -> scores [B, L]``, with the
training split's feature transform (``data.transform``) and z-score folded in, so a caller
passes feature values as they appear in the files. A ranker that attends over the list
(``uses_mask``, e.g. the transformer) is served as ``(features, mask) -> scores`` with ``mask``
bool ``[B, L]`` (True = real document; padded rows may hold anything, NaN included). Every
checkpoint ``train.py`` writes carries a serving record (:func:`serving_record`: feature count,
fitted feature transform, float64 z-score statistics), so :func:`load_ranker` rebuilds the
scorer from the file alone; the exporters (:mod:`differank.rankers.run.export`) write it as
TorchScript or ONNX.

Public API (also from :mod:`differank.rankers.checkpoints`)::

    Scorer(ranker, mean, std, transform)          # raw features [B, L, F], mask [B, L] -> scores
    MISSING_FEATURE_VALUE                         # 0.0: a feature an engine cannot compute
    serving_record(datamodule) -> dict            # what a checkpoint saves for serving
    check_serving_record(serving, path)           # a checkpoint's record, refused unless sound
    serving_scorer(ranker, serving) -> Scorer     # a ranker behind a record's statistics
    load_ranker(path) -> Scorer                   # a checkpoint file's scorer, eval mode
    checkpoint_scorer(checkpoint, path) -> Scorer # the same of a loaded checkpoint
    scorer_from_checkpoint(checkpoint, path) -> (Scorer, module)   # and its training module

Example:
    >>> from differank.rankers.scorers.linear import LinearRanker
    >>> scorer = Scorer(LinearRanker(n_features=3), mean=torch.zeros(3), std=torch.ones(3))
    >>> scorer(torch.zeros(2, 4, 3)).shape
    torch.Size([2, 4])
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch
from torch import nn

from differank.datamodules.normalization import NORMALIZATIONS
from differank.datamodules.transforms import GaussRank, SignedLog1p, check_gaussrank_tables
from differank.rankers.checkpoints.reading import (
    check_finite,
    load_checkpoint,
    run_record,
    serving_statistics,
)
from differank.rankers.checkpoints.restore import rebuild_module, rebuild_ranker
from differank.rankers.scorers.base import Ranker

# The raw value of a feature that could not be computed for a document: what the LETOR reader
# gives a feature absent from a line, so what the scorer was trained on. Every export format
# serves with it (docs/serving.md#missing-values): Solr's feature store writes it as each
# feature's defaultValue; a client of the ONNX, TorchScript or Triton scorer sends it.
MISSING_FEATURE_VALUE = 0.0


class Scorer(nn.Module):
    """``ranker((transform(features) - mean) / std)``: the ranker behind the data's feature
    transform and z-score normalisation.

    ``mean``/``std`` [F] are the training statistics (``None``: features are used as given,
    i.e. ``normalization=none``), kept in float64: the z-score is computed in float64 and
    rounded to float32, as the data module computes it, so the ranker sees the very features
    it was trained and tested on. ``transform`` is the data module's fitted
    ``feature_transform`` (``None``: ``transform=none``). A per-document ranker is called as
    ``scorer(features)`` (padding rows score but mean nothing); a ranker with ``uses_mask`` as
    ``scorer(features, mask)``.
    """

    mean: torch.Tensor  # float64 buffers [F]
    std: torch.Tensor

    def __init__(
        self,
        ranker: Ranker,
        mean: torch.Tensor | None = None,
        std: torch.Tensor | None = None,
        transform: nn.Module | None = None,
    ) -> None:
        super().__init__()
        self.ranker = ranker
        self.uses_mask = bool(getattr(ranker, "uses_mask", False))
        self.transform = nn.Identity() if transform is None else transform
        n_features = ranker.n_features
        mean = torch.zeros(n_features) if mean is None else torch.as_tensor(mean)
        std = torch.ones(n_features) if std is None else torch.as_tensor(std)
        if mean.shape != (n_features,) or std.shape != (n_features,):
            raise ValueError(
                f"mean and std must have shape [{n_features}], got {tuple(mean.shape)} and "
                f"{tuple(std.shape)}"
            )
        self.register_buffer("mean", mean.to(torch.float64))
        self.register_buffer("std", std.to(torch.float64))

    @property
    def n_features(self) -> int:
        return int(self.mean.shape[0])

    def forward(self, features: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        if not torch.jit.is_tracing():  # a trace records operations; the check is for callers
            self.check_features(features)
        transformed = self.transform(features).to(self.mean.dtype)
        normalised = ((transformed - self.mean) / self.std).to(features.dtype)
        if self.uses_mask:
            return self.ranker(normalised, mask)
        return self.ranker(normalised)

    def check_features(self, features) -> None:
        """Say what the scorer expects when ``features`` is not a tensor of the ranker's dtype
        shaped [queries, documents, F] (rather than fail inside the ranker)."""
        expected = next(self.ranker.parameters(), self.mean).dtype
        if not isinstance(features, torch.Tensor):
            raise TypeError(
                f"features must be a torch.Tensor [queries, documents, {self.n_features}] of "
                f"{expected}, got a {type(features).__module__}.{type(features).__name__} "
                "(torch.as_tensor(x, dtype=torch.float32) converts a NumPy array)"
            )
        if features.dtype != expected:
            raise TypeError(
                f"features must be {expected} (the ranker's dtype), got {features.dtype}: pass "
                f"features.to({expected})"
            )
        if features.dim() != 3 or features.shape[-1] != self.n_features:
            raise ValueError(
                f"features must be [queries, documents, {self.n_features}] (the model reads "
                f"{self.n_features} features), got {list(features.shape)}"
            )


def serving_record(datamodule) -> dict[str, Any]:
    """What scoring raw features needs besides the weights, from a data module after its
    setup: the feature count, the normalization with its float64 statistics and the fitted
    feature transform (its name and tables). ``train.py`` saves it with every checkpoint
    (``checkpoint["differank"]["serving"]``, tensors and plain values: ``weights_only``
    reads it)."""
    transform = getattr(datamodule, "feature_transform", None)
    stats = {}
    for name, value in (("mean", datamodule.feature_mean), ("std", datamodule.feature_std)):
        stats[name] = None if value is None else torch.tensor(value, dtype=torch.float64)
    return {
        "n_features": int(datamodule.n_features),
        "normalization": str(datamodule.normalization),
        **stats,
        "transform": None
        if transform is None
        else {"name": transform.name, **{k: v.clone() for k, v in transform.state_dict().items()}},
    }


def check_serving_record(serving: dict[str, Any], path: str | Path) -> None:
    """Refuse a checkpoint's serving record (its feature count already checked) unless its
    normalization is known, its mean and std finite with one value per feature and the std
    positive, and its transform known with finite non-decreasing GaussRank tables; the error
    names the file, the entry and the value."""

    def refuse(entry: str, problem: str) -> ValueError:
        return ValueError(f"{path}: serving[{entry!r}]{problem}; the file was altered: train again")

    n_features = serving["n_features"]
    normalization = serving.get("normalization")
    if normalization not in NORMALIZATIONS:
        raise refuse("normalization", f" is {normalization!r}, not one of {NORMALIZATIONS}")
    if (serving.get("mean") is None) != (serving.get("std") is None):
        raise refuse("mean", " and serving['std'] must both be tensors or both be None")
    for name in ("mean", "std"):
        value = serving.get(name)
        if value is None:
            continue
        if not isinstance(value, torch.Tensor) or list(value.shape) != [n_features]:
            shape = list(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
            raise refuse(name, f" is {shape}, not a tensor [{n_features}] (one per feature)")
        check_finite(f"serving[{name!r}]", value, path, "statistics must be finite")
        if name == "std" and bool((value <= 0).any()):
            index = int((value <= 0).nonzero()[0])
            raise refuse(name, f"[{index}] is {float(value[index])!r}, not a positive scale")
    transform = serving.get("transform")
    if transform is None:
        return
    known = (SignedLog1p.name, GaussRank.name)
    if not isinstance(transform, dict) or transform.get("name") not in known:
        raise refuse("transform", f" is {transform!r}, not one of the transforms {known}")
    if transform["name"] == GaussRank.name:
        knots, values = transform.get("knots"), transform.get("values")
        if not (isinstance(knots, torch.Tensor) and isinstance(values, torch.Tensor)):
            raise refuse("transform", " has no knots and values tensors")
        if knots.ndim != 2 or knots.shape[0] != n_features:
            raise refuse("transform", f": knots are {list(knots.shape)}, not [{n_features}, K]")
        try:
            check_gaussrank_tables(knots, values)
        except ValueError as error:
            raise refuse("transform", f": {error}") from None


def serving_scorer(ranker: Ranker, serving) -> Scorer:
    """``ranker``'s serving form behind the fitted feature transform and z-score of a
    :func:`serving_record` (or of a set-up data module): a scorer of raw features."""
    if not isinstance(serving, dict):
        serving = serving_record(serving)
    if serving["normalization"] == "query_minmax":
        raise ValueError(
            "a scorer of raw features folds in z-score statistics only; train with "
            "data.normalization=zscore or none to export or score files"
        )
    fitted = serving["transform"]
    transform: nn.Module | None = None
    if fitted is not None:
        name = fitted["name"]
        if name == SignedLog1p.name:
            transform = SignedLog1p()
        elif name == GaussRank.name:
            transform = GaussRank(fitted["knots"], fitted["values"])
        else:
            raise ValueError(f"unknown feature transform {name!r} in the serving record")
    return Scorer(ranker.serving_ranker(), serving["mean"], serving["std"], transform=transform)


def load_ranker(path: str | Path) -> Scorer:
    """The trained scorer of a ``train.py`` checkpoint, from the file alone: an ``nn.Module``
    in eval mode scoring raw LETOR features ``ranker(features [B, L, F], mask [B, L])``
    exactly as the exported scorer (``task=export``) does."""
    return checkpoint_scorer(load_checkpoint(path), path)


def checkpoint_scorer(checkpoint: dict[str, Any], path: str | Path) -> Scorer:
    """The raw-feature scorer of ``checkpoint`` (read from ``path``), in eval mode: its serving
    record checked, then its ranker rebuilt alone (:func:`rebuild_ranker`: no Lightning)."""
    serving = serving_statistics(run_record(checkpoint, path), path)
    check_serving_record(serving, path)
    return serving_scorer(rebuild_ranker(checkpoint, path), serving).eval()


def scorer_from_checkpoint(checkpoint: dict[str, Any], path: str | Path):
    """``(scorer, module)``: :func:`checkpoint_scorer` and the trained module of
    ``checkpoint`` (:func:`rebuild_module`, which loads Lightning), for what needs both."""
    return checkpoint_scorer(checkpoint, path), rebuild_module(checkpoint, path)
