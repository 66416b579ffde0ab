"""Pointwise baselines: sigmoid cross-entropy and squared error per document, summed over each
query's real documents (Rax's ``sigmoid_cross_entropy_loss`` and ``mean_squared_loss``), and
allRank's ordinal loss on one score per document; docs/objectives/standard.md#pointwise-baselines.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch.nn import functional as F

from differank.losses.inputs import (
    decorated_mask,
    finite_scores,
    list_inputs,
    list_loss,
    may_read_values,
    nan_for_nonfinite_scores,
)
from differank.losses.module_form import LISTWISE, LossModule
from differank.losses.options import COUNT, POSITIVE
from differank.losses.reduction import check_reduction, reduce_queries


def _per_document_sum(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    document_loss,
    reduction: str,
    *,
    average: bool = False,
) -> torch.Tensor:
    """Reduce ``document_loss(safe_scores, labels)`` [B, L] to a per-query sum (``average``:
    mean over the query's real documents), under the rule."""
    check_reduction(reduction)
    scores, labels, mask, valid = list_inputs(scores, labels, mask)
    safe = finite_scores(scores, mask)
    real_labels = torch.where(mask, labels, torch.zeros_like(labels))
    terms = document_loss(safe, real_labels)
    per_query = torch.where(mask, terms, torch.zeros_like(terms)).sum(dim=-1)
    if average:
        per_query = per_query / mask.sum(dim=-1).clamp(min=1)
    per_query = nan_for_nonfinite_scores(per_query, scores, mask, valid)
    return reduce_queries(per_query, valid, reduction)


@list_loss()
def sigmoid_bce_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    max_label: float = 1.0,
    reduction: str = "mean",
) -> torch.Tensor:
    """``L_q = Σ_i BCE(σ(s_i), t_i)`` with targets ``t_i = clamp(l_i / max_label, 0, 1)``
    (``max_label=1``: binary relevance, any positive label is relevant; MQ2008 graded: 2).

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.

    Example:
        >>> sigmoid_bce_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[1, 0]]),
        ...                  torch.tensor([[True, True]]))
        tensor(1.3863)
    """
    POSITIVE.check("sigmoid_bce_loss", max_label=max_label)

    def document_loss(safe, real_labels):
        targets = (real_labels / max_label).clamp(0.0, 1.0)
        return F.binary_cross_entropy_with_logits(safe, targets, reduction="none")

    return _per_document_sum(scores, labels, decorated_mask(mask), document_loss, reduction)


@list_loss()
def mse_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    reduction: str = "mean",
) -> torch.Tensor:
    """``L_q = Σ_i (s_i - l_i)²`` over the real documents (regression on the labels).

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.

    Example:
        >>> mask = torch.tensor([[True, True]])
        >>> mse_loss(torch.tensor([[0.0, 0.0]]), torch.tensor([[2, 0]]), mask)
        tensor(4.)
    """

    def document_loss(safe, real_labels):
        return (safe - real_labels).square()

    return _per_document_sum(scores, labels, decorated_mask(mask), document_loss, reduction)


def check_ordinal_options(n: int, thresholds: Sequence[float] | torch.Tensor | None) -> None:
    """Raise ValueError for ``n < 1`` or thresholds that are not ``n`` increasing finite values
    (a tensor's values are read only on the CPU eager path)."""
    COUNT.check("ordinal_loss", n=n)  # n: the number of label levels above 0
    if thresholds is None:
        return
    count = thresholds.numel() if isinstance(thresholds, torch.Tensor) else len(thresholds)
    if count != n:
        raise ValueError(f"thresholds must hold n = {n} values (one per level), got {count}")
    if isinstance(thresholds, torch.Tensor) and not may_read_values(thresholds):
        return
    values = [float(value) for value in thresholds]
    if not all(math.isfinite(value) for value in values) or any(
        low >= high for low, high in zip(values, values[1:], strict=False)
    ):
        raise ValueError(f"thresholds must be finite and increasing, got {values}")


def ordinal_thresholds(
    n: int, thresholds: Sequence[float] | torch.Tensor | None, like: torch.Tensor
) -> torch.Tensor:
    """``θ_1..θ_n`` [n] in ``like``'s dtype and device: ``thresholds``, or ``k - 1/2``."""
    if thresholds is None:
        return torch.arange(n, dtype=like.dtype, device=like.device) + 0.5
    if not isinstance(thresholds, torch.Tensor):
        thresholds = [float(value) for value in thresholds]  # a tuple, list or Hydra ListConfig
    return torch.as_tensor(thresholds, dtype=like.dtype, device=like.device)


@list_loss()
def ordinal_loss(
    scores: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor | None = None,
    *,
    n: int = 2,
    thresholds: Sequence[float] | torch.Tensor | None = None,
    reduction: str = "mean",
) -> torch.Tensor:
    """allRank's ordinal loss with one score per document: label ``l`` is ``n`` binary
    questions "``l >= k``?" (``k = 1..n``), each answered by ``σ(s - θ_k)``, averaged over the
    query's real documents::

        L_q = (1/|q|) Σ_i Σ_{k=1..n} BCE(σ(s_i - θ_k), [l_i >= k]),   θ_k = k - 1/2

    allRank's ``ordinal`` takes ``n`` probabilities per document from an ``n``-output scorer;
    here they come from the one score through ``n`` increasing thresholds (a cumulative-logit
    model: the score ranks, the thresholds place it on the label scale). ``thresholds``
    replaces ``k - 1/2``: ``n`` increasing values, or a tensor (e.g. a parameter trained with
    the model). ``n`` is the number of grades above 0 (2: LETOR 4.0's grades 0..2, the default
    data's; MSLR-WEB30K, Yahoo: 4); a higher label answers every question yes. Inputs follow
    ``differank.losses.inputs``.

    Shape:
        scores, labels, mask: [B, L] -> [B] for ``reduction="none"``, else a scalar.

    Example:
        >>> ordinal_loss(torch.tensor([[1.0, 0.0]]), torch.tensor([[1, 0]]), n=1)
        tensor(0.4741)
    """
    check_ordinal_options(n, thresholds)

    def document_loss(safe, real_labels):
        theta = ordinal_thresholds(n, thresholds, safe)
        levels = torch.arange(1, n + 1, dtype=safe.dtype, device=safe.device)
        answers = (real_labels.unsqueeze(-1) >= levels).to(safe.dtype)  # [B, L, n]
        logits = safe.unsqueeze(-1) - theta
        return F.binary_cross_entropy_with_logits(logits, answers, reduction="none").sum(-1)

    return _per_document_sum(
        scores, labels, decorated_mask(mask), document_loss, reduction, average=True
    )


class SigmoidBCELoss(LossModule, function=sigmoid_bce_loss, memory=LISTWISE):
    """Module form of :func:`sigmoid_bce_loss`."""


class MSELoss(LossModule, function=mse_loss, memory=LISTWISE):
    """Module form of :func:`mse_loss`."""


class OrdinalLoss(LossModule, function=ordinal_loss, memory=LISTWISE):
    """Module form of :func:`ordinal_loss`."""
