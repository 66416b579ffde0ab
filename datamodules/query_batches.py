"""Which queries go into a batch, and which documents of a long training query are kept.

Public API::

    QueryBatchSampler(lengths, batch_size, *, shuffle, bucket_by_length=True, seed=0,
                      draw_seeds=False)       # a torch batch sampler over query indices
    subsample_query(labels, max_list, rng) -> np.ndarray   # kept positions, in file order

Length bucketing keeps padding small: queries of similar length share a batch. Training
(``shuffle=True``) reshuffles every epoch from ``(seed, epoch)``; evaluation is deterministic.
With ``draw_seeds=True`` each yielded key is ``(query_index, draw_seed)`` so that the dataset's
per-draw random choices (``max_list`` subsampling) are reproducible whatever the worker count.
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
from torch.utils.data import Sampler

# Queries are bucketed inside pools of this many batches; within a pool, lengths that differ by
# less than about _LENGTH_JITTER (relative) may swap, so batch composition varies per epoch.
_POOL_BATCHES = 50
_LENGTH_JITTER = 0.1


class QueryBatchSampler(Sampler):
    """Batches of query indices, grouped by list length.

    Args:
        lengths: number of documents of each query (after any ``max_list`` cap).
        batch_size: queries per batch (the last batch may be smaller; nothing is dropped).
        shuffle: training mode: new order every epoch, seeded by ``(seed, epoch)``.
            Otherwise a fixed order (sorted by length when bucketing, else index order).
        bucket_by_length: group similar lengths; ``False`` gives plain (shuffled) chunks.
        seed: base seed of the per-epoch generator.
        draw_seeds: yield ``(index, draw_seed)`` pairs instead of plain indices.

    Every query appears exactly once per epoch. The epoch counter advances by one per
    iteration (Lightning iterates once per epoch; it does not call ``set_epoch`` on a batch
    sampler); :meth:`set_epoch` sets it explicitly, e.g. when resuming.
    """

    def __init__(
        self,
        lengths,
        batch_size: int,
        *,
        shuffle: bool,
        bucket_by_length: bool = True,
        seed: int = 0,
        draw_seeds: bool = False,
    ):
        lengths = np.asarray(lengths, dtype=np.int64)
        if lengths.ndim != 1 or len(lengths) == 0:
            raise ValueError("lengths must be a non-empty 1-D sequence of query lengths")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        self.lengths = lengths
        self.batch_size = batch_size
        self.shuffle = bool(shuffle)
        self.bucket_by_length = bool(bucket_by_length)
        self.seed = int(seed)
        self.draw_seeds = bool(draw_seeds)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __len__(self) -> int:
        n, pool = len(self.lengths), self.batch_size * _POOL_BATCHES
        if not (self.shuffle and self.bucket_by_length):
            return -(-n // self.batch_size)
        full, rest = divmod(n, pool)
        return full * _POOL_BATCHES + -(-rest // self.batch_size)

    def batches(self, epoch: int) -> list[np.ndarray]:
        """The batches (arrays of query indices) of one epoch."""
        n, size = len(self.lengths), self.batch_size
        if not self.shuffle:
            order = np.argsort(self.lengths, kind="stable") if self.bucket_by_length else None
            order = np.arange(n) if order is None else order
            return [order[i : i + size] for i in range(0, n, size)]
        rng = np.random.default_rng([self.seed, epoch])
        order = rng.permutation(n)
        if not self.bucket_by_length:
            batches = [order[i : i + size] for i in range(0, n, size)]
        else:
            jitter = np.exp(rng.uniform(-_LENGTH_JITTER, _LENGTH_JITTER, size=n))
            batches = []
            pool = size * _POOL_BATCHES
            for start in range(0, n, pool):
                members = order[start : start + pool]
                key = self.lengths[members] * jitter[members]
                members = members[np.argsort(key, kind="stable")]
                batches.extend(members[i : i + size] for i in range(0, len(members), size))
            batches = [batches[i] for i in rng.permutation(len(batches))]
        return batches

    def __iter__(self) -> Iterator[list]:
        epoch = self.epoch
        self.epoch += 1
        batches = self.batches(epoch)
        if not self.draw_seeds:
            for batch in batches:
                yield batch.tolist()
            return
        rng = np.random.default_rng([self.seed, epoch, 1])
        for batch in batches:
            seeds = rng.integers(0, 2**63 - 1, size=len(batch))
            yield list(zip(batch.tolist(), seeds.tolist(), strict=True))


def subsample_query(labels, max_list: int, rng: np.random.Generator) -> np.ndarray:
    """Positions (sorted, i.e. file order) of at most ``max_list`` documents of one query.

    Rule (training only; keeps preference pairs whenever the query has them):

    * ``n <= max_list``: keep everything.
    * Call "relevant" the documents above the query's lowest label (LETOR: label > 0).
      If the query has one label level, keep a random ``max_list`` subset.
    * If the relevant documents fit in ``max_list - 1`` slots, keep them all and fill the
      remaining slots with a random subset of the lowest-label documents.
    * Otherwise keep one random lowest-label document and a random subset of ``max_list - 1``
      relevant documents, so at least two label levels (and thus pairs) survive.

    ``max_list`` must be >= 2.
    """
    labels = np.asarray(labels)
    n = len(labels)
    if n <= max_list:
        return np.arange(n)
    lowest = labels == labels.min()
    low = np.flatnonzero(lowest)
    high = np.flatnonzero(~lowest)
    if len(high) == 0:
        kept = rng.choice(n, size=max_list, replace=False)
    elif len(high) <= max_list - 1:
        fill = rng.choice(low, size=max_list - len(high), replace=False)
        kept = np.concatenate([high, fill])
    else:
        kept = np.concatenate(
            [rng.choice(low, size=1), rng.choice(high, size=max_list - 1, replace=False)]
        )
    return np.sort(kept)
