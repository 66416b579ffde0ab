"""Regression EM (Wang, Golbandi, Bendersky, Metzler and Najork, WSDM 2018): examination
propensities estimated by expectation-maximisation alongside the ranker."""

from __future__ import annotations

import torch
from torch import nn

from differank.losses.unbiased.estimator import ClickEstimator, at_positions


class RegressionEM(ClickEstimator):
    """The ranker learns the posterior relevance of every shown document; the propensities
    follow by an EM step per training batch.

    With ``θ_k`` the examination probability of position k and ``γ_i = σ(s_i)`` the ranker's
    relevance probability, a click means examined and relevant; a skip is, by Bayes (Wang et
    al. 2018, eq. 4)::

        P(R_i = 1 | c_i = 0) = (1 − θ_k) γ_i / (1 − θ_k γ_i)
        P(E_i = 1 | c_i = 0) = θ_k (1 − γ_i) / (1 − θ_k γ_i)

    The E-step's relevance posteriors ``r_i = c_i + (1 − c_i) P(R_i = 1 | c_i = 0)`` are the
    loss's labels (the regression of the M-step; sigmoid_bce_loss is the paper's
    log-likelihood); the M-step's examination estimate
    ``θ_k ← mean over shown documents at k of c_i + (1 − c_i) P(E_i = 1 | c_i = 0)``
    is blended in with step ``update`` (an online EM: ``θ ← (1 − update) θ + update · θ_new``)
    in training mode. ``θ`` is a buffer of the training module, saved with its checkpoints and
    never part of the served scorer.

    Args:
        max_positions: positions modelled (0-based shown positions must be below it).
        update: the weight of each batch's M-step in ``θ`` (1: plain EM on each batch).

    Example:
        >>> from differank.losses import SigmoidBCELoss
        >>> rem = RegressionEM(max_positions=2)
        >>> rem.propensities
        tensor([0.9000, 0.9000])
        >>> _ = rem(SigmoidBCELoss(), torch.zeros(1, 2), torch.tensor([[1.0, 0.0]]),
        ...         torch.tensor([[0, 1]]), torch.ones(1, 2, dtype=torch.bool))
        >>> rem.propensities  # position 1: a click: examined; a skip of a γ = 0.5 document: 0.818
        tensor([0.9100, 0.8918])
    """

    propensities: torch.Tensor  # θ per position, a buffer saved with the checkpoint

    def __init__(
        self, *, max_positions: int = 10, update: float = 0.1, label_sum_weighting: bool = False
    ) -> None:
        super().__init__(label_sum_weighting=label_sum_weighting)
        if (
            isinstance(max_positions, bool)
            or not isinstance(max_positions, int)
            or max_positions < 1
        ):
            raise ValueError(
                f"RegressionEM: max_positions must be an integer >= 1, got {max_positions!r}"
            )
        if isinstance(update, bool) or not isinstance(update, (int, float)) or not 0 < update <= 1:
            raise ValueError(f"RegressionEM: update must be in (0, 1], got {update!r}")
        self.max_positions, self.update = max_positions, float(update)
        # θ = 1 is a fixed point of EM (a skip is then surely examined): start below it, at
        # ULTRA's 0.9
        self.register_buffer("propensities", torch.full((max_positions,), 0.9))

    fits_click_model = True

    def click_probabilities(self, scores: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``θ_{k_i} σ(s_i)``: the position-based model the EM fits."""
        return at_positions(self.propensities.to(scores.dtype), positions) * scores.sigmoid()

    def posteriors(
        self, scores: torch.Tensor, clicks: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(P(R = 1 | c), P(E = 1 | c))`` [B, L] of the E-step (detached)."""
        theta = at_positions(self.propensities.to(scores.dtype), positions)
        gamma = scores.detach().sigmoid()
        skipped = (1.0 - theta * gamma).clamp(min=torch.finfo(scores.dtype).tiny)
        relevant = clicks + (1.0 - clicks) * (1.0 - theta) * gamma / skipped
        examined = clicks + (1.0 - clicks) * theta * (1.0 - gamma) / skipped
        return relevant, examined

    def forward(
        self,
        loss: nn.Module,
        scores: torch.Tensor,
        clicks: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        propensities: torch.Tensor | None = None,
    ) -> torch.Tensor:
        visible, clicks = self.shown_clicks(scores, clicks, positions, mask)
        relevant, examined = self.posteriors(scores, clicks, positions)
        if self.training:
            self.maximise(examined, positions, visible)
        return self.weighted_mean(loss, scores, torch.where(visible, relevant, 0.0), visible)

    @torch.no_grad()
    def maximise(
        self, examined: torch.Tensor, positions: torch.Tensor, visible: torch.Tensor
    ) -> None:
        """The M-step for θ: each position's mean examination posterior, blended in."""
        index = positions.clamp(min=0)[visible]
        total = torch.zeros_like(self.propensities).index_add_(
            0, index, examined[visible].to(self.propensities)
        )
        count = torch.zeros_like(self.propensities).index_add_(
            0, index, torch.ones_like(index, dtype=self.propensities.dtype)
        )
        seen = count > 0
        estimate = torch.where(seen, total / count.clamp(min=1), self.propensities)
        self.propensities.lerp_(estimate, self.update)

    def extra_repr(self) -> str:
        return f"max_positions={self.max_positions}, update={self.update}, {super().extra_repr()}"
