"""RankNet: the pairwise logistic loss (Burges et al., ICML 2005), a baseline."""

from __future__ import annotations

import torch
from torch.nn import functional as F

from differank.losses.algorithms.pairs import preference_mask
from differank.losses.inputs import (
    decorated_mask,
    finite_scores,
    list_inputs,
    list_loss,
    nan_for_nonfinite_scores,
)
from differank.losses.module_form import PAIRWISE, LossModule
from differank.losses.reduction import check_reduction, reduce_queries

MAX_PAIR_BYTES = 16 * 2**30
"""The most memory :func:`ranknet_loss` may ask for its [B, L, L] pair tensors (16 GiB); a
larger batch is a ValueError before anything is allocated. Cap the list length instead (in
differank's harness ``data.max_list``), or raise this bound if the machine has the memory."""

# the [B, L, L] compute-dtype tensors alive at the peak of forward + backward besides the bool
# pair mask: 5 (a float32 step at B = 4, L = 2000 peaked at 21 bytes per pair on CPU)
_PAIR_TENSORS = 5


def _size(size: int) -> str:
    return f"{size / 2**30:.1f} GiB" if size >= 2**30 else f"{size / 2**20:.1f} MiB"


def check_pair_memory(batch: int, length: int, dtype: torch.dtype) -> None:
    """Raise a ValueError when RankNet's [B, L, L] tensors would pass :data:`MAX_PAIR_BYTES`.

    Shapes only: no tensor value is read, so it costs nothing compiled or on a GPU.
    """
    pairs = batch * length * length
    needed = pairs * (1 + _PAIR_TENSORS * dtype.itemsize)
    if needed > MAX_PAIR_BYTES:
        raise ValueError(
            f"ranknet_loss compares every pair of a list: B·L² = {batch}·{length}² = {pairs:,} "
            f"pairs need about {_size(needed)}, over its budget of "
            f"{_size(MAX_PAIR_BYTES)} (differank.losses.ranknet.MAX_PAIR_BYTES): cap "
            "the list length (in differank's harness: data.max_list), use smaller batches, or "
            "an O(L) loss such as listnet_loss or domination_loss"
        )


@list_loss()
def ranknet_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    reduction: str = "mean",
) -> torch.Tensor:
    """Mean over a query's preference pairs of ``log(1 + exp(-(s_i - s_j)))``.

    Pairs are the ordered pairs of real documents with ``label_i > label_j`` (Burges et al. 2005,
    eq. 1 with target probability 1). A query without pairs has loss 0. Inputs follow the rule
    of ``differank.losses.inputs`` (empty shapes, integer labels, non-finite values, half
    precision). Memory O(B·L²): a batch whose pair tensors would pass :data:`MAX_PAIR_BYTES`
    is a ValueError before anything is allocated.

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.

    Example:
        >>> scores = torch.tensor([[1.0, 0.0, 5.0]])
        >>> labels = torch.tensor([[1.0, 0.0, float("nan")]])
        >>> mask = torch.tensor([[True, True, False]])
        >>> ranknet_loss(scores, labels, mask)
        tensor(0.3133)
    """
    check_reduction(reduction)
    scores, labels, mask, valid = list_inputs(scores, labels, decorated_mask(mask))
    check_pair_memory(scores.shape[0], scores.shape[1], scores.dtype)
    pairs = preference_mask(labels, mask)  # [B, L, L]
    real_scores = finite_scores(scores, mask)
    difference = real_scores.unsqueeze(-1) - real_scores.unsqueeze(-2)
    pair_loss = torch.where(pairs, F.softplus(-difference), torch.zeros_like(difference))
    per_query = pair_loss.sum(dim=(-1, -2)) / pairs.sum(dim=(-1, -2)).clamp(min=1)
    per_query = nan_for_nonfinite_scores(per_query, scores, mask, valid)
    return reduce_queries(per_query, valid, reduction)


class RankNetLoss(LossModule, function=ranknet_loss, memory=PAIRWISE):
    """Module form of :func:`ranknet_loss`."""
