"""Softmax cross-entropy with label-proportional targets (TF-Ranking / Rax ``softmax_loss``)
and its Poly-1 form (Leng et al., ICLR 2022); docs/objectives/standard.md#softmax."""

from __future__ import annotations

import torch

from differank.losses.inputs import decorated_mask, list_inputs, list_loss, query_documents
from differank.losses.module_form import LISTWISE, LossModule
from differank.losses.options import FINITE
from differank.losses.reduction import check_reduction, reduce_queries


def softmax_cross_entropy(
    scores: torch.Tensor, real: torch.Tensor, targets: torch.Tensor, epsilon: float = 0.0
) -> torch.Tensor:
    """``-Σ_i t_i log softmax(s)_i + epsilon · (1 - Σ_i t_i softmax(s)_i)`` per query [B],
    the softmax over the ``real`` documents only (padded scores are never read), for targets
    ``t`` that sum to 1 over a query's real documents and are 0 at its padding. A non-finite
    score at a real document makes its query's loss NaN, and its gradient NaN at its real
    documents (the input rule); ``real`` False everywhere in a query gives it a 0 gradient.

    Written as the few autograd ops it needs: at LETOR list sizes an O(L) loss costs about its
    number of ops, so the rule's NaN rides on the weights instead of a finiteness pass.

    Shape:
        scores, real (bool), targets: [B, L] -> [B].
    """
    # padding enters as the dtype's most negative value: probability an exact 0, log finite
    logits = torch.where(real, scores, torch.finfo(scores.dtype).min)
    log_probs = logits.log_softmax(dim=-1)
    # the weights -t, plus 0 · s: NaN at a non-finite real score, so its query's loss and (through
    # the softmax's backward) its real documents' gradients are NaN, as the input rule says; a
    # -inf score alone would give +inf and a finite gradient. No gradient flows into the weights.
    weights = logits.detach().mul(0.0).sub_(targets)
    per_query = (weights * log_probs).sum(dim=-1)
    if epsilon != 0:  # Poly-1: p_t = Σ_i t_i p_i
        per_query = per_query + epsilon * (1.0 - (targets * log_probs.exp()).sum(dim=-1))
    return per_query


def _softmax_per_query(
    scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor, epsilon: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cross-entropy + epsilon · (1 - p_t) [B], valid [B])`` under the input rule, with the
    targets ``t_i = l_i / Σ_j l_j`` over the real documents of the valid queries (0 elsewhere);
    ``epsilon = 0`` is the plain softmax loss."""
    scores, labels, mask, valid = list_inputs(scores, labels, mask)
    real = query_documents(mask, valid)
    relevance = torch.where(real, labels, 0.0)  # labels >= 0 where real
    total = relevance.sum(dim=-1, keepdim=True)  # > 0 in a valid query
    targets = relevance.div_(total.clamp_(min=torch.finfo(relevance.dtype).tiny))
    return softmax_cross_entropy(scores, real, targets, epsilon), valid


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
    return reduce_queries(*_softmax_per_query(scores, labels, decorated_mask(mask), 0.0), reduction)


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
    FINITE.check("poly1_softmax_loss", epsilon=epsilon)
    per_query = _softmax_per_query(scores, labels, decorated_mask(mask), epsilon)
    return reduce_queries(*per_query, reduction)


class SoftmaxLoss(LossModule, function=softmax_loss, memory=LISTWISE):
    """Module form of :func:`softmax_loss`."""


class Poly1SoftmaxLoss(LossModule, function=poly1_softmax_loss, memory=LISTWISE):
    """Module form of :func:`poly1_softmax_loss`."""
