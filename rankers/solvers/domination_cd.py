"""Sparse linear domination ranker fitted by the thesis' batch coordinate descent (Algs. 1–7).

The objective is the domination loss of a linear scorer ``f = X w`` averaged over the valid
queries (``reduction="mean"`` of ``differank.losses.domination``), plus ``l1·‖w‖₁ + l2·‖w‖²``
(docs/objectives/domination.md#regularisation;
the same meaning as ``RankingModule``'s ``l1``/``l2``). Each coordinate step minimises the
quadratic upper bound ``L(w + δe_r) ≤ L(w) + g_r δ + β_r δ²/2`` with ``β_r = Σ_q m_q B_{q,r}``
(thesis Sec. 2–3, docs/objectives/domination.md#coordinate-descent-with-feature-induction) plus the
penalty exactly: the ℓ1 step is the soft threshold, the ℓ2²
step ``(−g − 2λw)/(β + 2λ)``. So the regularised objective never increases.

Caching (thesis Sec. 6, Alg. 6) keeps every coordinate step local. Per document the solver keeps
the margin ``f_j = w·x_j − m_j`` and ``h_j = ∂L_q/∂f_j``; then ``g_r = Σ_j x_jr h_j`` needs only the
feature's non-zeros. After ``w_r`` moves, only the queries that hold a non-zero of feature r
change: their per-layer ``log Z_{q,k}`` (the thesis' Z), the thesis' ``1/(Z + e^{f_i})`` sums and
``h`` are recomputed in the log domain (overflow-safe, replacing the thesis' running max ``c``).
An update therefore touches ``nnz_r + Σ_{touched q} n_q ≤ nnz_r·(1 + max list length)`` entries,
independent of the number of documents and features; :attr:`work` counts them.

Feature induction (Alg. 7) ranks the features outside the model by the guaranteed decrease of
the bound, adds the top ``alpha``, trains the chosen set to convergence and repeats until no
feature promises a decrease above ``induction_tol`` (relative to the objective).
"""

from __future__ import annotations

import math

import torch
from torch.nn import functional as F

from differank.losses.algorithms.pairs import label_levels
from differank.losses.domination import label_margins
from differank.rankers.scorers.linear import LinearRanker

NEG_INF = float("-inf")


def soft_threshold(value: torch.Tensor | float, threshold: float) -> torch.Tensor | float:
    """``S(v, t) = sign(v)·max(|v| − t, 0)``: the ℓ1 proximal step
    (docs/objectives/domination.md#coordinate-steps-with-l1-and-l2-penalties: the thesis' third
    case is a typo; the soft threshold is what its Lemmas 1–2 prove)."""
    if isinstance(value, torch.Tensor):
        return torch.sign(value) * (value.abs() - threshold).clamp(min=0)
    return math.copysign(max(abs(value) - threshold, 0.0), value)


def _scatter_logsumexp(values: torch.Tensor, index: torch.Tensor, size: int) -> torch.Tensor:
    """``out[k] = log Σ_{index_i = k} exp(values_i)``; −inf for empty buckets (no autograd here)."""
    peak = values.new_full((size,), NEG_INF).scatter_reduce(0, index, values, "amax")
    safe_peak = torch.where(torch.isfinite(peak), peak, torch.zeros_like(peak))
    total = values.new_zeros(size).index_add_(0, index, (values - safe_peak[index]).exp())
    log_total = safe_peak + total.clamp(min=1e-300).log()
    return torch.where(total > 0, log_total, peak.new_full((), NEG_INF))


