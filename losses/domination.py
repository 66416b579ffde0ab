"""Domination loss (Stevens' thesis, "DomRank"): multilayer log-sum-exp ranking loss with margins.

Per real document ``i`` of a query, with ``D(i) = {j : label_j < label_i}`` (thesis eq. 5)::

    ℓ_i = log(1 + Σ_{j ∈ D(i)} exp(s_j − s_i + Δ(i, j)))        (0 when D(i) is empty)
    L_q = Σ_i ℓ_i                                                 (eq. 6, no 1/n)

Layers are the distinct label values of the query, so every layer dominates all lower ones. The
closed form (eq. 7, docs/objectives/domination.md#closed-form-by-layers) groups documents by layer:
with ``g = s − m`` (separable
margins ``m``) and ``C_a = logsumexp{g_j : label_j below layer a}``, ``ℓ_i = softplus(C_a − g_i)``.
It costs O(B·L) scatters plus an O(B·L) log-cumsum-exp over levels; no [B, L, L] tensor is built
unless general pairwise margins ask for one.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn
from torch.nn import functional as F

from differank.losses.algorithms.pairs import label_levels, preference_mask
from differank.losses.inputs import (
    check_list_inputs,
    decorated_mask,
    finite_scores,
    list_inputs,
    list_loss,
    may_read_values,
    nan_for_nonfinite_scores,
)
from differank.losses.module_form import LISTWISE
from differank.losses.options import FINITE
from differank.losses.reduction import check_reduction, reduce_queries


def _masked_logsumexp(values: torch.Tensor, keep: torch.Tensor, dim: int) -> torch.Tensor:
    """``logsumexp`` of ``values`` over ``dim`` where ``keep``; 0 (a finite dummy) where none kept.

    Dropped entries never reach ``exp`` and rows without an entry never reach ``log``, so no
    −inf or NaN flows through autograd (docs/objectives/domination.md#batched-computation pitfall);
    their gradient is exactly 0.
    """
    peak = torch.where(keep, values.detach(), float("-inf")).amax(dim=dim, keepdim=True)
    any_kept = keep.any(dim=dim, keepdim=True)
    peak = torch.where(any_kept, peak, 0.0)
    shifted = torch.where(keep, values - peak, 0.0)
    total = torch.where(keep, shifted.exp(), 0.0).sum(dim=dim, keepdim=True)
    total = torch.where(any_kept, total, 1.0)
    return (peak + total.log()).squeeze(dim)


def _logcumsumexp(values: torch.Tensor) -> torch.Tensor:
    """Inclusive log-cum-sum-exp along the last dim by a Hillis–Steele scan of ``logaddexp``.

    log2(L) vectorised steps instead of ``torch.logcumsumexp``, whose CPU kernel is ~100x
    slower than ``cumsum``; finite inputs keep every gradient finite.
    """
    shift, length = 1, values.shape[-1]
    while shift < length:
        combined = torch.logaddexp(values[..., shift:], values[..., :-shift])
        values = torch.cat([values[..., :shift], combined], dim=-1)
        shift *= 2
    return values


def label_margins(
    labels: torch.Tensor, margin_scale: float = 0.0, margin_offset: float = 0.0
) -> torch.Tensor:
    """The thesis' separable margin ``m_i = k1·label_i + k2`` for positives (label > 0), 0 else.

    ``Δ(i, j) = m_i − m_j`` then asks a positive to beat each lower document by that gap
    (thesis Sec. 4 and 8.3.2, ``s(i) = k1·r_i + k2``;
    docs/objectives/domination.md#interpretations-chosen fixes the sign).

    Shape:
        labels: [B, L] -> [B, L] (same dtype as a float of labels).
    """
    labels = labels.to(torch.get_default_dtype()) if not labels.is_floating_point() else labels
    shifted = margin_scale * labels + margin_offset
    return torch.where(labels > 0, shifted, 0.0)


def _level_logsumexp(
    g: torch.Tensor, levels: torch.Tensor, mask: torch.Tensor, num_levels: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """``Lv[b, a] = logsumexp{g_i : level_i = a, mask_i}`` and ``present[b, a]`` (any doc there).

    Stabilised by the per-level maximum (detached), so each level's sum is ≥ 1 when present.
    Absent levels hold the finite dummy 0.
    """
    batch = g.shape[0]
    peak = torch.full((batch, num_levels), float("-inf"), dtype=g.dtype, device=g.device)
    peak = peak.scatter_reduce(1, levels, torch.where(mask, g.detach(), float("-inf")), "amax")
    present = peak > float("-inf")
    peak = torch.where(present, peak, 0.0)
    shifted = torch.where(mask, g - peak.gather(1, levels), 0.0)
    terms = torch.where(mask, shifted.exp(), 0.0)
    total = torch.zeros((batch, num_levels), dtype=g.dtype, device=g.device)
    total = total.scatter_add(1, levels, terms)
    total = torch.where(present, total, 1.0)
    return peak + total.log(), present


@list_loss()
def domination_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    margins: torch.Tensor | None = None,
    layer_margins: torch.Tensor | None = None,
    margin_scale: float = 0.0,
    margin_offset: float = 0.0,
    flat: bool = False,
    pool: bool = False,
    reduction: str = "mean",
) -> torch.Tensor:
    """Domination loss of Stevens' thesis (eqs. 5–7; docs/objectives/domination.md#the-loss),
    batched in O(B·L·M).

    Args:
        scores: model outputs ``s``; padded slots may hold anything (NaN included).
        labels: graded relevance, any real values; layers are a query's distinct labels.
        mask: True = real document (authoritative).
        margins: ``None`` (Δ = 0, the "Layered" variant); a [B, L] tensor of separable offsets
            ``m`` (``Δ(i, j) = m_i − m_j``, i.e. the zero-margin loss on ``s − m``); or a
            [B, L, L] tensor of general pairwise margins ``Δ(i, j)`` (O(L²) memory).
        layer_margins: an [M, M] matrix (tensor or nested list) with ``Δ(i, j) =
            layer_margins[label_i, label_j]`` for integer labels in ``0..M−1`` (thesis Fig. 2:
            one margin per layer boundary; docs/objectives/domination.md#margins). Only entries
            below the diagonal are read.
            Costs O(B·M²) on top. Cannot be combined with [B, L, L] margins.
        margin_scale, margin_offset: the thesis' separable margin ``k1·label + k2`` on
            positives (label > 0), added to any separable ``margins``; see ``label_margins``.
        flat: collapse labels to two layers, relevant (label > 0) vs not (thesis' "Flat").
        pool: treat all real documents of the batch as one list (the thesis' LETOR setup,
            Sec. 8.1.2, docs/objectives/domination.md#pooled); the per-query result then has shape
            [1].
        reduction: ``"none"`` | ``"mean"`` | ``"sum"`` over queries with a preference pair.

    Inputs follow the rule of ``differank.losses.inputs`` (empty shapes, integer labels, non-finite
    values, half precision computed in float32). Compiled or on an accelerator the level axis
    is L wide, so the default variant has static shapes and never reads values on the host.

    Shape:
        scores, labels, mask: [B, L]; margins: [B, L] or [B, L, L]; layer_margins: [M, M].
        Output: scalar, or [B] for ``reduction="none"`` ([1] with ``pool=True``).
        Memory: O(B·L) (O(B·L²) only for [B, L, L] margins).

    Example:
        >>> scores = torch.tensor([[0.0, 0.0, float("nan")]])
        >>> labels = torch.tensor([[1.0, 0.0, 0.0]])
        >>> mask = torch.tensor([[True, True, False]])
        >>> domination_loss(scores, labels, mask)  # log(1 + e^0)
        tensor(0.6931)
    """
    mask = decorated_mask(mask)
    check_list_inputs(scores, labels, mask)
    check_reduction(reduction)
    FINITE.check("domination_loss", margin_scale=margin_scale, margin_offset=margin_offset)
    pairwise_shape = scores.shape + scores.shape[-1:]
    if margins is not None and margins.shape not in (scores.shape, pairwise_shape):
        raise ValueError(
            f"margins must be [B, L] (separable) or [B, L, L] (pairwise) for scores "
            f"{list(scores.shape)}, got shape {tuple(margins.shape)}"
        )
    pairwise = margins is not None and margins.dim() == 3
    if pairwise and layer_margins is not None:
        raise ValueError("layer_margins cannot be combined with [B, L, L] pairwise margins")
    if pairwise and pool:
        raise ValueError("pool=True needs separable margins; [B, L, L] margins are per query")
    if scores.shape[1] == 0:  # no documents: margins have nothing to shift
        margins, pairwise = None, False
    scores, labels, mask, _ = list_inputs(scores, labels, mask)
    if margins is not None:
        margins = margins.to(scores.dtype)
    if layer_margins is not None:
        layer_margins = torch.as_tensor(layer_margins, dtype=scores.dtype, device=scores.device)
        if layer_margins.dim() != 2 or layer_margins.shape[0] != layer_margins.shape[1]:
            raise ValueError(f"layer_margins must be [M, M], got {tuple(layer_margins.shape)}")

    real_labels = torch.where(mask, labels, 0.0)
    g = finite_scores(scores, mask)
    if margin_scale != 0.0 or margin_offset != 0.0:
        g = g - label_margins(real_labels, margin_scale, margin_offset)
    if margins is not None and not pairwise:
        g = g - margins
    if flat:
        real_labels = (real_labels > 0).to(scores.dtype)
    if pool:
        g, real_labels = g.reshape(1, -1), real_labels.reshape(1, -1)
        scores, mask = scores.reshape(1, -1), mask.reshape(1, -1)

    if pairwise and margins is not None:  # pairwise: margins [B, L, L]
        # C_i = logsumexp_{j ∈ D(i)} (g_j + Δ(i, j)), a masked reduction over [B, L, L].
        dominated = preference_mask(real_labels, mask)
        below = _masked_logsumexp(g.unsqueeze(-2) + margins, dominated, dim=-1)
        has_lower = dominated.any(dim=-1)
    elif layer_margins is not None:
        num_levels = layer_margins.shape[0]
        levels = real_labels.round().long().clamp(0, num_levels - 1)
        level_lse, present = _level_logsumexp(g, levels, mask, num_levels)
        # C[b, a] = logsumexp_{c < a, c present} (Lv[b, c] + Δ[a, c]): O(B·M²).
        lower = torch.ones(num_levels, num_levels, dtype=torch.bool, device=g.device).tril(-1)
        keep = lower.unsqueeze(0) & present.unsqueeze(1)
        below_level = _masked_logsumexp(level_lse.unsqueeze(1) + layer_margins, keep, dim=-1)
        below = below_level.gather(1, levels)
        has_lower = keep.any(dim=-1).gather(1, levels) & mask
    else:
        levels = label_levels(real_labels, mask)
        # The level axis needs only as many slots as a row has levels. Reading that count is
        # free on the CPU eager path; compiled or on an accelerator it would be a sync, so
        # there the axis is L wide (a row has at most L levels): static shapes, no host read.
        read = may_read_values(levels) and levels.numel() > 0
        width = int(levels.max()) + 1 if read else levels.shape[-1]
        level_lse, _ = _level_logsumexp(g, levels, mask, width)
        # Exclusive log-cumsum-exp over levels: C[a] = inclusive[a − 1]. Levels are dense, so
        # every level below a real document's level is present and the dummies are never read.
        inclusive = _logcumsumexp(level_lse)
        below = inclusive.gather(1, (levels - 1).clamp(min=0))
        has_lower = (levels > 0) & mask

    gap = torch.where(has_lower, below - g, 0.0)
    per_doc = torch.where(has_lower, F.softplus(gap), 0.0)
    # A query is valid iff one of its real documents dominates another
    # (docs/architecture.md#validity-and-reduction).
    valid = has_lower.any(dim=-1)
    per_query = nan_for_nonfinite_scores(per_doc.sum(dim=-1), scores, mask, valid)
    return reduce_queries(per_query, valid, reduction)


class DominationLoss(nn.Module):
    """Module form of :func:`domination_loss`; stores the validated hyperparameters.

    ``layer_margins`` (nested list or tensor [M, M]) is kept as a non-persistent buffer so it
    follows the module's device. A per-batch ``margins`` tensor may be passed to ``forward``.

    Example:
        >>> loss = DominationLoss(margin_scale=1.0)
        >>> scores, labels = torch.zeros(2, 3), torch.tensor([[2.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
        >>> loss(scores, labels, torch.ones(2, 3, dtype=torch.bool)).shape
        torch.Size([])
    """

    layer_margins: torch.Tensor | None  # a buffer (register_buffer)
    # O(B·L) scatters and level sums; [B, L, L] margins are a call's argument, not an option
    memory = LISTWISE

    def __init__(
        self,
        *,
        layer_margins: Sequence[Sequence[float]] | torch.Tensor | None = None,
        margin_scale: float = 0.0,
        margin_offset: float = 0.0,
        flat: bool = False,
        pool: bool = False,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        self.reduction = check_reduction(reduction)
        FINITE.check("DominationLoss", margin_scale=margin_scale, margin_offset=margin_offset)
        self.margin_scale, self.margin_offset = float(margin_scale), float(margin_offset)
        self.flat, self.pool = bool(flat), bool(pool)
        matrix = None
        if layer_margins is not None:
            matrix = torch.as_tensor(layer_margins, dtype=torch.get_default_dtype())
            if matrix.dim() != 2 or matrix.shape[0] != matrix.shape[1] or matrix.shape[0] < 2:
                raise ValueError(f"layer_margins must be [M, M] with M >= 2, got {matrix.shape}")
            if not torch.isfinite(matrix).all():
                raise ValueError("layer_margins must be finite")
        self.register_buffer("layer_margins", matrix, persistent=False)

    def forward(
        self,
        scores: torch.Tensor,
        labels: torch.Tensor,
        mask: torch.Tensor | None = None,
        margins: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """:func:`domination_loss` with this module's options and an optional per-batch
        ``margins`` ([B, L] separable or [B, L, L] pairwise).

        Shape:
            scores [B, L] (one query: [L]); labels, mask like scores (``mask=None``: every
            document is real) -> [B] for ``reduction="none"`` ([] for one query; [1] with
            ``pool=True``), else a scalar.
        """
        return domination_loss(
            scores,
            labels,
            mask,
            margins=margins,
            layer_margins=self.layer_margins,
            margin_scale=self.margin_scale,
            margin_offset=self.margin_offset,
            flat=self.flat,
            pool=self.pool,
            reduction=self.reduction,
        )
