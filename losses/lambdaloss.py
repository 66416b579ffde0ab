"""LambdaLoss: the metric-driven pairwise framework (Wang et al., CIKM 2018) with allRank's
weighting schemes; docs/objectives/standard.md#lambdaloss."""

from __future__ import annotations

import math

import torch

from differank.losses.algorithms.chunks import query_chunks
from differank.losses.algorithms.dcg import dcg_gains, ideal_dcg, position_discounts
from differank.losses.inputs import (
    decorated_mask,
    finite_scores,
    list_inputs,
    list_loss,
    nan_for_nonfinite_scores,
)
from differank.losses.module_form import PAIRWISE, LossModule
from differank.losses.options import NON_NEGATIVE, OPTIONAL_COUNT, POSITIVE
from differank.losses.reduction import check_reduction, reduce_queries

WEIGHTINGS = (
    "ndcgLoss1",
    "ndcgLoss2",
    "ndcgLoss2++",
    "lambdaRank",
    "rankNet",
    "rankNetWeightedByGTDiff",
    "rankNetWeightedByGTDiffPowed",
)
LOGARITHMS = ("binary", "natural")


def check_lambda_options(
    weighting: str, k: int | None, sigma: float, mu: float, eps: float, logarithm: str
) -> None:
    """Raise ValueError for an unknown weighting or logarithm, ``k < 1``, or ``sigma``,
    ``mu``, ``eps`` out of range (finite; ``sigma``, ``eps`` > 0, ``mu`` >= 0)."""
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    if logarithm not in LOGARITHMS:
        raise ValueError(f"logarithm must be one of {LOGARITHMS}, got {logarithm!r}")
    OPTIONAL_COUNT.check("lambda_loss", k=k)
    POSITIVE.check("lambda_loss", sigma=sigma, eps=eps)  # eps > 0: its log is taken
    NON_NEGATIVE.check("lambda_loss", mu=mu)


def _position_weights(weighting: str, n: int, mu: float, like: torch.Tensor) -> torch.Tensor:
    """The factor of ``|G_i - G_j|`` that depends on the sorted positions only, [n, n]:
    ``delta_{|i-j|} = |1/D_{|i-j|} - 1/D_{|i-j|+1}|`` (0 on the diagonal) for ndcgLoss2,
    ``|1/D_i - 1/D_j|`` for lambdaRank, ``mu·delta + |1/D_i - 1/D_j|`` for ndcgLoss2++."""
    inverse_discount = position_discounts(n, like)  # 1 / D_i
    positions = torch.arange(n, device=like.device)
    distance = (positions.unsqueeze(-1) - positions.unsqueeze(-2)).abs()
    step = torch.cat([inverse_discount.new_ones(1), inverse_discount])  # 1/D_0 unused
    gap_discount = torch.where(
        distance > 0, (step[distance] - step[distance + 1]).abs(), torch.zeros_like(step[distance])
    )
    lambda_rank = (inverse_discount.unsqueeze(-1) - inverse_discount.unsqueeze(-2)).abs()
    return {
        "ndcgLoss2": gap_discount,
        "lambdaRank": lambda_rank,
        "ndcgLoss2++": mu * gap_discount + lambda_rank,
    }.get(weighting, lambda_rank)


def _pair_weights(weighting: str, sorted_terms: tuple, per_position: torch.Tensor) -> torch.Tensor:
    """``w_ij`` of the pairs at sorted positions (i, j) (Wang et al. 2018's schemes), 0 for the
    pairs that do not count, [chunk, n, n]. ``sorted_terms`` are, in score order, the
    normalised gains G, the labels clamped at 0, the labels and the real-document mask."""
    gains, clamped, labels, real = sorted_terms
    pairs = real.unsqueeze(-1) & real.unsqueeze(-2)
    if weighting == "ndcgLoss1":  # G_i / D_i for every j, the diagonal included
        weight = (gains * position_discounts(gains.shape[-1], gains)).unsqueeze(-1)
        return torch.where(pairs, weight, 0.0)
    pairs = pairs & (labels.unsqueeze(-1) > labels.unsqueeze(-2))
    if weighting == "rankNet":
        return pairs.to(gains.dtype)
    if weighting == "rankNetWeightedByGTDiff":
        gap = clamped.unsqueeze(-1) - clamped.unsqueeze(-2)
    elif weighting == "rankNetWeightedByGTDiffPowed":
        gap = clamped.square().unsqueeze(-1) - clamped.square().unsqueeze(-2)
    else:
        gap = (gains.unsqueeze(-1) - gains.unsqueeze(-2)).mul_(per_position)
    return gap.abs_().mul_(pairs)


def _clamped_log_sigmoid(scaled: torch.Tensor, log_eps: float) -> torch.Tensor:
    """``max(log σ(x_i - x_j), log eps)`` [chunk, n, n], in place on one buffer
    (``-log1p(exp(-x))``: an overflow to -inf lands on the clamp)."""
    difference = scaled.unsqueeze(-1) - scaled.unsqueeze(-2)
    return difference.neg_().exp_().log1p_().neg_().clamp_(min=log_eps)


