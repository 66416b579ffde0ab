"""ListNet: top-one probability cross-entropy (Cao et al., ICML 2007), a baseline."""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from differank.losses.algorithms.pairs import valid_queries
from differank.losses.inputs import (
    check_list_inputs,
    compute_dtype,
    every_document_real,
    finite_scores,
    float_labels,
    in_dtype,
    list_inputs,
    list_loss,
    may_read_values,
    nan_for_nonfinite_scores,
    unpadded_eager_validity,
    usable_eager_result,
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
    if may_read_values(scores):
        eager = _listnet_on_usable_inputs(scores, labels, mask)
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


def _listnet_on_usable_inputs(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The CPU eager path's per-query loss and validity ([B] each; validity None when every
    query is valid) in a few fused operations,
    or None when the input rule has work to do: an empty batch or list, or a non-finite score, a
    non-finite or negative label at a real document. Those are seen on [B] after the fact
    (one free host read), so usable inputs pay no O(B·L) check of their own.

    Padding enters both softmaxes as the dtype's most negative value, so its probability is an
    exact 0 and its log finite; a query whose real scores and labels are finite gets a finite
    cross-entropy, and anything else shows up in ``per_query`` or ``lowest``.
    """
    check_list_inputs(scores, labels, mask)
    if scores.numel() == 0:  # B = 0 or L = 0: the general path's connected zero
        return None
    dtype = compute_dtype(scores.dtype)
    as_float = float_labels(labels, dtype)
    if every_document_real(mask):  # no padding to fill: the checks come from one aminmax
        per_query = F.cross_entropy(in_dtype(scores, dtype), as_float.softmax(-1), reduction="none")
        usable, valid = unpadded_eager_validity(*torch.aminmax(as_float, dim=-1), per_query)
        return (per_query, valid) if usable else None
    very_negative = torch.finfo(dtype).min
    real_labels = torch.where(mask, as_float, very_negative)
    logits = torch.where(mask, in_dtype(scores, dtype), very_negative)
    # -Σ softmax(labels) · log softmax(scores), one fused call
    per_query = F.cross_entropy(logits, real_labels.softmax(-1), reduction="none")
    lowest = torch.where(mask, as_float, math.inf).amin(-1)  # NaN, -inf or < 0 if one is
    # a non-finite score or label makes per_query NaN or ±inf
    if not usable_eager_result(lowest, per_query):
        return None
    return per_query, real_labels.amax(-1) > lowest


class ListNetLoss(LossModule, function=listnet_loss):
    """Module form of :func:`listnet_loss`."""
