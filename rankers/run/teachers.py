"""The teachers a student may be distilled from, each scoring a split's raw features:

* :class:`CheckpointTeacher`: any ``train.py`` checkpoint (:func:`differank.load_ranker`, the
  allowlisted restore), e.g. a previous run of the same model (self-distillation);
* :class:`EnsembleTeacher`: the ``ensemble.json`` written by
  ``python -m differank.rankers.run.ensemble`` (its member checkpoints, weights and score mode);
* :class:`LightGBMTeacher`, :class:`XGBoostTeacher`: a gradient-boosted model file (the
  ``bench`` extra installs the libraries; they are imported only here, when used).

A teacher's path comes from the user's config (``teacher=...``), never from a checkpoint: a
restored run does not read its teacher. :meth:`Teacher.sha256` fingerprints every file the
scores depend on, which keys and verifies the cached scores.

Example:
    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "model.txt").write_text("tree")
    >>> first = LightGBMTeacher(folder / "model.txt").sha256()
    >>> _ = (folder / "model.txt").write_text("tree, retrained")
    >>> LightGBMTeacher(folder / "model.txt").sha256() == first  # another file: other scores
    False
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import numpy as np
import torch


class Teacher:
    """A scorer of raw LETOR features whose scores a student learns from.

    Subclasses give :meth:`files` (what the scores depend on) and :meth:`score`.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        if not self.path.is_file():
            raise FileNotFoundError(
                f"teacher file {self.path} does not exist: set teacher.path to a checkpoint, an "
                "ensemble.json or a LightGBM/XGBoost model file (docs/objectives/distill.md)"
            )

    def files(self) -> list[Path]:
        return [self.path]

    def sha256(self) -> str:
        """One sha256 over the sha256 of each of :meth:`files`, in order."""
        digest = hashlib.sha256(type(self).__name__.encode())
        for path in self.files():
            digest.update(hashlib.sha256(Path(path).read_bytes()).hexdigest().encode())
        return digest.hexdigest()

    def score(self, split) -> np.ndarray:
        """float64 [rows]: the teacher's score of every row of ``split`` (raw features)."""
        raise NotImplementedError


def score_every_row(scorer: torch.nn.Module, split) -> np.ndarray:
    """``scorer``'s scores of every row of ``split``, its dropped training queries included
    (a student's batches index rows, and a teacher must cover each)."""
    from differank.rankers.run.scoring import score_split

    every_query = dataclasses.replace(split, queries=np.arange(len(split.query_rows)))
    with torch.no_grad():
        return score_split(scorer, every_query).numpy()


class CheckpointTeacher(Teacher):
    """A ``train.py`` checkpoint, rebuilt by :func:`differank.load_ranker` (allowlisted)."""

    def score(self, split) -> np.ndarray:
        from differank.rankers.checkpoints import load_ranker

        return score_every_row(load_ranker(self.path), split)


class EnsembleTeacher(Teacher):
    """The ensemble of ``python -m differank.rankers.run.ensemble``'s ``ensemble.json``: its
    ``checkpoints`` averaged with its ``weights`` (``scores``: ``standardized`` or ``raw``)."""

    def record(self) -> dict:
        try:
            record = json.loads(self.path.read_text())
            return {
                "checkpoints": [Path(p) for p in record["checkpoints"]],
                "weights": [float(w) for w in record["weights"]],
                "standardize": record.get("scores", "standardized") == "standardized",
            }
        except (ValueError, KeyError, TypeError) as error:
            raise ValueError(
                f"{self.path} is not an ensemble.json of differank.rankers.run.ensemble "
                f"(checkpoints, weights, scores): {error}"
            ) from error

    def files(self) -> list[Path]:
        return [self.path, *self.record()["checkpoints"]]

    def score(self, split) -> np.ndarray:
        from differank.rankers.checkpoints import load_ranker
        from differank.rankers.run.ensemble import EnsembleRanker

        record = self.record()
        members = [load_ranker(path) for path in record["checkpoints"]]
        ensemble = EnsembleRanker(members, record["weights"], record["standardize"]).eval()
        return score_every_row(ensemble, split)


def _import_booster(library: str):
    try:
        return __import__(library)
    except ImportError as error:
        raise ImportError(
            f"a {library} teacher needs the {library} package: pip install 'differank[bench]' "
            f"(the bench extra), or {library} itself"
        ) from error


class LightGBMTeacher(Teacher):
    """A LightGBM model file (``Booster.save_model``), scoring the raw features."""

    def score(self, split) -> np.ndarray:
        lightgbm = _import_booster("lightgbm")
        booster = lightgbm.Booster(model_file=str(self.path))
        if booster.num_feature() != split.features.shape[1]:
            raise ValueError(
                f"teacher {self.path} reads {booster.num_feature()} features, the data has "
                f"{split.features.shape[1]}"
            )
        return np.asarray(booster.predict(np.asarray(split.features)), dtype=np.float64)


class XGBoostTeacher(Teacher):
    """An XGBoost model file (``Booster.save_model``, JSON or UBJSON), scoring raw features."""

    def score(self, split) -> np.ndarray:
        xgboost = _import_booster("xgboost")
        booster = xgboost.Booster(model_file=str(self.path))
        matrix = xgboost.DMatrix(np.asarray(split.features))
        return np.asarray(booster.predict(matrix), dtype=np.float64)
