"""An in-memory synthetic ranking set shaped like MSLR-WEB30K, for scale runs.

Public API::

    MSLR_WEB30K                                   # the shape: queries, documents, features, ...
    generate_mslr(n_queries=31531, n_docs=3771125, n_features=136, max_list=1251, seed=0,
                  chunk_queries=1024) -> RankingArrays
    query_lengths(n_queries, n_docs, max_list, seed) -> int64 [Q]   # sums to n_docs exactly
    iterate_batches(data, batch_size=64, *, max_list=None, seed=0, epoch=0)  # batch contract
    letor_text(data, first_qid=1) -> bytes    # the set as LETOR text (benchmarks/data_path.py)

MSLR-WEB30K has 31,531 queries, 3,771,125 documents, 136 features, labels 0-4 and lists of up to
1,251 documents. The generator reproduces that shape (exact query/document counts and maximum
list length, list lengths log-normal around the mean of ~120, labels 0-4 in about the published
proportions 51/33/13/2/1 %) with a planted signal: each document has 8 latent factors; its
utility is a fixed linear-plus-interaction function of them plus a per-query shift and noise,
thresholded into labels; its 136 features mix the factors plus noise. The set is generated in
chunks of queries, each from its own seed ``(seed, chunk)``, straight into float32 arrays (2.05
GB of features at full size); :func:`letor_text` writes it as LETOR text when a benchmark needs
the user's file path. Batches follow the batch contract (docs/data.md#the-batch-contract) and are
gathered by :mod:`differank.datamodules.split_tensors` like ``LetorDataModule``'s, ``max_list``
caps included.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from statistics import NormalDist
from typing import TypedDict

import numpy as np
import torch

from differank.datamodules.query_batches import QueryBatchSampler
from differank.datamodules.split_tensors import QueryBatchDataset, SplitTensors


class DatasetShape(TypedDict):
    """A LETOR data set's size: queries, documents, features, longest list, label values."""

    n_queries: int
    n_docs: int
    n_features: int
    max_list: int
    labels: tuple[int, ...]


MSLR_WEB30K: DatasetShape = {
    "n_queries": 31531,
    "n_docs": 3771125,
    "n_features": 136,
    "max_list": 1251,
    "labels": (0, 1, 2, 3, 4),
}
# Approximate MSLR-WEB30K label proportions for labels 0..4.
LABEL_SHARES = (0.514, 0.325, 0.134, 0.019, 0.008)
_N_LATENT = 8
_UTILITY_STD = 1.6  # std of the utility below (unit latent factors, noise 0.8, query shift 0.8)


@dataclass
class RankingArrays:
    """A ranking set held as flat arrays: query ``q`` owns rows ``offsets[q]:offsets[q+1]``."""

    features: np.ndarray  # float32 [N, F]
    labels: np.ndarray  # float32 [N]
    offsets: np.ndarray  # int64 [Q + 1]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    @property
    def n_queries(self) -> int:
        return len(self.offsets) - 1

    @property
    def nbytes(self) -> int:
        return self.features.nbytes + self.labels.nbytes + self.offsets.nbytes


def query_lengths(n_queries: int, n_docs: int, max_list: int, seed: int = 0) -> np.ndarray:
    """Log-normal list lengths in ``1..max_list`` summing to exactly ``n_docs``, one query of
    length ``max_list`` (the longest list of the set)."""
    if not n_queries <= n_docs <= n_queries * max_list:
        raise ValueError(
            f"need n_queries <= n_docs <= n_queries * max_list, got {n_queries}, "
            f"{n_docs}, {max_list}"
        )
    rng = np.random.default_rng([seed, 0])
    mean = n_docs / n_queries
    raw = rng.lognormal(np.log(mean) - 0.18, 0.6, size=n_queries)
    lengths = np.clip(np.rint(raw * n_docs / raw.sum()), 1, max_list).astype(np.int64)
    lengths[int(np.argmax(lengths))] = max_list
    # Fix the total by +-1 steps on random queries that stay inside 1..max_list.
    while (gap := n_docs - int(lengths.sum())) != 0:
        room = lengths < max_list if gap > 0 else lengths > 1
        room[int(np.argmax(lengths))] = False  # keep the longest list at max_list
        candidates = np.flatnonzero(room)
        if len(candidates) == 0:
            raise ValueError("cannot reach n_docs within 1..max_list")
        pick = rng.choice(candidates, size=min(abs(gap), len(candidates)), replace=False)
        lengths[pick] += 1 if gap > 0 else -1
    return lengths


def _label_thresholds() -> np.ndarray:
    """Utility cut points giving LABEL_SHARES for a normal utility of std _UTILITY_STD."""
    normal = NormalDist(0.0, _UTILITY_STD)
    return np.asarray([normal.inv_cdf(p) for p in np.cumsum(LABEL_SHARES)[:-1]])


