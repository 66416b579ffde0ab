"""The exact batched fold-in of ConeRank: a primal active-set method in the basis' K-space.

Every pair solves ``min_{w ∈ C} wᵀGw − 2bᵀw`` with the shared ``G = UᵀU`` [K, K] and its own
``b = Uᵀz̃`` [K]; the features enter only through ``b``, so the solver never touches a [P, F]
tensor. Each pair keeps a support S (its non-zero coefficients) and a feasible ``w``; one
iteration, for every pair still going:

1. ``v`` = the minimiser on S alone: free for the cone, on the affine hull ``Σ_S v = t`` for the
   simplex of mass t (the KKT system of that face, one small solve);
2. if ``v > 0`` on S, move to it and check the KKT conditions of the whole problem: every
   coordinate's half-gradient ``g = Gv − b`` is at least the support's common value (0 for the
   cone, ``vᵀg / t`` for the simplex) up to ``tol`` times the pair's scale; a pair that holds
   them is final, otherwise the most violating coordinate joins S (Lawson–Hanson for the cone,
   Wolfe's minimum-norm-point method for the simplex);
3. otherwise step from ``w`` towards ``v`` until the first coordinate reaches 0, and drop it.

The objective falls at every step and the supports never repeat, so the method ends after
finitely many iterations at the exact minimiser (to the KKT tolerance); ``max_iter`` is only a
safety cap. The cold start guesses the support as the positive part of the minimiser over all
K columns (a projected-Newton step), which is usually right or one swap away, so most pairs
finish in one or two iterations; a singular ``G`` (K > F) starts classically instead, from the
origin (cone) or the nearest vertex (simplex), which keeps every face affinely independent.

The band ``λ_l ≤ Σw ≤ λ_u`` (see :mod:`differank.losses.cone`) is the cone's solution where its mass
falls in the band, else the simplex of mass ``λ_u`` (or ``λ_l``).

Cost: a face missing one or two of the K columns is a rank-1 or rank-2 downdate of the whole
face's minimiser (elementwise work for all pairs at once); pairs on other faces share one inverse
of their face's bordered KKT matrix, grouped by face so that each face is one product. The state
is stored column-wise ([K, N]: one column per pair) so that the reductions over K run across
contiguous rows. The inverses are computed in float64, the per-pair arithmetic in the dtype of
``b`` (float32 for float32 features: it agrees with float64 to about 1e-7 relative on the
loss); memory is O(N·K) besides the O(faces·K²) inverses.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# a tiny ridge on the face matrices: keeps a face of an affinely dependent basis (K > F, or
# repeated columns) solvable; it moves the minimiser by ~1e-12 relative
_RIDGE = 1e-12


def _group_supports(support: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The distinct supports of the columns of ``support`` [K, N] bool, as rows [U, K], and
    each column's index among them [N].

    Supports are bit codes; for K <= 16 a ``bincount`` over the 2^K codes groups them in O(N)
    (no sort), wider bases sort the codes (K <= 52) or the columns themselves.
    """
    n_basis = support.shape[0]
    if n_basis > 52:
        return torch.unique(support.T, dim=0, return_inverse=True)
    bits = torch.pow(2, torch.arange(n_basis, device=support.device, dtype=torch.int64))
    # one vector-matrix product: float64 holds these integers exactly (K <= 52 bits)
    codes = (bits.to(torch.float64) @ support.to(torch.float64)).to(torch.int64)
    if n_basis <= 16:
        present = torch.bincount(codes, minlength=2**n_basis) > 0
        faces = present.nonzero().squeeze(-1)
        return (faces.unsqueeze(-1) & bits) > 0, (present.cumsum(0) - 1)[codes]
    faces, column_face = torch.unique(codes, return_inverse=True)
    return (faces.unsqueeze(-1) & bits) > 0, column_face


