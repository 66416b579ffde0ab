"""The two-tower additive bias model (Yan, Zhuang, Wang, Bendersky, Qin, Najork, Metzler and
Zhong, SIGIR 2022; Zhuang et al., WWW 2021): a position tower added to the relevance tower while
training on clicks, dropped at serving."""

from __future__ import annotations

import torch
from torch import nn

from differank.losses.unbiased.estimator import (
    ClickEstimator,
    at_positions,
    check_lr_scale,
)


class TwoTower(ClickEstimator):
    """Clicks explained by relevance plus a position bias, in logit space::

        click logit_i = s_i + b_{k_i},      L = (1/B) Σ_q loss(s_q + b_{k_q}, c_q)

    ``s`` the ranker's scores (the relevance tower), ``b`` one learned bias per position (the
    bias tower; with sigmoid_bce_loss, ``P(c_i = 1) = σ(s_i + b_{k_i})``, the additive model of
    Yan et al. 2022). The bias tower is a parameter of the training module, optimised with the
    ranker and dropped at serving and export: the scorer ranks by ``s`` alone.

    Example:
        >>> from differank.losses import SigmoidBCELoss
        >>> tower = TwoTower(max_positions=3)
        >>> tower.position_bias
        Parameter containing:
        tensor([0., 0., 0.], requires_grad=True)
        >>> tower(SigmoidBCELoss(), torch.zeros(1, 2), torch.tensor([[1.0, 0.0]]),
        ...       torch.tensor([[0, 1]]), torch.ones(1, 2, dtype=torch.bool))  # 2 log 2
        tensor(1.3863, grad_fn=<DivBackward0>)
    """

    def __init__(
        self, *, max_positions: int = 10, label_sum_weighting: bool = False, lr_scale: float = 1.0
    ) -> None:
        super().__init__(label_sum_weighting=label_sum_weighting)
        if (
            isinstance(max_positions, bool)
            or not isinstance(max_positions, int)
            or max_positions < 1
        ):
            raise ValueError(
                f"TwoTower: max_positions must be an integer >= 1, got {max_positions!r}"
            )
        self.max_positions = max_positions
        self.lr_scale = check_lr_scale("TwoTower", lr_scale)  # the bias tower's learning rate
        self.position_bias = nn.Parameter(torch.zeros(max_positions))

    fits_click_model = True

    def click_probabilities(self, scores: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``σ(s_i + b_{k_i})``: the additive model's click probability."""
        bias = at_positions(self.position_bias.detach().to(scores.dtype), positions)
        return (scores + bias).sigmoid()

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
        click_logits = scores + at_positions(self.position_bias.to(scores.dtype), positions)
        return self.weighted_mean(loss, click_logits, clicks, visible)

    def extra_repr(self) -> str:
        return (
            f"max_positions={self.max_positions}, lr_scale={self.lr_scale}, {super().extra_repr()}"
        )
