"""The dual learning algorithm (Ai, Bi, Luo, Guo and Croft, SIGIR 2018): a propensity model
learned jointly with the ranker, each one's estimate debiasing the other's labels."""

from __future__ import annotations

import torch
from torch import nn

from differank.losses.unbiased.estimator import (
    ClickEstimator,
    at_positions,
    check_lr_scale,
)
from differank.losses.unbiased.propensity import check_clip


class DLA(ClickEstimator):
    """Ranker and propensity model trained together, as ULTRA's ``DLA`` does.

    The propensity model is one logit ``π_k`` per position; the ranker's scores ``s`` are the
    relevance model. With ``k_i`` the position of document ``i`` and ``t`` the document shown
    first, the two inverse weights are (detached, clipped at ``clip``)::

        IPW_i = exp(π_0 − π_{k_i})      # θ̂_0 / θ̂_{k_i}: inverse propensity
        IRW_i = exp(s_t − s_i)          # r̂_t / r̂_i: inverse relevance

    and the training loss is ``loss(s, c ⊙ IPW) + loss(π_k, c ⊙ IRW)`` per query, averaged
    over the batch (Ai et al. 2018, eqs. 9-12, with softmax_loss and ``label_sum_weighting``
    as in the paper). At the joint optimum ``softmax(π)`` over the positions is proportional to
    the examination probabilities: :meth:`relative_propensities` gives ``θ̂_k / θ̂_0``. The
    logits are parameters of the training module (optimised with the ranker) and never part
    of the served or exported scorer.

    Args:
        max_positions: positions modelled (0-based shown positions must be below it).
        clip: the largest inverse weight.
        lr_scale: the propensity logits learn at the ranker's learning rate times this (they
            span log θ_k/θ_0, several units, in the few hundred steps of a small data set).

    Example:
        >>> from differank.losses import SoftmaxLoss
        >>> dla = DLA(max_positions=3, label_sum_weighting=True)
        >>> dla.relative_propensities()
        tensor([1., 1., 1.])
        >>> scores, clicks = torch.zeros(1, 2), torch.tensor([[1.0, 0.0]])
        >>> dla(SoftmaxLoss(), scores, clicks, torch.tensor([[0, 1]]),
        ...     torch.ones(1, 2, dtype=torch.bool))  # log 2 for each model
        tensor(1.3863, grad_fn=<AddBackward0>)
    """

    def __init__(
        self,
        *,
        max_positions: int = 10,
        clip: float = 100.0,
        label_sum_weighting: bool = True,
        lr_scale: float = 1.0,
    ) -> None:
        super().__init__(label_sum_weighting=label_sum_weighting)
        if (
            isinstance(max_positions, bool)
            or not isinstance(max_positions, int)
            or max_positions < 1
        ):
            raise ValueError(f"DLA: max_positions must be an integer >= 1, got {max_positions!r}")
        check_clip("DLA", clip)
        self.max_positions, self.clip = max_positions, float(clip)
        self.lr_scale = check_lr_scale("DLA", lr_scale)
        self.propensity_logits = nn.Parameter(torch.zeros(max_positions))

    def relative_propensities(self) -> torch.Tensor:
        """``θ̂_k / θ̂_0`` [max_positions]: the learned examination relative to the top."""
        with torch.no_grad():
            return (self.propensity_logits - self.propensity_logits[0]).exp()

    fits_click_model = True

    def click_probabilities(self, scores: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """``min(1, θ̂_{k_i}/θ̂_0) · σ(s_i)``: the position-based reading of DLA's two models
        (the top position examined surely; the scores as relevance logits)."""
        examined = at_positions(self.relative_propensities().clamp(max=1.0), positions)
        return examined.to(scores.dtype) * scores.sigmoid()

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
        logits = at_positions(self.propensity_logits.to(scores.dtype), positions)
        cap = torch.log(torch.tensor(self.clip, dtype=scores.dtype))
        top_logit = self.propensity_logits[0].to(scores.dtype)
        inverse_propensity = (top_logit - logits).detach().clamp(max=cap).exp()
        # the score of the document shown first (a query without one leans on its own score)
        first = torch.where(visible & (positions == 0), scores, 0.0).sum(dim=-1, keepdim=True)
        has_first = (visible & (positions == 0)).any(dim=-1, keepdim=True)
        reference = torch.where(has_first, first, scores)
        inverse_relevance = (reference - scores).detach().clamp(max=cap).exp()
        ranker = self.weighted_mean(loss, scores, clicks * inverse_propensity, visible)
        propensity = self.weighted_mean(loss, logits, clicks * inverse_relevance, visible)
        return ranker + propensity

    def extra_repr(self) -> str:
        return (
            f"max_positions={self.max_positions}, clip={self.clip}, lr_scale={self.lr_scale}, "
            + super().extra_repr()
        )
