"""A deterministic LETOR-like data set, written as real LETOR text and read back by the reader.

Public API::

    SyntheticLetorDataModule(n_train_queries=300, n_val_queries=100, n_test_queries=100,
                             seed=0, root=None, **LetorDataModule options)
    generate_queries(n_queries, seed, split_index, first_qid) -> (features, labels, qids, docids)
    write_letor(path, features, labels, qids, docids=None)    # re-exported from the reader

The set looks like LETOR 4.0: 46 features in [0, 1] (query-level min-max normalised, some
sparse), labels 0/1/2 (about 74/15/11 %), lists of 5..120 documents, and about 12 % of the
queries without any relevant document. Relevance is a planted nonlinear function of latent
document factors (linear terms, an interaction and a square) plus noise, so linear rankers
learn much of it and nonlinear ones can learn more. ``Fold1/{train,vali,test}.txt`` are
written to ``root`` (``None``: a cache subdirectory keyed by the generator parameters) and
read by exactly the same code path as real data. A split holds at most ``MAX_QUERIES`` queries
(about 2.2 million documents, 0.8 GB of float64 features while they are generated): larger sizes
are refused before anything is generated.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from differank.datamodules.letor import LetorDataModule
from differank.datamodules.reader import default_cache_dir, write_letor

__all__ = ["SyntheticLetorDataModule", "generate_queries", "write_letor", "N_FEATURES"]

N_FEATURES = 46
_N_LATENT = 8
_GENERATOR_VERSION = 1
_SPLIT_FILES = ("train.txt", "vali.txt", "test.txt")
MAX_QUERIES = 100_000  # per split; the ceiling a config (or a checkpoint's record) may ask for


def _model(seed: int) -> np.ndarray:
    """The feature-mixing matrix [latent, 46], shared by all splits of one seed."""
    rng = np.random.default_rng([seed, 0])
    mixing = rng.normal(size=(_N_LATENT, N_FEATURES))
    mixing[:, :_N_LATENT] += 3.0 * np.eye(_N_LATENT)  # features 1..8 track the factors closely
    return mixing


def generate_queries(n_queries: int, seed: int, split_index: int, first_qid: int):
    """Rows of ``n_queries`` synthetic queries: features float64 [N, 46] in [0, 1] (6 decimals),
    labels float64 [N] in {0, 1, 2}, qids int64 [N], docids list[str]."""
    mixing = _model(seed)
    rng = np.random.default_rng([seed, 1 + split_index])
    lengths = np.clip(np.rint(rng.lognormal(np.log(22.0), 0.7, size=n_queries)), 5, 120)
    lengths = lengths.astype(np.int64)
    qids = np.repeat(np.arange(first_qid, first_qid + n_queries, dtype=np.int64), lengths)
    n = int(lengths.sum())
    latent = rng.normal(size=(n, _N_LATENT))
    query_shift = np.repeat(rng.normal(-0.3, 1.3, size=n_queries), lengths)
    utility = (
        latent[:, 0]
        + 0.6 * latent[:, 1]
        - 0.4 * latent[:, 2]
        + 0.8 * np.tanh(latent[:, 3] * latent[:, 4])
        + 0.3 * latent[:, 5] ** 2
        + rng.normal(0.0, 0.8, size=n)
        + query_shift
    )
    labels = (utility > 1.3).astype(np.float64) + (utility > 2.5)
    raw = latent @ mixing + 0.5 * rng.normal(size=(n, N_FEATURES))
    raw[:, 30:] = np.maximum(raw[:, 30:] - 1.0, 0.0)  # sparse, LETOR-like count features
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    low = np.repeat(np.minimum.reduceat(raw, starts, axis=0), lengths, axis=0)
    span = np.repeat(np.maximum.reduceat(raw, starts, axis=0), lengths, axis=0) - low
    features = np.where(span > 0, (raw - low) / np.where(span > 0, span, 1.0), 0.0)
    features = np.round(features, 6)
    position = np.arange(n) - np.repeat(starts, lengths)
    docids = [f"SYN-{q}-{p}" for q, p in zip(qids.tolist(), position.tolist(), strict=True)]
    return features, labels, qids, docids


def _write_fold(directory: Path, sizes: tuple[int, int, int], seed: int) -> None:
    first_qid = 1
    for split_index, (name, size) in enumerate(zip(_SPLIT_FILES, sizes, strict=True)):
        features, labels, qids, docids = generate_queries(size, seed, split_index, first_qid)
        write_letor(directory / "Fold1" / name, features, labels, qids, docids, float_format="%.6f")
        first_qid += size


class SyntheticLetorDataModule(LetorDataModule):
    """:class:`LetorDataModule` over generated data (one fold, ``Fold1``); see module docstring.

    Files are generated on first use (``setup``, ``n_features`` or ``split_files``), never at
    construction, and reused when they already exist for the same parameters.
    """

    def __init__(
        self,
        n_train_queries: int = 300,
        n_val_queries: int = 100,
        n_test_queries: int = 100,
        seed: int = 0,
        root=None,
        **options,
    ):
        super().__init__(root=root, seed=seed, **options)
        if self.fold != 1:
            raise ValueError(f"synthetic data has a single fold (fold=1), got fold={self.fold}")
        sizes = (n_train_queries, n_val_queries, n_test_queries)
        for name, size in zip(
            ("n_train_queries", "n_val_queries", "n_test_queries"), sizes, strict=True
        ):
            is_int = isinstance(size, int) and not isinstance(size, bool)
            if not (is_int and 1 <= size <= MAX_QUERIES):
                raise ValueError(
                    f"{name} must be a positive int of at most {MAX_QUERIES} (the queries a "
                    f"split may hold: datamodules.synthetic.MAX_QUERIES), got {size!r}"
                )
        self.sizes = sizes
        self._written: Path | None = None

    def _params(self) -> dict:
        return {"version": _GENERATOR_VERSION, "sizes": list(self.sizes), "seed": self.seed}

    def _data_root(self) -> Path:
        if self._written is not None:
            return self._written
        params = json.dumps(self._params(), sort_keys=True)
        if self.root is not None:
            target = self.root
            marker = target / "synthetic.json"
            if not (marker.is_file() and marker.read_text() == params):
                _write_fold(target, self.sizes, self.seed)
                marker.write_text(params)
        else:
            key = hashlib.sha256(params.encode()).hexdigest()[:16]
            target = Path(self.cache_dir or default_cache_dir()) / "synthetic" / key
            if not (target / "synthetic.json").is_file():
                # Build in a sibling temp dir and rename: concurrent runs never see half a fold.
                target.parent.mkdir(parents=True, exist_ok=True)
                tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{key}-"))
                try:
                    _write_fold(tmp, self.sizes, self.seed)
                    (tmp / "synthetic.json").write_text(params)
                except BaseException:  # out of memory, disk full, interrupted: no half fold left
                    shutil.rmtree(tmp, ignore_errors=True)
                    raise
                try:
                    os.replace(tmp, target)
                except OSError:  # another process won the race; its files are identical
                    shutil.rmtree(tmp, ignore_errors=True)
        self._written = target
        return target
