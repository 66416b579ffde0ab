"""Splits held in memory as arrays, read by the LETOR data module's own code.

Public API::

    SplitArrays(features float32 [N, F], labels float32 [N], qids int64 [N], name="X",
                query_weights=None)               # float64 [Q] in order of first appearance
    InMemoryDataModule(train, val=None, test=None, **LetorDataModule options)

:class:`InMemoryDataModule` is :class:`~differank.datamodules.letor.LetorDataModule` whose
"files" are arrays: the value rules, the feature set, the query grouping, the feature transform,
the normalization and the batching are the LETOR module's code, so rows given as arrays train
exactly as the same rows written as a LETOR fold and read by ``data=letor`` (no text is written,
nothing is cached on disk). ``val`` and ``test`` default to the training rows. Each split's
:meth:`file_sha256` is a sha256 of its arrays, the data fingerprint a checkpoint records.

``query_weights`` (training split only) weigh each query's loss (``Ranker(...).fit(...,
sample_weight=...)``): one non-negative float per query, in the order queries first appear.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from differank.datamodules.letor import LetorDataModule
from differank.datamodules.letor_split import LetorSplit
from differank.datamodules.parquet import ParquetFile
from differank.datamodules.reader import LetorFile

SPLITS = ("train", "val", "test")


@dataclass(frozen=True)
class SplitArrays:
    """One split's rows: ``features`` float32 [N, F], ``labels`` float32 [N] (integers 0..31),
    ``qids`` int64 [N]; ``name`` names the rows in errors (``"X"``, ``"eval_set[0] X"``)."""

    features: np.ndarray
    labels: np.ndarray
    qids: np.ndarray
    name: str = "X"
    query_weights: np.ndarray | None = None

    def __post_init__(self) -> None:
        if self.features.dtype != np.float32 or self.features.ndim != 2:
            raise ValueError(f"{self.name}: features must be float32 [N, F]")
        rows = len(self.features)
        if self.labels.shape != (rows,) or self.qids.shape != (rows,):
            raise ValueError(
                f"{self.name}: labels {self.labels.shape} and qids {self.qids.shape} must hold "
                f"one value per row ({rows})"
            )


class ArrayRows(ParquetFile):
    """A split's arrays as the reader's :class:`LetorFile`, with the value rules of a file
    without lines (:class:`ParquetFile`'s), located by row and column: ``line_numbers`` are
    0-based row numbers; no doc ids."""

    def location(self, row: int, column: str) -> str:
        return f"{self.path}: row {row}, column {column}"

    def _feature_column(self, index: int) -> str:
        return str(index)

    def release_pages(self) -> None:
        """Nothing: the arrays are the caller's (and a split may be read twice, as validation
        and test when no other rows are given)."""


def array_rows(arrays: SplitArrays) -> ArrayRows:
    """``arrays`` as :class:`ArrayRows`, with the counts the value rules read."""
    features = arrays.features
    rows, width = features.shape
    bad = ~np.isfinite(features)
    first = np.argwhere(bad)[0] if bad.any() else (0, 0)
    digest = hashlib.sha256()
    for array in (features, arrays.labels, arrays.qids):
        digest.update(np.ascontiguousarray(array).data)
    meta = {
        "rows": rows,
        "features": width,
        "nulls": 0,
        "nonfinite": int(bad.sum()),
        "nonfinite_row": int(first[0]),  # ParquetFile's names: rows, not lines
        "label_column": "y",
        "nonfinite_feature": int(first[1]),
        "nonfinite_value": float(features[first[0], first[1]]) if rows and width else 0.0,
        "sha256": digest.hexdigest(),
        "version": "arrays-1",
    }
    return ArrayRows(
        path=Path(arrays.name),
        features=features,
        labels=arrays.labels.astype(np.uint8),
        qids=arrays.qids,
        line_numbers=np.arange(rows, dtype=np.int64),
        present=np.ones(width, bool),
        null_rows=np.zeros(0, np.int64),
        null_cols=np.zeros(0, np.int64),
        docid_offsets=np.zeros(rows + 1, np.int64),
        docid_bytes=np.zeros(0, np.uint8),
        meta=meta,
    )


class InMemoryDataModule(LetorDataModule):
    """Training, validation and test rows given as :class:`SplitArrays` (module docstring);
    every other option is :class:`LetorDataModule`'s (``root``, ``fold``, ``format``, the
    Parquet columns and the cache options do not apply)."""

    def __init__(
        self,
        train: SplitArrays,
        val: SplitArrays | None = None,
        test: SplitArrays | None = None,
        **options,
    ) -> None:
        super().__init__(root=None, **options)
        val = train if val is None else val
        self.arrays = {"train": train, "val": val, "test": val if test is None else test}
        width = train.features.shape[1]
        for split, arrays in self.arrays.items():
            if arrays.features.shape[1] != width:
                raise ValueError(
                    f"{arrays.name} ({split}) has {arrays.features.shape[1]} features, the "
                    f"training rows {width}"
                )
        weights = train.query_weights
        if weights is not None:
            queries = len(np.unique(train.qids))
            if weights.shape != (queries,) or not np.isfinite(weights).all() or (weights < 0).any():
                raise ValueError(
                    f"{train.name}: query weights must be {queries} finite non-negative "
                    f"numbers (one per query), got shape {weights.shape}"
                )
            if not weights.any():
                raise ValueError(f"{train.name}: every query weight is 0: nothing to train on")

    def _fold_files(self) -> dict[str, list[Path]]:
        return {split: [Path(arrays.name)] for split, arrays in self.arrays.items()}

    def _read_files(self, files: dict[str, list[Path]]) -> dict[Path, LetorFile]:
        parsed: dict[Path, LetorFile] = {}
        for split, paths in files.items():
            parsed[paths[0]] = rows = array_rows(self.arrays[split])
            rows.check_values(
                nan_policy=self.nan_policy, null_value=self.null_value, label_range=self.label_range
            )
        return parsed

    def _store_features(
        self, splits: dict[str, LetorSplit], n_features: int, dropped: np.ndarray
    ) -> None:
        """The normalised features in memory (the LETOR module caches them on disk)."""
        features = {
            name: np.empty((split.num_rows, n_features), np.float32)
            for name, split in splits.items()
        }
        mean, std, fitted = self._fill_features(splits, features, dropped)
        for name, split in splits.items():
            split.features = features[name]
        self._set_zscore({"mean": mean, "std": std})
        self._transform = fitted

    def _query_weights(self, split: str) -> np.ndarray | None:
        return self.arrays["train"].query_weights if split == "train" else None
