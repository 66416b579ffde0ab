"""Orderings of a query's documents (SPEC §5): their loss Δ, their φ_po coefficients, and the
batched MCMC swap sampler behind the conditional-model objectives (Dubey et al., ICDM 2009).

An *order* is an int64 row ``[L]`` of document slots from rank 1 down: the query's ``n`` real
documents first, padded slots after (padding never enters positions ``0..n-1``). Everything here
is batched over ``[B, S, L]`` orders without loops over queries, orders or chains; the only
Python loops are the sampler's step loop and a loop over the few distinct label levels.

Energy of an order y (SPEC §5.2): ``E(y) = Δ(y) + c(y)·s`` with
``c_i(y) = (2/|P|)(#{higher-labelled docs below i} - #{lower-labelled docs above i})``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from losses.pairs import sample_pairs

DELTAS = ("auc", "map", "ndcg")
ACCEPTS = ("metropolis", "all")
TARGETS = ("convex", "model")


class QueryTables(NamedTuple):
    """Per-query constants shared by Δ, the coefficients and the sampler (built once per batch)."""

    mask: torch.Tensor  # [B, L] bool
    levels: torch.Tensor  # [B, L] int64: dense rank of the label within its query (0 at padding)
    num_levels: int  # G: 1 + the largest level in the batch
    higher_total: torch.Tensor  # [B, G] int64: real docs labelled above level g
    count: torch.Tensor  # [B] int64: n, the number of real documents
    pairs: torch.Tensor  # [B] float: |P| (clamped to >= 1 so it can divide)
    gain: torch.Tensor  # [B, L] float: 2^label - 1 (0 at padding)
    relevant: torch.Tensor  # [B, L] float: label > 0 (0 at padding)
    discount: torch.Tensor  # [L] float: 1/log2(2 + p) for p < k, else 0 (0-based positions p)
    ideal_dcg: torch.Tensor  # [B] float
    num_relevant: torch.Tensor  # [B] float
    ideal: torch.Tensor  # [B, L] int64: label descending, ties by slot index, padding after
    delta: str


def query_tables(
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    delta: str = "ndcg",
    ndcg_k: int | None = None,
    dtype: torch.dtype = torch.float32,
) -> QueryTables:
    """Precompute the per-query constants (one host sync: the number of label levels)."""
    batch, length = labels.shape
    device = labels.device
    real = torch.where(mask, labels, torch.zeros_like(labels)).to(dtype)
    ascending = torch.where(mask, real, torch.full_like(real, math.inf))
    sorted_labels, sort_index = ascending.sort(dim=-1, stable=True)
    step = torch.ones_like(sort_index)
    step[:, 0] = 0
    step[:, 1:] = (sorted_labels[:, 1:] != sorted_labels[:, :-1]).long()
    levels = torch.zeros_like(sort_index).scatter(-1, sort_index, step.cumsum(-1))
    levels = torch.where(mask, levels, torch.zeros_like(levels))
    num_levels = int(levels.max()) + 1 if levels.numel() else 1
    per_level = torch.zeros(batch, num_levels, dtype=torch.long, device=device)
    per_level.scatter_add_(1, levels, mask.long())
    count = mask.sum(-1)
    higher_total = count[:, None] - per_level.cumsum(-1)
    below = per_level.cumsum(-1) - per_level  # real docs labelled below level g
    pairs = (per_level * below).sum(-1).to(dtype).clamp(min=1)
    gain = torch.where(mask, torch.exp2(real) - 1, torch.zeros_like(real))
    relevant = (mask & (real > 0)).to(dtype)
    positions = torch.arange(length, device=device, dtype=dtype)
    discount = 1.0 / torch.log2(positions + 2.0)
    if ndcg_k is not None:
        discount = torch.where(positions < ndcg_k, discount, torch.zeros_like(discount))
    ideal = torch.where(mask, -real, torch.full_like(real, math.inf)).argsort(dim=-1, stable=True)
    ideal_dcg = (gain.gather(-1, ideal) * discount).sum(-1)
    return QueryTables(
        mask, levels, num_levels, higher_total, count, pairs, gain, relevant, discount,
        ideal_dcg, relevant.sum(-1), ideal, delta,
    )


def _gather(values: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """``values [B, L]`` at the slots of ``order [B, S, L]`` -> ``[B, S, L]``."""
    return values.unsqueeze(1).expand(-1, order.shape[1], -1).gather(-1, order)


def _real_positions(tables: QueryTables, length: int) -> torch.Tensor:
    """``[B, 1, L]`` bool: position p holds a real document (p < n)."""
    positions = torch.arange(length, device=tables.count.device)
    return (positions < tables.count[:, None]).unsqueeze(1)


def position_counts(
    order: torch.Tensor, tables: QueryTables
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each position p of each order: (higher-labelled docs after p, lower-labelled docs
    before p, higher-labelled docs before p), each ``[B, S, L]`` int64 (garbage at padding).

    One pass per label level (G passes of O(B·S·L)), no [L, L] comparison.
    """
    length = order.shape[-1]
    level_at = _gather(tables.levels, order)
    real = _real_positions(tables, length)
    lower_before = torch.zeros_like(level_at)
    same_before = torch.zeros_like(level_at)
    below = torch.zeros_like(level_at)  # docs before p with level < g
    for level in range(tables.num_levels):
        here = (level_at == level) & real
        before = here.cumsum(-1) - here.long()
        lower_before = torch.where(here, below, lower_before)
        same_before = torch.where(here, before, same_before)
        below = below + before
    positions = torch.arange(length, device=order.device)
    higher_before = positions - lower_before - same_before
    higher_after = tables.higher_total.unsqueeze(1).expand(-1, order.shape[1], -1)
    higher_after = higher_after.gather(-1, level_at) - higher_before
    return higher_after, lower_before, higher_before


