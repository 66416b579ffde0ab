"""Pointwise baselines: sigmoid cross-entropy and squared error per document, summed over each
query's real documents (Rax's ``sigmoid_cross_entropy_loss`` and ``mean_squared_loss``);
docs/objectives/standard.md#pointwise-baselines."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from differank.losses.algorithms.pairs import valid_queries
from differank.losses.inputs import finite_scores, list_inputs, nan_for_nonfinite_scores
from differank.losses.reduction import check_reduction, reduce_queries


def _per_document_sum(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, document_loss, reduction: str
) -> torch.Tensor:
    """Reduce ``document_loss(safe_scores, labels)`` [B, L] to a per-query sum, under the rule."""
    check_reduction(reduction)
    scores, labels, mask = list_inputs(scores, labels, mask)
    safe = finite_scores(scores, mask)
    real_labels = torch.where(mask, labels, torch.zeros_like(labels))
    terms = document_loss(safe, real_labels)
    per_query = torch.where(mask, terms, torch.zeros_like(terms)).sum(dim=-1)
    valid = valid_queries(labels, mask)
    per_query = nan_for_nonfinite_scores(per_query, scores, mask, valid)
    return reduce_queries(per_query, valid, reduction)


def sigmoid_bce_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    max_label: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """``L_q = Σ_i BCE(σ(s_i), t_i)`` with targets ``t_i = clamp(l_i / max_label, 0, 1)``
    (``max_label=1``: binary relevance, any positive label is relevant; MQ2008 graded: 2).

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.

    Example:
        >>> sigmoid_bce_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[1, 0]]),
        ...                  torch.tensor([[True, True]]))
        tensor(1.3863)
    """
    if not max_label > 0:
        raise ValueError(f"max_label must be > 0, got {max_label!r}")

    def document_loss(safe, real_labels):
        targets = (real_labels / max_label).clamp(0.0, 1.0)
        return F.binary_cross_entropy_with_logits(safe, targets, reduction="none")

    return _per_document_sum(scores, labels, mask, document_loss, reduction)


def mse_loss(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, *, reduction: str = "mean"
) -> torch.Tensor:
    """``L_q = Σ_i (s_i - l_i)²`` over the real documents (regression on the labels).

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.

    Example:
        >>> mask = torch.tensor([[True, True]])
        >>> mse_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[2, 0]]), mask)
        tensor(4.)
    """
    return _per_document_sum(
        scores, labels, mask, lambda safe, real_labels: (safe - real_labels).square(), reduction
    )


class SigmoidBCELoss(nn.Module):
    """Module form of :func:`sigmoid_bce_loss`."""

    def __init__(self, *, max_label: float = 1.0, reduction: str = "mean") -> None:
        super().__init__()
        if not max_label > 0:
            raise ValueError(f"max_label must be > 0, got {max_label!r}")
        self.max_label, self.reduction = float(max_label), check_reduction(reduction)

    def forward(
        self, scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        return sigmoid_bce_loss(
            scores, labels, mask, max_label=self.max_label, reduction=self.reduction
        )


class MSELoss(nn.Module):
    """Module form of :func:`mse_loss`."""

    def __init__(self, *, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = check_reduction(reduction)

    def forward(
        self, scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        return mse_loss(scores, labels, mask, reduction=self.reduction)