class _WeightedPairLoss(torch.autograd.Function):
    """``-Σ_{i,j} max(w_ij · max(log σ(x_i - x_j), log eps), log eps)`` per query [B], with its
    gradient written out, computed per query chunk on a few [chunk, n, n] buffers (autograd
    would keep about ten [B, n, n] tensors). The weights are rebuilt in the backward pass
    rather than stored."""

    @staticmethod
    def forward(ctx, scaled, gains, clamped, labels, real, per_position, weighting, log_eps):
        ctx.save_for_backward(scaled, gains, clamped, labels, real, per_position)
        ctx.weighting, ctx.log_eps = weighting, log_eps
        losses = []
        for c in query_chunks(scaled.shape[0], scaled.shape[-1]):
            terms = (gains[c], clamped[c], labels[c], real[c])
            weights = _pair_weights(weighting, terms, per_position)
            log_probability = _clamped_log_sigmoid(scaled[c], log_eps)
            losses.append(-log_probability.mul_(weights).clamp_(min=log_eps).sum(dim=(-1, -2)))
        return torch.cat(losses) if losses else scaled.sum(dim=-1)

    @staticmethod
    def backward(ctx, grad):
        scaled, gains, clamped, labels, real, per_position = ctx.saved_tensors
        parts = []
        for c in query_chunks(scaled.shape[0], scaled.shape[-1]):
            terms = (gains[c], clamped[c], labels[c], real[c])
            weights = _pair_weights(ctx.weighting, terms, per_position)
            log_probability = _clamped_log_sigmoid(scaled[c], ctx.log_eps)
            # each clamp passes the gradient only where it does not bind (torch.clamp's rule; the
            # inner one binds where the clamped value equals log eps)
            active = (log_probability > ctx.log_eps) & (log_probability * weights >= ctx.log_eps)
            # d/dx max(w log σ(x)) = w (1 - σ(x)) = -w expm1(log σ(x))
            slope = log_probability.expm1_().neg_().mul_(weights).mul_(active)
            slope.mul_(-grad[c].reshape(-1, 1, 1))
            parts.append(slope.sum(dim=-1) - slope.sum(dim=-2))
        grad_scaled = torch.cat(parts) if parts else torch.zeros_like(scaled)
        return grad_scaled, None, None, None, None, None, None, None


@list_loss()
def lambda_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    weighting: str = "ndcgLoss2++",
    k: int | None = None,
    sigma: float = 1.0,
    mu: float = 10.0,
    eps: float = 1e-10,
    logarithm: str = "binary",
    reduction: str = "mean",
) -> torch.Tensor:
    """LambdaLoss (Wang et al. 2018, with allRank's weighting schemes), as allRank computes it.

    Documents are sorted by score (descending; equal scores keep their index order). For the
    pairs of sorted positions ``i, j < k`` with ``l_i > l_j`` (every pair, the diagonal
    included, for ``ndcgLoss1``)::

        L_q = -Σ_{i,j} log2( max( max(σ(sigma·(s_i - s_j)), eps)^{w_ij}, eps ) )

    with ``G_i = (2^{l_i} - 1) / maxDCG@k``, ``D_i = log2(1 + i)`` and the weights ``w_ij``:
    ``ndcgLoss1`` G_i/D_i; ``ndcgLoss2`` |1/D_{|i-j|} - 1/D_{|i-j|+1}|·|G_i - G_j|;
    ``lambdaRank`` |1/D_i - 1/D_j|·|G_i - G_j|; ``ndcgLoss2++`` mu·ndcgLoss2 + lambdaRank;
    ``rankNet`` 1; ``rankNetWeightedByGTDiff`` |l_i - l_j|; ``rankNetWeightedByGTDiffPowed``
    |l_i² - l_j²|. The weights are constants (no gradient), as in the paper and allRank.
    ``logarithm="natural"`` uses ln. Per-query sum; allRank's default ``reduction="sum"`` is
    ``reduction="sum"`` here. Inputs follow ``differank.losses.inputs``.

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.
        Memory: a few [B, k, k] tensors (k = L when ``k=None``).

    Example:
        >>> scores = torch.tensor([[0.0, 1.0, 9.0]])
        >>> labels = torch.tensor([[1.0, 0.0, float("nan")]])
        >>> mask = torch.tensor([[True, True, False]])
        >>> lambda_loss(scores, labels, mask, weighting="rankNet")
        tensor(1.8946)
    """
    check_reduction(reduction)
    check_lambda_options(weighting, k, sigma, mu, eps, logarithm)
    scores, labels, mask, valid = list_inputs(scores, labels, decorated_mask(mask))
    safe = finite_scores(scores, mask)
    gains = dcg_gains(labels, mask)
    max_dcg = ideal_dcg(gains, k).clamp(min=eps)
    # padded slots sort last, so sorted position i is the i-th real document
    key = torch.where(mask, safe, torch.full_like(safe, float("-inf")))
    order = key.argsort(dim=-1, descending=True, stable=True)[..., :k]
    top_scores = safe.gather(-1, order)
    top_real = mask.gather(-1, order)
    top_labels = torch.where(top_real, labels.gather(-1, order), 0.0).clamp(min=0.0)
    top_gains = gains.gather(-1, order) / max_dcg.unsqueeze(-1)
    top_raw_labels = torch.where(top_real, labels.gather(-1, order), 0.0)
    per_position = _position_weights(weighting, order.shape[-1], mu, top_gains)
    per_query = _WeightedPairLoss.apply(
        sigma * top_scores,
        top_gains,
        top_labels,
        top_raw_labels,
        top_real,
        per_position,
        weighting,
        math.log(eps),
    )
    if logarithm == "binary":
        per_query = per_query / math.log(2.0)
    per_query = nan_for_nonfinite_scores(per_query, scores, mask, valid)
    return reduce_queries(per_query, valid, reduction)


class LambdaLoss(LossModule, function=lambda_loss, memory=PAIRWISE):
    """Module form of :func:`lambda_loss`."""
