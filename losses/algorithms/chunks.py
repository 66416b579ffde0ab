"""Query chunks for the [B, L, L] pair computations that own their backward (ApproxNDCG,
LambdaLoss): working on a few queries at a time keeps the pair buffer small enough to be
reused from the allocator's heap and to stay in cache, instead of a fresh [B, L, L] allocation
(page faults) per elementwise step. The chunk count follows from the shapes only, so it is
static under ``torch.compile``."""

from __future__ import annotations

PAIR_BUDGET = 1 << 21
"""Pair entries per chunk (2M: 8 MiB of float32), below glibc's largest mmap threshold (32 MiB),
so freed chunk buffers are reused instead of mapped afresh."""


def query_chunks(batch_size: int, length: int, budget: int = PAIR_BUDGET) -> list[slice]:
    """Slices of the batch holding at most ``budget`` pairs each (at least one query).

    Example:
        >>> query_chunks(5, 1024, budget=2 * 1024 * 1024)
        [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
    """
    size = max(1, budget // max(1, length * length))
    return [slice(start, min(start + size, batch_size)) for start in range(0, batch_size, size)]
