"""A teacher's scores of the training and validation splits, computed once and cached with the
data, and handed to the loss per document.

:func:`split_teacher_scores` scores a split's raw features (the data's own files, without the
student's normalization or transform) and keeps them in the data cache
(``<cache_dir>/distill/teacher_scores/<key>/``, :mod:`differank.datamodules.cache`), keyed by
the teacher's sha256 (:meth:`~differank.rankers.run.teachers.Teacher.sha256`), the split's
files' sha256 and the split's name. A cached entry is used only after a check: its metadata
must name that same teacher digest, files and row count, and every score must be finite;
anything else is rebuilt.

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
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from differank.datamodules import cache
from differank.rankers.run.teachers import Teacher

log = logging.getLogger(__name__)

SPLITS = ("train", "val")  # the splits whose batches reach a loss


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


def cache_key(teacher_digest: str, files_sha256: list[str], split: str) -> str:
    text = json.dumps({"teacher": teacher_digest, "files": files_sha256, "split": split})
    return hashlib.sha256(text.encode()).hexdigest()[:32]


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
    entry = cache_dir / "distill" / "teacher_scores" / cache_key(digest, files, split)
    expected = {"teacher_sha256": digest, "files_sha256": files, "split": split, "rows": rows}

    def shapes(meta: dict) -> dict:
        return {"scores": [meta["rows"]]}

    def same(meta: dict) -> bool:
        return all(meta.get(name) == value for name, value in expected.items())

    found = cache.load(entry, shapes) if entry.exists() else None
    if found is not None:
        arrays, meta = found
        if same(meta) and np.isfinite(arrays["scores"]).all():
            return np.asarray(arrays["scores"], dtype=np.float64)
        log.warning("teacher score cache %s does not match its teacher or data; rebuilding", entry)
    raw_split = raw_data.split_data(split)
    scores = np.asarray(teacher.score(raw_split), dtype=np.float64)
    if scores.shape != (rows,):
        raise ValueError(
            f"teacher {teacher.path} gave {scores.shape} scores for the {rows} rows of {split}"
        )
    check_finite(scores, teacher, split, raw_split)
    folder = cache.new_entry(entry.parent)
    cache.commit(folder, entry, {"scores": scores}, expected, shapes, same)
    return scores


def teacher_scores(teacher: Teacher, raw_data, cache_dir: Path) -> TeacherScores:
    """The teacher's scores of the training and validation splits of ``raw_data``."""
    tables = {
        split: torch.from_numpy(split_teacher_scores(teacher, raw_data, split, cache_dir)).float()
        for split in SPLITS
    }
    return TeacherScores(**tables)