def _face_maps(
    gram: torch.Tensor, faces: torch.Tensor, total: float | None, checked: bool = True
) -> tuple[torch.Tensor, torch.Tensor]:
    """For each face S (rows of ``faces`` [U, K] bool), the affine map ``v = R b + c`` of its
    minimiser: R [U, K, K] and c [U, K, 1].

    ``total=None``: free on S (the cone); else on the affine hull ``Σ_S v = total``. Both come
    from one inverse of the bordered KKT matrix ``[[G_SS, 1], [1ᵀ, 0]]`` (identity off the
    support, and in place of the border for the cone), so ``v = 0`` off S exactly.
    ``checked=False``: the inverse's status is not checked (no host read; the static path).
    """
    n_basis = gram.shape[0]
    face = faces.to(gram.dtype)
    inside = face.unsqueeze(-1) * face.unsqueeze(-2)
    ridge = _RIDGE * gram.diagonal().amax().clamp(min=1.0)
    eye = torch.eye(n_basis, dtype=gram.dtype, device=gram.device)
    system = torch.zeros(len(face), n_basis + 1, n_basis + 1, dtype=gram.dtype, device=gram.device)
    system[:, :n_basis, :n_basis] = (gram + ridge * eye) * inside + torch.diag_embed(1.0 - face)
    if total is None:
        system[:, n_basis, n_basis] = 1.0
    else:
        system[:, :n_basis, n_basis] = face
        system[:, n_basis, :n_basis] = face
    inverse = torch.linalg.inv(system) if checked else torch.linalg.inv_ex(system)[0]
    response = inverse[:, :n_basis, :n_basis] * inside
    offset = inverse[:, :n_basis, n_basis:] * (0.0 if total is None else total)
    return response, offset


def _face_minimisers(
    gram: torch.Tensor, linear: torch.Tensor, support: torch.Tensor, total: float | None
) -> torch.Tensor:
    """The minimiser of ``vᵀGv − 2bᵀv`` over each column's face (``support`` [K, N] bool).

    Two exact routes by size: many columns are grouped by face (a sort) and each face is one
    product over its slice, O(N·K) numbers moved; few columns each gather their face's [K, K]
    map for one batched product, O(N·K²) numbers but a few operations instead of one per face
    (the cheaper route for the small batches of training)."""
    faces, column_face = _group_supports(support)
    response, offset = _face_maps(gram, faces, total)  # in G's dtype (float64)
    response, offset = response.to(linear.dtype), offset.to(linear.dtype)
    if len(faces) == 1:
        return torch.addmm(offset[0], response[0], linear)
    if linear.shape[1] < _GATHER_BELOW:
        mapped = torch.bmm(response[column_face], linear.T.unsqueeze(-1))  # [N, K, 1]
        return (mapped + offset[column_face]).squeeze(-1).T
    order = column_face.argsort()
    sizes = torch.bincount(column_face, minlength=len(faces)).tolist()
    parts = linear[:, order].split(sizes, dim=1)
    solved = torch.cat(
        [torch.addmm(offset[u], response[u], part) for u, part in enumerate(parts)], dim=1
    )
    return torch.empty_like(solved).index_copy_(1, order, solved)


# below this many pairs each pair gathers its face's map: per-face products cost one call per
# face, which dominates the small batches of training (measured crossover ~10⁴–10⁵ pairs)
_GATHER_BELOW = 32768


