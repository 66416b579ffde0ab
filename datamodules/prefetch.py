"""A DataLoader that forms the next batch while the current one is in use.

Public API::

    PrefetchingDataLoader(dataset, ...)     # torch DataLoader arguments, num_workers=0

Batches gathered in this process (:mod:`differank.datamodules.split_tensors`) are torch ops that
release the GIL, so one background thread building batch ``i + 1`` overlaps the training step
on batch ``i``: on a CPU the gather runs on another core, on a GPU its kernels are queued ahead.
Order, contents and the sampler's epoch are exactly the plain DataLoader's (the thread runs the
same iterator, one batch ahead); with worker processes (``num_workers > 0``) it is a plain
DataLoader.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

from torch.utils.data import DataLoader

_END = object()


class PrefetchingDataLoader(DataLoader):
    """See the module docstring."""

    def __iter__(self) -> Iterator:
        batches = super().__iter__()
        if self.num_workers > 0:
            yield from batches
            return
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="batches") as pool:
            pending = pool.submit(next, batches, _END)
            while (batch := pending.result()) is not _END:
                pending = pool.submit(next, batches, _END)
                yield batch
