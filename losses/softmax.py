"""Softmax cross-entropy with label-proportional targets (TF-Ranking / Rax ``softmax_loss``)
and its Poly-1 form (Leng et al., ICLR 2022); docs/objectives/standard.md#softmax."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from differank.losses.inputs import (
    finite_scores,
    list_inputs,
    list_loss,
    nan_for_nonfinite_scores,
)
from differank.losses.module_form import LossModule
from differank.losses.reduction import check_reduction, reduce_queries


def _softmax_per_query(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, epsilon: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cross-entropy + epsilon · (1 - p_t) [B], valid [B])`` under the input rule, where
    the targets are ``t_i = l_i / Σ_j l_j`` and ``p_t = Σ_i t_i softmax(s)_i``; ``epsilon = 0``
    is the plain softmax loss. Padding enters as the dtype's most negative score with
    relevance 0."""
    scores, labels, mask, valid = list_inputs(scores, labels, mask)
    logits = torch.where(mask, finite_scores(scores, mask), torch.finfo(scores.dtype).min)
    relevance = torch.where(mask, labels, 0.0)  # labels >= 0 where real
    per_query = _cross_entropy(logits, relevance, epsilon)
    return nan_for_nonfinite_scores(per_query, scores, mask, valid), valid


def _cross_entropy(logits: torch.Tensor, relevance: torch.Tensor, epsilon: float) -> torch.Tensor:
    """``-Σ_i t_i log softmax(logits)_i + epsilon · (1 - Σ_i t_i softmax(logits)_i)`` [B] with
    ``t = relevance / Σ relevance`` (0 for a query of zeros). Padding enters the softmax as the
    dtype's most negative value (probability an exact 0, log finite) with relevance 0."""
    total = relevance.sum(dim=-1, keepdim=True)
    targets = relevance / total.clamp_(min=torch.finfo(relevance.dtype).tiny)
    per_query = F.cross_entropy(logits, targets, reduction="none")  # one fused call
    if epsilon != 0:
        per_query = per_query + epsilon * (1.0 - torch.linalg.vecdot(logits.softmax(-1), targets))
    return per_query


@list_loss()
def softmax_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    reduction: str = "mean",
) -> torch.Tensor:
    """``L_q = -Σ_i (l_i / Σ_j l_j) · log softmax(s)_i`` over the real documents (TF-Ranking's
    ``SoftmaxLoss``, Rax's ``softmax_loss``; Bruch et al. 2019). Labels below 0 count as 0.
    Inputs follow ``differank.losses.inputs``.

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.

    Example:
        >>> scores = torch.tensor([[0.0, 0.0, 9.0]])
        >>> labels = torch.tensor([[1.0, 0.0, float("nan")]])
        >>> softmax_loss(scores, labels, torch.tensor([[True, True, False]]))
        tensor(0.6931)
    """
    check_reduction(reduction)
    return reduce_queries(*_softmax_per_query(scores, labels, mask, 0.0), reduction)


@list_loss()
def poly1_softmax_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    epsilon: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Poly-1 softmax loss: :func:`softmax_loss` ``+ epsilon · (1 - p_t)`` with
    ``p_t = Σ_i t_i softmax(s)_i`` (Leng et al. 2022; TF-Ranking's
    ``PolyOneSoftmaxLoss``). Inputs follow ``differank.losses.inputs``.

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.

    Example:
        >>> scores = torch.tensor([[0.0, 0.0]])
        >>> poly1_softmax_loss(scores, torch.tensor([[1.0, 0.0]]), torch.tensor([[True, True]]))
        tensor(1.1931)
    """
    check_reduction(reduction)
    return reduce_queries(*_softmax_per_query(scores, labels, mask, epsilon), reduction)


class SoftmaxLoss(LossModule, function=softmax_loss):
    """Module form of :func:`softmax_loss`."""


class Poly1SoftmaxLoss(LossModule, function=poly1_softmax_loss):
    """Module form of :func:`poly1_softmax_loss`."""
