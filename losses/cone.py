"""ConeRank's cone loss: squared distance of normalised pair differences to a learned cone/hull.

Tran & Pham, "ConeRank: Ranking as Learning Generalized Inequalities": every ordered pair
(l, m) of a query with ``r_l > r_m`` gives ``z = x_l - x_m``, normalised by eq. 5 to
``z̃ = ρ z / (α + ‖z‖)``; its fold-in ``d² = min_{w ∈ C} ‖z̃ - U w‖²`` is the distance to the
polyhedral cone (eq. 1), to the convex hull of the basis (eq. 18, the default) or to the band
of eqs. 8–9; the query loss is ``(1/n_q) Σ_j φ_j d²_j`` with ``φ = r_l - r_m`` (eq. 7).

The fold-in runs without gradient, by default with the exact active-set method of
:mod:`differank.losses.algorithms.cone_active_set`; gradients reach the basis and the features
through ``d² = ‖z̃‖² − 2 bᵀw* + w*ᵀGw*`` (``b = Uᵀz̃``, ``G = UᵀU``) with ``w*`` fixed, which is the
gradient of the value function by Danskin's theorem. Each pair is carried as its K numbers
``b`` and its norm: memory O(P·K) for P pairs besides the [B, L, K] projections (plus a
transient [P, F] difference when there are few pairs, see :func:`_pair_geometry`).
See docs/objectives/conerank.md for the mathematics and the choices made.
"""

from __future__ import annotations

import contextlib
import math
import warnings
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from differank.losses.algorithms.cone_fold_in import (
    FoldInOptions,
    cone_fold_in,
    fold_in_k_space,
)
from differank.losses.algorithms.pairs import preference_mask, sample_pairs
from differank.losses.inputs import (
    batch_result,
    check_list_inputs,
    compute_dtype,
    decorated_mask,
    finite_label_mask,
    finite_scores,
    float_labels,
    list_loss,
    may_read_values,
    nan_for_nonfinite_scores,
    nonempty_lists,
    single_query,
)
from differank.losses.module_form import LISTWISE, PAIRWISE, ListMemory
from differank.losses.options import (
    NON_NEGATIVE,
    OPTIONAL_COUNT,
    OPTIONAL_POSITIVE,
    keyword_options,
)
from differank.losses.reduction import check_reduction, reduce_queries

__all__ = ["ConeLoss", "ConeOptions", "cone_fold_in", "cone_loss", "normalise_differences"]

WEIGHTINGS = ("label_diff", "none")

_WARNED_WIDE_BASIS = False


def _warn_wide_basis(n_features: int, n_basis: int) -> None:
    """K > F makes ``UᵀU`` singular: allowed (the projection point stays unique), warned once
    (by eager calls: a compiled graph cannot warn; ConeRank's constructor warns as well)."""
    global _WARNED_WIDE_BASIS
    if torch.compiler.is_compiling():
        return
    if n_basis > n_features and not _WARNED_WIDE_BASIS:
        _WARNED_WIDE_BASIS = True
        warnings.warn(
            f"cone basis has K={n_basis} columns in F={n_features} dimensions: UᵀU is singular, "
            "the fold-in coefficients are not unique (the distance still is) and prediction uses "
            "the pseudo-inverse",
            stacklevel=3,
        )


@dataclass(frozen=True)
class ConeOptions(FoldInOptions):
    """The cone loss's hyperparameters, validated once (see :func:`cone_loss`): the fold-in's
    (:class:`~differank.losses.algorithms.cone_fold_in.FoldInOptions`: ``constraint``, ``band``,
    ``solver``, ``max_iter``, ``tol``) and the objective's own. The defaults are
    ``conf/loss/cone.yaml``'s.

    Example:
        >>> ConeOptions(constraint="cone", max_pairs_per_query=None).weighting
        'label_diff'
    """

    alpha: float = 0.102  # chosen on MQ2008 and lightgbm_rank validation (was 1.0)
    rho: float | None = None
    weighting: str = "label_diff"
    max_pairs_per_query: int | None = 64
    static_iterations: int | None = None

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.weighting not in WEIGHTINGS:
            raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {self.weighting!r}")
        NON_NEGATIVE.check("cone_loss", alpha=self.alpha)
        OPTIONAL_POSITIVE.check("cone_loss", rho=self.rho)
        OPTIONAL_COUNT.check(
            "cone_loss",
            max_pairs_per_query=self.max_pairs_per_query,
            static_iterations=self.static_iterations,
        )


