"""Gains, rank discounts and ideal DCG: the NDCG terms shared by the NDCG surrogates
(LambdaLoss, ApproxNDCG, NeuralNDCG, the approximate metrics); docs/objectives/standard.md.

Conventions are allRank's (and the LETOR/MSLR literature's): exponential gains ``2^l - 1`` (or
linear gains ``l`` as an option), discounts ``1 / log2(1 + position)`` with 1-based positions,
and labels below 0 counted as 0. Padded slots have gain 0 whatever they hold.
"""

from __future__ import annotations

import torch


def label_gains(labels: torch.Tensor, mask: torch.Tensor, *, powered: bool = True) -> torch.Tensor:
    """``2^l - 1`` (``powered``) or ``l`` per real document, labels clamped at 0; 0 at padding.

    Shape:
        labels, mask: [..., L] -> [..., L].
    """
    real = torch.where(mask, labels, torch.zeros_like(labels)).clamp(min=0.0)
    return torch.exp2(real) - 1.0 if powered else real


def position_discounts(length: int, like: torch.Tensor) -> torch.Tensor:
    """``1 / log2(1 + p)`` for the 1-based positions ``p = 1..length``, as ``like``'s dtype.

    Shape:
        -> [length].
    """
    positions = torch.arange(1, length + 1, device=like.device, dtype=like.dtype)
    return 1.0 / torch.log2(1.0 + positions)


def ideal_dcg(gains: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """DCG@k of the ideal ordering (gains sorted in decreasing order); ``k=None``: the whole list.

    Padded slots must hold gain 0 (as :func:`label_gains` gives), so they sort last.

    Shape:
        gains: [B, L] -> [B].

    Example:
        >>> ideal_dcg(torch.tensor([[0.0, 3.0, 1.0]]), k=1)
        tensor([3.])
    """
    ordered = gains.sort(dim=-1, descending=True).values
    top = ordered[..., :k] if k is not None else ordered
    return (top * position_discounts(top.shape[-1], top)).sum(dim=-1)
