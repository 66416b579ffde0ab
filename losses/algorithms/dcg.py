"""The NDCG gain and discount, written once: the structured hinge's Δ = 1 − NDCG@k
(:mod:`differank.losses.algorithms.ndcg_assignment`) and ConvexLoss' ``delta="ndcg"``
(:mod:`differank.losses.algorithms.permutation_sampler`) both use them.

``gain(label) = 2^label − 1`` and ``D(r) = 1 / log2(1 + r)`` at 1-based rank r, 0 below the
truncation k (docs/objectives/hinge.md#interpretations-chosen, docs/objectives/convex.md).
"""

from __future__ import annotations

import torch


def dcg_gains(labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``2^label − 1`` at real documents, 0 at padding (whatever it holds).

    Shape:
        labels (floating), mask: [..., L] -> [..., L] in labels' dtype.

    Example:
        >>> dcg_gains(torch.tensor([2.0, 0.0, float("nan")]), torch.tensor([True, True, False]))
        tensor([3., 0., 0.])
    """
    return torch.where(mask, torch.exp2(labels) - 1.0, torch.zeros_like(labels))


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
