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

import torch
from torch import nn

from differank.losses.algorithms.cone_active_set import (
    active_set_fold_in,
    static_active_set_fold_in,
)
from differank.losses.algorithms.pairs import preference_mask, sample_pairs
from differank.losses.inputs import (
    check_list_inputs,
    compute_dtype,
    finite_label_mask,
    finite_scores,
    float_labels,
    may_read_values,
    nan_for_nonfinite_scores,
    nonempty_lists,
)
from differank.losses.reduction import check_reduction, reduce_queries

CONSTRAINTS = ("simplex", "cone", "band")
WEIGHTINGS = ("label_diff", "none")
SOLVERS = ("active_set", "fista", "sg", "eg")

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


def _check_options(
    constraint: str,
    weighting: str,
    solver: str,
    band: tuple[float, float],
    *,
    alpha: float = 1.0,
    rho: float | None = None,
    max_iter: int = 1,
    tol: float = 0.0,
    max_pairs_per_query: int | None = None,
    static_iterations: int | None = None,
) -> None:
    """The one validation of the cone hyperparameters, shared by the function and the module."""
    if constraint not in CONSTRAINTS:
        raise ValueError(f"constraint must be one of {CONSTRAINTS}, got {constraint!r}")
    if weighting not in WEIGHTINGS:
        raise ValueError(f"weighting must be one of {WEIGHTINGS}, got {weighting!r}")
    if solver not in SOLVERS:
        raise ValueError(f"solver must be one of {SOLVERS}, got {solver!r}")
    lower, upper = band
    if not 0.0 <= lower <= upper or math.isinf(lower):
        raise ValueError(f"band must satisfy 0 <= lower <= upper, got {band}")
    if alpha < 0:
        raise ValueError(f"alpha must be >= 0, got {alpha}")
    if rho is not None and rho <= 0:
        raise ValueError(f"rho must be > 0, got {rho}")
    if max_iter < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    if tol < 0:
        raise ValueError(f"tol must be >= 0, got {tol}")
    if max_pairs_per_query is not None and max_pairs_per_query < 1:
        raise ValueError(f"max_pairs_per_query must be >= 1 or None, got {max_pairs_per_query}")
    if static_iterations is not None and (
        isinstance(static_iterations, bool)
        or not isinstance(static_iterations, int)
        or static_iterations < 1
    ):
        raise ValueError(
            f"static_iterations must be None or an int >= 1, got {static_iterations!r}"
        )


def project_simplex(values: torch.Tensor, total: float | torch.Tensor = 1.0) -> torch.Tensor:
    """Euclidean projection of each row onto ``{w >= 0, Σ w = total}`` (sort-based, exact).

    Sort descending, take cumulative sums and the largest k with ``v_(k) > (Σ_{i<=k} v_(i) -
    total) / k``; then ``w = max(v - τ, 0)`` with ``τ = (Σ_{i<=k} v_(i) - total) / k``.

    Shape:
        values: [..., K]; total: a float or a tensor broadcastable to [..., 1] -> [..., K].

    Example:
        >>> project_simplex(torch.tensor([[0.5, 0.5, 3.0], [-1.0, 0.2, 0.2]]))
        tensor([[0.0000, 0.0000, 1.0000],
                [0.0000, 0.5000, 0.5000]])
    """
    ordered, _ = values.sort(dim=-1, descending=True)
    excess = ordered.cumsum(dim=-1) - total
    steps = torch.arange(1, values.shape[-1] + 1, device=values.device, dtype=values.dtype)
    support = (ordered - excess / steps > 0).sum(dim=-1, keepdim=True).clamp(min=1)
    tau = excess.gather(-1, support - 1) / support.to(values.dtype)
    return (values - tau).clamp(min=0)