class DominationCD:
    """Coordinate-descent domination ranker, a ``FullBatchSolver`` (see
    ``rankers/scorers/base.py``).

    Args:
        n_features: F.
        l1, l2: penalty ``l1·Σ|w| + l2·Σw²`` on the objective (mean over valid queries).
        induction: feature induction (thesis Alg. 7); ``fit_step`` is then one induction round
            (choose ``alpha`` features, train the chosen set to convergence).
        alpha: features added per induction round.
        induction_tol: stop inducing when no feature's guaranteed decrease exceeds
            ``induction_tol × objective``.
        tol: a feature set has converged when a sweep decreases the objective by at most
            ``tol ×`` the first sweep's decrease (thesis Sec. 7.1).
        sweeps_per_step: sweeps per ``fit_step`` without induction.
        max_inner_sweeps: cap on the sweeps that train the chosen set in an induction round.
        bound: ``"thesis"`` uses ``B_{q,r} = max_j x_jr²``; ``"range"`` the tighter but still valid
            ``(max_j x_jr − min_j x_jr)²/4`` (Popoviciu's bound on the variance), per query.
        negative_fraction: keep this fraction of each query's lowest layer (thesis' "Sampled"
            variant; drawn once per training set with ``seed``).
        margin_scale, margin_offset, flat, pool: as in
        ``differank.losses.domination.domination_loss``. dtype: the solver's internal precision.

    Example:
        >>> solver = DominationCD(n_features=2, l1=0.01)
        >>> x = torch.tensor([[[1.0, 0.0], [0.0, 1.0], [0.0, 0.0]]])
        >>> labels, mask = torch.tensor([[2.0, 1.0, 0.0]]), torch.ones(1, 3, dtype=torch.bool)
        >>> stats = solver.fit_step(x, labels, mask)
        >>> bool(solver.ranker.linear.weight[0, 0] > solver.ranker.linear.weight[0, 1] > 0)
        True
    """

    def __init__(
        self,
        n_features: int,
        *,
        l1: float = 0.0,
        l2: float = 0.0,
        induction: bool = False,
        alpha: int = 5,
        induction_tol: float = 1e-4,
        tol: float = 1e-3,
        sweeps_per_step: int = 1,
        max_inner_sweeps: int = 200,
        bound: str = "thesis",
        negative_fraction: float = 1.0,
        margin_scale: float = 0.0,
        margin_offset: float = 0.0,
        flat: bool = False,
        pool: bool = False,
        seed: int = 0,
        dtype: torch.dtype = torch.float64,
    ) -> None:
        if l1 < 0 or l2 < 0:
            raise ValueError(f"l1 and l2 must be >= 0, got l1={l1}, l2={l2}")
        if alpha < 1 or sweeps_per_step < 1 or max_inner_sweeps < 1:
            raise ValueError("alpha, sweeps_per_step and max_inner_sweeps must be >= 1")
        if tol <= 0 or induction_tol < 0:
            raise ValueError(f"tol must be > 0 and induction_tol >= 0, got {tol}, {induction_tol}")
        if bound not in ("thesis", "range"):
            raise ValueError(f"bound must be 'thesis' or 'range', got {bound!r}")
        if not 0.0 < negative_fraction <= 1.0:
            raise ValueError(f"negative_fraction must be in (0, 1], got {negative_fraction}")
        self.ranker = LinearRanker(n_features, bias=False)  # scores are shift-invariant per query
        self.n_features = n_features
        self.l1, self.l2 = float(l1), float(l2)
        self.induction, self.alpha, self.induction_tol = bool(induction), int(alpha), induction_tol
        self.tol, self.sweeps_per_step = float(tol), int(sweeps_per_step)
        self.max_inner_sweeps, self.bound = int(max_inner_sweeps), bound
        self.negative_fraction, self.seed = float(negative_fraction), int(seed)
        self.margin_scale, self.margin_offset = float(margin_scale), float(margin_offset)
        self.flat, self.pool, self.dtype = bool(flat), bool(pool), dtype
        self.converged = False
        self.work = 0  # entries touched by coordinate updates (the cost model of the docstring)
        self.chosen = torch.zeros(n_features, dtype=torch.bool)
        self.w = torch.zeros(n_features, dtype=torch.float64)
        self._key: tuple | None = None
        self._first_decrease: float | None = None

    # ------------------------------------------------------------------ setup (Algs. 1, 3, 5)
    def prepare(self, features: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor) -> None:
        """Build the sparse column layout, bounds and caches for a training set (once per set).

        ``features``: dense [Q, L, F]; sparse COO [Q, L, F]; or sparse COO/CSR [Q·L, F] (rows
        in the query-major order of ``features.reshape(-1, F)``). Margins start from the
        ranker's current weights.
        """
        key = (id(features), tuple(features.shape), id(labels), id(mask))
        if key == self._key:
            return
        num_queries, length = mask.shape
        if features.shape[-1] != self.n_features:
            raise ValueError(
                f"features have {features.shape[-1]} columns, the solver {self.n_features}"
            )
        device, dtype = mask.device, self.dtype
        labels = torch.where(mask, labels, torch.zeros_like(labels)).to(dtype)
        shift = label_margins(labels, self.margin_scale, self.margin_offset)  # thesis s(i), Alg. 5
        if self.flat:
            labels = (labels > 0).to(dtype)
        if self.pool:
            mask, labels, shift = mask.reshape(1, -1), labels.reshape(1, -1), shift.reshape(1, -1)
        levels = label_levels(labels, mask)
        if self.negative_fraction < 1.0:
            generator = torch.Generator().manual_seed(self.seed)
            draw = torch.rand(mask.shape, generator=generator).to(device)
            mask = mask & ((levels > 0) | (draw < self.negative_fraction))
            levels = label_levels(labels, mask)

        flat_mask = mask.reshape(-1)
        keep = flat_mask.nonzero().squeeze(-1)  # setup only: the compact real-document index
        n_docs = keep.numel()
        doc_of = torch.full((flat_mask.numel(),), -1, dtype=torch.long, device=device)
        doc_of[keep] = torch.arange(n_docs, device=device)
        query = keep // mask.shape[1]
        level = levels.reshape(-1)[keep]
        self.query, self.level, self.n_docs = query, level, n_docs
        self.n_queries = mask.shape[0]
        self.n_levels = int(level.max()) + 1 if n_docs else 1
        self.offset = -shift.reshape(-1)[keep]

        rows, cols, vals = _nonzeros(features, num_queries * length, self.n_features)
        rows = doc_of[rows.to(device)]
        vals, cols = vals.to(device=device, dtype=dtype), cols.to(device)
        real = (rows >= 0) & (vals != 0)
        rows, cols, vals = rows[real], cols[real], vals[real]
        order = torch.argsort(cols * max(n_docs, 1) + rows)  # CSC: by feature, then document
        self.rows, self.cols, self.vals = rows[order], cols[order], vals[order]
        counts = torch.bincount(self.cols, minlength=self.n_features).cpu()
        self.col_ptr = [0, *torch.cumsum(counts, 0).tolist()]

        # Queries as contiguous document blocks (the compact index is query-major).
        self.q_len = torch.bincount(query, minlength=self.n_queries)
        self.q_start = torch.cumsum(self.q_len, 0) - self.q_len
        dominating = torch.zeros(self.n_queries, dtype=dtype, device=device)
        dominating.index_add_(0, query, (level > 0).to(dtype))  # m_q
        self.n_valid = int((dominating > 0).sum())
        self.scale = 1.0 / max(self.n_valid, 1)
        self.beta = self._bounds(dominating).cpu()
        self.beta_list = self.beta.tolist()
        self._query_pos = torch.zeros(self.n_queries, dtype=torch.long, device=device)
        self._all_docs = torch.arange(n_docs, device=device)
        self._all_queries = torch.arange(self.n_queries, device=device)

        w = self.w.to(device=device, dtype=dtype)
        self.f = self.offset.clone().index_add_(0, self.rows, self.vals * w[self.cols])
        self.h = torch.zeros(n_docs, dtype=dtype, device=device)
        self.query_loss = torch.zeros(self.n_queries, dtype=dtype, device=device)
        self._refresh(self._all_docs, self._all_queries)
        self._key = key

    def _bounds(self, dominating: torch.Tensor) -> torch.Tensor:
        """``β_r = scale·Σ_q m_q B_{q,r}`` from the non-zeros only (no [Q, F] matrix)."""
        pair = self.query[self.rows] * self.n_features + self.cols
        unique, inverse = torch.unique(pair, return_inverse=True)
        size = unique.numel()
        high = self.vals.new_full((size,), NEG_INF).scatter_reduce(0, inverse, self.vals, "amax")
        if self.bound == "thesis":
            bound = self.vals.new_zeros(size).scatter_reduce(0, inverse, self.vals.square(), "amax")
        else:
            low = self.vals.new_full((size,), math.inf)
            low = low.scatter_reduce(0, inverse, self.vals, "amin")
            count = torch.zeros(size, dtype=torch.long, device=self.vals.device)
            count.index_add_(0, inverse, torch.ones_like(inverse))
            has_zero = count < self.q_len[unique // self.n_features]
            high = torch.where(has_zero, high.clamp(min=0), high)
            low = torch.where(has_zero, low.clamp(max=0), low)
            bound = (high - low).square() / 4
        per_pair = dominating[unique // self.n_features] * bound
        beta = self.vals.new_zeros(self.n_features)
        return beta.index_add_(0, unique % self.n_features, per_pair) * self.scale

    # ------------------------------------------------------------------ caches (Alg. 6)
    def _refresh(self, docs: torch.Tensor, queries: torch.Tensor) -> None:
        """Recompute log Z, the ``1/(Z + e^f)`` sums, ``h`` and the loss of ``queries``.

        ``docs`` are exactly the documents of ``queries``. Everything is in the log domain:
        ``h_j = e^{f_j}·Σ_{layers k above j} Σ_{i∈G(k)} 1/(Z_k + e^{f_i}) − σ(log Z_{k_j} − f_j)``.
        """
        width = self.n_levels
        self._query_pos[queries] = torch.arange(queries.numel(), device=queries.device)
        f, level = self.f[docs], self.level[docs]
        local = self._query_pos[self.query[docs]]
        slot = local * width + level
        size = queries.numel() * width
        log_e = _scatter_logsumexp(f, slot, size).view(-1, width)
        inclusive = torch.logcumsumexp(log_e, dim=1)
        bottom = inclusive.new_full((inclusive.shape[0], 1), NEG_INF)
        log_z = torch.cat([bottom, inclusive[:, :-1]], 1)  # exclusive: layers strictly below
        lz = log_z.reshape(-1)[slot]
        has_lower = level > 0  # dense levels: every lower layer is present, so lz is finite
        gap = torch.where(has_lower, lz - f, torch.zeros_like(f))
        doc_loss = torch.where(has_lower, F.softplus(gap), torch.zeros_like(f))
        log_a = torch.where(has_lower, -torch.logaddexp(lz, f), torch.full_like(f, NEG_INF))
        log_layer_a = _scatter_logsumexp(log_a, slot, size).view(-1, width)
        above = torch.logcumsumexp(log_layer_a.flip(1), dim=1).flip(1)  # Σ over layers ≥ k
        above = torch.cat([above[:, 1:], above.new_full((above.shape[0], 1), NEG_INF)], 1)  # > k
        push_down = (f + above.reshape(-1)[slot]).exp()
        self.h[docs] = push_down - torch.where(has_lower, torch.sigmoid(gap), torch.zeros_like(f))
        per_query = doc_loss.new_zeros(queries.numel()).index_add_(0, local, doc_loss)
        self.query_loss[queries] = per_query

    def _touched(self, rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The queries holding ``rows`` (sorted) and all their documents."""
        queries = torch.unique_consecutive(self.query[rows])
        if queries.numel() == self.n_queries:
            return self._all_docs, self._all_queries
        lengths = self.q_len[queries]
        total = int(lengths.sum())
        starts = self.q_start[queries] - (torch.cumsum(lengths, 0) - lengths)
        docs = torch.repeat_interleave(starts, lengths, output_size=total)
        return docs + torch.arange(total, device=rows.device), queries

    # ------------------------------------------------------------------ updates (Algs. 2, 4)
    def coordinate_gradient(self, r: int) -> float:
        """``g_r = ∂L/∂w_r = scale·Σ_j x_jr h_j``, from feature r's non-zeros only."""
        lo, hi = self.col_ptr[r], self.col_ptr[r + 1]
        return self.scale * float((self.vals[lo:hi] * self.h[self.rows[lo:hi]]).sum())

    def step(self, r: int, gradient: float | None = None) -> float:
        """One coordinate update of ``w_r``; returns the guaranteed decrease of the objective."""
        lo, hi = self.col_ptr[r], self.col_ptr[r + 1]
        beta = self.beta_list[r]
        if hi == lo or beta <= 0:
            return 0.0
        g = self.coordinate_gradient(r) if gradient is None else gradient
        old = float(self.w[r])
        new = soft_threshold(beta * old - g, self.l1) / (beta + 2 * self.l2)
        delta = new - old
        if delta == 0.0:
            return 0.0
        self.w[r] = new
        rows = self.rows[lo:hi]
        self.f.index_add_(0, rows, self.vals[lo:hi] * delta)
        docs, queries = self._touched(rows)
        self._refresh(docs, queries)
        self.work += (hi - lo) + docs.numel()
        penalty = self.l1 * (abs(new) - abs(old)) + self.l2 * (new * new - old * old)
        return -(g * delta + 0.5 * beta * delta * delta + penalty)

    def objective(self) -> float:
        """Mean domination loss over valid queries + ``l1·‖w‖₁ + l2·‖w‖²``."""
        loss = self.scale * float(self.query_loss.sum())
        return loss + self.l1 * float(self.w.abs().sum()) + self.l2 * float(self.w.square().sum())

    def sweep(self, features: torch.Tensor | None = None) -> float:
        """Update each feature of ``features`` (default: all) once; returns the objective's drop."""
        before = self.objective()
        indices = range(self.n_features) if features is None else features.tolist()
        for r in indices:
            self.step(r)
        return before - self.objective()

    def _train_to_convergence(self, features: torch.Tensor | None, max_sweeps: int) -> int:
        first = None
        for sweep in range(1, max_sweeps + 1):
            decrease = self.sweep(features)
            first = decrease if first is None else first
            if decrease <= self.tol * max(first, 1e-300) or decrease <= 1e-15 * self.objective():
                return sweep
        return max_sweeps

    def induction_gains(self) -> torch.Tensor:
        """Alg. 7's guaranteed decrease ``−g δ − β δ²/2 − Δpenalty`` of one step, per feature."""
        h = self.h[self.rows] * self.vals
        g = (self.scale * h.new_zeros(self.n_features).index_add_(0, self.cols, h)).cpu()
        w = self.w
        new = soft_threshold(self.beta * w - g, self.l1) / (self.beta + 2 * self.l2)
        delta = torch.where(self.beta > 0, new - w, torch.zeros_like(w))
        penalty = self.l1 * (new.abs() - w.abs()) + self.l2 * (new.square() - w.square())
        gains = -(g * delta + 0.5 * self.beta * delta.square() + penalty)
        return torch.where(self.beta > 0, gains, torch.zeros_like(gains))

    # ------------------------------------------------------------------ FullBatchSolver
    def fit_step(
        self, features: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
    ) -> dict[str, float]:
        """One outer iteration on the full training set: ``sweeps_per_step`` sweeps over all
        features, or (with ``induction``) one Alg. 7 round. Sets :attr:`converged`."""
        self.prepare(features, labels, mask)
        sweeps, added = 0, 0
        if self.induction:
            gains = self.induction_gains()
            gains[self.chosen] = NEG_INF
            eligible = gains > self.induction_tol * max(self.objective(), 1e-300)
            top = torch.topk(
                torch.where(eligible, gains, torch.full_like(gains, NEG_INF)),
                min(self.alpha, self.n_features),
            )
            new = top.indices[torch.isfinite(top.values)]
            added = new.numel()
            if added == 0:
                self.converged = True
            else:
                self.chosen[new] = True
                active = self.chosen.nonzero().squeeze(-1)
                sweeps = self._train_to_convergence(active, self.max_inner_sweeps)
        else:
            for _ in range(self.sweeps_per_step):
                decrease = self.sweep()
                sweeps += 1
                if self._first_decrease is None:
                    self._first_decrease = decrease
                if decrease <= self.tol * max(self._first_decrease, 1e-300):
                    self.converged = True
                    break
        with torch.no_grad():
            weight = self.ranker.linear.weight
            weight.copy_(self.w.to(device=weight.device, dtype=weight.dtype).unsqueeze(0))
        return {
            "objective": self.objective(),
            "nnz": float((self.w != 0).sum()),
            "chosen": float(self.chosen.sum()),
            "added": float(added),
            "sweeps": float(sweeps),
            "work": float(self.work),
        }


def _nonzeros(
    features: torch.Tensor, n_rows: int, n_features: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(row, feature, value)`` of the stored entries, rows in query-major document order."""
    if features.layout == torch.strided:
        matrix = features.reshape(n_rows, n_features)
        rows, cols = matrix.nonzero(as_tuple=True)
        return rows, cols, matrix[rows, cols]
    if features.layout == torch.sparse_csr:
        features = features.to_sparse_coo()
    if features.layout != torch.sparse_coo:
        raise ValueError(f"features must be dense, sparse COO or CSR, got {features.layout}")
    features = features.coalesce()
    index, values = features.indices(), features.values()
    if features.dim() == 3:
        length = features.shape[1]
        return index[0] * length + index[1], index[2], values
    if features.dim() == 2 and features.shape[0] == n_rows:
        return index[0], index[1], values
    raise ValueError(f"sparse features must be [Q, L, F] or [Q·L, F], got {tuple(features.shape)}")