def order_deltas(
    order: torch.Tensor, tables: QueryTables, lower_before: torch.Tensor | None = None
) -> torch.Tensor:
    """Δ(y) in [0, 1] of every order ``[B, S, L]`` -> ``[B, S]`` (SPEC §5.3).

    auc: inverted preference pairs / |P|; map: 1 - AP (relevance label > 0); ndcg: 1 - NDCG@k
    with gain 2^label - 1 and discount 1/log2(1 + rank). Queries where the measure is undefined
    (no pair, no relevant document, zero ideal DCG) get Δ = 0.
    """
    if tables.delta == "auc":
        if lower_before is None:
            lower_before = position_counts(order, tables)[1]
        real = _real_positions(tables, order.shape[-1])
        inversions = torch.where(real, lower_before, torch.zeros_like(lower_before)).sum(-1)
        return inversions.to(tables.pairs.dtype) / tables.pairs[:, None]
    if tables.delta == "ndcg":
        dcg = (_gather(tables.gain, order) * tables.discount).sum(-1)
        ideal = tables.ideal_dcg[:, None]
        ratio = dcg / torch.where(ideal > 0, ideal, torch.ones_like(ideal))
        return torch.where(ideal > 0, 1.0 - ratio, torch.zeros_like(ratio))
    return _map_delta(_gather(tables.relevant, order), tables.num_relevant)


def _map_delta(relevant_at: torch.Tensor, num_relevant: torch.Tensor) -> torch.Tensor:
    """1 - AP from the relevance-by-position rows ``[B, S, L]`` and R ``[B]``."""
    ranks = torch.arange(1, relevant_at.shape[-1] + 1, device=relevant_at.device)
    precision = relevant_at.cumsum(-1) / ranks
    total = num_relevant[:, None]
    safe = torch.where(total > 0, total, torch.ones_like(total))
    average = (relevant_at * precision).sum(-1) / safe
    return torch.where(total > 0, 1.0 - average, torch.zeros_like(average))


def order_constants(order: torch.Tensor, tables: QueryTables) -> tuple[torch.Tensor, torch.Tensor]:
    """Δ ``[B, S]`` and the coefficients c ``[B, S, L]`` (indexed by document slot, 0 at padding)
    of every order, so that ``E(y) = Δ(y) + c(y)·s`` (SPEC §5.2)."""
    higher_after, lower_before, _ = position_counts(order, tables)
    real = _real_positions(tables, order.shape[-1])
    scale = (2.0 / tables.pairs)[:, None, None]
    at_position = torch.where(
        real, (higher_after - lower_before).to(scale.dtype) * scale, torch.zeros_like(scale)
    )
    coefficients = torch.zeros_like(at_position).scatter(-1, order, at_position)
    return order_deltas(order, tables, lower_before), coefficients