class _FaceSolver:
    """Face minimisers for the active set: with a nonsingular G, a face missing one or two of
    the K coordinates is a rank-1 or rank-2 downdate of the whole face's minimiser (the Schur
    complement of the constraints ``v_D = 0`` in the bordered KKT system,
    ``v = v_all − H[:, D] H[D, D]⁻¹ v_all[D]`` with H its inverse): a few elementwise passes for
    every pair at once, no grouping. Faces missing more go through :func:`_face_minimisers`
    (and all faces do when G is singular or K > 16)."""

    def __init__(self, gram: torch.Tensor, total: float | None, dtype: torch.dtype, rank: int):
        n_basis, device = gram.shape[0], gram.device
        self.gram, self.total = gram, total
        everything = torch.ones(1, n_basis, dtype=torch.bool, device=device)
        response, offset = _face_maps(gram, everything, total)
        self.response, self.offset = response[0].to(dtype), offset[0].to(dtype)
        self.downdates = rank == n_basis and n_basis <= 16
        if not self.downdates:
            return
        # H: the inverse of the whole face's bordered system, restricted to the coefficients
        system = torch.zeros(n_basis + 1, n_basis + 1, dtype=gram.dtype, device=device)
        ridge = _RIDGE * gram.diagonal().amax().clamp(min=1.0)
        eye = torch.eye(n_basis, dtype=gram.dtype, device=device)
        system[:n_basis, :n_basis] = gram + ridge * eye
        if total is None:
            system[n_basis, n_basis] = 1.0
        else:
            system[:n_basis, n_basis] = 1.0
            system[n_basis, :n_basis] = 1.0
        self.inverse = torch.linalg.inv(system)[:n_basis, :n_basis].to(dtype)
        # for every pattern of missing coordinates (a K-bit code): how many, the first two
        codes = torch.arange(2**n_basis, device=device)
        bit = (codes.unsqueeze(-1) >> torch.arange(n_basis, device=device)) & 1
        self.bits = torch.pow(2.0, torch.arange(n_basis, device=device, dtype=torch.float64))
        self.count = bit.sum(dim=-1)
        position = torch.where(bit > 0, torch.arange(n_basis, device=device), n_basis)
        ordered = position.sort(dim=-1).values.clamp(max=n_basis - 1)
        self.first, self.second = ordered[:, 0], ordered[:, 1 if n_basis > 1 else 0]

    def whole(self, linear: torch.Tensor) -> torch.Tensor:
        """The minimiser over the face of all K columns (free for the cone, Σ = t otherwise)."""
        return torch.addmm(self.offset, self.response, linear)

    def __call__(self, linear: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
        if not self.downdates:
            return _face_minimisers(self.gram, linear, support, self.total)
        code = (self.bits @ (~support).to(torch.float64)).to(torch.int64)
        missing, first, second = self.count[code], self.first[code], self.second[code]
        v = self.whole(linear)
        h = self.inverse
        r1, r2 = v.gather(0, first.unsqueeze(0))[0], v.gather(0, second.unsqueeze(0))[0]
        flat = h.reshape(-1)
        n_basis = h.shape[0]
        a = flat.index_select(0, first * (n_basis + 1))
        b = flat.index_select(0, first * n_basis + second)
        c = flat.index_select(0, second * (n_basis + 1))
        one, two = missing == 1, missing == 2
        determinant = torch.where(two, a * c - b * b, 1.0)
        y1 = torch.where(two, (c * r1 - b * r2) / determinant, torch.where(one, r1 / a, 0.0))
        y2 = torch.where(two, (a * r2 - b * r1) / determinant, 0.0)
        v = v - h.index_select(1, first) * y1 - h.index_select(1, second) * y2
        many = (missing > 2).nonzero().squeeze(-1)
        if len(many) > 0:
            v[:, many] = _face_minimisers(self.gram, linear[:, many], support[:, many], self.total)
        return torch.where(support, v, 0.0)


def active_set_fold_in(
    gram: torch.Tensor,
    linear: torch.Tensor,
    *,
    total: float | None,
    tol: float,
    max_iter: int,
    support: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Exact ``argmin wᵀGw − 2bᵀw`` over the orthant (``total=None``) or the simplex of mass t.

    ``gram`` should be float64 (the face inverses are computed in its dtype); the pairs' own
    arithmetic runs in ``linear``'s dtype, and the KKT tolerance is at least 100 ulps of it
    (1.2e-5 relative in float32, 2.2e-14 in float64), below which rounding could ask for a
    spurious column. ``support`` [N, K] bool optionally seeds each row's active set (a warm
    start: any seed leads to the same minimiser, a good one in fewer iterations). Returns
    ``(w, support, iterations)``: the coefficients [N, K], their supports ``w > 0`` and the
    number of iterations the slowest row took. Rows that reach ``max_iter`` keep their last
    feasible w.

    Shape:
        gram: [K, K]; linear: [N, K] (same floating dtype) -> [N, K], [N, K] bool, int.

    Example:
        >>> gram, linear = torch.eye(2, dtype=torch.float64), torch.tensor([[3.0, 1.0]])
        >>> w, support, _ = active_set_fold_in(gram, linear.double(), total=1.0, tol=1e-12,
        ...                                    max_iter=50)
        >>> w
        tensor([[1., 0.]], dtype=torch.float64)
    """
    if max_iter < 1:
        raise ValueError(f"max_iter must be >= 1, got {max_iter}")
    rows, n_basis = linear.shape
    device, dtype = linear.device, linear.dtype
    tol = max(tol, 100 * torch.finfo(dtype).eps)
    if rows == 0:
        empty = torch.zeros_like(linear)
        return empty, empty.bool(), 0
    # the rank of G bounds the useful support: a free face with rank (cone) or rank + 1
    # (simplex) columns already reaches the whole span (affine hull) of U, so every KKT
    # condition holds there and only rounding could ask for another column
    eigenvalues = torch.linalg.eigvalsh(gram)
    rank = int(
        (eigenvalues > 1e-10 * eigenvalues[-1].clamp(min=torch.finfo(gram.dtype).tiny)).sum()
    )
    widest = rank if total is None else rank + 1
    b = linear.T.contiguous()  # [K, N]: one column per pair
    gram_work = gram.to(dtype)
    going = torch.arange(rows, device=device)
    updates = []  # (pairs, w, support) after each step; later ones overwrite earlier ones
    faces_of = _FaceSolver(gram, total, dtype, rank)
    if support is None and rank == n_basis:
        # the cold seed: where the minimiser over the whole face (all K columns) is positive
        s = faces_of.whole(b) > 0
    elif support is None:  # a singular G: the classical start, the origin or a vertex
        s = torch.zeros(n_basis, rows, dtype=torch.bool, device=device)
    else:
        s = support.T.contiguous()
    if total is not None:  # the simplex needs mass somewhere: an empty seed takes the vertex
        empty = (~s.any(dim=0)).nonzero().squeeze(-1)  # nearest to z̃
        nearest = (gram_work.diagonal().unsqueeze(-1) - 2.0 * b[:, empty]).argmin(dim=0)
        s[nearest, empty] = True
    # the pair's scale for the KKT tolerance: the size of its gradient's terms
    scale = (gram_work.diagonal().amax() + b.abs().amax(dim=0)).clamp(min=torch.finfo(dtype).tiny)
    tiny = torch.finfo(dtype).tiny
    # the state of the pairs still going; ``w`` (a feasible point) is made when a pair first
    # needs one (None: not yet made)
    w: torch.Tensor | None = None
    iterations = 0
    while iterations < max_iter and len(going) > 0:
        iterations += 1
        v = faces_of(b, s)
        blocked = (s & (v <= 0)).any(dim=0)  # the face's minimiser leaves the orthant
        # (2) where v is feasible, move there and check the KKT conditions; stationarity on S
        # holds by construction of v, so the check is on the coordinates off S
        gradient = torch.addmm(b, gram_work, v, beta=-1.0)  # half-gradient g = Gv − b
        level = 0.0 if total is None else (v * gradient).sum(dim=0) / total
        worst, entering = torch.where(s, torch.inf, gradient - level).min(dim=0)
        full = s.sum(dim=0) >= widest
        optimal = ((worst >= -tol * scale) | full) & ~blocked
        grow = ~optimal & ~blocked
        new_s = s | (torch.zeros_like(s).scatter_(0, entering.unsqueeze(0), True) & grow)
        new_w = v
        # (3) where it is not, step from w towards v until the first support coordinate hits 0
        stuck = blocked.nonzero().squeeze(-1)
        if len(stuck) > 0:
            new_w, new_s = new_w.clone(), new_s.clone()
            v_stuck, s_stuck = v[:, stuck], s[:, stuck]
            if w is None and total is None:
                # the cone's first feasible point: the face minimiser clipped to the orthant
                w_stuck = v_stuck.clamp(min=0)
                new_w[:, stuck], new_s[:, stuck] = w_stuck, w_stuck > 0
            else:
                if w is None:  # the simplex's first feasible point: even mass over S
                    # total is set: w and total both None (the cone) took the branch above
                    even = total / s_stuck.sum(dim=0)  # type: ignore[operator, arg-type]
                    w_stuck = s_stuck.to(dtype) * even
                else:
                    w_stuck = w[:, stuck]
                shrink = s_stuck & (v_stuck <= 0)
                ratio = torch.where(shrink, w_stuck / (w_stuck - v_stuck).clamp(min=tiny), 2.0)
                first, first_index = ratio.min(dim=0, keepdim=True)
                stepped = w_stuck + first.clamp(0.0, 1.0) * (v_stuck - w_stuck)
                leaving = (s_stuck & (stepped <= 0)).scatter_(0, first_index, True)
                new_w[:, stuck] = torch.where(leaving, 0.0, stepped)
                new_s[:, stuck] = s_stuck & ~leaving
        updates.append((going, new_w, new_s))
        keep = (~optimal).nonzero().squeeze(-1)
        going, b, scale = going[keep], b[:, keep], scale[keep]
        w, s = new_w[:, keep], new_s[:, keep]
    w_out = torch.empty(n_basis, rows, dtype=dtype, device=device)
    s_out = torch.empty(n_basis, rows, dtype=torch.bool, device=device)
    for pairs, update_w, update_s in updates:  # pairs stopped by the cap keep their last w
        w_out.index_copy_(1, pairs, update_w)
        s_out.index_copy_(1, pairs, update_s)
    return w_out.T, s_out.T, iterations


def _bordered_face_minimisers(
    gram: torch.Tensor, linear: torch.Tensor, support: torch.Tensor, total: float | None
) -> torch.Tensor:
    """The face minimiser of every row, each from its own bordered KKT system (static shapes).

    One batched solve of [N, K+1, K+1] systems (identity off the support; the border
    ``Σ_S v = total`` for the simplex), in G's dtype: no grouping, no host read, at O(N·K³)
    work instead of the grouped route's O(faces·K³ + N·K²).

    Shape:
        gram: [K, K]; linear, support: [N, K] -> [N, K] in linear's dtype, 0 off the support.
    """
    rows, n_basis = linear.shape
    face = support.to(gram.dtype)
    ridge = _RIDGE * gram.diagonal().amax().clamp(min=1.0)
    eye = torch.eye(n_basis, dtype=gram.dtype, device=gram.device)
    inside = face.unsqueeze(-1) * face.unsqueeze(-2)
    corner = (gram + ridge * eye) * inside + torch.diag_embed(1.0 - face)  # [N, K, K]
    if total is None:  # the cone: a decoupled unit row and column for the unused multiplier
        border = torch.zeros(rows, n_basis, 1, dtype=gram.dtype, device=gram.device)
        bottom = torch.cat([border.transpose(1, 2), torch.ones_like(border[:, :1])], dim=2)
        target = torch.zeros(rows, 1, dtype=gram.dtype, device=gram.device)
    else:
        border = face.unsqueeze(-1)
        bottom = torch.cat([border.transpose(1, 2), torch.zeros_like(border[:, :1])], dim=2)
        target = torch.full((rows, 1), float(total), dtype=gram.dtype, device=gram.device)
    system = torch.cat([torch.cat([corner, border], dim=2), bottom], dim=1)
    right = torch.cat([linear.to(gram.dtype) * face, target], dim=1).unsqueeze(-1)
    # solve_ex: no check of the factorisation's status, which would read it on the host
    solution, _ = torch.linalg.solve_ex(system, right)
    return (solution[:, :n_basis, 0] * face).to(linear.dtype)


# the static path tabulates every face's map when G is nonsingular (an explicit inverse of a
# face of a singular G loses what a solve keeps), there are at most 2^12 faces (4.7 MB in
# float64) and fewer faces than the row solves they replace
_TABLE_MAX_BASIS = 12


class _FaceTable:
    """The map ``v = R b + c`` of every one of the 2^K faces, from one batched inverse, so that
    each iteration of the static path gathers its rows' maps (a K x K product per row) instead
    of solving a bordered system per row (an LU per row and iteration: the static path's main
    cost, 4.6x the eager path's per batch when compiled on a CPU). Face ``code`` holds column
    k when bit k is set; the empty face maps to 0 (the cone's minimiser there; the simplex's
    rows never have an empty face)."""

    def __init__(self, gram: torch.Tensor, total: float | None, dtype: torch.dtype):
        n_basis = gram.shape[0]
        self.bits = torch.pow(2, torch.arange(n_basis, device=gram.device))
        codes = torch.arange(1, 2**n_basis, device=gram.device)
        faces = (codes.unsqueeze(-1) & self.bits) > 0
        response, offset = _face_maps(gram, faces, total, checked=False)
        self.response = torch.cat([torch.zeros_like(response[:1]), response]).to(dtype)
        self.offset = torch.cat([torch.zeros_like(offset[:1]), offset]).to(dtype)

    def __call__(self, linear: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
        """Face minimisers [N, K] of ``linear`` [N, K] on each row's ``support`` [N, K]."""
        code = (support.to(self.bits.dtype) * self.bits).sum(dim=-1)
        mapped = torch.bmm(self.response[code], linear.unsqueeze(-1)) + self.offset[code]
        return mapped.squeeze(-1)


def static_active_set_fold_in(
    gram: torch.Tensor,
    linear: torch.Tensor,
    *,
    total: float | None,
    tol: float,
    iterations: int,
    full_rank: bool,
    support: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """:func:`active_set_fold_in` with static shapes and no host read, for compiled and
    accelerator runs: exactly ``iterations`` steps for every row, rows that have met the KKT
    conditions frozen by masking instead of leaving the batch.

    The steps are the same as the eager solver's (the same seed, face minimisers, KKT check and
    ratio step), so a row that converges within ``iterations`` ends at the same minimiser;
    a row that does not keeps its last feasible ``w`` (an upper bound on its distance) and is
    reported in the returned ``converged`` mask, which stays on the device. ``full_rank``
    replaces the eager solver's rank test (an eigenvalue read on the host): say whether G is
    nonsingular (K <= F for a generic basis); a singular G starts from the origin or a vertex.

    Shape:
        gram: [K, K]; linear: [N, K] -> w [N, K], support [N, K] bool, converged [N] bool.
    """
    if iterations < 1:
        raise ValueError(f"iterations must be >= 1, got {iterations}")
    rows, n_basis = linear.shape
    dtype = linear.dtype
    tol = max(tol, 100 * torch.finfo(dtype).eps)
    tiny = torch.finfo(dtype).tiny
    b = linear
    gram_work = gram.to(dtype)
    face_minimisers: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    if full_rank and n_basis <= _TABLE_MAX_BASIS and 2**n_basis <= (iterations + 1) * rows:
        face_minimisers = _FaceTable(gram, total, dtype)
    else:

        def bordered(linear: torch.Tensor, support: torch.Tensor) -> torch.Tensor:
            return _bordered_face_minimisers(gram, linear, support, total)

        face_minimisers = bordered

    if support is not None:
        s = support.clone()
    elif full_rank:  # the cold seed: the positive part of the whole face's minimiser
        everything = torch.ones_like(b, dtype=torch.bool)
        s = face_minimisers(b, everything) > 0
    else:
        s = torch.zeros_like(b, dtype=torch.bool)
    if total is not None:  # the simplex needs mass somewhere: an empty seed takes the vertex
        nearest = (gram_work.diagonal() - 2.0 * b).argmin(dim=-1, keepdim=True)  # nearest to z̃
        vertex = torch.zeros_like(s).scatter_(-1, nearest, True)
        s = torch.where(s.any(dim=-1, keepdim=True), s, vertex)
    scale = (gram_work.diagonal().amax() + b.abs().amax(dim=-1)).clamp(min=tiny)
    widest = n_basis if total is None or not full_rank else n_basis + 1
    w = torch.zeros_like(b)
    done = torch.zeros(rows, dtype=torch.bool, device=b.device)
    for step in range(iterations):
        v = face_minimisers(b, s)
        blocked = (s & (v <= 0)).any(dim=-1)
        gradient = v @ gram_work - b  # half-gradient g = Gv − b
        level = 0.0 if total is None else ((v * gradient).sum(dim=-1, keepdim=True) / total)
        worst, entering = torch.where(s, torch.inf, gradient - level).min(dim=-1)
        full = s.sum(dim=-1) >= widest
        optimal = ((worst >= -tol * scale) | full) & ~blocked
        grow = (~optimal & ~blocked).unsqueeze(-1)
        new_s = s | (torch.zeros_like(s).scatter_(-1, entering.unsqueeze(-1), True) & grow)
        # blocked rows step from w towards v until the first support coordinate reaches 0
        if step == 0 and total is None:  # the cone's first feasible point: v clipped
            clipped = v.clamp(min=0)
            stepped_w, stepped_s = clipped, clipped > 0
        else:
            start = w
            if step == 0 and total is not None:  # the simplex's first point: even mass over S
                start = s.to(dtype) * (total / s.sum(dim=-1, keepdim=True).clamp(min=1))
            shrink = s & (v <= 0)
            ratio = torch.where(shrink, start / (start - v).clamp(min=tiny), 2.0)
            first, first_index = ratio.min(dim=-1, keepdim=True)
            moved = start + first.clamp(0.0, 1.0) * (v - start)
            leaving = (s & (moved <= 0)).scatter(-1, first_index, True)
            stepped_w, stepped_s = torch.where(leaving, 0.0, moved), s & ~leaving
        new_w = torch.where(blocked.unsqueeze(-1), stepped_w, v)
        new_s = torch.where(blocked.unsqueeze(-1), stepped_s, new_s)
        keep = done.unsqueeze(-1)  # rows already final keep their state
        w, s = torch.where(keep, w, new_w), torch.where(keep, s, new_s)
        done = done | optimal
    return w, s, done
