"""Inverse propensity scoring (Joachims, Swaminathan and Schnabel, WSDM 2017)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from differank.losses.unbiased.estimator import ClickEstimator, shown
from differank.losses.unbiased.propensity import document_propensities, propensity_vector


class IPS(ClickEstimator):
    """Clicks divided by the examination propensity of their position as the loss's labels:
    ``ĉ_i = c_i / max(θ_{k_i}, 1/clip)``, ``L = (1/B) Σ_q loss(s_q, ĉ_q)``.

    Under the position-based model ``P(c_i = 1) = θ_{k_i} γ_i``, so ``E[ĉ_i] = γ_i`` (for
    ``θ ≥ 1/clip``): the labels are unbiased estimates of the relevance probabilities, and a
    loss linear in its labels is an unbiased estimate of its full-information value
    ``loss(s, γ)``. softmax_loss with ``label_sum_weighting`` (ULTRA's form,
    ``-Σ_i ĉ_i log softmax(s)_i``) is; other losses get unbiased labels but not an unbiased
    loss (their targets are normalised, paired or ranked, and differank's losses give 0 to a
    query whose labels are all equal, e.g. a session without a click).

    Args:
        propensities: θ per position (0-based), known or estimated; ``None``: the batch's
            logged ``propensities`` [B, L].
        clip: the largest weight ``1/θ`` (clipping trades variance for bias).
        label_sum_weighting: see :class:`~differank.losses.unbiased.estimator.ClickEstimator`.

    Example:
        >>> from differank.losses import SoftmaxLoss
        >>> ips = IPS(propensities=[1.0, 0.5], label_sum_weighting=True)
        >>> scores, clicks = torch.tensor([[0.0, 0.0]]), torch.tensor([[0.0, 1.0]])
        >>> ips(SoftmaxLoss(), scores, clicks, torch.tensor([[0, 1]]),
        ...     torch.ones(1, 2, dtype=torch.bool))  # 2 · log 2
        tensor(1.3863)
    """

    propensities: torch.Tensor | None  # a non-persistent buffer: configuration, not state

    def __init__(
        self,
        *,
        propensities: Sequence[float] | None = None,
        clip: float = 100.0,
        label_sum_weighting: bool = False,
    ) -> None:
        super().__init__(label_sum_weighting=label_sum_weighting)
        vector, self.clip = propensity_vector("IPS", propensities, clip)
        self.register_buffer("propensities", vector, persistent=False)

    def targets(
        self,
        clicks: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        logged: torch.Tensor | None,
        dtype: torch.dtype,
    ) -> torch.Tensor:
        """``c_i / max(θ_i, 1/clip)`` [B, L] at shown documents, 0 elsewhere."""
        theta = document_propensities("IPS", self.propensities, positions, mask, logged)
        weights = theta.to(dtype).clamp(min=1.0 / self.clip).reciprocal()
        return torch.where(shown(positions, mask), clicks.to(dtype) * weights, 0.0)

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
        targets = self.targets(clicks, positions, mask, propensities, scores.dtype)
        return self.weighted_mean(loss, scores, targets, shown(positions, mask))

    def extra_repr(self) -> str:
        given = None if self.propensities is None else self.propensities.tolist()
        return f"propensities={given}, clip={self.clip}, {super().extra_repr()}"
