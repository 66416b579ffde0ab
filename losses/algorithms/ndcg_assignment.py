"""Exact loss-augmented inference for the structured NDCG@k hinge
(docs/objectives/hinge.md#loss-augmented-inference).

For one query with ``n`` documents, scores ``s``, gains ``g = 2^label − 1`` and ideal DCG@k ``N``,

    max_y  Σ_{r=1}^{k'} [ A(r)·s_{π(r)} − g_{π(r)}·D(r) / N ],   k' = min(n, k),

with ``A(r) = max(k + 1 − r, 0)`` and ``D(r) = 1 / log2(1 + r)``, is a rectangular linear
assignment of k' positions to n documents. Two exact solvers, both returning the 1-based position
of every document in the maximiser (``k + 1`` for documents left outside the top k'):

* :func:`label_level_dp` (batched, on the scores' device): within one label level the documents
  used are that level's highest-scored ones, in score order (rearrangement inequality, A > 0 on
  the top k), so only *which level* fills each position is decided. A DP over count vectors
  ``c ∈ N^M`` with ``Σc ≤ k'`` (``C(k' + M, M)`` states: 286 for M = 3, k = 10), run as batched
  gathers with cached (M, k') tables and backtracked to document ids.
* :func:`assignment_positions` (per query, CPU): a shortest-augmenting-path Hungarian method
  (Kuhn–Munkres, as the report's Section 4 uses) on the [k', n] cost matrix, written in torch so
  that ``losses`` stays torch-only. The exact cross-check of the DP.

Inference carries no gradient: everything here runs under ``torch.no_grad``.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import torch

from differank.losses.algorithms.dcg import dcg_discounts, dcg_gains, ideal_dcg
from differank.losses.algorithms.pairs import label_levels
from differank.losses.inputs import may_read_values

MAX_DP_STATES = 10_000
"""Largest DP table accepted (C(k'+M, M) states); M = 6 levels at k = 10 is 8008."""


def position_weights(positions: torch.Tensor, k: int) -> torch.Tensor:
    """``A(r) = max(k + 1 − r, 0)`` for 1-based positions (any integer tensor)."""
    return (k + 1 - positions).clamp(min=0)


def gains_and_ideal_dcg(
    labels: torch.Tensor, mask: torch.Tensor, k: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Gains ``2^label − 1`` (0 at padding) [B, L] and the ideal DCG@k ``N_q`` [B]."""
    real = torch.where(mask, labels.to(dtype), torch.zeros((), dtype=dtype, device=labels.device))
    gains = dcg_gains(real, mask)
    return gains, ideal_dcg(gains, k)


def query_levels(
    labels: torch.Tensor, mask: torch.Tensor, num_levels: int | None
) -> tuple[torch.Tensor, int, torch.Tensor]:
    """Each document's label level counted from the top, the level count M and the queries with
    more than M distinct labels.

    The DP and y* fill positions from the highest label down, so level 0 is the query's highest
    label here: :func:`~differank.losses.algorithms.pairs.label_levels` (0 = lowest) reversed within
    each query.

    On the CPU eager path M is read from the labels (small tables, fast) and a query with more
    than ``num_levels`` distinct labels is a ValueError; compiled or on an accelerator (the
    host-read rule of ``differank.losses.inputs``) M = ``num_levels`` (static shapes, no sync) and
    such queries are flagged in ``overflow`` (their documents below the M-th label get levels >= M,
    in no level's table). ``num_levels=None`` means no bound: M is always read.

    Shape:
        labels, mask: [B, L] -> level [B, L] int64 (M at padded slots), M (an int >= 1),
        overflow [B] bool.
    """
    from_bottom = label_levels(labels, mask)
    distinct = torch.where(mask, from_bottom + 1, 0).amax(dim=-1, keepdim=True)  # [B, 1]
    from_top = distinct - 1 - from_bottom  # 0 = the query's highest label
    overflow = torch.zeros_like(mask[:, 0])
    if num_levels is None or may_read_values(labels):
        levels = max(int(distinct.max()), 1) if distinct.numel() else 1
        if num_levels is not None and levels > num_levels:
            raise ValueError(
                f"a query has {levels} distinct label values, more than num_levels={num_levels} "
                "of the label-level DP: raise num_levels (the DP has C(k'+M, M) states) or use "
                "solver='assignment' (exact per-query assignment on CPU)"
            )
    else:
        levels = num_levels
        overflow = (mask & (from_top >= levels)).any(dim=-1)
    level = torch.where(mask, from_top, levels)
    return level, levels, overflow


def level_tops(
    key: torch.Tensor, level: torch.Tensor, levels: int, top: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Each label level's ``top`` documents by ``key`` descending (one batched ``topk``).

    Shape:
        key, level: [B, L] -> ids [B, M, top], in_level [B, M, top] bool (False past the
        level's size), sizes n_m [B, M].
    """
    member = level.unsqueeze(1) == torch.arange(levels, device=level.device).unsqueeze(-1)
    masked = torch.where(member, key.unsqueeze(1), torch.full_like(key, -math.inf).unsqueeze(1))
    ids = masked.topk(top, dim=-1).indices
    sizes = member.sum(dim=-1)
    in_level = torch.arange(top, device=key.device) < sizes.unsqueeze(-1)
    return ids, in_level, sizes


def ystar_positions(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    ystar: str,
    k: int,
    levels: tuple[torch.Tensor, int] | None = None,
) -> torch.Tensor:
    """1-based positions of the correct ranking y* within its top k [B, L] (k + 1 elsewhere).

    ``"compatible"``: sort by (label desc, score desc), the Δ = 0 ranking closest to the scores
    (docs/objectives/hinge.md#the-loss); ``"index"``: label desc with ties in index order (fixed, so
    ξ is convex; A12).
    Only positions ≤ k carry A(r) > 0, so each level's top k documents suffice (no full sort).
    ``levels``: ``(level, M)`` from :func:`query_levels`, else read from the labels.
    """
    batch, length = scores.shape
    if ystar == "compatible":
        key = torch.where(mask, scores, torch.zeros_like(scores))
    elif ystar == "index":
        key = -torch.arange(length, device=scores.device, dtype=torch.float64).expand(batch, -1)
    else:
        raise ValueError(f"ystar must be 'compatible' or 'index', got {ystar!r}")
    top = min(k, length)
    level, n_levels = query_levels(labels, mask, None)[:2] if levels is None else levels
    if n_levels > 16:  # many distinct labels: one lexicographic sort beats M top-k's of [B, L]
        by_key = key.argsort(dim=-1, descending=True, stable=True)
        order = by_key.gather(1, level.gather(1, by_key).argsort(dim=-1, stable=True))
        ranks = torch.arange(1, length + 1, device=scores.device).expand(batch, -1)
        positions = torch.empty_like(order).scatter_(1, order, ranks)
        return torch.where(mask & (positions <= k), positions, torch.full_like(positions, k + 1))
    ids, in_level, sizes = level_tops(key, level, n_levels, top)
    starts = sizes.cumsum(dim=-1) - sizes
    rank = starts.unsqueeze(-1) + torch.arange(1, top + 1, device=scores.device)  # [B, M, top]
    keep = in_level & (rank <= k)
    positions = torch.full((batch, length + 1), k + 1, dtype=torch.long, device=scores.device)
    target = torch.where(keep, ids, torch.full_like(ids, length)).reshape(batch, n_levels * top)
    positions.scatter_(
        1,
        target,
        torch.where(keep, rank, torch.full_like(rank, k + 1)).reshape(batch, top * n_levels),
    )
    return positions[:, :length]


# ---------------------------------------------------------------------------------------------
# (b) batched label-level DP
# ---------------------------------------------------------------------------------------------


def dp_state_count(levels: int, positions: int) -> int:
    """Number of DP states ``C(positions + levels, levels)`` (count vectors with Σc ≤ positions)."""
    return math.comb(positions + levels, levels)


@lru_cache(maxsize=64)
def _dp_tables_cpu(levels: int, positions: int) -> tuple[torch.Tensor, ...]:
    """State tables for (M, k'), states ordered by Σc so that each DP step is one slice.

    Returns ``counts [S, M]``, ``sums [S]``, ``pred [S, M]`` (index of ``c − e_m``, or ``S``, a
    dummy −inf state, when ``c_m = 0``), ``pick [S, M]`` (flat index ``m·k' + c_m − 1`` of the
    score the step adds, or the dummy ``M·k'``) and ``layer_starts [k' + 2]``.
    """
    states = [
        c for c in itertools.product(range(positions + 1), repeat=levels) if sum(c) <= positions
    ]
    states.sort(key=lambda c: (sum(c), c))
    index = {c: i for i, c in enumerate(states)}
    total = len(states)
    pred = [
        [index[c[:m] + (c[m] - 1,) + c[m + 1 :]] if c[m] > 0 else total for m in range(levels)]
        for c in states
    ]
    pick = [
        [m * positions + c[m] - 1 if c[m] > 0 else levels * positions for m in range(levels)]
        for c in states
    ]
    counts = torch.tensor(states, dtype=torch.long).reshape(total, levels)
    sums = counts.sum(dim=1)
    layer_starts = torch.searchsorted(sums, torch.arange(positions + 2))
    as_table = lambda rows: torch.tensor(rows, dtype=torch.long).reshape(total, levels)  # noqa: E731
    return counts, sums, as_table(pred), as_table(pick), layer_starts


_DEVICE_TABLES: dict[tuple[int, int, str], tuple] = {}


def dp_tables(levels: int, positions: int, device: torch.device) -> tuple:
    """The cached tables on ``device``; layer bounds as a Python list (static, not data).

    Constants to ``torch.compile``: built once on the host, never traced. The mark
    (``torch.compiler.assume_constant_result``) is made by
    :mod:`~differank.losses.algorithms.dp_tables_constant`, imported only while compiling.
    """
    key = (levels, positions, str(device))
    if key not in _DEVICE_TABLES:
        *tables, layer_starts = _dp_tables_cpu(levels, positions)
        _DEVICE_TABLES[key] = (*(t.to(device) for t in tables), layer_starts.tolist())
    return _DEVICE_TABLES[key]


@torch.no_grad()
def label_level_dp(
    scores: torch.Tensor,
    gains: torch.Tensor,
    ideal: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    k: int,
    levels: tuple[torch.Tensor, int] | None = None,
) -> torch.Tensor:
    """Loss-augmented argmax by the label-level DP of docs/objectives/hinge.md#label-level-dp,
    batched over queries.

    ``V_r(c) = max_m V_{r−1}(c − e_m) + A(r)·S_m[c_m] − D(r)·g_m / N`` where ``S_m`` holds level
    m's scores sorted descending. ``ideal`` must be > 0 where the result is used (the caller masks
    invalid queries). ``levels``: ``(level, M)`` from :func:`query_levels` (static M when
    compiled or on an accelerator); without it M is read from the labels to size the tables.

    Shape:
        scores, gains, labels, mask: [B, L]; ideal: [B] -> positions [B, L] int64, 1..k' for the
        placed documents and k + 1 for the others (A = 0, no gain).
    """
    batch, length = scores.shape
    device, dtype = scores.device, scores.dtype
    top = min(k, length)
    level, n_levels = query_levels(labels, mask, None)[:2] if levels is None else levels
    states = dp_state_count(n_levels, top)
    if states > MAX_DP_STATES:
        raise ValueError(
            f"the label-level DP needs C(k'+M, M) = {states} states for M = {n_levels} label "
            f"levels and k' = {top} positions (limit {MAX_DP_STATES}); too many label levels "
            "for the DP: use solver='assignment' (exact per-query assignment on CPU)"
        )
    if torch.compiler.is_compiling():
        # marks dp_tables constant; a real import even while tracing (torch._dynamo is loaded)
        import differank.losses.algorithms.dp_tables_constant  # noqa: F401
    counts, sums, pred, pick, bounds = dp_tables(n_levels, top, device)
    neg_inf = torch.full((), -math.inf, dtype=dtype, device=device)  # no host-to-device copy

    # Each level's best documents by score, descending: S [B, M, k'] (−inf past n_m) and ids.
    safe = torch.where(mask, scores, torch.zeros_like(scores))
    ids, in_level, sizes = level_tops(safe, level, n_levels, top)
    best_scores = torch.where(
        in_level, safe.gather(1, ids.reshape(batch, n_levels * top)).reshape_as(ids), neg_inf
    )
    flat_scores = torch.cat(
        [best_scores.reshape(batch, n_levels * top), neg_inf.expand(batch, 1)], dim=1
    )
    first = ids[:, :, 0]
    level_gain = torch.where(
        sizes > 0, gains.gather(1, first), torch.zeros((), dtype=dtype, device=device)
    )
    safe_ideal = torch.where(ideal > 0, ideal, torch.ones_like(ideal))
    level_cost = level_gain / safe_ideal.unsqueeze(-1)  # g_m / N  [B, M]

    # Every state has one depth r = Σc, so the term a step adds is known up front:
    # gain[b, s, m] = A(r_s)·S_m[c_m − 1] − D(r_s)·g_m / N for entering s from c − e_m.
    total = counts.shape[0]
    depth = sums.to(dtype)
    weight = (k + 1 - depth).unsqueeze(-1)  # [S, 1]
    discount = torch.where(
        sums > 0, 1.0 / torch.log2(1.0 + depth.clamp(min=1.0)), torch.zeros_like(depth)
    ).unsqueeze(-1)
    step_gain = weight * flat_scores.index_select(1, pick.reshape(-1)).reshape(
        batch, total, n_levels
    ) - discount * level_cost.unsqueeze(1)  # [B, S, M]; −inf where c_m = 0 or c_m > n_m
    value = torch.full((batch, total + 1), -math.inf, dtype=dtype, device=device)
    value[:, 0] = 0.0
    choice = torch.zeros(batch, total, dtype=torch.long, device=device)
    for r in range(1, top + 1):
        lo, hi = bounds[r], bounds[r + 1]
        candidate = value.index_select(1, pred[lo:hi].reshape(-1)).reshape(batch, hi - lo, n_levels)
        best, arg = (candidate + step_gain[:, lo:hi]).max(dim=-1)
        value[:, lo:hi] = best
        choice[:, lo:hi] = arg

    # The ranking fills exactly min(n, k') positions: finish in that layer, then walk back.
    filled = mask.sum(dim=-1).clamp(max=top)
    final = torch.where(sums.unsqueeze(0) == filled.unsqueeze(-1), value[:, :total], neg_inf)
    current = final.argmax(dim=-1, keepdim=True)  # [B, 1]
    flat_ids = torch.cat(
        [ids.reshape(batch, n_levels * top), torch.full_like(ids[:, :1, 0], length)], dim=1
    )
    pred_flat, pick_flat = pred.reshape(-1), pick.reshape(-1)
    docs, places = [], []
    for _ in range(top):
        edge = current * n_levels + choice.gather(1, current.clamp(max=total - 1))
        docs.append(flat_ids.gather(1, pick_flat[edge]))  # the dummy id L once the walk is done
        places.append(sums[current])
        # Finite scores never lead the walk to the dummy state; the clamp keeps even overflowed
        # (inf − inf) values in range, so inference never raises on numbers.
        current = torch.where(current > 0, pred_flat[edge], current).clamp(max=total - 1)
    positions = torch.full((batch, length + 1), k + 1, dtype=torch.long, device=device)
    positions.scatter_(1, torch.cat(docs, dim=1), torch.cat(places, dim=1))
    return positions[:, :length]


# ---------------------------------------------------------------------------------------------
# (a) per-query rectangular assignment (CPU)
# ---------------------------------------------------------------------------------------------


def hungarian_min(cost: torch.Tensor) -> torch.Tensor:
    """Exact min-cost assignment of every row of ``cost [R, C]`` (R ≤ C) to a distinct column.

    Shortest augmenting paths with potentials (Kuhn–Munkres / Jonker–Volgenant form), O(R²·C),
    vectorised over columns. Returns the column of each row, int64 [R].
    """
    rows, cols = cost.shape
    if rows > cols:
        raise ValueError(f"need rows <= columns, got {rows} x {cols}")
    cost = cost.to(torch.float64)
    u = torch.zeros(rows + 1, dtype=torch.float64)
    v = torch.zeros(cols + 1, dtype=torch.float64)
    owner = [0] * (cols + 1)  # owner[j]: row (1-based) matched to column j (1-based); 0 = free
    owner_t = torch.zeros(cols + 1, dtype=torch.long)
    for i in range(1, rows + 1):
        owner[0] = i
        owner_t[0] = i
        j0 = 0
        minv = torch.full((cols + 1,), math.inf, dtype=torch.float64)
        way = torch.zeros(cols + 1, dtype=torch.long)
        used = torch.zeros(cols + 1, dtype=torch.bool)
        while True:
            used[j0] = True
            i0 = owner[j0]
            reduced = cost[i0 - 1] - u[i0] - v[1:]
            free = ~used[1:]
            better = free & (reduced < minv[1:])
            minv[1:] = torch.where(better, reduced, minv[1:])
            way[1:] = torch.where(better, torch.full_like(way[1:], j0), way[1:])
            candidates = torch.where(free, minv[1:], torch.full_like(reduced, math.inf))
            j1 = int(candidates.argmin()) + 1
            delta = candidates[j1 - 1]
            u.index_add_(0, owner_t[used], delta.expand(int(used.sum())))
            v = torch.where(used, v - delta, v)
            minv = torch.where(used, minv, minv - delta)
            j0 = j1
            if owner[j0] == 0:
                break
        way_list = way.tolist()
        while j0:
            j1 = way_list[j0]
            owner[j0] = owner[j1]
            j0 = j1
        owner_t = torch.tensor(owner, dtype=torch.long)
    assigned = torch.zeros(rows, dtype=torch.long)
    for j in range(1, cols + 1):
        if owner[j]:
            assigned[owner[j] - 1] = j - 1
    return assigned


@torch.no_grad()
def assignment_positions(
    scores: torch.Tensor,
    gains: torch.Tensor,
    ideal: torch.Tensor,
    mask: torch.Tensor,
    k: int,
) -> torch.Tensor:
    """Loss-augmented argmax by one exact rectangular assignment per query, on CPU.

    The benefit of document i at position r ≤ k' is ``A(r)·s_i − g_i·D(r)/N``
    (docs/objectives/hinge.md#per-query-assignment);
    the result is copied back to the scores' device. Shapes as :func:`label_level_dp`.
    """
    batch, length = scores.shape
    positions = torch.full((batch, length), k + 1, dtype=torch.long)
    host_scores = scores.detach().to("cpu", torch.float64)
    host_gains = gains.detach().to("cpu", torch.float64)
    host_ideal = ideal.detach().to("cpu", torch.float64)
    host_mask = mask.to("cpu")
    for b in range(batch):
        docs = host_mask[b].nonzero().squeeze(-1)
        n = docs.numel()
        top = min(n, k)
        if top == 0 or host_ideal[b] <= 0:
            continue
        ranks = torch.arange(1, top + 1)
        weight = position_weights(ranks, k).to(torch.float64)
        discount = dcg_discounts(ranks, k, torch.float64)
        benefit = (
            weight.unsqueeze(1) * host_scores[b, docs].unsqueeze(0)
            - discount.unsqueeze(1) * host_gains[b, docs].unsqueeze(0) / host_ideal[b]
        )  # [k', n]
        column = hungarian_min(-benefit)
        positions[b, docs[column]] = ranks
    return positions.to(scores.device)
