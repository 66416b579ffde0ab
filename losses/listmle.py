"""ListMLE: the Plackett-Luce likelihood of the label order (Xia et al., ICML 2008), and its
position-aware form p-ListMLE (Lan et al., UAI 2014); docs/objectives/standard.md#listmle."""

from __future__ import annotations

import torch

from differank.losses.algorithms.pairs import valid_queries
from differank.losses.inputs import finite_scores, list_inputs, list_loss, nan_for_nonfinite_scores
from differank.losses.module_form import LossModule
from differank.losses.reduction import check_reduction, reduce_queries

TIES = ("random", "index")


def check_listmle_options(ties: str, eps: float) -> None:
    """Raise ValueError for an unknown tie rule or ``eps < 0``."""
    if ties not in TIES:
        raise ValueError(f"ties must be one of {TIES}, got {ties!r}")
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")


def label_order(labels: torch.Tensor, mask: torch.Tensor, *, ties: str = "random") -> torch.Tensor:
    """A permutation sorting each query's real documents by decreasing label, padding last.

    Equal labels are ordered at random, afresh on every call (``ties="random"``: one random
    permutation of the slots from the global stream, shared by the batch as allRank's shuffle,
    then a sort), or by index (``ties="index"``).

    Shape:
        labels, mask: [B, L] -> [B, L] int64.
    """
    key = torch.where(mask, labels, torch.full_like(labels, float("-inf")))
    if ties == "index":
        return key.argsort(dim=-1, descending=True, stable=True)
    # one uniform shuffle of the slots (shared by the batch, as allRank's), then any sort: the
    # tied documents' order is a fixed function of their shuffled slots, hence uniform too
    shuffle = torch.randperm(labels.shape[-1], device=labels.device)
    return shuffle.take(key.index_select(-1, shuffle).argsort(dim=-1, descending=True))


class _PlackettLuce(torch.autograd.Function):
    """``Σ_i α_i (log(Σ_{j≥i} exp(s_πj - m) + eps) + m - s_πi)`` per query [B] from the scores,
    the label order ``π`` and the weights ``α`` (0 past the real documents), with its gradient
    written out: a dozen [B, L] operations instead of autograd's graph of ~30 nodes, which
    dominates at the list sizes of LETOR data. ``m`` (the real maximum) is differentiated like
    ``amax``: its gradient is shared evenly by tied maxima."""

    @staticmethod
    def forward(ctx, scores, order, real, weights, eps):
        ranked = scores.gather(-1, order)
        top = torch.where(real, ranked, torch.full_like(ranked, float("-inf"))).amax(dim=-1)
        top = torch.where(top.isfinite(), top, torch.zeros_like(top)).unsqueeze(-1)
        shifted = torch.where(real, ranked - top, torch.full_like(ranked, float("-inf")))
        exps = shifted.exp()
        tails = exps.flip(-1).cumsum(dim=-1).flip(-1) + eps  # Σ_{j≥i} exp(s_πj - m) + eps
        terms = tails.log() - torch.where(real, shifted, torch.zeros_like(shifted))
        ctx.save_for_backward(order, real, weights, exps, tails, ranked, top)
        return (weights * terms).sum(dim=-1)

    @staticmethod
    def backward(ctx, grad):
        order, real, weights, exps, tails, ranked, top = ctx.saved_tensors
        share = weights / tails  # α_i / (T_i + eps)
        through_max = (share * (tails - exps.flip(-1).cumsum(dim=-1).flip(-1))).sum(dim=-1)
        is_top = real & (ranked == top)
        count = is_top.sum(dim=-1, keepdim=True).clamp(min=1)
        ranked_grad = exps * share.cumsum(dim=-1) - weights
        ranked_grad = ranked_grad + is_top * (through_max.unsqueeze(-1) / count)
        ranked_grad = torch.where(real, ranked_grad, 0.0) * grad.unsqueeze(-1)
        return torch.zeros_like(ranked_grad).scatter(-1, order, ranked_grad), None, None, None, None


@list_loss()
def listmle_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    ties: str = "random",
    position_aware: bool = False,
    eps: float = 1e-10,
    reduction: str = "mean",
) -> torch.Tensor:
    """Negative Plackett-Luce log-likelihood of the label order (Xia et al. 2008).

    With ``π`` the documents sorted by decreasing label (ties: :func:`label_order`) and ``n``
    the query's real documents::

        L_q = Σ_{i=1..n} α_i · ( log(Σ_{j≥i} exp(s_πj - m) + eps) + m - s_πi ),   m = max_j s_j

    ``α_i = 1`` (ListMLE), or with ``position_aware`` p-ListMLE's ``α_i = 2^{n-i} - 1`` (Lan et
    al. 2014; TF-Ranking's ``create_p_list_mle_lambda_weight``) divided by ``2^{n-1}`` so that
    long lists do not overflow: ``α_i = 2^{1-i} - 2^{1-n}``. ``eps`` is allRank's 1e-10 inside
    the log. Inputs follow ``differank.losses.inputs``.

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.

    Example:
        >>> listmle_loss(torch.tensor([0.0, 0.0]), torch.tensor([1, 0]))  # one query, all real
        tensor(0.6931)
    """
    check_reduction(reduction)
    check_listmle_options(ties, eps)
    scores, labels, mask = list_inputs(scores, labels, mask)
    safe = finite_scores(scores, mask)
    order = label_order(labels, mask, ties=ties)
    real = mask.gather(-1, order)
    weights = real.to(safe.dtype)
    if position_aware:
        count = mask.sum(dim=-1, keepdim=True).to(safe.dtype)
        positions = torch.arange(1, safe.shape[-1] + 1, device=safe.device, dtype=safe.dtype)
        weights = weights * (torch.exp2(1.0 - positions) - torch.exp2(1.0 - count))
    per_query = _PlackettLuce.apply(safe, order, real, weights, eps)
    valid = valid_queries(labels, mask)
    per_query = nan_for_nonfinite_scores(per_query, scores, mask, valid)
    return reduce_queries(per_query, valid, reduction)


class ListMLELoss(LossModule, function=listmle_loss):
    """Module form of :func:`listmle_loss`."""
