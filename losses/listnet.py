"""ListNet: top-one probability cross-entropy (Cao et al., ICML 2007), a baseline."""

from __future__ import annotations

import torch
from torch import nn

from losses.inputs import check_list_inputs
from losses.pairs import valid_queries
from losses.reduction import check_reduction, reduce_queries


def listnet_loss(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, *, reduction: str = "mean"
) -> torch.Tensor:
    """Cross-entropy between the top-one distributions of the labels and of the scores.

    ``L_q = -Σ_i softmax(r)_i · log softmax(s)_i`` over the query's real documents (Cao et al.
    2007, eq. 4 with φ = exp). Queries whose labels are all equal carry no preference and get 0,
    like every other loss here (SPEC §1 "Validity").

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.

    Example:
        >>> scores = torch.tensor([[0.0, 0.0, 9.0]])
        >>> labels = torch.tensor([[1.0, 0.0, float("nan")]])
        >>> mask = torch.tensor([[True, True, False]])
        >>> listnet_loss(scores, labels, mask)
        tensor(0.6931)
    """
    check_list_inputs(scores, labels, mask)
    check_reduction(reduction)
    very_negative = torch.finfo(scores.dtype).min
    log_p_scores = torch.where(mask, scores, torch.full_like(scores, very_negative)).log_softmax(-1)
    real_labels = torch.where(mask, labels.to(scores.dtype), torch.full_like(scores, very_negative))
    p_labels = real_labels.softmax(-1)
    terms = torch.where(mask, p_labels * log_p_scores, torch.zeros_like(scores))
    return reduce_queries(-terms.sum(-1), valid_queries(labels, mask), reduction)


class ListNetLoss(nn.Module):
    """Module form of :func:`listnet_loss`."""

    def __init__(self, *, reduction: str = "mean") -> None:
        super().__init__()
        self.reduction = check_reduction(reduction)

    def forward(
        self, scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        return listnet_loss(scores, labels, mask, reduction=self.reduction)
