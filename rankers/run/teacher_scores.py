"""A teacher's scores of the training and validation splits, computed once and cached with the
data, and handed to the loss per document.

:func:`split_teacher_scores` scores a split's raw features (the data's own files, without the
student's normalization or transform) and keeps them in the data cache
(``<cache_dir>/distill/teacher_scores/<key>/``, :mod:`differank.datamodules.cache`), keyed by
the teacher's sha256 (:meth:`~differank.rankers.run.teachers.Teacher.sha256`), the split's
files' sha256, the split's fingerprint (:func:`split_fingerprint`: its query ids and raw
features as read, which reading options such as Parquet's columns change while the files stay
the same) and the split's name. A cached entry is used only after a check: its metadata must
name that same teacher digest, files, fingerprint and row count, the scores' bytes must have
the sha256 recorded beside them (an altered file is caught) and every score must be finite;
anything else is rebuilt, with a warning.

:class:`TeacherScores` gives the loss the teacher's score of each document of a batch, gathered
by ``batch["doc_index"]`` (the row in the split; -1 at padding).

Example:
    >>> table = TeacherScores(train=torch.tensor([0.5, 1.5, 2.5]), val=torch.tensor([9.0]))
    >>> table.for_batch(torch.tensor([[2, 0, -1]]), training=True)
    tensor([[2.5000, 0.5000, 0.0000]])
    >>> table.for_batch(torch.tensor([[0, -1]]), training=False)
    tensor([[9., 0.]])
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from differank.datamodules import cache
from differank.rankers.run.teachers import Teacher

log = logging.getLogger(__name__)

SPLITS = ("train", "val")  # the splits whose batches reach a loss
_HASH_BLOCK = 2**22  # elements hashed at a time


@dataclass
class TeacherScores:
    """The teacher's score of every row of the training and validation splits (float32)."""

    train: torch.Tensor
    val: torch.Tensor

    def for_batch(self, doc_index: torch.Tensor, training: bool) -> torch.Tensor:
        """[B, L] teacher scores of a batch's documents (0 at padding, ``doc_index`` -1): the
        training split's while ``training``, else the validation split's."""
        table = self.train if training else self.val
        if table.device != doc_index.device:
            table = table.to(doc_index.device)
            if training:
                self.train = table
            else:
                self.val = table
        return torch.where(doc_index >= 0, table[doc_index.clamp(min=0)], 0.0)


def cache_key(teacher_digest: str, files_sha256: list[str], data_sha256: str, split: str) -> str:
    text = json.dumps(
        {"teacher": teacher_digest, "files": files_sha256, "data": data_sha256, "split": split}
    )
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def array_sha256(*arrays: np.ndarray) -> str:
    """sha256 of the arrays' dtypes, shapes and bytes (C order), hashed block by block so a
    memory-mapped array is never copied whole."""
    digest = hashlib.sha256()
    for array in arrays:
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        flat = np.ascontiguousarray(array).reshape(-1)  # no copy when already C order
        for start in range(0, len(flat), _HASH_BLOCK):
            digest.update(flat[start : start + _HASH_BLOCK].tobytes())
    return digest.hexdigest()


def split_fingerprint(raw_split) -> str:
    """The identity of a split's rows as the teacher scores them: sha256 of its query ids and
    raw features (the same files read with other options give another fingerprint)."""
    return array_sha256(np.asarray(raw_split.qids), np.asarray(raw_split.features))


def check_finite(scores: np.ndarray, teacher: Teacher, split: str, raw_split) -> None:
    bad = ~np.isfinite(scores)
    if bad.any():
        from differank.rankers.run.scoring import row_source

        row = int(np.flatnonzero(bad)[0])
        raise ValueError(
            f"teacher {teacher.path} scores row {row + 1} of the {split} split "
            f"({row_source(raw_split, row)}) as {scores[row]}, not finite ({int(bad.sum())} of "
            f"{len(scores)} rows): check the teacher file"
        )


def split_teacher_scores(teacher: Teacher, raw_data, split: str, cache_dir: Path) -> np.ndarray:
    """float64 [rows] teacher scores of ``split`` of ``raw_data`` (a data module with raw
    features), from the cache after its check, else computed and cached."""
    files = raw_data.file_sha256(split)
    digest = teacher.sha256()
    rows = raw_data.num_rows(split)
    raw_split = raw_data.split_data(split)
    data = split_fingerprint(raw_split)
    entry = cache_dir / "distill" / "teacher_scores" / cache_key(digest, files, data, split)
    expected = {
        "teacher_sha256": digest,
        "files_sha256": files,
        "data_sha256": data,
        "split": split,
        "rows": rows,
    }

    def shapes(meta: dict) -> dict:
        return {"scores": [meta["rows"]]}

    def same(meta: dict) -> bool:
        return all(meta.get(name) == value for name, value in expected.items())

    found = cache.load(entry, shapes) if entry.exists() else None
    if found is not None:
        arrays, meta = found
        scores = arrays["scores"]
        whole = meta.get("scores_sha256") == array_sha256(scores)
        if same(meta) and whole and np.isfinite(scores).all():
            return np.asarray(scores, dtype=np.float64)
        log.warning(
            "teacher score cache %s does not match its teacher or data, or was altered; rebuilding",
            entry,
        )
        shutil.rmtree(entry, ignore_errors=True)  # the cache's own folder: commit writes it anew
    scores = np.asarray(teacher.score(raw_split), dtype=np.float64)
    if scores.shape != (rows,):
        raise ValueError(
            f"teacher {teacher.path} gave {scores.shape} scores for the {rows} rows of {split}"
        )
    check_finite(scores, teacher, split, raw_split)
    folder = cache.new_entry(entry.parent)
    meta = {**expected, "scores_sha256": array_sha256(scores)}
    cache.commit(folder, entry, {"scores": scores}, meta, shapes, same)
    return scores


def teacher_scores(teacher: Teacher, raw_data, cache_dir: Path) -> TeacherScores:
    """The teacher's scores of the training and validation splits of ``raw_data``."""
    tables = {
        split: torch.from_numpy(split_teacher_scores(teacher, raw_data, split, cache_dir)).float()
        for split in SPLITS
    }
    return TeacherScores(**tables)
