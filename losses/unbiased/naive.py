"""The naive estimator: clicks as relevance labels, the lower bar of unbiased learning to rank."""

from __future__ import annotations

import torch
from torch import nn

from differank.losses.unbiased.estimator import ClickEstimator, shown


class Naive(ClickEstimator):
    """``L = (1/B) Σ_q loss(s_q, c_q)``: every click counts as a relevant label, every skipped
    document as irrelevant, whatever its position (biased towards what was shown on top).

    Example:
        >>> from differank.losses import SoftmaxLoss
        >>> scores = torch.tensor([[0.0, 0.0]])
        >>> clicks, positions = torch.tensor([[1.0, 0.0]]), torch.tensor([[0, 1]])
        >>> Naive()(SoftmaxLoss(), scores, clicks, positions, torch.ones(1, 2, dtype=torch.bool))
        tensor(0.6931)
    """

    def forward(
        self,
        loss: nn.Module,
        scores: torch.Tensor,
        clicks: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        propensities: torch.Tensor | None = None,
    ) -> torch.Tensor:
        self.check(scores, clicks, positions, mask)
        visible = shown(positions, mask)  # a document never shown carries no click evidence
        return self.weighted_mean(loss, scores, clicks.to(scores.dtype), visible)
