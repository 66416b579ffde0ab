"""Which queries go into a batch, and which documents of a long training query are kept.

Public API::

    QueryBatchSampler(lengths, batch_size, *, shuffle, bucket_by_length=True, seed=0,
                      draw_seeds=False)       # a torch batch sampler over query indices
    ShardedQueryBatchSampler(lengths, batch_size, *, rank, world_size, shuffle, **options)
                                              # the share of one DDP process (all in one)
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


class ShardedQueryBatchSampler(Sampler):
    """The loaders' batches: :class:`~differank.datamodules.query_batches.QueryBatchSampler` over
    the share of the queries that process ``rank`` of ``world_size`` serves (all of them in one
    process).

    Under DDP (``use_distributed_sampler=False``) queries are dealt round-robin:

    * Evaluation (``shuffle=False``): queries sorted by length are dealt once, so every query is
      scored by exactly one process (no padding, no duplicates; shares differ by at most one
      query) and synced metrics and gathered predictions equal a single process's.
    * Training (``shuffle=True``): a new permutation each epoch, seeded by ``(seed, epoch)`` and
      the same on every process, padded by repeating its first queries to a multiple of
      ``world_size``, so every process has the same number of batches (DDP all-reduces
      gradients once per batch).

    ``sampler`` is this object itself: Lightning calls ``batch_sampler.sampler.set_epoch`` at
    every epoch start (never ``batch_sampler.set_epoch``), and that is what makes a run resumed
    from a checkpoint draw the same batches as an uninterrupted one.
    """

    def __init__(
        self, lengths, batch_size: int, *, rank: int, world_size: int, shuffle: bool, **options
    ):
        self.lengths = np.asarray(lengths, dtype=np.int64)
        if not 0 <= rank < world_size:
            raise ValueError(f"rank must be in 0..{world_size - 1}, got {rank!r}")
        self.rank = int(rank)
        if len(self.lengths) < world_size:
            raise ValueError(
                f"{len(self.lengths)} queries cannot be shared by {world_size} processes "
                "(every process needs one); use fewer devices"
            )
        self.world_size, self.batch_size, self.shuffle = world_size, batch_size, shuffle
        self.options = options
        self.epoch = 0

    @property
    def sampler(self) -> ShardedQueryBatchSampler:
        return self

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def _share(self, epoch: int) -> tuple[np.ndarray, QueryBatchSampler]:
        n = len(self.lengths)
        if self.world_size == 1:
            order = np.arange(n)
        elif self.shuffle:
            order = np.random.default_rng([self.options.get("seed", 0), epoch, 2]).permutation(n)
            order = np.resize(order, -(-n // self.world_size) * self.world_size)
        else:
            order = np.argsort(self.lengths, kind="stable")
        mine = order[self.rank :: self.world_size]
        batches = QueryBatchSampler(
            self.lengths[mine], self.batch_size, shuffle=self.shuffle, **self.options
        )
        batches.set_epoch(epoch)
        return mine, batches

    def __len__(self) -> int:
        return len(self._share(self.epoch)[1])

    def __iter__(self) -> Iterator[list]:
        epoch = self.epoch
        self.epoch += 1
        mine, batches = self._share(epoch)
        for batch in batches:  # local positions -> the split's query positions
            if self.options.get("draw_seeds"):
                yield [(int(mine[i]), seed) for i, seed in batch]
            else:
                yield [int(mine[i]) for i in batch]


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