def _project(values: torch.Tensor, constraint: str, band: tuple[float, float]) -> torch.Tensor:
    """Euclidean projection onto C: simplex, the orthant (cone) or ``{w>=0, λ_l<=Σw<=λ_u}``."""
    if constraint == "simplex":
        return project_simplex(values)
    positive = values.clamp(min=0)
    if constraint == "cone":
        return positive
    # band: the multiplier of Σw is zero inside the band, else the sum sits on the violated face
    lower, upper = band
    mass = positive.sum(dim=-1, keepdim=True)
    above = project_simplex(values, upper) if math.isfinite(upper) else positive
    below = project_simplex(values, lower) if lower > 0 else positive
    return torch.where(mass > upper, above, torch.where(mass < lower, below, positive))


def _rescale_mass(values: torch.Tensor, constraint: str, band: tuple[float, float]) -> torch.Tensor:
    """The paper's step 1c: rescale non-negative w so its mass lies in the band (Σw = 1 for the
    simplex, untouched for the cone); an all-zero row restarts uniform."""
    if constraint == "cone":
        return values
    lower, upper = (1.0, 1.0) if constraint == "simplex" else band
    mass = values.sum(dim=-1, keepdim=True)
    uniform = torch.full_like(values, max(lower, min(1.0, upper)) / values.shape[-1])
    target = mass.clamp(min=lower, max=upper)
    scaled = values * (target / torch.where(mass > 0, mass, torch.ones_like(mass)))
    return torch.where(mass > 0, scaled, uniform)


