"""ListNet: top-one probability cross-entropy (Cao et al., ICML 2007), a baseline."""

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
    scores, labels, mask, valid = list_inputs(scores, labels, mask)
    # padding enters both softmaxes as the dtype's most negative value: its probability is an
    # exact 0 and its log finite, so one fused cross-entropy call is the whole loss
    very_negative = torch.finfo(scores.dtype).min
    logits = torch.where(mask, finite_scores(scores, mask), very_negative)
    targets = torch.where(mask, labels, very_negative).softmax(-1)
    per_query = F.cross_entropy(logits, targets, reduction="none")
    per_query = nan_for_nonfinite_scores(per_query, scores, mask, valid)
    return reduce_queries(per_query, valid, reduction)


class ListNetLoss(LossModule, function=listnet_loss):
    """Module form of :func:`listnet_loss`."""
