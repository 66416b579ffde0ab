"""ApproxNDCG: NDCG with sigmoid-approximated positions (Qin, Liu & Li, Information Retrieval
2010); docs/objectives/standard.md#approxndcg."""

from __future__ import annotations

import torch

from differank.losses.algorithms.chunks import query_chunks
from differank.losses.algorithms.dcg import dcg_gains, ideal_dcg
from differank.losses.inputs import (
    decorated_mask,
    finite_scores,
    list_inputs,
    list_loss,
    nan_for_nonfinite_scores,
)
from differank.losses.module_form import PAIRWISE, LossModule
from differank.losses.options import NON_NEGATIVE, POSITIVE
from differank.losses.reduction import check_reduction, reduce_queries


def _beaten_probabilities(scaled: torch.Tensor, real: torch.Tensor, eps: float) -> torch.Tensor:
    """``real_j · max(σ(a_j - a_i), eps)`` [b, i, j] for scaled scores ``a``, in place on one
    buffer."""
    beaten = scaled.unsqueeze(-2) - scaled.unsqueeze(-1)
    return beaten.sigmoid_().clamp_(min=eps).mul_(real.unsqueeze(-2))


class _BeatenSum(torch.autograd.Function):
    """``Σ_j real_j · max(σ(a_j - a_i), eps)`` for scaled scores ``a`` [B, L], with its
    gradient written out: per query chunk, one [chunk, L, L] buffer forward and one backward
    (autograd would allocate about ten [B, L, L] tensors)."""

    @staticmethod
    def forward(ctx, scaled, real, eps):
        ctx.save_for_backward(scaled, real)
        ctx.eps = eps
        chunks = query_chunks(scaled.shape[0], scaled.shape[-1])
        sums = [_beaten_probabilities(scaled[c], real[c], eps).sum(dim=-1) for c in chunks]
        return torch.cat(sums) if sums else scaled.clone()

    @staticmethod
    def backward(ctx, grad):
        scaled, real = ctx.saved_tensors
        parts = []
        for c in query_chunks(scaled.shape[0], scaled.shape[-1]):
            slope = (scaled[c].unsqueeze(-2) - scaled[c].unsqueeze(-1)).sigmoid_()
            # d max(σ(x), eps)/dx = σ(1 - σ) where σ >= eps, else 0 (torch.clamp's rule)
            slope.masked_fill_(slope < ctx.eps, 0.0)
            slope.addcmul_(slope, slope, value=-1.0).mul_(real[c].unsqueeze(-2))
            # x_ij = a_j - a_i: a_j gets Σ_i grad_i slope_ij, a_i loses grad_i Σ_j slope_ij
            incoming = (grad[c].unsqueeze(-2) @ slope).squeeze(-2)
            parts.append(incoming - grad[c] * slope.sum(dim=-1))
        return (torch.cat(parts) if parts else torch.zeros_like(scaled)), None, None


def approx_positions(
    scores: torch.Tensor, mask: torch.Tensor, *, alpha: float = 1.0, eps: float = 0.0
) -> torch.Tensor:
    """``π̂_i = 1 + Σ_{j ≠ i, real} max(σ(alpha·(s_j - s_i)), eps)`` (Qin et al. 2010, eq. 20).

    ``scores`` must be finite at every slot (padded slots are never read through the sum).

    Shape:
        scores, mask: [B, L] -> [B, L]. Memory: [chunk, L, L] (``query_chunks``).

    Example:
        >>> approx_positions(torch.tensor([[2.0, 0.0]]), torch.tensor([[True, True]]), alpha=100.0)
        tensor([[1., 2.]])
    """
    real = mask.to(scores.dtype)
    # the diagonal term is σ(0) = 1/2 (above any eps), removed by subtracting it instead of
    # masking the diagonal
    return 0.5 + _BeatenSum.apply(alpha * scores, real, eps)


@list_loss()
def approx_ndcg_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    alpha: float = 1.0,
    eps: float = 1e-10,
    reduction: str = "mean",
) -> torch.Tensor:
    """Minus ApproxNDCG (Qin et al. 2010, eqs. 19-21), as allRank computes it.

    ``L_q = -Σ_i G_i / log2(1 + π̂_i)`` with ``G_i = (2^{l_i} - 1) / max(maxDCG, eps)`` over the
    whole list (no truncation, as allRank) and the approximate positions
    ``π̂_i = 1 + Σ_{j ≠ i} max(σ(-alpha·(s_i - s_j)), eps)`` (:func:`approx_positions`). The value
    lies in [-1, 0) for a valid query. Inputs follow ``differank.losses.inputs``.

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.
        Memory: a few [B, L, L] tensors.

    Example:
        >>> scores = torch.tensor([[5.0, -5.0, 0.0]])
        >>> labels = torch.tensor([[1.0, 0.0, float("nan")]])
        >>> mask = torch.tensor([[True, True, False]])
        >>> approx_ndcg_loss(scores, labels, mask, alpha=10.0)
        tensor(-1.)
    """
    check_reduction(reduction)
    POSITIVE.check("approx_ndcg_loss", alpha=alpha)
    NON_NEGATIVE.check("approx_ndcg_loss", eps=eps)
    scores, labels, mask, valid = list_inputs(scores, labels, decorated_mask(mask))
    safe = finite_scores(scores, mask)
    gains = dcg_gains(labels, mask)
    normalized = gains / ideal_dcg(gains).clamp(min=eps).unsqueeze(-1)
    positions = approx_positions(safe, mask, alpha=alpha, eps=eps)
    per_query = -(normalized / torch.log2(1.0 + positions)).sum(dim=-1)
    per_query = nan_for_nonfinite_scores(per_query, scores, mask, valid)
    return reduce_queries(per_query, valid, reduction)


class ApproxNDCGLoss(LossModule, function=approx_ndcg_loss, memory=PAIRWISE):
    """Module form of :func:`approx_ndcg_loss`."""