def generate_mslr(
    n_queries: int = MSLR_WEB30K["n_queries"],
    n_docs: int = MSLR_WEB30K["n_docs"],
    n_features: int = MSLR_WEB30K["n_features"],
    max_list: int = MSLR_WEB30K["max_list"],
    seed: int = 0,
    chunk_queries: int = 1024,
) -> RankingArrays:
    """The synthetic set (see the module docstring); defaults give the full MSLR-WEB30K shape.

    Example:
        >>> data = generate_mslr(n_queries=20, n_docs=500, n_features=16, max_list=60)
        >>> data.features.shape, data.features.dtype, int(data.lengths.max())
        ((500, 16), dtype('float32'), 60)
        >>> sorted(set(data.labels.tolist())) <= [0.0, 1.0, 2.0, 3.0, 4.0]
        True
    """
    lengths = query_lengths(n_queries, n_docs, max_list, seed)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    mixing = np.random.default_rng([seed, 1]).normal(size=(_N_LATENT, n_features))
    mixing += 2.0 * np.eye(_N_LATENT, n_features)  # features 1..8 track the factors
    mixing = (mixing / np.sqrt(_N_LATENT)).astype(np.float32)
    thresholds = _label_thresholds()
    features = np.empty((n_docs, n_features), dtype=np.float32)
    labels = np.empty(n_docs, dtype=np.float32)
    for chunk, first in enumerate(range(0, n_queries, chunk_queries)):
        last = min(first + chunk_queries, n_queries)
        rows = slice(int(offsets[first]), int(offsets[last]))
        n = rows.stop - rows.start
        rng = np.random.default_rng([seed, 2, chunk])
        latent = rng.standard_normal((n, _N_LATENT), dtype=np.float32)
        shift = np.repeat(rng.normal(0.0, 0.8, size=last - first), lengths[first:last])
        utility = (
            0.9 * latent[:, 0]
            + 0.6 * latent[:, 1]
            - 0.4 * latent[:, 2]
            + 0.5 * latent[:, 3] * latent[:, 4]
            + rng.normal(0.0, 0.8, size=n)
            + shift
        )
        labels[rows] = np.searchsorted(thresholds, utility).astype(np.float32)
        block = features[rows]
        rng.standard_normal(out=block, dtype=np.float32)  # noise, then add the signal in place
        block *= 0.5
        block += latent @ mixing
    return RankingArrays(features=features, labels=labels, offsets=offsets)


def iterate_batches(
    data: RankingArrays,
    batch_size: int = 64,
    *,
    max_list: int | None = None,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
) -> Iterator[dict[str, torch.Tensor]]:
    """One epoch of padded batches, formed exactly as ``LetorDataModule``'s training loader
    forms them (length-bucketed batches, one gather per batch, static lengths).

    ``max_list`` caps each list by the rule of
    :func:`~differank.datamodules.query_batches.subsample_query` (relevant documents kept
    first), so memory per batch is bounded by ``batch_size × max_list``.
    """
    tensors = SplitTensors(
        torch.from_numpy(data.features),
        torch.from_numpy(data.labels),
        torch.arange(len(data.labels)),
        data.offsets,
        np.arange(data.n_queries),
    )
    dataset = QueryBatchDataset(tensors, max_list)
    sampler = QueryBatchSampler(
        dataset.lengths, batch_size, shuffle=shuffle, seed=seed, draw_seeds=max_list is not None
    )
    sampler.set_epoch(epoch)
    for keys in sampler:
        yield dataset.__getitems__(keys)


def _ascii_digits(values: np.ndarray, width: int) -> np.ndarray:
    """Non-negative ints [N] as zero-padded ASCII digits uint8 [N, width]."""
    powers = 10 ** np.arange(width - 1, -1, -1, dtype=np.int64)
    return (values[:, None] // powers % 10 + 48).astype(np.uint8)


def letor_text(data: RankingArrays, first_qid: int = 1) -> bytes:
    """The set as LETOR text: ``<label> qid:<q> 1:<v> ... F:<v>`` for every row, every value
    written with six decimals as ``d.dddddd`` (features mapped into [0, 10) like the
    non-negative MSLR-WEB30K features). Vectorised: rows of one qid width share a layout."""
    n, n_features = data.features.shape
    qids = np.repeat(np.arange(first_qid, first_qid + data.n_queries), data.lengths)
    parts = []
    for width in range(1, 20):
        rows = np.flatnonzero(
            (qids >= (10 ** (width - 1) if width > 1 else 0)) & (qids < 10**width)
        )
        if len(rows) == 0:
            continue
        for start in range(0, len(rows), 20000):
            block = rows[start : start + 20000]
            columns = [
                _ascii_digits(data.labels[block].astype(np.int64), 1),
                np.frombuffer(b" qid:", np.uint8)[None].repeat(len(block), 0),
                _ascii_digits(qids[block], width),
            ]
            scaled = np.clip(data.features[block] * 1.5 + 5.0, 0.0, 9.999999)
            micro = np.rint(scaled.astype(np.float64) * 1e6).astype(np.int64)
            for j in range(n_features):
                head = np.frombuffer(f" {j + 1}:".encode(), np.uint8)[None]
                digits = _ascii_digits(micro[:, j], 7)
                columns += [
                    head.repeat(len(block), 0),
                    digits[:, :1],
                    np.full((len(block), 1), 46, np.uint8),
                    digits[:, 1:],
                ]
            columns.append(np.full((len(block), 1), 10, np.uint8))
            parts.append(np.concatenate(columns, axis=1).tobytes())
    return b"".join(parts)