def normalise_differences(z: torch.Tensor, alpha: float, rho: float) -> torch.Tensor:
    """Eq. 5, ``ρ z / (α + ‖z‖)``; at z = 0 the norm's (sub)gradient is taken as 0."""
    squared = z.pow(2).sum(dim=-1, keepdim=True)
    positive = squared > 0
    norm = torch.where(positive, torch.where(positive, squared, 1.0).sqrt(), 0.0)
    return rho * z / (alpha + norm)


@list_loss(features=True)
@keyword_options(ConeOptions)
def cone_loss(
    features: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None,
    basis: torch.Tensor,
    *,
    generator: torch.Generator | None = None,
    reduction: str = "mean",
    **options,
) -> torch.Tensor:
    """ConeRank's empirical risk (Tran & Pham, eqs. 3–7 and 18).

    For each query, over its ordered pairs ``(l, m)`` with ``r_l > r_m`` (strict: ties make no
    pair):
    ``z̃ = ρ (x_l - x_m) / (α + ‖x_l - x_m‖)`` (eq. 5), ``d² = min_{w ∈ C} ‖z̃ - U w‖²`` and
    ``L_q = (1/n_q) Σ φ d²`` with ``φ = r_l - r_m`` (eq. 7; ``weighting="none"``: φ = 1);
    ``reduction`` then combines the valid queries (``"mean"`` is eq. 4).

    ``options`` are the fields of :class:`ConeOptions` (defaults: ``conf/loss/cone.yaml``).
    ``constraint``: ``"simplex"`` (eq. 18, ``w >= 0, Σw = 1``: distance to the convex hull of
    the columns of U), ``"cone"`` (eq. 1, ``w >= 0``: distance to the cone, NNLS) or ``"band"``
    (eqs. 8–9, ``w >= 0, band[0] <= Σw <= band[1]``). ``solver``, ``max_iter``, ``tol``: see
    :func:`cone_fold_in`. ``rho`` defaults to ``sqrt(F)``.

    Pairs: each pair enters as ``b = z̃U`` (K numbers) and ``‖z‖``, computed in float64 (exact
    for near-duplicate documents). By default (``max_pairs_per_query=64``) P = 64 pairs are drawn
    per query uniformly with replacement from ``generator`` (None: the global RNG;
    :func:`differank.losses.algorithms.pairs.sample_pairs`, unbiased for the per-query mean):
    static shapes ``[B, P]``, memory ``O(B·P·F)``. ``max_pairs_per_query=None`` uses every pair,
    gathered into a flat list whose length depends on the labels (one host synchronisation on
    a GPU), memory ``O(#pairs·K)``.

    The static path: compiled (``torch.compile``) or on an accelerator the loss reads no tensor
    value on the host (:func:`differank.losses.inputs.may_read_values`). Every pair list has a
    static shape (all pairs: the B·L² slot pairs, invalid ones weighted 0), and the active set runs
    exactly ``static_iterations`` iterations for every pair (``None``: K + 2, enough for every
    pair in our measurements) with converged pairs frozen, so the value equals the eager one.
    The iterative solvers run ``max_iter`` steps without a convergence check there.

    Shape:
        features: [B, L, F] (padded rows may hold anything, NaN included); labels: [B, L];
        mask: [B, L] bool; basis: [F, K]. Returns [B] for ``reduction="none"``, else a scalar.

    Example:
        >>> features = torch.tensor([[[1.0, 0.0], [0.0, 0.0], [0.0, 2.0]]])
        >>> labels = torch.tensor([[1.0, 0.0, 0.0]])
        >>> mask = torch.ones(1, 3, dtype=torch.bool)
        >>> basis = torch.eye(2)
        >>> every_pair = cone_loss(
        ...     features, labels, mask, basis, constraint="cone", max_pairs_per_query=None)
        >>> round(float(every_pair), 4)
        0.7317
    """
    loss, _ = _cone_loss_and_support(
        features, labels, decorated_mask(mask), basis, ConeOptions(**options), generator=generator,
        reduction=reduction,
    )  # fmt: skip
    return loss


