"""The cone fold-in of ConeRank: ``w* = argmin_{w ∈ C} ‖z − U w‖²`` for many rows at once.

The objective (:mod:`differank.losses.cone`) hands over ``G = UᵀU`` and ``b = zU`` per pair; this
module picks the solver: the exact active set of
:mod:`differank.losses.algorithms.cone_active_set` (default; its static-shape form compiled or on
an accelerator) or the iterative FISTA and the paper's SG/EG updates, and handles the band
constraint (eqs. 8–9) by solving the faces it may need. :class:`FoldInOptions` holds the
solver's hyperparameters, validated once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from differank.losses.algorithms.cone_active_set import (
    active_set_fold_in,
    static_active_set_fold_in,
)
from differank.losses.options import COUNT, NON_NEGATIVE, keyword_options

CONSTRAINTS = ("simplex", "cone", "band")
SOLVERS = ("active_set", "fista", "sg", "eg")


@dataclass(frozen=True)
class FoldInOptions:
    """The fold-in's hyperparameters (see :func:`cone_fold_in`), validated on construction.

    ``band`` may be given as any pair of numbers (a YAML list too); it is kept as a float tuple.
    """

    constraint: str = "simplex"
    band: tuple[float, float] = (1.0, 1.0)
    solver: str = "active_set"
    max_iter: int = 500
    tol: float = 1e-7

    def __post_init__(self) -> None:
        if self.constraint not in CONSTRAINTS:
            raise ValueError(f"constraint must be one of {CONSTRAINTS}, got {self.constraint!r}")
        if self.solver not in SOLVERS:
            raise ValueError(f"solver must be one of {SOLVERS}, got {self.solver!r}")
        if len(self.band) != 2:
            raise ValueError(f"band must be two numbers (lower, upper), got {self.band!r}")
        band = (float(self.band[0]), float(self.band[1]))
        object.__setattr__(self, "band", band)  # frozen: the one normalisation, here
        lower, upper = band
        if not 0.0 <= lower <= upper or math.isinf(lower):
            raise ValueError(f"band must satisfy 0 <= lower <= upper, got {band}")
        COUNT.check("cone_fold_in", max_iter=self.max_iter)
        NON_NEGATIVE.check("cone_fold_in", tol=self.tol)


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


def _project(values: torch.Tensor, options: FoldInOptions) -> torch.Tensor:
    """Euclidean projection onto C: simplex, the orthant (cone) or ``{w>=0, λ_l<=Σw<=λ_u}``."""
    if options.constraint == "simplex":
        return project_simplex(values)
    positive = values.clamp(min=0)
    if options.constraint == "cone":
        return positive
    # band: the multiplier of Σw is zero inside the band, else the sum sits on the violated face
    lower, upper = options.band
    mass = positive.sum(dim=-1, keepdim=True)
    above = project_simplex(values, upper) if math.isfinite(upper) else positive
    below = project_simplex(values, lower) if lower > 0 else positive
    return torch.where(mass > upper, above, torch.where(mass < lower, below, positive))


def _rescale_mass(values: torch.Tensor, options: FoldInOptions) -> torch.Tensor:
    """The paper's step 1c: rescale non-negative w so its mass lies in the band (Σw = 1 for the
    simplex, untouched for the cone); an all-zero row restarts uniform."""
    if options.constraint == "cone":
        return values
    lower, upper = (1.0, 1.0) if options.constraint == "simplex" else options.band
    mass = values.sum(dim=-1, keepdim=True)
    uniform = torch.full_like(values, max(lower, min(1.0, upper)) / values.shape[-1])
    target = mass.clamp(min=lower, max=upper)
    scaled = values * (target / torch.where(mass > 0, mass, torch.ones_like(mass)))
    return torch.where(mass > 0, scaled, uniform)


def _static_active_set_with_band(
    gram: torch.Tensor,
    linear: torch.Tensor,
    options: FoldInOptions,
    iterations: int,
    support: torch.Tensor | None,
    full_rank: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """:func:`_active_set_with_band` on static shapes: every face the band may need is solved for
    every pair and the right one selected, with no host read."""

    def solve(total, seed):
        return static_active_set_fold_in(
            gram, linear, total=total, tol=options.tol, iterations=iterations,
            full_rank=full_rank, support=seed,
        )[:2]  # fmt: skip

    if options.constraint == "simplex":
        return solve(1.0, support)
    w, s = solve(None, support)
    if options.constraint == "cone":
        return w, s
    lower, upper = options.band
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
    options: FoldInOptions,
    support: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The exact active-set fold-in for each constraint (float64 K-space arithmetic)."""
    tol, max_iter = options.tol, options.max_iter
    total = 1.0 if options.constraint == "simplex" else None
    w, support, _ = active_set_fold_in(
        gram, linear, total=total, tol=tol, max_iter=max_iter, support=support
    )
    if options.constraint != "band":
        return w, support
    # band: where the orthant's minimiser has too much (too little) mass, the band's minimiser
    # sits on the face Σw = λ_u (λ_l)
    lower, upper = options.band
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
def fold_in_k_space(
    gram: torch.Tensor,
    linear: torch.Tensor,
    options: FoldInOptions,
    *,
    support: torch.Tensor | None,
    solve_dtype: torch.dtype,
    static_iterations: int | None = None,
    full_rank: bool = True,
    check_every: int = 10,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The fold-in from ``G = UᵀU`` [K, K] and ``b = z U`` [N, K] alone (float64 inputs).

    The per-pair arithmetic runs in ``solve_dtype`` (the features' dtype, at least float32);
    the active set's face inverses in float64. Returns w [N, K] in float64 and its support.
    ``static_iterations`` (the static path, see :class:`~differank.losses.cone.ConeLoss`): run
    exactly that many active-set iterations, or ``max_iter`` iterative steps without a
    convergence check, and read nothing on the host; ``full_rank`` then stands for the rank test
    of G.
    """
    static = static_iterations is not None
    if options.solver != "active_set":
        tol = 0.0 if static else options.tol
        w = _iterative_fold_in(
            gram.to(solve_dtype), linear.to(solve_dtype), options, tol, check_every
        )
        return w.to(gram.dtype), w > 0
    if support is not None and tuple(support.shape) != tuple(linear.shape):
        raise ValueError(
            f"support must be [N, K] = {list(linear.shape)} to warm-start the fold-in, got "
            f"shape {tuple(support.shape)}"
        )
    if static_iterations is not None:
        w, support = _static_active_set_with_band(
            gram, linear.to(solve_dtype), options, static_iterations, support, full_rank
        )
    else:
        w, support = _active_set_with_band(gram, linear.to(solve_dtype), options, support)
    return w.to(gram.dtype), support


@torch.no_grad()
@keyword_options(FoldInOptions)
def cone_fold_in(
    z: torch.Tensor, basis: torch.Tensor, *, check_every: int = 10, **options
) -> torch.Tensor:
    """The fold-in ``w* = argmin_{w ∈ C} ‖z - U w‖²`` of every row of ``z`` (no gradient).

    All rows share ``G = UᵀU``: the objective is ``wᵀGw - 2 bᵀw`` with ``b = z U`` ([N, K]).
    ``options`` are the fields of :class:`FoldInOptions`: ``constraint`` (``"simplex"``,
    ``"cone"`` or ``"band"`` with ``band=(lower, upper)``), ``solver``, ``max_iter`` and ``tol``.

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
    fold_in = FoldInOptions(**options)
    basis64 = basis.detach().to(torch.float64)
    w, _ = fold_in_k_space(
        basis64.T @ basis64, z.detach().to(torch.float64) @ basis64, fold_in, support=None,
        solve_dtype=torch.promote_types(z.dtype, torch.float32), check_every=check_every,
    )  # fmt: skip
    return w.to(z.dtype)


def _iterative_fold_in(
    gram: torch.Tensor,
    linear: torch.Tensor,
    options: FoldInOptions,
    tol: float,
    check_every: int,
) -> torch.Tensor:
    """FISTA and the paper's SG/EG fold-in updates (see :func:`cone_fold_in`); ``tol`` replaces
    ``options.tol`` (0 on the static path: no convergence check)."""
    n_basis, tiny = gram.shape[0], torch.finfo(gram.dtype).tiny
    lipschitz = 2.0 * torch.linalg.eigvalsh(gram)[-1].clamp(min=tiny)
    step = 1.0 / lipschitz
    w = _project(torch.full_like(linear, 1.0 / n_basis), options)
    momentum, t = w, 1.0
    eta = 1.0 / (2.0 * gram.diagonal().max().clamp(min=tiny))
    result, active = w.clone(), None  # active: rows still iterating (None = all)
    for iteration in range(1, options.max_iter + 1):
        if options.solver == "fista":
            gradient = 2.0 * (momentum @ gram - linear)
            new = _project(momentum - step * gradient, options)
            t_next = 0.5 * (1.0 + math.sqrt(1.0 + 4.0 * t * t))
            momentum = new + ((t - 1.0) / t_next) * (new - w)
            t = t_next
        elif options.solver == "sg":
            gradient = 2.0 * (w @ gram - linear)
            new = _rescale_mass((w - step * gradient).clamp(min=0), options)
        else:  # eg
            gradient = 2.0 * (w @ gram - linear)
            exponent = (-eta * gradient).clamp(max=50.0)  # bounded: no overflow from exp
            new = _rescale_mass(w * torch.exp(exponent), options)
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