def _hash_coefficients(length: int, device: torch.device) -> torch.Tensor:
    """Fixed random int64 weights ``[L]``, bounded so ``Σ_p order[p]·R[p]`` is exact in int64."""
    limit = max(2, (1 << 62) // max(1, length * length))
    generator = torch.Generator().manual_seed(20091206)
    return torch.randint(1, limit, (length,), generator=generator).to(device)


def order_hashes(order: torch.Tensor, tables: QueryTables) -> torch.Tensor:
    """``[B, S]`` int64 hash of each order's real prefix: an exact integer dot product with
    fixed random weights (two distinct orders collide with probability < L²/2^62)."""
    weights = _hash_coefficients(order.shape[-1], order.device)
    real = _real_positions(tables, order.shape[-1])
    return (torch.where(real, order, torch.zeros_like(order)) * weights).sum(-1)


def first_occurrences(hashes: torch.Tensor) -> torch.Tensor:
    """``[B, S]`` bool: True at the first slot holding each distinct hash of its row."""
    sorted_hashes, index = hashes.sort(dim=-1, stable=True)
    first = torch.ones_like(sorted_hashes, dtype=torch.bool)
    first[:, 1:] = sorted_hashes[:, 1:] != sorted_hashes[:, :-1]
    return torch.zeros_like(first).scatter(-1, index, first)


def distinct_orders(order: torch.Tensor, tables: QueryTables) -> torch.Tensor:
    """``[B, S]`` bool: the first occurrence of each distinct order of a query's real documents
    (slot order is kept, so slot 0 always survives)."""
    return first_occurrences(order_hashes(order, tables))


def _seed_orders(
    tables: QueryTables, chains: int, generator: torch.Generator | None
) -> torch.Tensor:
    """``[3, B, C, L]`` restart candidates: ideal (random order within a label, Δ = 0), a uniform
    shuffle (E[Δ_AUC] = 1/2) and the reversed ideal (Δ_AUC = 1), padding after in slot order."""
    batch, length = tables.levels.shape
    noise = torch.rand(batch, chains, length, generator=generator, device=tables.levels.device)
    levels = tables.levels.unsqueeze(1).to(noise.dtype)
    keys = torch.stack([-(levels + noise), noise, levels + noise])
    keys = torch.where(tables.mask.unsqueeze(1), keys, torch.full_like(keys, math.inf))
    return keys.argsort(dim=-1, stable=True)


class SampleSet(NamedTuple):
    """Sampled orders with their constants: ``E(y) = deltas + coefficients·s``."""

    orders: torch.Tensor  # [B, S, L] int64
    deltas: torch.Tensor  # [B, S]
    coefficients: torch.Tensor  # [B, S, L], indexed by document slot (0 at padding)
    hashes: torch.Tensor  # [B, S] int64 (order_hashes)


def sample_orders(scores: torch.Tensor, tables: QueryTables, **options) -> torch.Tensor:
    """The orders ``[B, S, L]`` of :func:`run_sampler` (same keyword options).

    Example:
        >>> labels = torch.tensor([[1.0, 0.0, 2.0, 0.0]])
        >>> mask = torch.tensor([[True, True, True, False]])
        >>> tables = query_tables(labels, mask, delta="ndcg")
        >>> g = torch.Generator().manual_seed(0)
        >>> orders = sample_orders(torch.zeros(1, 4), tables, num_samples=6, generator=g)
        >>> orders.shape, bool((orders[..., 3] == 3).all())  # padding stays last
        (torch.Size([1, 6, 4]), True)
    """
    return run_sampler(scores, tables, **options).orders


@torch.no_grad()
def run_sampler(
    scores: torch.Tensor,
    tables: QueryTables,
    *,
    num_samples: int = 1000,
    restart_skew: float = -20.0,
    walk_length: int = 10,
    num_chains: int | None = None,
    accept: str = "metropolis",
    target: str = "convex",
    generator: torch.Generator | None = None,
) -> SampleSet:
    """Draw ``num_samples`` orders per query by restarted swap-Metropolis walks (SPEC §5.5–5.6).

    C chains per query (default ``ceil(S / T)``, i.e. one walk each) run in lock-step. Every
    ``walk_length`` (T) steps each chain restarts from one of three seeds (ideal with random
    within-label order, uniform shuffle, reversed ideal) drawn with probability
    ``∝ exp(restart_skew · Δ(seed))``. A step proposes swapping the positions of a uniform
    preference pair (two documents with different labels; their number is state-independent,
    so the proposal is symmetric) and accepts it with probability ``min(1, exp(E' - E))`` on the
    detached scores (``accept="all"``: always), where ``E = Δ + c·s`` (``target="convex"``) or
    ``E = c·s`` (``target="model"``: the model distribution Pr(y|x; w) of MLE and ExpGain).
    The state after every step is collected.

    Everything a sample needs later (Δ, the coefficients c, the hash) is updated incrementally
    in O(L) per step instead of recomputed per sample: when u moves from above v to below v and
    their labels differ, c·s changes by (2/|P|)(s_v - s_u), c_u by -2/|P| and c_v by +2/|P|.

    Shape:
        scores: [B, L] (padding already replaced by finite values). Memory O(B·S·L).
    """
    if accept not in ACCEPTS or target not in TARGETS:
        raise ValueError(f"accept must be in {ACCEPTS} and target in {TARGETS}, got "
                         f"{accept!r} and {target!r}")  # fmt: skip
    batch, length = scores.shape
    device, dtype = scores.device, scores.dtype
    chains = num_chains if num_chains is not None else -(-num_samples // walk_length)
    steps = -(-num_samples // (chains * walk_length)) * walk_length
    first, second, _ = sample_pairs(
        tables.levels.to(dtype), tables.mask, steps * chains, generator=generator
    )
    first, second = first.view(batch, steps, chains), second.view(batch, steps, chains)
    log_uniform = torch.rand(steps, batch, chains, generator=generator, device=device).log()
    scale = (2.0 / tables.pairs).to(dtype)[:, None, None]  # [B, 1, 1]
    positions = torch.arange(length, device=device)
    weights = _hash_coefficients(length, device)
    orders = torch.empty(batch, chains, steps, length, dtype=torch.long, device=device)
    coefficients = torch.empty(batch, chains, steps, length, dtype=dtype, device=device)
    deltas = torch.empty(batch, chains, steps, dtype=dtype, device=device)
    hashes = torch.empty(batch, chains, steps, dtype=torch.long, device=device)
    zero = torch.zeros((), dtype=dtype, device=device)
    for step in range(steps):
        if step % walk_length == 0:
            state = _restart(scores, tables, chains, restart_skew, generator)
            order, pos, score_at, level_at, coef_at, delta_now, hash_now = state
        i, j = first[:, step, :, None], second[:, step, :, None]  # [B, C, 1] documents to swap
        pi, pj = pos.gather(-1, i), pos.gather(-1, j)
        p, q = torch.minimum(pi, pj), torch.maximum(pi, pj)  # [B, C, 1], p <= q
        a, b = order.gather(-1, p), order.gather(-1, q)  # upper and lower document
        sa, sb = score_at.gather(-1, p), score_at.gather(-1, q)
        la, lb = level_at.gather(-1, p), level_at.gather(-1, q)
        window = (positions > p) & (positions < q)  # [B, C, L]
        cross_a, cross_b = window & (level_at != la), window & (level_at != lb)
        over_a = torch.where(cross_a, score_at - sa, zero)  # a passes below these
        over_b = torch.where(cross_b, sb - score_at, zero)  # b passes above these
        change = scale[..., 0] * ((sb - sa).squeeze(-1) + (over_a + over_b).sum(-1))
        new_delta = _swapped_delta(tables, order, a, b, p, q, la, lb, level_at, window, delta_now)
        if target == "convex":
            change = change + (new_delta - delta_now)
        accepted = (p != q).squeeze(-1)  # p == q only in queries without a pair
        if accept == "metropolis":
            accepted = accepted & (log_uniform[step] < change)
        flag = accepted[..., None]
        step_scale = torch.where(flag, scale, zero)  # [B, C, 1]: 0 where rejected
        coef_a, coef_b = coef_at.gather(-1, p), coef_at.gather(-1, q)
        count_a = cross_a.sum(-1, keepdim=True).to(dtype) + 1
        count_b = cross_b.sum(-1, keepdim=True).to(dtype) + 1
        coef_at += step_scale * (cross_a.to(dtype) - cross_b.to(dtype))
        _swap(coef_at, p, q, flag, coef_a - step_scale * count_a, coef_b + step_scale * count_b)
        _swap(order, p, q, flag, a, b)
        _swap(score_at, p, q, flag, sa, sb)
        _swap(level_at, p, q, flag, la, lb)
        pos.scatter_(-1, a, torch.where(flag, q, p))
        pos.scatter_(-1, b, torch.where(flag, p, q))
        delta_now = torch.where(accepted, new_delta, delta_now)
        rehash = (b - a).squeeze(-1) * (weights[p] - weights[q]).squeeze(-1)
        hash_now = hash_now + torch.where(accepted, rehash, torch.zeros_like(rehash))
        orders[:, :, step], coefficients[:, :, step] = order, coef_at
        deltas[:, :, step], hashes[:, :, step] = delta_now, hash_now
    orders = orders.view(batch, chains * steps, length)[:, :num_samples]
    coefficients = coefficients.view(batch, chains * steps, length)[:, :num_samples]
    by_slot = torch.zeros_like(coefficients).scatter_(-1, orders, coefficients)
    return SampleSet(
        orders,
        deltas.view(batch, -1)[:, :num_samples],
        by_slot,
        hashes.view(batch, -1)[:, :num_samples],
    )


def _swap(
    values: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    flag: torch.Tensor,
    at_p: torch.Tensor,
    at_q: torch.Tensor,
) -> None:
    """In place, where ``flag``: ``at_p`` (what leaves position p) goes to q and ``at_q`` to p;
    elsewhere both positions keep their values."""
    values.scatter_(-1, p, torch.where(flag, at_q, values.gather(-1, p)))
    values.scatter_(-1, q, torch.where(flag, at_p, values.gather(-1, q)))


def _restart(
    scores: torch.Tensor,
    tables: QueryTables,
    chains: int,
    restart_skew: float,
    generator: torch.Generator | None,
) -> tuple[torch.Tensor, ...]:
    """Fresh chain states from the three seeds, chosen ∝ exp(restart_skew · Δ(seed))."""
    batch, length = scores.shape
    candidates = _seed_orders(tables, chains, generator)  # [3, B, C, L]
    deltas = order_deltas(candidates.view(3 * batch, chains, length), _repeat(tables, 3))
    deltas = deltas.view(3, batch, chains)
    uniform = torch.rand(3, batch, chains, generator=generator, device=scores.device)
    gumbel = -torch.log(-torch.log(uniform.clamp(min=1e-12)))
    choice = (restart_skew * deltas.to(gumbel.dtype) + gumbel).argmax(0)  # [B, C]
    order = candidates.gather(0, choice[None, ..., None].expand(1, -1, -1, length))[0]
    delta_now = deltas.gather(0, choice[None])[0].to(scores.dtype)
    pos = torch.empty_like(order).scatter_(
        -1, order, torch.arange(length, device=order.device).expand_as(order).contiguous()
    )
    higher_after, lower_before, _ = position_counts(order, tables)
    real = _real_positions(tables, length)
    scale = (2.0 / tables.pairs).to(scores.dtype)[:, None, None]
    coef_at = torch.where(real, (higher_after - lower_before).to(scale.dtype) * scale, 0.0)
    state = (order, pos, _gather(scores, order), _gather(tables.levels, order), coef_at)
    return (*state, delta_now, order_hashes(order, tables))


def _repeat(tables: QueryTables, times: int) -> QueryTables:
    """The tables of ``times`` stacked copies of the batch (query b of copy t at t·B + b)."""
    fields = {}
    for name, value in tables._asdict().items():
        is_batched = isinstance(value, torch.Tensor) and name != "discount"
        fields[name] = value.repeat(times, *([1] * (value.dim() - 1))) if is_batched else value
    return QueryTables(**fields)


def _swapped_delta(
    tables: QueryTables,
    order: torch.Tensor,
    a: torch.Tensor,
    b: torch.Tensor,
    p: torch.Tensor,
    q: torch.Tensor,
    la: torch.Tensor,
    lb: torch.Tensor,
    level_at: torch.Tensor,
    window: torch.Tensor,
    delta_now: torch.Tensor,
) -> torch.Tensor:
    """Δ after swapping the documents a (position p) and b (position q > p), [B, C]."""
    if tables.delta == "auc":
        zero = torch.zeros((), dtype=la.dtype, device=la.device)
        crossing = torch.where(window, (la - level_at).sign() + (level_at - lb).sign(), zero)
        inversions = (la - lb).sign().squeeze(-1) + crossing.sum(-1)
        return delta_now + inversions.to(delta_now.dtype) / tables.pairs[:, None]
    if tables.delta == "ndcg":
        gain_a, gain_b = tables.gain.gather(1, a.squeeze(-1)), tables.gain.gather(1, b.squeeze(-1))
        disc_p, disc_q = tables.discount[p.squeeze(-1)], tables.discount[q.squeeze(-1)]
        dcg_change = (gain_b - gain_a) * (disc_p - disc_q)
        ideal = tables.ideal_dcg[:, None]
        safe = torch.where(ideal > 0, ideal, torch.ones_like(ideal))
        return torch.where(ideal > 0, delta_now - dcg_change / safe, delta_now)
    relevant_at = _gather(tables.relevant, order)
    rel_a, rel_b = relevant_at.gather(-1, p), relevant_at.gather(-1, q)
    relevant_at = relevant_at.scatter(-1, p, rel_b).scatter(-1, q, rel_a)
    return _map_delta(relevant_at, tables.num_relevant)
