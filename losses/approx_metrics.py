"""Metrics made losses by sigmoid-approximated ranks, in the style of Rax's ``approx_t12n``
(Qin et al. 2010's approximation framework applied to NDCG, MAP, MRR and precision);
docs/objectives/standard.md#approximate-metrics."""

from __future__ import annotations

import torch

from differank.losses.algorithms.dcg import dcg_gains, ideal_dcg
from differank.losses.inputs import (
    decorated_mask,
    finite_scores,
    list_inputs,
    list_loss,
    nan_for_nonfinite_scores,
)
from differank.losses.module_form import PAIRWISE, LossModule
from differank.losses.options import OPTIONAL_COUNT, POSITIVE
from differank.losses.reduction import check_reduction, reduce_queries

METRICS = ("ndcg", "map", "mrr", "precision")


def check_metric_options(metric: str, k: int | None, temperature: float) -> None:
    """Raise ValueError for an unknown metric, ``k < 1`` or a temperature not finite and > 0."""
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {METRICS}, got {metric!r}")
    OPTIONAL_COUNT.check("approx_metric_loss", k=k)
    POSITIVE.check("approx_metric_loss", temperature=temperature)


@list_loss()
def approx_metric_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    metric: str = "ndcg",
    k: int | None = None,
    temperature: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """Minus a ranking metric computed with smooth ranks and cutoffs.

    ``above_ij = σ((s_j - s_i) / temperature)`` for ``j ≠ i`` (document j ranked above i),
    ``π̂_i = 1 + Σ_{j≠i} above_ij``, the soft cutoff ``c_i = σ((k + 1/2 - π̂_i) / temperature)``
    (1 without k), ``rel_i = [l_i > 0]``, then per query:

    * ``ndcg``: ``Σ_i c_i (2^{l_i} - 1) / log2(1 + π̂_i) / maxDCG@k``;
    * ``map``: ``Σ_i rel_i c_i (1 + Σ_{j≠i} rel_j above_ij) / π̂_i / #rel`` (average precision);
    * ``mrr``: ``max_i rel_i c_i / π̂_i``;
    * ``precision``: ``Σ_i rel_i c_i / k`` (``/ n`` without k).

    As ``temperature -> 0`` each tends to the metric of the score order. Inputs follow
    ``differank.losses.inputs``.

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.
        Memory: a few [B, L, L].

    Example:
        >>> scores = torch.tensor([[2.0, 0.0, 1.0]])
        >>> labels = torch.tensor([[0.0, 1.0, 0.0]])
        >>> mask = torch.ones(1, 3, dtype=torch.bool)
        >>> approx_metric_loss(scores, labels, mask, metric="mrr", temperature=0.01)
        tensor(-0.3333)
    """
    check_reduction(reduction)
    check_metric_options(metric, k, temperature)
    scores, labels, mask, valid = list_inputs(scores, labels, decorated_mask(mask))
    safe = finite_scores(scores, mask)
    above = torch.sigmoid((safe.unsqueeze(-2) - safe.unsqueeze(-1)) / temperature)
    pair = mask.unsqueeze(-2) & ~torch.eye(safe.shape[-1], dtype=torch.bool, device=safe.device)
    above = torch.where(pair, above, torch.zeros_like(above))
    ranks = 1.0 + above.sum(dim=-1)
    cutoff = torch.ones_like(ranks) if k is None else torch.sigmoid((k + 0.5 - ranks) / temperature)
    cutoff = torch.where(mask, cutoff, torch.zeros_like(cutoff))
    relevant = (mask & (labels > 0)).to(safe.dtype)
    if metric == "ndcg":
        gains = dcg_gains(labels, mask)
        ideal = ideal_dcg(gains, k)
        value = (cutoff * gains / torch.log2(1.0 + ranks)).sum(dim=-1)
        value = value / torch.where(ideal > 0, ideal, torch.ones_like(ideal))
    elif metric == "map":
        hits_above = 1.0 + (above * relevant.unsqueeze(-2)).sum(dim=-1)
        count = relevant.sum(dim=-1)
        value = (relevant * cutoff * hits_above / ranks).sum(dim=-1)
        value = value / count.clamp(min=1.0)
    elif metric == "mrr":
        value = (relevant * cutoff / ranks).amax(dim=-1)
    else:
        size = mask.sum(dim=-1).to(safe.dtype).clamp(min=1.0) if k is None else float(k)
        value = (relevant * cutoff).sum(dim=-1) / size
    per_query = nan_for_nonfinite_scores(-value, scores, mask, valid)
    return reduce_queries(per_query, valid, reduction)


class ApproxMetricLoss(LossModule, function=approx_metric_loss, memory=PAIRWISE):
    """Module form of :func:`approx_metric_loss`."""
