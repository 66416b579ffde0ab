"""Is one ranker better than another on the same queries? A paired bootstrap over queries.

Two rankers scored on the same test queries give two per-query values (AP, NDCG@k: what
:func:`differank.rankers.metrics.evaluate.per_query_metrics` returns). Their per-query
differences are what varies between rankers; the queries' own difficulty cancels out. The
interval is the percentile interval of the mean difference over query resamples drawn with
replacement (Efron & Tibshirani 1993, ch. 13; Sakai 2006 for IR evaluation). A difference is
significant at the interval's level when the interval excludes 0.

Example:
    >>> a = torch.tensor([0.5, 0.6, 0.7, 0.8])
    >>> result = paired_bootstrap(a + 0.1, a, resamples=1000)
    >>> round(result.mean, 4), round(result.low, 4), round(result.high, 4), result.verdict
    (0.1, 0.1, 0.1, 'better')
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class PairedInterval:
    """Mean of ``a - b`` over queries and its bootstrap interval ``[low, high]``."""

    mean: float
    low: float
    high: float
    queries: int
    confidence: float

    @property
    def verdict(self) -> str:
        """``better`` / ``worse`` when the interval excludes 0, else ``indistinguishable``."""
        if self.low > 0:
            return "better"
        if self.high < 0:
            return "worse"
        return "indistinguishable"


def paired_bootstrap(
    a: torch.Tensor,
    b: torch.Tensor,
    *,
    resamples: int = 10_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> PairedInterval:
    """The mean of ``a - b`` (per-query values of two rankers, same queries, same order) and its
    paired bootstrap percentile interval at ``confidence``; ``seed`` fixes the resamples."""
    a = torch.as_tensor(a, dtype=torch.float64).reshape(-1)
    b = torch.as_tensor(b, dtype=torch.float64).reshape(-1)
    if a.shape != b.shape:
        raise ValueError(
            f"paired values need one entry per query in both, got {a.numel()} and {b.numel()}"
        )
    if a.numel() == 0:
        raise ValueError("no queries to compare")
    if not (torch.isfinite(a).all() and torch.isfinite(b).all()):
        raise ValueError("per-query values must be finite (a NaN would void the interval)")
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be in (0, 1), got {confidence}")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    differences = a - b
    generator = torch.Generator().manual_seed(seed)
    means = torch.empty(resamples, dtype=torch.float64)
    for start in range(0, resamples, 1000):  # bounded memory: 1000 x Q indices at a time
        count = min(1000, resamples - start)
        picks = torch.randint(len(differences), (count, len(differences)), generator=generator)
        means[start : start + count] = differences[picks].mean(dim=1)
    tail = (1.0 - confidence) / 2
    low, high = torch.quantile(means, torch.tensor([tail, 1.0 - tail], dtype=torch.float64))
    return PairedInterval(
        float(differences.mean()), float(low), float(high), len(differences), confidence
    )