def _static_active_set_with_band(
    gram: torch.Tensor,
    linear: torch.Tensor,
    constraint: str,
    band: tuple[float, float],
    tol: float,
    iterations: int,
    support: torch.Tensor | None,
    full_rank: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_active_set_with_band` on static shapes: every face the band may need is solved for
    every pair and the right one selected, with no host read."""
    solve = lambda total, seed: static_active_set_fold_in(  # noqa: E731
        gram, linear, total=total, tol=tol, iterations=iterations, full_rank=full_rank,
        support=seed,
    )[:2]  # fmt: skip
    if constraint == "simplex":
        return solve(1.0, support)
    w, s = solve(None, support)
    if constraint == "cone":
        return w, s
    lower, upper = band
    mass = w.sum(dim=-1, keepdim=True)
    for face_total, rows in ((upper, mass > upper), (lower, mass < lower)):
        if face_total <= 0 or math.isinf(face_total):
            continue
        w_face, s_face = solve(face_total, s)
        w, s = torch.where(rows, w_face, w), torch.where(rows, s_face, s)
    return w, s


def _active_set_with_band(
    gram: torch.Tensor,
    linear: torch.Tensor,
    constraint: str,
    band: tuple[float, float],
    tol: float,
    max_iter: int,
    support: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact active-set fold-in for each constraint (float64 K-space arithmetic)."""
    if constraint == "simplex":
        w, support, _ = active_set_fold_in(
            gram, linear, total=1.0, tol=tol, max_iter=max_iter, support=support
        )
        return w, support
    w, support, _ = active_set_fold_in(
        gram, linear, total=None, tol=tol, max_iter=max_iter, support=support
    )
    if constraint == "cone":
        return w, support
    # band: where the orthant's minimiser has too much (too little) mass, the band's minimiser
    # sits on the face Σw = λ_u (λ_l)
    lower, upper = band
    mass = w.sum(dim=-1)
    for face_total, rows in ((upper, mass > upper), (lower, mass < lower)):
        if face_total <= 0 or math.isinf(face_total) or not bool(rows.any()):
            continue
        w_face, s_face, _ = active_set_fold_in(
            gram, linear[rows], total=face_total, tol=tol, max_iter=max_iter, support=support[rows]
        )
        w[rows], support[rows] = w_face, s_face
    return w, support


@torch.no_grad()
def _fold_in_k_space(
    gram: torch.Tensor,
    linear: torch.Tensor,
    *,
    constraint: str,
    band: tuple[float, float],
    solver: str,
    max_iter: int,
    tol: float,
    check_every: int,
    support: torch.Tensor | None,
    solve_dtype: torch.dtype,
    static_iterations: int | None = None,
    full_rank: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fold-in from ``G = UᵀU`` [K, K] and ``b = z U`` [N, K] alone (float64 inputs).

    The per-pair arithmetic runs in ``solve_dtype`` (the features' dtype, at least float32);
    the active set's face inverses in float64. Returns w [N, K] in float64 and its support.
    ``static_iterations`` (the static path, see :class:`ConeLoss`): run exactly that many
    active-set iterations, or ``max_iter`` iterative steps without a convergence check, and
    read nothing on the host; ``full_rank`` then stands for the rank test of G.
    """
    static = static_iterations is not None
    if solver != "active_set":
        w = _iterative_fold_in(
            gram.to(solve_dtype), linear.to(solve_dtype), constraint, band, solver,
            max_iter, 0.0 if static else tol, check_every,
        )  # fmt: skip
        return w.to(gram.dtype), w > 0
    if support is not None and tuple(support.shape) != tuple(linear.shape):
        raise ValueError(
            f"support must be [N, K] = {list(linear.shape)} to warm-start the fold-in, got "
            f"shape {tuple(support.shape)}"
        )
    if static:
        w, support = _static_active_set_with_band(
            gram, linear.to(solve_dtype), constraint, band, tol, static_iterations, support,
            full_rank,
        )  # fmt: skip
    else:
        w, support = _active_set_with_band(
            gram, linear.to(solve_dtype), constraint, band, tol, max_iter, support
        )
    return w.to(gram.dtype), support


@torch.no_grad()
def cone_fold_in(
    z: torch.Tensor,
    basis: torch.Tensor,
    *,
    constraint: str = "simplex",
    band: tuple[float, float] = (1.0, 1.0),
    solver: str = "active_set",
    max_iter: int = 500,
    tol: float = 1e-7,
    check_every: int = 10,
) -> torch.Tensor:
    """The fold-in ``w* = argmin_{w ∈ C} ‖z - U w‖²`` of every row of ``z`` (no gradient).

    All rows share ``G = UᵀU``: the objective is ``wᵀGw - 2 bᵀw`` with ``b = z U`` ([N, K]).

    * ``solver="active_set"`` (default): exact, see
    :mod:`differank.losses.algorithms.cone_active_set`. Float64
      arithmetic in K-space whatever z's dtype; ``tol`` is the KKT tolerance relative to the
      row's scale, ``max_iter`` a safety cap (rows typically need ``|support| + 1`` iterations).
      Memory O(N·K); it never forms an [N, F] tensor besides ``z`` itself.
    * ``solver="fista"``: accelerated projected gradient, step ``1/(2 λ_max(G))``,
      start at the projection of ``1/K``, exact Euclidean projection onto C (sort-based for
      the simplex, clamp for the cone). A row stops when its ``max_k |Δw_k| < tol`` (checked
      every ``check_every`` iterations, a host synchronisation; converged rows leave the batch;
      ``tol=0`` runs exactly ``max_iter`` iterations) or after ``max_iter`` iterations. From its
      cold start it agrees with the exact solver to about 1e-6 relative after 100 iterations
      and 1e-9 after 300 when ``UᵀU ≻ 0``.
    * ``solver="sg"``: the paper's Algorithm 1 steps 1a–1c, a gradient step ``1/(2 λ_max(G))``,
      clamp at 0, then rescale the mass into C (normalise to Σw = 1 for the simplex). This is a
      heuristic, not a projection: its fixed point is near, not at, the minimiser.
    * ``solver="eg"``: the paper's exponentiated-gradient update (Sec. 4.2)
      ``w ← w·exp(-η ∇)`` with ``η = 1/(2 max_k G_kk)`` (the ℓ1-smoothness), then the same
      rescaling. It converges, slowly.

    Shape:
        z: [N, F]; basis: [F, K] -> w: [N, K] (same dtype as z).

    Example:
        >>> basis = torch.eye(2, dtype=torch.float64)
        >>> cone_fold_in(torch.tensor([[3.0, 1.0], [-1.0, 2.0]], dtype=torch.float64), basis)
        tensor([[1., 0.],
                [0., 1.]], dtype=torch.float64)
    """
    _check_options(constraint, "none", solver, band, max_iter=max_iter, tol=tol)
    basis64 = basis.detach().to(torch.float64)
    w, _ = _fold_in_k_space(
        basis64.T @ basis64, z.detach().to(torch.float64) @ basis64, constraint=constraint,
        band=band, solver=solver, max_iter=max_iter, tol=tol, check_every=check_every,
        support=None, solve_dtype=torch.promote_types(z.dtype, torch.float32),
    )  # fmt: skip
    return w.to(z.dtype)


def _iterative_fold_in(
    gram: torch.Tensor,
    linear: torch.Tensor,
    constraint: str,
    band: tuple[float, float],
    solver: str,
    max_iter: int,
    tol: float,
    check_every: int,
) -> torch.Tensor:
    """FISTA and the paper's SG/EG fold-in updates (see :func:`cone_fold_in`)."""
    n_basis, tiny = gram.shape[0], torch.finfo(gram.dtype).tiny
    lipschitz = 2.0 * torch.linalg.eigvalsh(gram)[-1].clamp(min=tiny)
    step = 1.0 / lipschitz
    w = _project(torch.full_like(linear, 1.0 / n_basis), constraint, band)
    momentum, t = w, 1.0
    eta = 1.0 / (2.0 * gram.diagonal().max().clamp(min=tiny))
    result, active = w.clone(), None  # active: rows still iterating (None = all)
    for iteration in range(1, max_iter + 1):
        if solver == "fista":
            gradient = 2.0 * (momentum @ gram - linear)
            new = _project(momentum - step * gradient, constraint, band)
            t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
            momentum = new + ((t - 1.0) / t_next) * (new - w)
            t = t_next
        elif solver == "sg":
            gradient = 2.0 * (w @ gram - linear)
            new = _rescale_mass((w - step * gradient).clamp(min=0), constraint, band)
        else:  # eg
            gradient = 2.0 * (w @ gram - linear)
            exponent = (-eta * gradient).clamp(max=50.0)  # bounded: no overflow from exp
            new = _rescale_mass(w * torch.exp(exponent), constraint, band)
        change = (new - w).abs().amax(dim=-1)
        w = new
        if tol > 0 and iteration % check_every == 0:
            # rows that met the tolerance are final; the rest keep iterating on a smaller batch
            going = change >= tol
            if active is None:
                result = torch.where(going.unsqueeze(-1), result, w)
                active = torch.arange(len(w), device=w.device)
            else:
                result[active[~going]] = w[~going]
            if not bool(going.any()):
                return result
            active, w, momentum, linear = active[going], w[going], momentum[going], linear[going]
    if active is None:
        return w
    result[active] = w
    return result


def normalise_differences(z: torch.Tensor, alpha: float, rho: float) -> torch.Tensor:
    """Eq. 5, ``ρ z / (α + ‖z‖)``; at z = 0 the norm's (sub)gradient is taken as 0."""
    squared = z.pow(2).sum(dim=-1, keepdim=True)
    positive = squared > 0
    norm = torch.where(positive, torch.where(positive, squared, 1.0).sqrt(), 0.0)
    return rho * z / (alpha + norm)


def cone_loss(
    features: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    basis: torch.Tensor,
    *,
    alpha: float = 1.0,
    rho: float | None = None,
    constraint: str = "simplex",
    weighting: str = "label_diff",
    band: tuple[float, float] = (1.0, 1.0),
    solver: str = "active_set",
    max_iter: int = 500,
    tol: float = 1e-7,
    max_pairs_per_query: int | None = None,
    static_iterations: int | None = None,
    generator: torch.Generator | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """ConeRank's empirical risk (Tran & Pham, eqs. 3–7 and 18).

    For each query, over its ordered pairs ``(l, m)`` with ``r_l > r_m`` (strict: ties make no
    pair):
    ``z̃ = ρ (x_l - x_m) / (α + ‖x_l - x_m‖)`` (eq. 5), ``d² = min_{w ∈ C} ‖z̃ - U w‖²`` and
    ``L_q = (1/n_q) Σ φ d²`` with ``φ = r_l - r_m`` (eq. 7; ``weighting="none"``: φ = 1);
    ``reduction`` then combines the valid queries (``"mean"`` is eq. 4).

    ``constraint``: ``"simplex"`` (eq. 18, ``w >= 0, Σw = 1``: distance to the convex hull of
    the columns of U), ``"cone"`` (eq. 1, ``w >= 0``: distance to the cone, NNLS) or ``"band"``
    (eqs. 8–9, ``w >= 0, band[0] <= Σw <= band[1]``). ``solver``, ``max_iter``, ``tol``: see
    :func:`cone_fold_in`. ``rho`` defaults to ``sqrt(F)``.

    Pairs: each pair enters as ``b = z̃U`` (K numbers) and ``‖z‖``, computed in float64 (exact
    for near-duplicate documents). By default every pair is used; they are gathered into a
    flat list whose length depends on the labels (one host synchronisation on a GPU), memory
    ``O(#pairs·K)``. ``max_pairs_per_query=P`` instead draws P pairs per query
    uniformly with replacement (:func:`differank.losses.algorithms.pairs.sample_pairs`, unbiased for
    the per-query mean): static shapes ``[B, P]``, memory ``O(B·P·F)``.

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
        >>> round(float(cone_loss(features, labels, mask, basis, constraint="cone")), 4)
        0.382
    """
    loss, _ = _cone_loss_and_support(
        features, labels, mask, basis, alpha=alpha, rho=rho, constraint=constraint,
        weighting=weighting, band=band, solver=solver, max_iter=max_iter, tol=tol,
        max_pairs_per_query=max_pairs_per_query, static_iterations=static_iterations,
        generator=generator, reduction=reduction,
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
    *,
    alpha: float,
    rho: float | None,
    constraint: str,
    weighting: str,
    band: tuple[float, float],
    solver: str,
    max_iter: int,
    tol: float,
    max_pairs_per_query: int | None,
    generator: torch.Generator | None,
    reduction: str,
    static_iterations: int | None = None,
    warm_support: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`cone_loss` and the supports of its pairs' fold-ins (a warm start's seed)."""
    check_list_inputs(features, labels, mask, features=True)
    if basis.dim() != 2 or basis.shape[0] != features.shape[-1]:
        raise ValueError(
            f"basis must be [F, K] with F = {features.shape[-1]} (the features' last dimension), "
            f"got shape {tuple(basis.shape)}"
        )
    _check_options(
        constraint, weighting, solver, band, alpha=alpha, rho=rho,
        max_pairs_per_query=max_pairs_per_query, static_iterations=static_iterations,
    )  # fmt: skip
    check_reduction(reduction)
    n_features = features.shape[-1]
    _warn_wide_basis(n_features, basis.shape[1])
    rho = math.sqrt(n_features) if rho is None else rho
    # the input rule of differank.losses.inputs: empty lists, any label dtype, non-finite labels
    # drop their query, half precision computed in float32 (autocast off: the fold-in needs it)
    features, labels, mask = nonempty_lists(features, labels, mask)
    dtype = compute_dtype(features.dtype)
    device_type = features.device.type
    no_autocast = (
        torch.autocast(device_type, enabled=False)
        if torch.amp.is_autocast_available(device_type)
        else contextlib.nullcontext()  # e.g. the meta device, which has no autocast
    )
    with no_autocast:
        features, basis = features.to(dtype), basis.to(dtype)
        labels = float_labels(labels, dtype)
        mask = finite_label_mask(labels, mask)
        return _cone_terms(
            features, labels, mask, basis, alpha=alpha, rho=rho, constraint=constraint,
            weighting=weighting, band=band, solver=solver, max_iter=max_iter, tol=tol,
            max_pairs_per_query=max_pairs_per_query, generator=generator, reduction=reduction,
            static_iterations=static_iterations, warm_support=warm_support,
        )  # fmt: skip


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
    *,
    alpha: float,
    rho: float,
    constraint: str,
    weighting: str,
    band: tuple[float, float],
    solver: str,
    max_iter: int,
    tol: float,
    max_pairs_per_query: int | None,
    generator: torch.Generator | None,
    reduction: str,
    static_iterations: int | None,
    warm_support: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The loss on checked inputs in their compute dtype (see :func:`cone_loss`)."""
    # mask first: padded rows and non-finite values become 0 so nothing non-finite reaches a
    # difference or a gradient; a non-finite feature makes its query NaN at the end
    real_labels = torch.where(mask, labels, torch.zeros_like(labels))
    x = finite_scores(features, mask)
    static = not may_read_values(features)
    batch, length = features.shape[:2]
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
    scale = rho / (alpha + norm)
    linear = scale.unsqueeze(-1) * projected  # b = z̃U [P, K]
    gram = basis64.T @ basis64
    if warm_support is not None and warm_support.shape[0] != linear.shape[0]:
        warm_support = None  # another pair list: a cold start
    w, support = _fold_in_k_space(
        gram.detach(), linear.detach(), constraint=constraint, band=band, solver=solver,
        max_iter=max_iter, tol=tol, check_every=10, support=warm_support,
        solve_dtype=torch.promote_types(features.dtype, torch.float32),
        static_iterations=(static_iterations or _static_iterations(basis)) if static else None,
        full_rank=basis.shape[1] <= basis.shape[0],
    )  # fmt: skip
    # w* fixed: the gradient is the Danskin gradient 2(z̃ − Uw*) through z̃ and U
    distance = scale.pow(2) * squared - 2.0 * (linear * w).sum(-1) + ((w @ gram) * w).sum(-1)
    distance = distance.clamp(min=0.0).to(features.dtype)
    weight = gain if weighting == "label_diff" else torch.ones_like(gain)
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
        >>> loss = ConeLoss(constraint="cone")
        >>> features = torch.randn(2, 4, 3)
        >>> labels = torch.tensor([[2.0, 1.0, 0.0, 0.0], [1.0, 0.0, 0.0, 1.0]])
        >>> mask = torch.ones(2, 4, dtype=torch.bool)
        >>> loss(features, labels, mask, torch.eye(3)).shape
        torch.Size([])
    """

    def __init__(
        self,
        *,
        alpha: float = 1.0,
        rho: float | None = None,
        constraint: str = "simplex",
        weighting: str = "label_diff",
        band: tuple[float, float] | list[float] = (1.0, 1.0),
        solver: str = "active_set",
        max_iter: int = 500,
        tol: float = 1e-7,
        max_pairs_per_query: int | None = None,
        static_iterations: int | None = None,
        warm_start: bool = False,
        reduction: str = "mean",
    ) -> None:
        super().__init__()
        band = (float(band[0]), float(band[1]))
        _check_options(
            constraint, weighting, solver, band, alpha=alpha, rho=rho, max_iter=max_iter,
            tol=tol, max_pairs_per_query=max_pairs_per_query, static_iterations=static_iterations,
        )  # fmt: skip
        check_reduction(reduction)
        self.static_iterations = static_iterations
        self.alpha, self.rho, self.constraint, self.weighting = alpha, rho, constraint, weighting
        self.band, self.solver, self.max_iter, self.tol = band, solver, max_iter, tol
        self.max_pairs_per_query, self.reduction = max_pairs_per_query, reduction
        self.warm_start = warm_start
        self._support: torch.Tensor | None = None  # the last call's supports (warm start)

    def forward(self, features, labels, mask, basis):  # noqa: D102 (see cone_loss)
        seed = self._support
        if seed is not None and (seed.device != basis.device or seed.shape[1] != basis.shape[1]):
            seed = None
        loss, support = _cone_loss_and_support(
            features, labels, mask, basis, alpha=self.alpha, rho=self.rho,
            constraint=self.constraint, weighting=self.weighting, band=self.band,
            solver=self.solver, max_iter=self.max_iter, tol=self.tol,
            max_pairs_per_query=self.max_pairs_per_query, generator=None,
            reduction=self.reduction, static_iterations=self.static_iterations,
            warm_support=seed,
        )  # fmt: skip
        if self.warm_start and self.solver == "active_set":
            self._support = support
        return loss
