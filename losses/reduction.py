"""The one definition of how per-query losses become a batch loss
(docs/architecture.md#validity-and-reduction)."""

from __future__ import annotations

import torch

REDUCTIONS = ("none", "mean", "sum")


def check_reduction(reduction: str) -> str:
    """Return ``reduction`` if it is one of ``"none" | "mean" | "sum"``, else raise ValueError."""
    if reduction not in REDUCTIONS:
        raise ValueError(f"reduction must be one of {REDUCTIONS}, got {reduction!r}")
    return reduction


def reduce_queries(
    per_query: torch.Tensor, valid: torch.Tensor | None, reduction: str
) -> torch.Tensor:
    """Reduce a per-query loss ``[B]`` over the valid queries (``valid=None``: every query).

    Invalid queries (no preference pair) contribute an exact, graph-connected 0, so a batch
    without any pair still returns a tensor that backpropagates zeros.

    * ``"none"``: the per-query loss ``[B]`` with 0 where invalid;
    * ``"sum"``: the sum over valid queries;
    * ``"mean"``: that sum divided by ``max(#valid, 1)``.

    Shape:
        per_query: [B]; valid: [B] bool or None; returns [B] or a scalar.

    Example:
        >>> per_query = torch.tensor([2.0, 5.0, 4.0])
        >>> valid = torch.tensor([True, False, True])
        >>> reduce_queries(per_query, valid, "mean")
        tensor(3.)
        >>> reduce_queries(per_query, valid, "none")
        tensor([2., 0., 4.])
    """
    check_reduction(reduction)
    if valid is None:
        if reduction == "none":
            return per_query
        return per_query.mean() if reduction == "mean" else per_query.sum()
    per_query = torch.where(valid, per_query, 0.0)
    if reduction == "none":
        return per_query
    total = per_query.sum()
    if reduction == "sum":
        return total
    return total / valid.sum().clamp(min=1)  # a float divided by an integer count
