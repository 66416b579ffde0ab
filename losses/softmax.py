"""Softmax cross-entropy with label-proportional targets (TF-Ranking / Rax ``softmax_loss``)
and its Poly-1 form (Leng et al., ICLR 2022); docs/objectives/standard.md#softmax."""

from __future__ import annotations

import torch

from differank.losses.algorithms.pairs import valid_queries
from differank.losses.inputs import finite_scores, list_inputs, list_loss, nan_for_nonfinite_scores
from differank.losses.module_form import LossModule
from differank.losses.reduction import check_reduction, reduce_queries


def _softmax_terms(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(cross-entropy [B], p_t [B], valid [B], scores)`` after the input rule, where the
    targets are ``t_i = l_i / Σ_j l_j`` (labels below 0 count as 0) and
    ``p_t = Σ_i t_i softmax(s)_i``."""
    scores, labels, mask = list_inputs(scores, labels, mask)
    safe = finite_scores(scores, mask)
    very_negative = torch.finfo(safe.dtype).min
    log_p = torch.where(mask, safe, torch.full_like(safe, very_negative)).log_softmax(dim=-1)
    relevance = torch.where(mask, labels, torch.zeros_like(labels)).clamp(min=0.0)
    total = relevance.sum(dim=-1, keepdim=True)
    targets = relevance / torch.where(total > 0, total, torch.ones_like(total))
    cross_entropy = -torch.where(mask, targets * log_p, torch.zeros_like(log_p)).sum(dim=-1)
    p_target = torch.where(mask, targets * log_p.exp(), torch.zeros_like(log_p)).sum(dim=-1)
    valid = valid_queries(labels, mask)
    return cross_entropy, p_target, valid, (scores, mask)


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
    cross_entropy, _, valid, (values, mask) = _softmax_terms(scores, labels, mask)
    per_query = nan_for_nonfinite_scores(cross_entropy, values, mask, valid)
    return reduce_queries(per_query, valid, reduction)


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
    cross_entropy, p_target, valid, (values, mask) = _softmax_terms(scores, labels, mask)
    per_query = nan_for_nonfinite_scores(
        cross_entropy + epsilon * (1.0 - p_target), values, mask, valid
    )
    return reduce_queries(per_query, valid, reduction)


class SoftmaxLoss(LossModule, function=softmax_loss):
    """Module form of :func:`softmax_loss`."""


class Poly1SoftmaxLoss(LossModule, function=poly1_softmax_loss):
    """Module form of :func:`poly1_softmax_loss`."""
