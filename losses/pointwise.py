"""Pointwise baselines: sigmoid cross-entropy and squared error per document, summed over each
query's real documents (Rax's ``sigmoid_cross_entropy_loss`` and ``mean_squared_loss``);
docs/objectives/standard.md#pointwise-baselines."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from differank.losses.algorithms.pairs import valid_queries
from differank.losses.inputs import finite_scores, list_inputs, list_loss, nan_for_nonfinite_scores
from differank.losses.module_form import LossModule
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


@list_loss()
def sigmoid_bce_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
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


@list_loss()
def mse_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    reduction: str = "mean",
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


class SigmoidBCELoss(LossModule, function=sigmoid_bce_loss):
    """Module form of :func:`sigmoid_bce_loss`."""


class MSELoss(LossModule, function=mse_loss):
    """Module form of :func:`mse_loss`."""
