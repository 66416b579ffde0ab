"""The teachers a student may be distilled from, each scoring a split's raw features:

* :class:`CheckpointTeacher`: any ``train.py`` checkpoint (:func:`differank.load_ranker`, the
  allowlisted restore), e.g. a previous run of the same model (self-distillation);
* :class:`EnsembleTeacher`: the ``ensemble.json`` written by
  ``python -m differank.rankers.run.ensemble`` (its member checkpoints, weights and score mode);
* :class:`LightGBMTeacher`, :class:`XGBoostTeacher`: a gradient-boosted model file (the
  ``bench`` extra installs the libraries), loaded and scored in a child process
  (:mod:`~differank.rankers.run.booster_child`): the libraries' C++ loaders abort the process
  on a damaged or forged file, and here that process is not the run. Any failure of the child
  (a signal, an exception, a feature count other than the data's) is a
  :class:`TeacherFileError` naming the file (docs/objectives/distill.md#foreign-model-files).

A teacher's path comes from the user's config (``teacher=...``), never from a checkpoint: a
restored run does not read its teacher. It must be a regular file (a FIFO, a device, a
directory or a dangling link is refused before it is opened). :meth:`Teacher.sha256`
fingerprints every file the scores depend on, which keys and verifies the cached scores.

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
import importlib.util
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from differank.datamodules.reader import available_memory_bytes, file_sha256
from differank.datamodules.regular_files import require_regular_file

# Address space a child may reserve beyond the free memory: thread stacks and malloc arenas
# (OpenMP's threads) reserve space they never touch
_CHILD_HEADROOM = 2 * 2**30
_CHILD_STDERR_LINES = 3  # the library's last words, e.g. "[LightGBM] [Fatal] Model format error"


class BoosterFileError(ValueError):
    """A LightGBM or XGBoost model file that its library could not load or score (it crashed,
    raised or refused it); the message names the file, what happened and the library's last
    lines."""

    what = "model file"  # how the message names the file


class TeacherFileError(BoosterFileError):
    """A teacher's model file that its library could not load or score."""

    what = "teacher file"


class Teacher:
    """A scorer of raw LETOR features whose scores a student learns from.

    Subclasses give :meth:`files` (what the scores depend on) and :meth:`score`.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path).expanduser()
        if not self.path.exists() and not self.path.is_symlink():
            raise FileNotFoundError(
                f"teacher file {self.path} does not exist: set teacher.path to a checkpoint, an "
                "ensemble.json or a LightGBM/XGBoost model file (docs/objectives/distill.md)"
            )
        require_regular_file(self.path, "teacher.path (a checkpoint or model file)")

    def files(self) -> list[Path]:
        return [self.path]

    def sha256(self) -> str:
        """One sha256 over the sha256 of each of :meth:`files`, in order."""
        digest = hashlib.sha256(type(self).__name__.encode())
        for path in self.files():
            digest.update(file_sha256(path).encode())
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

    def record(self):
        """The checked ``ensemble.json`` (:func:`~differank.rankers.run.ensemble.read_record`):
        its members are regular files of a size memory holds, or it is refused by name."""
        from differank.rankers.run.ensemble import read_record

        return read_record(self.path)

    def files(self) -> list[Path]:
        return [self.path, *self.record().checkpoints]

    def score(self, split) -> np.ndarray:
        from differank.rankers.checkpoints import load_ranker
        from differank.rankers.run.ensemble import EnsembleRanker

        record = self.record()
        members = [load_ranker(path) for path in record.checkpoints]
        ensemble = EnsembleRanker(members, record.weights, record.standardize).eval()
        return score_every_row(ensemble, split)


class BoosterTeacher(Teacher):
    """A gradient-boosted model file of ``library``, scored in a child process
    (:mod:`~differank.rankers.run.booster_child`) on the raw features: a crash of the library
    on the file, an error it raises, or a feature count other than the data's becomes a
    :class:`TeacherFileError` naming the file."""

    library = ""  # the subclass's: a key of booster_child.BOOSTERS

    def score(self, split) -> np.ndarray:
        if importlib.util.find_spec(self.library) is None:
            raise ImportError(
                f"a {self.library} teacher needs the {self.library} package: pip install "
                f"'differank[bench]' (the bench extra), or {self.library} itself"
            )
        features = np.ascontiguousarray(split.features)
        with tempfile.TemporaryDirectory(prefix="differank-teacher-") as scratch:
            inputs, outputs = Path(scratch) / "features.npy", Path(scratch) / "scores.npy"
            np.save(inputs, features, allow_pickle=False)
            run_booster_child(
                "differank.rankers.run.booster_child",
                self.library,
                self.path,
                [str(inputs), str(outputs)],
                TeacherFileError,
            )
            scores = np.load(outputs, allow_pickle=False)
        if scores.shape != (len(features),):
            raise TeacherFileError(
                f"{self.library} gave {scores.shape} scores for the {len(features)} rows from "
                f"teacher file {self.path}: give a model of one score per row (a ranker)"
            )
        return scores


def run_booster_child(
    module: str,
    library: str,
    path: Path,
    arguments: list[str],
    error: type[BoosterFileError],
) -> None:
    """``python -m MODULE LIBRARY PATH *ARGUMENTS MEMORY`` (a child that loads the model file
    ``path`` with ``library``, capping its address space at ``MEMORY`` bytes); any failure of
    it, a signal included, raises ``error`` naming the file, what happened, the library's last
    lines and the fix."""
    memory = available_memory_bytes()
    limit = 0 if memory is None else memory + _CHILD_HEADROOM
    child = subprocess.run(
        [sys.executable, "-m", module, library, str(path), *arguments, str(limit)],
        capture_output=True,
        text=True,
        errors="replace",
        env=_child_environment(),
    )
    if child.returncode == 0:
        return
    if child.returncode < 0:
        happened = f"{library} crashed ({signal.Signals(-child.returncode).name})"
    else:
        happened = f"{library} failed (exit status {child.returncode})"
    lines = [line.strip() for line in child.stderr.splitlines() if line.strip()]
    said = "; ".join(lines[-_CHILD_STDERR_LINES:])[-1000:].rstrip(". ") or "no message"
    raise error(
        f"{error.what} {path} could not be scored: {happened} loading or running it: "
        f"{said}. Give a model saved by {library}'s Booster.save_model, whole and "
        "unedited, trained on this data's features "
        "(docs/objectives/distill.md#foreign-model-files)"
    )


def _child_environment() -> dict[str, str]:
    """This process's environment, with differank's own folder first on ``PYTHONPATH`` so the
    child imports this differank (an uninstalled checkout included)."""
    import differank

    root = str(Path(differank.__file__).resolve().parent.parent)
    inherited = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": root if not inherited else root + os.pathsep + inherited}


class LightGBMTeacher(BoosterTeacher):
    """A LightGBM model file (``Booster.save_model``, text), scoring the raw features."""

    library = "lightgbm"


class XGBoostTeacher(BoosterTeacher):
    """An XGBoost model file (``Booster.save_model``, JSON or UBJSON), scoring raw features."""

    library = "xgboost"
