"""A DataLoader that forms the next batch while the current one is in use.

Public API::

    PrefetchingDataLoader(dataset, ...)     # torch DataLoader arguments, num_workers=0

Batches gathered in this process (:mod:`differank.datamodules.split_tensors`) are torch ops that
release the GIL, so one background thread building batch ``i + 1`` overlaps the training step
on batch ``i``: on a CPU the gather runs on another core, on a GPU its kernels are queued ahead.
Order, contents and the sampler's epoch are exactly the plain DataLoader's (the thread runs the
same steps, one batch ahead); with worker processes (``num_workers > 0``) it is a plain
DataLoader. Without workers or pinning, the thread takes the batch sampler's keys and calls the
dataset's ``__getitems__`` (or ``__getitem__`` per key) and ``collate_fn`` itself, as the plain
iterator does, without that iterator's per-batch bookkeeping (a profiler record among it: about
0.1 ms a batch on a CPU, a fifth of a 1/8 MSLR batch's gather).
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import torch
from torch.utils.data import DataLoader

_END = object()


class PrefetchingDataLoader(DataLoader):
    """See the module docstring."""

    def __iter__(self) -> Iterator:
        if self.num_workers > 0:
            yield from super().__iter__()
            return
        plain = self.pin_memory or self.batch_sampler is None
        batches = super().__iter__() if plain else self._batches()
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="batches") as pool:
            pending = pool.submit(next, batches, _END)
            while (batch := pending.result()) is not _END:
                pending = pool.submit(next, batches, _END)
                yield batch

    def _batches(self) -> Iterator:
        """The single-process iterator's batches: keys from the batch sampler, the dataset's
        ``__getitems__`` (else one ``__getitem__`` per key), then ``collate_fn``. Like the plain
        iterator it first draws its base seed from the loader's generator (the global one by
        default), so the random stream after it (dropout, noise, samplers) is the plain loader's
        and a run gives the same numbers with or without this path."""
        torch.empty((), dtype=torch.int64).random_(generator=self.generator)
        fetch = getattr(self.dataset, "__getitems__", None)
        for keys in self.batch_sampler:
            items = fetch(keys) if fetch else [self.dataset[key] for key in keys]
            yield self.collate_fn(items)
