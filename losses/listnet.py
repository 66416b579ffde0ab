"""ListNet: top-one probability cross-entropy (Cao et al., ICML 2007), a baseline."""

from __future__ import annotations

import torch

from differank.losses.inputs import decorated_mask, list_inputs, list_loss, query_documents
from differank.losses.module_form import LISTWISE, LossModule
from differank.losses.reduction import check_reduction, reduce_queries
from differank.losses.softmax import softmax_cross_entropy


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
    scores, labels, mask, valid = list_inputs(scores, labels, decorated_mask(mask))
    real = query_documents(mask, valid)
    # the labels' top-one distribution over the real documents: padding (and every slot of a
    # query without a pair) enters as the dtype's most negative label, probability an exact 0
    targets = torch.where(real, labels, torch.finfo(labels.dtype).min).softmax(dim=-1)
    per_query = softmax_cross_entropy(scores, real, targets)
    return reduce_queries(per_query, valid, reduction)


class ListNetLoss(LossModule, function=listnet_loss, memory=LISTWISE):
    """Module form of :func:`listnet_loss`."""
