"""Orderings of a query's documents (docs/objectives/convex.md): their loss Δ, their φ_po
coefficients, and the
batched MCMC swap sampler behind the conditional-model objectives (Dubey et al., ICDM 2009).

An *order* is an int64 row ``[L]`` of document slots from rank 1 down: the query's ``n`` real
documents first, padded slots after (padding never enters positions ``0..n-1``). Everything here
is batched over ``[B, S, L]`` orders without loops over queries, orders or chains; the only
Python loops are the sampler's step loop and a loop over the few distinct label levels.

Host reads follow the rule of ``differank.losses.inputs``: on the CPU eager path
:func:`query_tables` reads the number of label levels from the labels; given ``num_levels`` and
compiled or on an accelerator it takes that bound instead, so nothing here reads a tensor value on
the host and every shape comes from hyperparameters or input shapes
(``torch.compile(fullgraph=True)`` works). Randomness comes from ``generator`` or, with
``generator=None``, the CPU's global RNG, and is drawn where the generator lives and moved
(:func:`~differank.losses.algorithms.pairs.random_uniform`): for the same seed the sampler
draws the same rankings on every device.

Energy of an order y (docs/objectives/convex.md#the-loss): ``E(y) = Δ(y) + c(y)·s`` with
``c_i(y) = (2/|P|)(#{higher-labelled docs below i} - #{lower-labelled docs above i})``.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch

from differank.losses.algorithms.dcg import dcg_discounts, dcg_gains
from differank.losses.algorithms.pairs import (
    label_levels,
    random_integers,
    random_uniform,
    sample_pairs,
)
from differank.losses.inputs import may_read_values

DELTAS = ("auc", "map", "ndcg")
ACCEPTS = ("metropolis", "all")
TARGETS = ("convex", "model")


class QueryTables(NamedTuple):
    """Per-query constants shared by Δ, the coefficients and the sampler (built once per batch)."""

    mask: torch.Tensor  # [B, L] bool
    levels: torch.Tensor  # [B, L] int64: dense rank of the label within its query (0 at padding)
    num_levels: int  # G: 1 + the largest level in the batch, or the num_levels bound (static)
    higher_total: torch.Tensor  # [B, G] int64: real docs labelled above level g
    num_real: torch.Tensor  # [B] int64: n, the number of real documents
    pairs: torch.Tensor  # [B] float: |P| (clamped to >= 1 so it can divide)
    gain: torch.Tensor  # [B, L] float: 2^label - 1 (0 at padding)
    relevant: torch.Tensor  # [B, L] float: label > 0 (0 at padding)
    discount: torch.Tensor  # [L] float: 1/log2(2 + p) for p < k, else 0 (0-based positions p)
    ideal_dcg: torch.Tensor  # [B] float
    num_relevant: torch.Tensor  # [B] float
    ideal: torch.Tensor  # [B, L] int64: label descending, ties by slot index, padding after
    delta: str
    overflow: torch.Tensor  # [B] bool: more distinct labels than G (static path only; levels cut)


def query_tables(
    labels: torch.Tensor,
    mask: torch.Tensor,
    *,
    delta: str = "ndcg",
    ndcg_k: int | None = None,
    dtype: torch.dtype = torch.float32,
    num_levels: int | None = None,
) -> QueryTables:
    """Precompute the per-query constants.

    The level count G sizes the per-level tables and loops. With ``num_levels=None``, or on the
    CPU eager path (:func:`~differank.losses.inputs.may_read_values`), G is read from the labels
    (one host read; no bound). Otherwise (compiled or on an accelerator) G = ``num_levels``, with no
    host read: a query with more distinct labels has its levels cut to ``num_levels - 1`` (its
    tables stay in range but are wrong) and is flagged in ``overflow``, and the caller must discard
    its result (ConvexLoss makes it NaN). Extra empty levels change no result.
    """
    batch, length = labels.shape
    device = labels.device
    real = torch.where(mask, labels, torch.zeros_like(labels)).to(dtype)
    levels = label_levels(real, mask)
    overflow = torch.zeros(batch, dtype=torch.bool, device=device)
    if num_levels is None or may_read_values(levels):
        num_levels = int(levels.max()) + 1 if levels.numel() else 1
    else:  # static: G from the hyperparameter, no host read
        overflow = (levels >= num_levels).any(-1)
        levels = levels.clamp(max=num_levels - 1)
    per_level = torch.zeros(batch, num_levels, dtype=torch.long, device=device)
    per_level.scatter_add_(1, levels, mask.long())
    count = mask.sum(-1)
    higher_total = count[:, None] - per_level.cumsum(-1)
    below = per_level.cumsum(-1) - per_level  # real docs labelled below level g
    pairs = (per_level * below).sum(-1).to(dtype).clamp(min=1)
    gain = dcg_gains(real, mask)
    relevant = (mask & (real > 0)).to(dtype)
    discount = dcg_discounts(torch.arange(1, length + 1, device=device), ndcg_k, dtype)
    ideal = torch.where(mask, -real, torch.full_like(real, math.inf)).argsort(dim=-1, stable=True)
    ideal_dcg = (gain.gather(-1, ideal) * discount).sum(-1)
    return QueryTables(
        mask,
        levels,
        num_levels,
        higher_total,
        count,
        pairs,
        gain,
        relevant,
        discount,
        ideal_dcg,
        relevant.sum(-1),
        ideal,
        delta,
        overflow,
    )


def _gather(values: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    """``values [B, L]`` at the slots of ``order [B, S, L]`` -> ``[B, S, L]``."""
    return values.unsqueeze(1).expand(-1, order.shape[1], -1).gather(-1, order)


def _real_positions(tables: QueryTables, length: int) -> torch.Tensor:
    """``[B, 1, L]`` bool: position p holds a real document (p < n)."""
    positions = torch.arange(length, device=tables.num_real.device)
    return (positions < tables.num_real[:, None]).unsqueeze(1)


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
    """Δ(y) in [0, 1] of every order ``[B, S, L]`` -> ``[B, S]`` (docs/objectives/convex.md#deltas).

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
    of every order, so that ``E(y) = Δ(y) + c(y)·s`` (docs/objectives/convex.md#the-loss)."""
    higher_after, lower_before, _ = position_counts(order, tables)
    real = _real_positions(tables, order.shape[-1])
    scale = (2.0 / tables.pairs)[:, None, None]
    at_position = torch.where(
        real, (higher_after - lower_before).to(scale.dtype) * scale, torch.zeros_like(scale)
    )
    coefficients = torch.zeros_like(at_position).scatter(-1, order, at_position)
    return order_deltas(order, tables, lower_before), coefficients


_MASK32 = (1 << 32) - 1


def _mix32(x: torch.Tensor) -> torch.Tensor:
    """A 32-bit integer hash (xor-shift-multiply) of int64 values in ``[0, 2^32)``.

    Every product stays below 2^63 and every shifted value is non-negative, so int64 arithmetic
    is exact on any device and compiler (no wrap-around, arithmetic = logical shift).
    """
    for _ in range(2):
        x = ((x >> 16) ^ x) * 0x45D9F3B & _MASK32
    return (x >> 16) ^ x


def _hash_coefficients(length: int, device: torch.device) -> torch.Tensor:
    """Fixed pseudo-random int64 weights ``[L]`` in ``[1, limit)``, bounded so that
    ``Σ_p order[p]·R[p]`` is exact in int64.

    A hash of the position computed with tensor ops on ``device``: no generator object and no
    host-to-device copy, so it compiles (any ``length``, symbolic too) and runs on meta. The
    position only gets a small offset before the mix: inductor folds affine arithmetic on an
    ``arange`` into an int32 index expression, where large constants do not fit.
    """
    limit = max(2, (1 << 62) // max(1, length * length))
    position = torch.arange(length, device=device, dtype=torch.int64)
    high, low = _mix32(position + 20091206), _mix32(position + 1206)
    return ((high << 30) ^ low) % (limit - 1) + 1


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


class SampleSet(NamedTuple):
    """Sampled orders with their constants: ``E(y) = deltas + coefficients·s``."""

    orders: torch.Tensor | None  # [B, S, L] int64 (None: the sampler was told not to keep them)
    deltas: torch.Tensor  # [B, S]
    coefficients: torch.Tensor  # [B, S, L], indexed by document slot (0 at padding)
    hashes: torch.Tensor  # [B, S] int64 (order_hashes)


class _WalkTables(NamedTuple):
    """Per-query constants of the sampler's walk, built once per call (slot-indexed)."""

    scores: torch.Tensor  # [B, L] float (detached)
    level: torch.Tensor  # [B, L] int64 (0 at padding)
    level_row: torch.Tensor  # [B, 1, L] small int: level, -1 at padding
    height: torch.Tensor  # [B, 1, L] small int: real docs labelled above the slot's doc (0: pad)
    real_slots: torch.Tensor  # [B, 1, L] small int: 1 at real slots
    real_slot_ids: torch.Tensor  # [B, 1, L] int64: the slot index at real slots, 0 at padding
    real_positions: torch.Tensor  # [B, 1, L] bool: position p < n
    positions: torch.Tensor  # [L] small int
    higher_total: torch.Tensor  # [B, G] small int: real docs labelled above level g
    lower_total: torch.Tensor  # [B, G] small int: real docs labelled below level g
    window_table: torch.Tensor  # [B, K, L] float: one-hot level | score·one-hot level (| relevant)
    moves: torch.Tensor | None  # [B·G·G, L] float: row (b, g, h) = one-hot h - one-hot g (G <= 8)
    between: torch.Tensor  # [G·G, G] float: row (g, h) marks the levels strictly between g and h
    reversed_delta: torch.Tensor  # [B, 1] float: Δ of the reversed ideal order
    scale: torch.Tensor  # [B, 1] float: 2/|P|
    weights: torch.Tensor  # [L] int64 hash weights


def _small_int(length: int) -> torch.dtype:
    """The narrowest integer type that holds positions, ranks and coefficient counts (|x| <= L)."""
    return torch.int16 if length < 2**15 else torch.int32


def _walk_tables(tables: QueryTables, scores: torch.Tensor | None = None) -> _WalkTables:
    batch, length = tables.levels.shape
    device, dtype = tables.levels.device, tables.pairs.dtype
    small = _small_int(length)
    scores = torch.zeros(batch, length, dtype=dtype, device=device) if scores is None else scores
    dtype = scores.dtype
    mask, levels, groups = tables.mask, tables.levels, tables.num_levels
    level_row = torch.where(mask, levels, -1).to(small)
    one_hot = (level_row.unsqueeze(-1) == torch.arange(groups, device=device)).to(dtype)
    columns = [one_hot, one_hot * scores.unsqueeze(-1)]
    if tables.delta == "map":
        columns.append(tables.relevant.to(dtype).unsqueeze(-1))
    per_level = one_hot.sum(1).long()  # [B, G]
    rows = one_hot.transpose(1, 2)  # [B, G, L]
    # the G² difference rows save a subtraction per step; past 8 levels their memory is not worth it
    moves = (rows.unsqueeze(1) - rows.unsqueeze(2)).reshape(-1, length) if groups <= 8 else None
    levels_g = torch.arange(groups, device=device)
    low = torch.minimum(levels_g[:, None], levels_g[None, :]).unsqueeze(-1)
    high = torch.maximum(levels_g[:, None], levels_g[None, :]).unsqueeze(-1)
    between = ((levels_g > low) & (levels_g < high)).to(dtype).view(groups * groups, groups)
    lower_total = per_level.cumsum(-1) - per_level
    height = torch.where(mask, tables.higher_total.gather(1, levels), 0)
    positions = torch.arange(length, device=device)
    reversed_order = torch.where(mask, levels, length).argsort(dim=-1, stable=True)
    return _WalkTables(
        scores=scores,
        level=levels,
        level_row=level_row.unsqueeze(1),
        height=height.to(small).unsqueeze(1),
        real_slots=mask.to(small).unsqueeze(1),
        real_slot_ids=torch.where(mask, positions, 0).unsqueeze(1),
        real_positions=(positions < tables.num_real[:, None]).unsqueeze(1),
        positions=positions.to(small),
        higher_total=tables.higher_total.to(small),
        lower_total=lower_total.to(small),
        window_table=torch.cat(columns, -1).transpose(1, 2).contiguous(),
        moves=moves,
        between=between,
        reversed_delta=order_deltas(reversed_order.unsqueeze(1), tables).to(dtype),
        scale=(2.0 / tables.pairs).to(dtype).unsqueeze(1),
        weights=_hash_coefficients(length, device),
    )


def _shuffle(
    walk: _WalkTables, chains: int, generator: torch.Generator | None, inversions: bool = True
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, list[torch.Tensor], torch.Tensor]:
    """A uniform random order per chain and what the three seeds are built from.

    Returns the order ``[B, C, L]`` (real slots first in uniform random order, padded slots after
    in slot order), the level at each position (-1 at padding), the rank of each position's
    document among the documents of its level before it (``[B, C, L]``, -1 at padding), one
    bool ``[B, C, L]`` per level marking its positions, and the number of inverted preference
    pairs ``[B, C]`` (the AUC numerator; 0 unless ``inversions``). Ranks come from one prefix
    count per label level.
    """
    batch, length = walk.level.shape
    device, small = walk.level.device, walk.positions.dtype
    top = (1 << 31) - 1 - length  # real keys below it, padded slots above it in slot order
    noise = random_integers(top, (batch, chains, length), generator, device)
    slots = torch.arange(length, device=device, dtype=torch.int32)
    keys = torch.where(walk.real_slots.bool(), noise, top + slots)
    # int32 keys sort faster than float or int64 ones; stable: equal noise (rare) is ordered
    # by slot on every device
    order = keys.argsort(dim=-1, stable=True)
    level_at = walk.level_row.expand(-1, chains, -1).gather(-1, order)
    rank = torch.full_like(level_at, -1)
    lower_before = torch.zeros_like(level_at)
    at_level = []
    groups = walk.higher_total.shape[1]
    for level in range(groups):
        here = level_at == level
        seen = here.cumsum(-1, dtype=small)  # level-`level` documents at positions <= p
        rank += here * seen
        if inversions and level < groups - 1:
            lower_before += (level_at > level) * seen
        at_level.append(here)
    return order, level_at, rank, at_level, lower_before.sum(-1)


def _arrange(
    walk: _WalkTables, rank: torch.Tensor, at_level: list[torch.Tensor], choice: torch.Tensor
) -> torch.Tensor:
    """``[B, C, L]`` target position of the document at each position of the uniform order for
    the chosen seed (0: ideal, 1: the uniform order itself, 2: reversed ideal). The ideal and
    the reversed ideal put a level-g document at (documents above level g, resp. below) + its
    rank within the level, so both keep the uniform order's (uniformly random) order within a
    label, independent of which seed is chosen."""
    start = torch.where(
        (choice == 0).unsqueeze(-1), walk.higher_total.unsqueeze(1), walk.lower_total.unsqueeze(1)
    )
    target = rank.clone()
    for level, here in enumerate(at_level):
        target += here * start[..., level : level + 1]
    keep = (choice == 1).unsqueeze(-1) | ~walk.real_positions
    return torch.where(keep, walk.positions, target)


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
    keep_orders: bool = True,
) -> SampleSet:
    """Draw ``num_samples`` orders per query by restarted swap-Metropolis walks
    (docs/objectives/convex.md#the-mcmc-swap-sampler).

    C chains per query (default ``ceil(S / T)``, i.e. one walk each) run in lock-step. Every
    ``walk_length`` (T) steps each chain restarts from one of three seeds (ideal with random
    within-label order, uniform shuffle, reversed ideal) drawn with probability
    ``∝ exp(restart_skew · Δ(seed))``. A step proposes swapping the positions of a uniform
    preference pair (two documents with different labels; their number is state-independent,
    so the proposal is symmetric) and accepts it with probability ``min(1, exp(E' - E))`` on the
    detached scores (``accept="all"``: always), where ``E = Δ + c·s`` (``target="convex"``) or
    ``E = c·s`` (``target="model"``: the model distribution Pr(y|x; w) of MLE and ExpGain).
    The state after every step is collected.

    A chain's state is kept by document slot: each document's position and its coefficient
    count ``c/(2/|P|) = #higher-labelled docs below - #lower-labelled docs above`` (small
    integers, exact). When u at position p and v at position q > p swap, the documents strictly
    between them form the window; one batched matrix product of the window indicator with a
    per-query table (one-hot level, score × one-hot level) gives every sum the step needs: c·s
    changes by (2/|P|)((s_v - s_u) + Σ over window docs w labelled unlike u of (s_w - s_u) +
    Σ over window docs w labelled unlike v of (s_v - s_w)), the AUC numerator by
    sign(l_u - l_v)(1 + #window docs labelled l_u or l_v + 2 #labelled strictly between), and a
    window document's count moves by [its label = l_v] - [its label = l_u]. NDCG changes in
    O(1) from the two positions' discounts, AP in O(L) from the window's relevant documents.
    Seeds: one uniform order per chain (one sort); the ideal and reversed ideal are the same
    documents regrouped by label, keeping their order within a label.

    ``keep_orders=False`` skips materialising the orders (``SampleSet.orders`` is None); the
    loss only needs Δ, the coefficients and the hashes.

    Shape:
        scores: [B, L] (padding already replaced by finite values). Memory O(B·S·L): S
        coefficient rows (float) plus, with ``keep_orders``, S orders (int64).
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
    log_uniform = random_uniform((steps, batch, chains), generator, device).log()
    walk = _walk_tables(tables, scores)
    counts = torch.empty(batch, chains, steps, length, dtype=dtype, device=device)
    placed = torch.empty_like(counts) if keep_orders else None  # each slot's position
    deltas = torch.empty(batch, chains, steps, dtype=dtype, device=device)
    hashes = torch.empty(batch, chains, steps, dtype=torch.long, device=device)
    for step in range(steps):
        if step % walk_length == 0:
            state, inverse = _restart(walk, tables, chains, restart_skew, generator)
        _step(walk, tables, state, inverse, first[:, step], second[:, step], log_uniform[step],
              accept, target)  # fmt: skip
        counts[:, :, step], deltas[:, :, step], hashes[:, :, step] = state[1], state[2], state[3]
        if placed is not None:
            placed[:, :, step] = state[0]
    orders = None
    if placed is not None:
        placed = placed.view(batch, chains * steps, length)[:, :num_samples].long()
        slots = torch.arange(length, device=device).expand_as(placed)
        orders = torch.empty_like(placed).scatter_(-1, placed, slots)
    coefficients = counts.view(batch, chains * steps, length)[:, :num_samples]
    return SampleSet(
        orders,
        deltas.view(batch, -1)[:, :num_samples],
        coefficients.mul_(walk.scale.unsqueeze(-1)),
        hashes.view(batch, -1)[:, :num_samples],
    )


def _restart(
    walk: _WalkTables,
    tables: QueryTables,
    chains: int,
    restart_skew: float,
    generator: torch.Generator | None,
) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """Fresh chain states from the three seeds, chosen ∝ exp(restart_skew · Δ(seed)).

    State: [position of each slot, coefficient count of each slot, Δ, hash], and apart from it
    1/(position + 1) (AP only, else None).
    """
    order, _, rank, at_level, inversions = _shuffle(
        walk, chains, generator, inversions=tables.delta == "auc"
    )
    if tables.delta == "auc":
        shuffled = inversions.to(walk.scale.dtype) / tables.pairs[:, None].to(walk.scale.dtype)
    else:
        shuffled = order_deltas(order, tables).to(walk.scale.dtype)
    batch = order.shape[0]
    deltas = torch.stack(
        [torch.zeros_like(shuffled), shuffled, walk.reversed_delta.expand(batch, chains)]
    )
    uniform = random_uniform((3, batch, chains), generator, order.device)
    gumbel = -torch.log(-torch.log(uniform.clamp(min=1e-12)))
    choice = (restart_skew * deltas.to(gumbel.dtype) + gumbel).argmax(0)  # [B, C]
    target = _arrange(walk, rank, at_level, choice)
    position = torch.empty_like(target).scatter_(-1, order, target)
    rank_of = torch.empty_like(rank).scatter_(-1, order, rank)
    count = (walk.height - position + rank_of) * walk.real_slots  # 0 for the ideal seed
    weights = walk.weights.expand(batch, chains, -1).gather(-1, position.long())
    hashed = (weights * walk.real_slot_ids).sum(-1)  # Σ_d d·R[pos(d)] = Σ_p order[p]·R[p]
    delta = deltas.gather(0, choice.unsqueeze(0))[0]
    dtype = walk.scale.dtype
    position = position.to(dtype)
    inverse = 1.0 / (position + 1) if tables.delta == "map" else None
    return [position, count.to(dtype), delta, hashed], inverse


def _step(
    walk: _WalkTables,
    tables: QueryTables,
    state: list[torch.Tensor],
    inverse: torch.Tensor | None,
    first: torch.Tensor,
    second: torch.Tensor,
    log_uniform: torch.Tensor,
    accept: str,
    target: str,
) -> None:
    """One proposal + accept/reject for every chain; updates ``state`` and ``inverse`` in place.

    Positions and counts are exact small integers held in the score dtype, so the window
    indicator comes from one product and a clamp and feeds the matrix product without a
    conversion.
    """
    position, count, delta_now, hash_now = state
    batch, chains, length = position.shape
    dtype, groups = walk.scale.dtype, walk.higher_total.shape[1]
    pair = torch.stack([first, second], -1)  # [B, C, 2] documents to swap
    pi, pj = position.gather(-1, pair).unbind(-1)
    upper = (pi < pj).unsqueeze(-1)
    p, q = torch.minimum(pi, pj).unsqueeze(-1), torch.maximum(pi, pj).unsqueeze(-1)  # p <= q
    ab = torch.where(upper, pair, pair.flip(-1)).view(batch, 2 * chains)  # upper doc, then lower
    a, b = ab.view(batch, chains, 2).unbind(-1)  # [B, C]
    la, lb = walk.level.gather(1, ab).view(batch, chains, 2).unbind(-1)
    sa, sb = walk.scores.gather(1, ab).view(batch, chains, 2).unbind(-1)
    # 1 for the documents strictly between p and q, else 0: (x - p)(q - x) >= 1 for integer
    # positions strictly between, <= 0 elsewhere
    window = (position - p).mul_(q - position).clamp_(0, 1)
    sums = torch.bmm(walk.window_table, window.transpose(1, 2)).transpose(1, 2)  # [B, C, K]
    picked = sums.gather(-1, torch.stack([la, lb, groups + la, groups + lb], -1))
    count_a, count_b, mass_a, mass_b = picked.unbind(-1)
    pu, qu = p.squeeze(-1), q.squeeze(-1)
    width = qu - pu - 1
    past_a, past_b = width - count_a, width - count_b  # window docs labelled unlike a (b)
    linear = (sb - sa) + mass_b - mass_a - past_a * sa + past_b * sb
    change = walk.scale * linear
    if tables.delta == "auc":
        crossed = 1 + count_a + count_b
        if groups > 2:
            counts = sums[..., :groups]
            between = walk.between.index_select(0, (la * groups + lb).view(-1)).view_as(counts)
            crossed = crossed + 2 * (counts * between).sum(-1)
        new_delta = delta_now + (la - lb).sign().to(dtype) * crossed / tables.pairs[:, None]
    elif tables.delta == "ndcg":
        gain_a, gain_b = tables.gain.gather(1, a), tables.gain.gather(1, b)
        dcg_change = (gain_b - gain_a) * (tables.discount[pu.long()] - tables.discount[qu.long()])
        ideal = tables.ideal_dcg[:, None]
        safe = torch.where(ideal > 0, ideal, torch.ones_like(ideal))
        new_delta = torch.where(ideal > 0, delta_now - dcg_change / safe, delta_now)
    else:
        assert inverse is not None  # _restart builds 1/(position + 1) whenever Δ is AP
        relevant = tables.relevant.to(dtype)
        sign = relevant.gather(1, b) - relevant.gather(1, a)  # +1: a relevant doc moves up
        hits = sums[..., 2 * groups]  # relevant documents in the window
        row = relevant.unsqueeze(1)
        window_precision = (window * inverse * row).sum(-1)
        before = ((p - position).clamp_(0, 1) * row).sum(-1)  # relevant documents above p
        gained = sign * (
            window_precision + (before + 1) / (pu + 1) - (before + hits + 1) / (qu + 1)
        )
        total = tables.num_relevant[:, None]
        safe = torch.where(total > 0, total, torch.ones_like(total))
        new_delta = torch.where(total > 0, delta_now - gained / safe, delta_now)
    if target == "convex":
        change = change + (new_delta - delta_now)
    accepted = pu != qu  # p == q only in queries without a pair
    if accept == "metropolis":
        accepted = accepted & (log_uniform < change)
    # window docs' counts move by [label = l_b] - [label = l_a]; rejected: l_b := l_a, no move
    to = torch.where(accepted, lb, la)
    query = torch.arange(batch, device=la.device).unsqueeze(-1)
    if walk.moves is not None:
        rows = walk.moves.index_select(0, ((query * groups + la) * groups + to).view(-1))
    else:
        one_hot = walk.window_table.view(-1, length)  # rows b·K + g: one-hot level g of query b
        table_rows = walk.window_table.shape[1]
        rows = one_hot.index_select(0, (query * table_rows + to).view(-1))
        rows = rows - one_hot.index_select(0, (query * table_rows + la).view(-1))
    count.addcmul_(rows.view_as(count), window)
    flag = accepted.unsqueeze(-1)
    both = ab.view(batch, chains, 2)  # a and b (the same slot twice only where p == q)
    moved = torch.stack([-(past_a + 1), past_b + 1], -1)  # a passes past_a docs, b past_b
    count.scatter_add_(-1, both, torch.where(flag, moved, 0.0))
    now = torch.where(flag, torch.cat([q, p], -1), torch.cat([p, q], -1))  # [B, C, 2]
    position.scatter_(-1, both, now)
    if inverse is not None:
        inverse.scatter_(-1, both, 1.0 / (now + 1))
    state[2] = torch.where(accepted, new_delta, delta_now)
    rehash = (b - a) * (walk.weights[pu.long()] - walk.weights[qu.long()])
    state[3] = hash_now + torch.where(accepted, rehash, torch.zeros_like(rehash))
