"""The doubly robust estimator (Oosterhuis, ACM TOIS 2023: "Doubly Robust Estimation for
Correcting Position Bias in Click Feedback for Unbiased Learning to Rank")."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from differank.losses.unbiased.estimator import ClickEstimator, shown
from differank.losses.unbiased.propensity import document_propensities, propensity_vector


class DoublyRobust(ClickEstimator):
    """A direct-method relevance estimate, corrected by inverse-propensity-weighted residuals::

        ĉ_i = R̂_i + 1[i shown] · (c_i − θ_{k_i} R̂_i) / max(ρ_i, 1/clip)

    (Oosterhuis 2023, eq. 20 with the position-based model α = θ, β = 0). ``R̂_i = σ(s_i)``
    (detached) is the ranker's own click-free relevance estimate (the direct method), ``θ``
    the examination of the shown position and ``ρ_i`` the expected examination under the
    logging policy (the batch's logged ``propensities`` when given, else θ at the shown
    position: a deterministic logging ranker). Where the regression model is right the residual
    has mean 0; where the propensities are right the correction is unbiased: either one
    suffices. A real document the logging ranker did not show (position -1) gets the direct
    estimate alone, where IPS has no information at all. The labels ``ĉ`` are clamped at 0
    (losses take grades ≥ 0), and the loss is taken on them as for IPS.

    Args:
        propensities: θ per position (0-based), known or estimated; ``None``: the batch's
            logged ``propensities`` serve as both θ and ρ.
        clip: the largest inverse propensity weight.

    Example:
        >>> from differank.losses import SigmoidBCELoss
        >>> dr = DoublyRobust(propensities=[1.0, 0.5])
        >>> scores, clicks = torch.zeros(1, 3), torch.tensor([[0.0, 1.0, 0.0]])
        >>> dr.targets(scores, clicks, torch.tensor([[0, 1, -1]]),
        ...            torch.ones(1, 3, dtype=torch.bool), None)
        tensor([[0.0000, 2.0000, 0.5000]])
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
        vector, self.clip = propensity_vector("DoublyRobust", propensities, clip)
        self.register_buffer("propensities", vector, persistent=False)

    def targets(
        self,
        scores: torch.Tensor,
        clicks: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        logged: torch.Tensor | None,
    ) -> torch.Tensor:
        """The doubly robust labels ``ĉ`` [B, L] (0 at padding)."""
        dtype = scores.dtype
        visible = shown(positions, mask)
        theta = document_propensities("DoublyRobust", self.propensities, positions, mask, logged)
        rho = theta
        if self.propensities is not None and logged is not None:  # θ given, ρ logged
            rho = document_propensities("DoublyRobust", None, positions, mask, logged)
        rho = rho.to(dtype).clamp(min=1.0 / self.clip)
        direct = scores.detach().sigmoid()
        residual = (clicks.to(dtype) - theta.to(dtype) * direct) / rho
        estimate = direct + torch.where(visible, residual, 0.0)
        return torch.where(mask, estimate.clamp(min=0.0), 0.0)

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
        targets = self.targets(scores, clicks, positions, mask, propensities)
        return self.weighted_mean(loss, scores, targets, mask)

    def extra_repr(self) -> str:
        given = None if self.propensities is None else self.propensities.tolist()
        return f"propensities={given}, clip={self.clip}, {super().extra_repr()}"
