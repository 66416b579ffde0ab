"""Structured NDCG@k hinge (large-margin structured ranking; Chapelle, Le & Smola 2007).

Paper: "Large Margin Optimization of Ranking Measures" (NIPS 2007 workshop), as reproduced in the
report *Large margin structured ranking* (eqs. 3, 8–12); the mathematics and the interpretations
chosen are in docs/objectives/hinge.md.
"""

from __future__ import annotations

import torch

from differank.losses.algorithms.dcg import dcg_discounts
from differank.losses.algorithms.ndcg_assignment import (
    assignment_positions,
    gains_and_ideal_dcg,
    label_level_dp,
    position_weights,
    query_levels,
    ystar_positions,
)
from differank.losses.algorithms.pairs import NUM_LEVELS, valid_queries
from differank.losses.inputs import (
    decorated_mask,
    finite_scores,
    list_inputs,
    list_loss,
    nan_for_nonfinite_scores,
)
from differank.losses.module_form import PAIRWISE, LossModule
from differank.losses.options import COUNT
from differank.losses.reduction import check_reduction, reduce_queries

YSTARS = ("compatible", "index")
SOLVERS = ("dp", "assignment")


def _check_options(k: int, ystar: str, solver: str, num_levels: int) -> None:
    COUNT.check("structured_hinge_loss", k=k, num_levels=num_levels)  # k: the NDCG truncation
    if ystar not in YSTARS:
        raise ValueError(f"ystar must be one of {YSTARS}, got {ystar!r}")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")


@torch.no_grad()
def hinge_inference(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    k: int = 10,
    ystar: str = "compatible",
    solver: str = "dp",
    num_levels: int = NUM_LEVELS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """The non-differentiable half of the hinge: ŷ (eq. 12), y* and Δ(ŷ), without grad.

    Shared by :func:`structured_hinge_loss` and the cutting-plane solver
    (``differank.rankers.solvers.hinge_cutting_plane``), whose constraint for query q is the joint
    feature ``Σ_i x_i A(ŷ_i)`` with offset ``Δ(ŷ)``.

    Shape:
        scores, labels, mask: [B, L] (scores finite at real documents) -> ``A(ŷ_i)`` [B, L],
        ``A(y*_i)`` [B, L] (0 at padding), ``Δ(ŷ)`` [B] (NaN where a query has more than
        ``num_levels`` distinct labels on the static path) and ``valid`` [B] bool.
    """
    _check_options(k, ystar, solver, num_levels)
    dtype = scores.dtype
    gains, ideal = gains_and_ideal_dcg(labels, mask, k, dtype)
    valid = valid_queries(labels, mask) & (ideal > 0)
    levels = query_levels(labels, mask, num_levels if solver == "dp" else None)
    if solver == "dp":
        worst = label_level_dp(scores, gains, ideal, labels, mask, k, levels=levels[:2])
    else:
        worst = assignment_positions(scores, gains, ideal, mask, k)
    best = ystar_positions(scores, labels, mask, ystar, k, levels=levels[:2])
    zero = torch.zeros((), dtype=dtype, device=scores.device)
    weight_hat = torch.where(mask, position_weights(worst, k).to(dtype), zero)
    weight_star = torch.where(mask, position_weights(best, k).to(dtype), zero)
    discount = torch.where(mask, dcg_discounts(worst, k, dtype), zero)
    safe_ideal = torch.where(valid, ideal, torch.ones_like(ideal))
    # Δ ≥ 0 exactly; clamping removes the 1e-16 rounding of 1 − NDCG at ŷ = y*
    delta = (1.0 - (gains * discount).sum(dim=-1) / safe_ideal).clamp(min=0.0)
    delta = torch.where(levels[2], torch.full_like(delta, float("nan")), delta)
    return weight_hat, weight_star, delta, valid


@list_loss()
def structured_hinge_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    k: int = 10,
    ystar: str = "compatible",
    solver: str = "dp",
    num_levels: int = NUM_LEVELS,
    reduction: str = "mean",
) -> torch.Tensor:
    """Margin-rescaled structured hinge for ``Δ = 1 − NDCG@k`` (docs/objectives/hinge.md#the-loss,
    report eq. 11).

    ``ξ_q = max_y [Δ_q(y) + Σ_i A(y_i) s_i] − Σ_i A(y*_i) s_i`` with ``A(r) = max(k + 1 − r, 0)``,
    gains ``2^label − 1`` and discount ``1/log2(1 + r)`` (A13). ``y*`` is the correct ranking
    most compatible with the scores, (label desc, score desc), or ``ystar="index"`` for a fixed
    index tie-break (convex in s; A12). The loss-augmented argmax ŷ (eq. 12) is exact:
    ``solver="dp"`` runs the batched label-level DP on the scores' device, ``"assignment"`` one
    rectangular assignment per query on CPU (``differank.losses.algorithms.ndcg_assignment``). ŷ and
    y* carry no gradient, so ``ξ = Δ(ŷ) + Σ_i s_i (A(ŷ_i) − A(y*_i))`` and ``∂ξ/∂s_i = A(ŷ_i) −
    A(y*_i)`` (§4.3). ``ξ_q ≥ 1 − NDCG@k(sort(s)) ≥ 0``. Queries with a single label value or no
    relevant document are invalid and give 0.

    ``num_levels`` bounds the distinct label values of a query (the DP's M; 5 covers LETOR 4.0's
    three grades and MSLR's five). On the CPU eager path the DP is sized by the labels actually
    present and a query with more levels is a ValueError; compiled or on an accelerator it is
    sized by ``num_levels`` (static shapes, no host read) and such a query's loss is NaN. Other
    inputs follow the rule of ``differank.losses.inputs`` (empty shapes, integer labels, non-finite
    values, half precision computed in float32).

    Shape:
        scores, labels, mask: [B, L] (mask bool, True = real document) -> scalar, or [B] with
        ``reduction="none"``.

    Example:
        >>> scores = torch.tensor([[0.1, 0.2, 0.9, float("nan")]], requires_grad=True)
        >>> labels = torch.tensor([[2.0, 0.0, 1.0, 0.0]])
        >>> mask = torch.tensor([[True, True, True, False]])
        >>> loss = structured_hinge_loss(scores, labels, mask, k=2)
        >>> round(loss.item(), 4)
        1.6246
        >>> loss.backward()
        >>> scores.grad
        tensor([[-2.,  1.,  1.,  0.]])
    """
    _check_options(k, ystar, solver, num_levels)
    check_reduction(reduction)
    scores, labels, mask, _ = list_inputs(scores, labels, decorated_mask(mask))
    safe_scores = finite_scores(scores, mask)
    weight_hat, weight_star, delta, valid = hinge_inference(
        safe_scores.detach(), labels, mask, k=k, ystar=ystar, solver=solver, num_levels=num_levels
    )
    per_query = delta + (safe_scores * (weight_hat - weight_star)).sum(dim=-1)
    per_query = nan_for_nonfinite_scores(per_query, scores, mask, valid)
    return reduce_queries(per_query, valid, reduction)


class StructuredHingeLoss(LossModule, function=structured_hinge_loss, memory=PAIRWISE):
    """Module form of :func:`structured_hinge_loss` (no learnable parameters).

    Example:
        >>> loss = StructuredHingeLoss(k=10)
        >>> float(loss(torch.tensor([[3.0, 1.0]]), torch.tensor([[1.0, 0.0]]),
        ...            torch.ones(1, 2, dtype=torch.bool)))
        0.0
    """
