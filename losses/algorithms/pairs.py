"""Preference pairs by broadcasting, label levels, pair differences and bounded pair sampling
(no Python loops).

A preference pair of a query is an ordered pair of real documents ``(i, j)`` with
``label_i > label_j`` (strict: ties make no pair, docs/architecture.md#validity-and-reduction).
Padded slots may hold any label,
NaN included; the mask is authoritative.
"""

from __future__ import annotations

import torch

from differank.losses.inputs import float_labels

NUM_LEVELS = 5
"""Default bound on a query's distinct label values, i.e. its :func:`label_levels` (LETOR 4.0
has 3, MSLR-WEB30K 5): the static size of the level tables of the hinge's DP and ConvexLoss."""


def _real_labels(labels: torch.Tensor, mask: torch.Tensor, fill: float) -> torch.Tensor:
    """Labels with padded slots replaced by ``fill`` (so NaN padding never reaches a compare).

    Integer and bool labels are compared as floats of the default dtype.
    """
    if not labels.is_floating_point():
        labels = float_labels(labels, torch.get_default_dtype())
    return torch.where(mask, labels, torch.full_like(labels, fill))


def preference_mask(labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``pref[b, i, j] = mask_i & mask_j & (label_i > label_j)``, one broadcast.

    Shape:
        labels, mask: [B, L] -> [B, L, L] bool. Memory: B·L² bytes.

    Example:
        >>> labels = torch.tensor([[2.0, 0.0, 1.0, float("nan")]])
        >>> mask = torch.tensor([[True, True, True, False]])
        >>> preference_mask(labels, mask)[0].int()
        tensor([[0, 1, 1, 0],
                [0, 0, 0, 0],
                [0, 1, 0, 0],
                [0, 0, 0, 0]], dtype=torch.int32)
    """
    real = _real_labels(labels, mask, 0.0)
    both = mask.unsqueeze(-1) & mask.unsqueeze(-2)
    return both & (real.unsqueeze(-1) > real.unsqueeze(-2))


def valid_queries(labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B]`` bool: the query's real documents carry at least two distinct labels
    (docs/architecture.md#validity-and-reduction).

    Computed in O(B·L) without the [B, L, L] mask.
    """
    highest = _real_labels(labels, mask, float("-inf")).amax(dim=-1)
    lowest = _real_labels(labels, mask, float("inf")).amin(dim=-1)
    return highest > lowest


def label_levels(labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Dense label levels: each real document's rank among its query's distinct real labels.

    Level 0 is the query's lowest label, and ``level_i > level_j`` exactly when ``(i, j)`` is a
    preference pair; padded slots get 0. One sort, no host read (so it compiles with
    ``fullgraph=True`` and runs on the meta device).

    Shape:
        labels, mask: [..., L] -> [..., L] int64.

    Example:
        >>> labels = torch.tensor([[2.0, 0.5, 2.0, 7.0, float("nan")]])
        >>> label_levels(labels, torch.tensor([[True, True, True, True, False]]))
        tensor([[1, 0, 1, 2, 0]])
    """
    ascending, order = _real_labels(labels, mask, float("inf")).sort(dim=-1)
    new_value = torch.zeros_like(ascending, dtype=torch.long)
    new_value[..., 1:] = (ascending[..., 1:] != ascending[..., :-1]).long()
    levels = torch.empty_like(new_value).scatter_(-1, order, new_value.cumsum(dim=-1))
    return torch.where(mask, levels, torch.zeros_like(levels))


def pair_counts(labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``[B, L]`` int64: for each real document, the number of real documents labelled lower."""
    ascending, _ = _real_labels(labels, mask, float("inf")).sort(dim=-1)
    real = _real_labels(labels, mask, float("inf")).contiguous()
    below = torch.searchsorted(ascending, real, side="left")
    return torch.where(mask, below, torch.zeros_like(below))


def pair_differences(values: torch.Tensor, high: torch.Tensor, low: torch.Tensor) -> torch.Tensor:
    """``values[b, high] - values[b, low]`` for index tensors ``high, low`` of shape [B, P].

    Shape:
        values: [B, L] or [B, L, F]; high, low: [B, P] int64 -> [B, P] or [B, P, F].
    """
    if values.dim() == 2:
        return values.gather(1, high) - values.gather(1, low)
    width = values.shape[-1]
    gather = lambda index: values.gather(1, index.unsqueeze(-1).expand(-1, -1, width))  # noqa: E731
    return gather(high) - gather(low)


def random_uniform(
    shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """Uniform float32 draws in ``[0, 1)`` of ``shape`` on ``device``, made where ``generator``
    lives (the CPU's global RNG when it is None) and moved: with a CPU generator, or None, the
    same numbers for the same seed on every device (a CUDA generator's stream is another).

    ``generator=None`` is left out rather than passed: under ``torch.compile`` with dynamic
    shapes the explicit ``generator`` overload does not accept symbolic sizes.
    """
    if generator is None:
        return torch.rand(shape).to(device, non_blocking=True)
    return torch.rand(shape, generator=generator, device=generator.device).to(
        device, non_blocking=True
    )


def random_integers(
    high: int, shape: tuple[int, ...], generator: torch.Generator | None, device: torch.device
) -> torch.Tensor:
    """int32 draws uniform in ``[0, high)`` of ``shape`` on ``device``, from the same stream as
    :func:`random_uniform` (the generator's device, the CPU's global RNG for None)."""
    if generator is None:
        return torch.randint(0, high, shape, dtype=torch.int32).to(device, non_blocking=True)
    drawn = torch.randint(
        0, high, shape, dtype=torch.int32, generator=generator, device=generator.device
    )
    return drawn.to(device, non_blocking=True)


def sample_pairs(
    labels: torch.Tensor,
    mask: torch.Tensor,
    num_pairs: int,
    *,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Draw ``num_pairs`` preference pairs per query, uniformly with replacement.

    Every pair ``(i, j)`` with ``label_i > label_j`` has the same probability, so a per-query
    mean over the sample is an unbiased estimate of the mean over all pairs. Shapes are static
    ([B, P]) and memory is O(B·(L + P)): pair number u is decoded by counting, never by
    materialising the [B, L, L] mask. Sort the query's labels ascending; a document with c
    lower-labelled documents owns c consecutive pair numbers, and its partners are exactly the
    first c documents of the ascending order.

    Shape:
        labels, mask: [B, L]. Returns ``(high, low, pair_valid)``, each [B, P]: document
        indices of the preferred and the other document, and False where the query has no
        pair (its indices are 0).

    Example:
        >>> g = torch.Generator().manual_seed(0)
        >>> labels = torch.tensor([[0.0, 2.0, 1.0]])
        >>> high, low, ok = sample_pairs(labels, torch.ones(1, 3, dtype=torch.bool), 4, generator=g)
        >>> bool((labels.gather(1, high) > labels.gather(1, low)).all()), bool(ok.all())
        (True, True)
    """
    if num_pairs < 1:
        raise ValueError(f"num_pairs must be >= 1, got {num_pairs}")
    batch = labels.shape[0]
    ascending_order = _real_labels(labels, mask, float("inf")).argsort(dim=-1, stable=True)
    below = pair_counts(labels, mask)  # [B, L]
    ends = below.cumsum(dim=-1)  # pair numbers [ends_i - below_i, ends_i) belong to document i
    total = ends[:, -1:]  # [B, 1]
    uniform = random_uniform((batch, num_pairs), generator, labels.device)
    number = (uniform * total).long().clamp(max=(total - 1).clamp(min=0))
    high = torch.searchsorted(ends, number, side="right").clamp(max=labels.shape[1] - 1)
    rank_of_low = number - (ends.gather(1, high) - below.gather(1, high))
    low = ascending_order.gather(1, rank_of_low.clamp(min=0))
    pair_valid = (total > 0).expand(-1, num_pairs)
    zeros = torch.zeros_like(high)
    return torch.where(pair_valid, high, zeros), torch.where(pair_valid, low, zeros), pair_valid
