"""ListNet: top-one probability cross-entropy (Cao et al., ICML 2007), a baseline."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from differank.losses.algorithms.pairs import valid_queries
from differank.losses.inputs import (
    eager_per_query,
    finite_scores,
    list_inputs,
    list_loss,
    nan_for_nonfinite_scores,
)
from differank.losses.module_form import LossModule
from differank.losses.reduction import check_reduction, reduce_queries


@list_loss()
def listnet_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    reduction: str = "mean",
) -> torch.Tensor:
    """Cross-entropy between the top-one distributions of the labels and of the scores.

    ``L_q = -Σ_i softmax(r)_i · log softmax(s)_i`` over the query's real documents (Cao et al.
    2007, eq. 4 with φ = exp). Queries whose labels are all equal carry no preference and get 0,
    like every other loss here. Inputs follow the rule of
    ``differank.losses.inputs`` (empty shapes, integer labels, non-finite values, half precision).

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.

    Example:
        >>> scores = torch.tensor([[0.0, 0.0, 9.0]])
        >>> labels = torch.tensor([[1.0, 0.0, float("nan")]])
        >>> mask = torch.tensor([[True, True, False]])
        >>> listnet_loss(scores, labels, mask)
        tensor(0.6931)
    """
    check_reduction(reduction)
    eager = eager_per_query(scores, labels, mask, _listnet_per_query)
    if eager is not None:
        return reduce_queries(*eager, reduction)
    scores, labels, mask = list_inputs(scores, labels, mask)
    very_negative = torch.finfo(scores.dtype).min
    safe = finite_scores(scores, mask)
    log_p_scores = torch.where(mask, safe, torch.full_like(scores, very_negative)).log_softmax(-1)
    real_labels = torch.where(mask, labels, torch.full_like(scores, very_negative))
    p_labels = real_labels.softmax(-1)
    terms = torch.where(mask, p_labels * log_p_scores, torch.zeros_like(scores))
    valid = valid_queries(labels, mask)
    per_query = nan_for_nonfinite_scores(-terms.sum(-1), scores, mask, valid)
    return reduce_queries(per_query, valid, reduction)


def _listnet_per_query(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor | None
) -> torch.Tensor:
    """-Σ softmax(labels) · log softmax(scores) [B] in one fused call (the eager shortcut of
    :func:`~differank.losses.inputs.eager_per_query`). Padding enters both softmaxes as the
    dtype's most negative value, so its probability is an exact 0 and its log finite."""
    if mask is not None:
        very_negative = torch.finfo(scores.dtype).min
        scores = torch.where(mask, scores, very_negative)
        labels = torch.where(mask, labels, very_negative)
    return F.cross_entropy(scores, labels.softmax(-1), reduction="none")


class ListNetLoss(LossModule, function=listnet_loss):
    """Module form of :func:`listnet_loss`."""