def _pair_geometry(
    x: torch.Tensor, basis: torch.Tensor, flat_high: torch.Tensor, flat_low: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``‖z‖²`` [P] and ``z U`` [P, K] in float64 for ``z = x_l − x_m``, pairs given as rows of
    the flattened ``x`` [B·L, F].

    Two exact routes, chosen by cost: for a few pairs the direct differences (a transient
    [P, F] tensor, O(P·F)); for dense pair lists each query's Gram matrix ``x xᵀ`` and the
    projections ``x U`` in float64 (O(B·L²·F), no [P, F] tensor):
    ``‖z‖² = ‖x_l‖² + ‖x_m‖² − 2 x_l·x_m`` and ``zU = x_l U − x_m U``. The expansion cancels for
    near-duplicates: a difference it cannot tell from 0 (below 1e-13 of the norms) is 0, as
    duplicates are on the direct route.
    """
    batch, length, n_features = x.shape
    exact = torch.float64
    if 32 * len(flat_high) < batch * length * length:  # measured crossover: about L²/32 pairs
        rows = x.reshape(-1, n_features)
        z = rows.index_select(0, flat_high) - rows.index_select(0, flat_low)
        return z.to(exact).pow(2).sum(dim=-1), (z @ basis).to(exact)
    x64 = x.to(exact)
    inner = x64 @ x64.transpose(1, 2)  # [B, L, L]
    self_inner = inner.diagonal(dim1=1, dim2=2).reshape(-1)
    # flat index_select: its backward is an index_add, not an accumulating index_put
    norms_sq = self_inner.index_select(0, flat_high) + self_inner.index_select(0, flat_low)
    cross = inner.reshape(-1).index_select(0, flat_high * length + flat_low % length)
    squared = norms_sq - 2.0 * cross
    projected = (x64 @ basis.to(exact)).reshape(-1, basis.shape[1])  # [B·L, K]
    differences = projected.index_select(0, flat_high) - projected.index_select(0, flat_low)
    return torch.where(squared > 1e-13 * norms_sq, squared, 0.0), differences


def _cone_loss_and_support(
    features: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    basis: torch.Tensor,
    options: ConeOptions,
    **call: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`cone_loss` and the supports of its pairs' fold-ins (a warm start's seed);
    ``call``: the ``generator``, ``reduction`` and ``warm_support`` of :func:`_cone_terms`."""
    check_list_inputs(features, labels, mask, features=True)
    if basis.dim() != 2 or basis.shape[0] != features.shape[-1]:
        raise ValueError(
            f"basis must be [F, K] with F = {features.shape[-1]} (the features' last dimension), "
            f"got shape {tuple(basis.shape)}"
        )
    check_reduction(call["reduction"])
    n_features = features.shape[-1]
    _warn_wide_basis(n_features, basis.shape[1])
    # the input rule of differank.losses.inputs: empty lists, any label dtype, non-finite labels
    # drop their query, half precision computed in float32 (autocast off: the fold-in needs it)
    features, labels, mask = nonempty_lists(features, labels, mask)
    dtype = compute_dtype(features.dtype)
    device_type = features.device.type
    no_autocast = (
        torch.autocast(device_type, enabled=False)
        # torch < 2.12's dynamo cannot trace is_autocast_available: compiled means a real device
        if torch.compiler.is_compiling() or torch.amp.is_autocast_available(device_type)
        else contextlib.nullcontext()  # e.g. the meta device, which has no autocast
    )
    with no_autocast:
        features, basis = features.to(dtype), basis.to(dtype)
        labels = float_labels(labels, dtype)
        mask, _ = finite_label_mask(labels, mask)
        return _cone_terms(features, labels, mask, basis, options, **call)


def _static_iterations(basis: torch.Tensor) -> int:
    """The static path's default active-set iterations for a basis of K columns: K + 2.

    No row can leave the batch there, so every row runs them all. From the projected-Newton
    seed the eager solver's rows needed at most 5 (simplex) and 11 (cone) iterations with
    K = 10 and 22 (cone) with K = 20 in MQ2008 and synthetic training (see
    docs/objectives/conerank.md#the-static-path); a row that needs more keeps a feasible point,
    an upper bound on its distance.
    """
    return basis.shape[1] + 2


def _cone_terms(
    features: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    basis: torch.Tensor,
    options: ConeOptions,
    *,
    generator: torch.Generator | None,
    reduction: str,
    warm_support: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss on checked inputs in their compute dtype (see :func:`cone_loss`)."""
    # mask first: padded rows and non-finite values become 0 so nothing non-finite reaches a
    # difference or a gradient; a non-finite feature makes its query NaN at the end
    real_labels = torch.where(mask, labels, torch.zeros_like(labels))
    x = finite_scores(features, mask)
    static = not may_read_values(features)
    batch, length = features.shape[:2]
    max_pairs_per_query = options.max_pairs_per_query
    if max_pairs_per_query is None and static:
        # every ordered pair of slots, invalid ones weighted 0: B·L² pairs, a static shape
        pref = preference_mask(labels, mask)  # [B, L, L]
        grid = torch.arange(batch * length * length, device=features.device)
        query, high, low = grid // (length * length), grid // length % length, grid % length
        counts = pref.sum(dim=(1, 2))
        pair_valid = pref.reshape(-1)
    elif max_pairs_per_query is None:
        pref = preference_mask(labels, mask)  # [B, L, L]
        query, high, low = torch.where(pref)  # the flat pair list (dynamic length)
        counts = pref.sum(dim=(1, 2))
        pair_valid = None
    else:
        high2, low2, ok = sample_pairs(labels, mask, max_pairs_per_query, generator=generator)
        query = torch.arange(features.shape[0], device=features.device)
        query = query.repeat_interleave(max_pairs_per_query)
        high, low = high2.reshape(-1), low2.reshape(-1)
        counts = ok.sum(dim=1)
        pair_valid = ok.reshape(-1)
    gain = real_labels[query, high] - real_labels[query, low]

    # Per pair only K numbers are kept, in float64: b = z̃U = s·zU with s = ρ / (α + ‖z‖), and
    # ‖z̃‖² = s² ‖z‖²; the squared distance is ‖z̃‖² − 2 bᵀw + wᵀGw with w fixed. ‖z‖² and zU
    # come from the cheaper of two exact routes (see _pair_geometry).
    exact = torch.float64
    basis64 = basis.to(exact)
    flat_high, flat_low = query * length + high, query * length + low  # rows of [B·L, ·]
    squared, projected = _pair_geometry(x, basis, flat_high, flat_low)
    norm = torch.where(squared > 0, torch.where(squared > 0, squared, 1.0).sqrt(), 0.0)
    rho = math.sqrt(features.shape[-1]) if options.rho is None else options.rho
    scale = rho / (options.alpha + norm)
    linear = scale.unsqueeze(-1) * projected  # b = z̃U [P, K]
    gram = basis64.T @ basis64
    if warm_support is not None and warm_support.shape[0] != linear.shape[0]:
        warm_support = None  # another pair list: a cold start
    static_iterations = options.static_iterations or _static_iterations(basis)
    w, support = fold_in_k_space(
        gram.detach(), linear.detach(), options, support=warm_support,
        solve_dtype=torch.promote_types(features.dtype, torch.float32),
        static_iterations=static_iterations if static else None,
        full_rank=basis.shape[1] <= basis.shape[0],
    )  # fmt: skip
    # w* fixed: the gradient is the Danskin gradient 2(z̃ − Uw*) through z̃ and U
    distance = scale.pow(2) * squared - 2.0 * (linear * w).sum(-1) + ((w @ gram) * w).sum(-1)
    distance = distance.clamp(min=0.0).to(features.dtype)
    weight = gain if options.weighting == "label_diff" else torch.ones_like(gain)
    term = weight * distance
    if pair_valid is not None:
        term = torch.where(pair_valid, term, torch.zeros_like(term))
    per_query = torch.zeros(features.shape[0], dtype=term.dtype, device=term.device)
    per_query = per_query.index_add(0, query, term)
    # connect the graph even when there is no pair, so backward yields zeros
    per_query = per_query + 0.0 * basis.sum().to(term.dtype) + 0.0 * x.sum().to(term.dtype)
    valid = counts > 0
    per_query = per_query / counts.clamp(min=1).to(term.dtype)
    per_query = nan_for_nonfinite_scores(per_query, features, mask, valid)
    return reduce_queries(per_query, valid, reduction), support


class ConeLoss(nn.Module):
    """Module form of :func:`cone_loss`; the basis U is an argument (it belongs to the ranker).

    ``warm_start=True`` (``solver="active_set"`` only) seeds each call's fold-in with the
    supports of the previous call whenever the pair count and K match. The result is the same
    whatever the seed (the active set ends at the exact minimiser); only the number of
    iterations changes, and it drops to about one when the pairs are the same as last time
    (full-batch training, a fixed batch).

    Example:
        >>> loss = ConeLoss(constraint="cone")  # 64 sampled pairs per query (conf/loss/cone.yaml)
        >>> features = torch.randn(2, 4, 3)
        >>> labels = torch.tensor([[2.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 1.0]])
        >>> mask = torch.ones(2, 4, dtype=torch.bool)
        >>> loss(features, labels, mask, torch.eye(3)).shape
        torch.Size([])
    """

    @keyword_options(ConeOptions)
    def __init__(self, *, warm_start: bool = False, reduction: str = "mean", **options) -> None:
        super().__init__()
        self.options = ConeOptions(**options)
        self.reduction = check_reduction(reduction)
        self.warm_start = warm_start
        self._support: torch.Tensor | None = None  # the last call's supports (warm start)

    @property
    def memory(self) -> ListMemory:
        """Every pair (``max_pairs_per_query=None``): the B·L² slot pairs (each of F features
        more); a fixed number of pairs per query: the [B, L, K] projections and [B, P] pairs."""
        return PAIRWISE if self.options.max_pairs_per_query is None else LISTWISE

    def extra_repr(self) -> str:
        return f"{self.options}, warm_start={self.warm_start}, reduction={self.reduction!r}"

    def forward(
        self,
        features: torch.Tensor,
        labels: torch.Tensor,
        mask: torch.Tensor | None,
        basis: torch.Tensor,
    ) -> torch.Tensor:
        """:func:`cone_loss` with this module's options (and warm start).

        Shape:
            features: [B, L, F] (one query: [L, F]); labels, mask: [B, L] (one query: [L];
            ``mask=None``: every document is real; it is positional, the basis follows it);
            basis: [F, K] -> [B] for ``reduction="none"`` ([] for one query), else a scalar.
        """
        features, labels, mask, unbatched = single_query(features, labels, mask, features=True)
        seed = self._support
        if seed is not None and (seed.device != basis.device or seed.shape[1] != basis.shape[1]):
            seed = None
        loss, support = _cone_loss_and_support(
            features, labels, mask, basis, self.options, generator=None,
            reduction=self.reduction, warm_support=seed,
        )  # fmt: skip
        if self.warm_start and self.options.solver == "active_set":
            self._support = support
        return batch_result(loss, unbatched)
