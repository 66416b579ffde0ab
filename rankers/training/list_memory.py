"""The memory a loss needs for a batch, checked against the memory budget before the allocator
sees the request (issue #41: one query of 10^6 documents under a pairwise loss reached torch's
allocator with an 8 TB request after 41 s).

Every differank loss states how its memory grows with the list length L
(:class:`~differank.losses.module_form.ListMemory`: pairwise O(B·L²), listwise O(B·L)).
:func:`check_batch_memory` reads shapes only, so it costs nothing on an accelerator; the budget
(free host memory, or the device's free plus cached memory) is read only for a batch whose need
passes :data:`ALWAYS_FITS`, which no batch of LETOR-sized lists comes near.
"""

from __future__ import annotations

import torch
from torch import nn

from differank.datamodules.reader import available_memory_bytes

ALWAYS_FITS = 256 * 2**20
"""A need below this (256 MiB) is not checked against the budget: no read of the free memory in
the training steps of ordinary lists."""


def memory_budget(device: torch.device) -> int | None:
    """Bytes a tensor on ``device`` can still take: the host's available memory on the CPU, on a
    CUDA device its free memory plus what torch's allocator holds unused; ``None`` elsewhere."""
    if device.type == "cpu":
        return available_memory_bytes()
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return free + torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
    return None


def _size(size: float) -> str:
    for unit, scale in (("TiB", 2**40), ("GiB", 2**30)):
        if size >= scale:
            return f"{size / scale:,.1f} {unit}"
    return f"{size / 2**20:,.1f} MiB"


def check_batch_memory(loss: nn.Module, mask: torch.Tensor, dtype: torch.dtype) -> None:
    """Raise a ValueError, before the loss allocates anything, when its need for the batch of
    ``mask``'s shape [B, L] in the compute dtype of ``dtype`` passes the budget of the mask's
    device; the message names the list length, the loss, the bytes and the fix. A loss that
    states no ``memory`` (one from outside differank) is not checked."""
    memory = getattr(loss, "memory", None)
    if memory is None or mask.dim() != 2:
        return
    batch, length = mask.shape
    itemsize = torch.promote_types(dtype, torch.float32).itemsize  # half is computed in float32
    need = memory.bytes(batch, length, itemsize)
    if need <= ALWAYS_FITS:
        return
    budget = memory_budget(mask.device)
    if budget is None or need <= budget:
        return
    longest = memory.longest_list(batch, itemsize, budget)
    raise ValueError(
        f"{type(loss).__name__} needs memory {memory}: a batch of {batch} lists of up to "
        f"{length:,} documents needs about {_size(need)}, over the {_size(budget)} available on "
        f"{mask.device}. Cap the lists with data.max_list={max(longest, 2)} (or smaller batches), "
        "or use a sampled or listwise loss (loss=listnet, loss=listmle, loss=softmax, "
        "loss=domination; ConeLoss and ConvexLoss sample by default)"
    )
