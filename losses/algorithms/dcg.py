"""The NDCG gain, discount and ideal DCG, written once: the structured hinge's Δ = 1 − NDCG@k
(:mod:`differank.losses.algorithms.ndcg_assignment`), ConvexLoss' ``delta="ndcg"``
(:mod:`differank.losses.algorithms.permutation_sampler`) and the NDCG surrogates (LambdaLoss,
ApproxNDCG, NeuralNDCG, the approximate metrics) all use them.

``gain(label) = 2^label − 1`` (``powered=False``: ``label``) and ``D(r) = 1 / log2(1 + r)`` at
1-based rank r, 0 below the truncation k (docs/objectives/hinge.md#interpretations-chosen,
docs/objectives/convex.md, docs/objectives/standard.md). Labels below 0 count as 0.
"""

from __future__ import annotations

import torch


def dcg_gains(labels: torch.Tensor, mask: torch.Tensor, *, powered: bool = True) -> torch.Tensor:
    """``2^label − 1`` (``powered``) or ``label`` at real documents, 0 at padding (whatever it
    holds).

    Shape:
        labels (floating), mask: [..., L] -> [..., L] in labels' dtype.

    Example:
        >>> dcg_gains(torch.tensor([2.0, 0.0, float("nan")]), torch.tensor([True, True, False]))
        tensor([3., 0., 0.])
    """
    real = torch.where(mask, labels, torch.zeros_like(labels)).clamp(min=0.0)
    return torch.exp2(real) - 1.0 if powered else real


def dcg_discounts(ranks: torch.Tensor, k: int | None, dtype: torch.dtype) -> torch.Tensor:
    """``1 / log2(1 + r)`` for 1-based ranks ``r ≤ k`` (every rank when ``k`` is None), else 0.

    Shape:
        ranks: any integer (or integral float) tensor -> the same shape in ``dtype``.

    Example:
        >>> dcg_discounts(torch.tensor([1, 3, 4]), 3, torch.float64)
        tensor([1.0000, 0.5000, 0.0000], dtype=torch.float64)
    """
    r = ranks.to(dtype)
    discount = 1.0 / torch.log2(1.0 + r.clamp(min=1.0))
    if k is None:
        return discount
    return torch.where(ranks <= k, discount, torch.zeros_like(r))


def position_discounts(length: int, like: torch.Tensor) -> torch.Tensor:
    """``D(p)`` for the positions ``p = 1..length``, in ``like``'s dtype and device.

    Shape:
        -> [length].
    """
    ranks = torch.arange(1, length + 1, device=like.device)
    return dcg_discounts(ranks, None, like.dtype)


def ideal_dcg(gains: torch.Tensor, k: int | None = None) -> torch.Tensor:
    """DCG@k of the ideal ordering (gains in decreasing order); ``k=None``: the whole list.
    Padded slots must hold gain 0 (as :func:`dcg_gains` gives), so they sort last.

    Shape:
        gains: [B, L] -> [B].

    Example:
        >>> ideal_dcg(torch.tensor([[0.0, 3.0, 1.0]]), k=1)
        tensor([3.])
    """
    top = gains.shape[-1] if k is None else min(k, gains.shape[-1])
    best = gains.topk(top, dim=-1).values
    return (best * position_discounts(top, best)).sum(dim=-1)
