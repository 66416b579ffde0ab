"""Pairwise debiasing (Hu, Wang, Peng and Li, WWW 2019: "Unbiased LambdaMART"): position biases
of clicked and of skipped documents, estimated jointly with a pairwise ranker."""

from __future__ import annotations

import torch
from torch import nn
from torch.nn import functional as F

from differank.losses.ranknet import RankNetLoss, check_pair_memory
from differank.losses.unbiased.estimator import ClickEstimator, at_positions, shown


class PairwiseDebiasing(ClickEstimator):
    """RankNet's pair loss over (clicked i, skipped j) pairs, each divided by the bias of the
    click's position ``t⁺`` and of the skip's position ``t⁻`` (Hu et al. 2019, eqs. 7-12)::

        L_q = Σ_{c_i=1, c_j=0} log(1 + exp(−(s_i − s_j))) / (t⁺_{k_i} t⁻_{k_j})  / #pairs
        t⁺_k = (Σ_{pairs, k_i=k} ℓ_ij / t⁻_{k_j} / Σ_{pairs, k_i=0} ℓ_ij / t⁻_{k_j})^{1/(p+1)}
        t⁻_k = (Σ_{pairs, k_j=k} ℓ_ij / t⁺_{k_i} / Σ_{pairs, k_j=0} ℓ_ij / t⁺_{k_i})^{1/(p+1)}

    ``ℓ_ij`` the pair loss, ``p`` the regularisation exponent. The paper re-estimates t⁺, t⁻
    over the whole log each boosting round; here each training batch's estimate is blended in
    with step ``update`` (positions without a pair in the batch keep their value). They are
    buffers of the training module, never part of the served scorer. The base loss must be
    :class:`~differank.losses.RankNetLoss` (loss=ranknet): the pair term is its logistic loss.

    Example:
        >>> from differank.losses import RankNetLoss
        >>> debias = PairwiseDebiasing(max_positions=2)
        >>> debias(RankNetLoss(), torch.zeros(1, 2), torch.tensor([[0.0, 1.0]]),
        ...        torch.tensor([[0, 1]]), torch.ones(1, 2, dtype=torch.bool))  # log 2
        tensor(0.6931)
    """

    click_bias: torch.Tensor  # t⁺ per position (a buffer)
    skip_bias: torch.Tensor  # t⁻ per position (a buffer)

    def __init__(self, *, max_positions: int = 10, p: float = 0.0, update: float = 0.1) -> None:
        super().__init__()
        if (
            isinstance(max_positions, bool)
            or not isinstance(max_positions, int)
            or max_positions < 1
        ):
            raise ValueError(
                f"PairwiseDebiasing: max_positions must be an integer >= 1, got {max_positions!r}"
            )
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p < float("inf"):
            raise ValueError(f"PairwiseDebiasing: p must be a finite number >= 0, got {p!r}")
        if isinstance(update, bool) or not isinstance(update, (int, float)) or not 0 < update <= 1:
            raise ValueError(f"PairwiseDebiasing: update must be in (0, 1], got {update!r}")
        self.max_positions, self.p, self.update = max_positions, float(p), float(update)
        self.register_buffer("click_bias", torch.ones(max_positions))  # t⁺
        self.register_buffer("skip_bias", torch.ones(max_positions))  # t⁻

    def forward(
        self,
        loss: nn.Module,
        scores: torch.Tensor,
        clicks: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        propensities: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if not isinstance(loss, RankNetLoss):
            raise ValueError(
                f"PairwiseDebiasing weighs RankNet's pair loss, not {type(loss).__name__}'s: "
                "train it with loss=ranknet (ultr=pairwise)"
            )
        self.check(scores, clicks, positions, mask)
        check_pair_memory(scores.shape[0], scores.shape[1], scores.dtype)
        visible = shown(positions, mask)
        clicked = visible & (clicks > 0)
        pairs = clicked.unsqueeze(-1) & (visible & ~clicked).unsqueeze(-2)  # [B, L, L]: i, j
        safe = torch.where(visible, scores, 0.0)
        pair_loss = F.softplus(-(safe.unsqueeze(-1) - safe.unsqueeze(-2)))
        pair_loss = torch.where(pairs, pair_loss, 0.0)
        plus = at_positions(self.click_bias.to(scores.dtype), positions).unsqueeze(-1)
        minus = at_positions(self.skip_bias.to(scores.dtype), positions).unsqueeze(-2)
        if self.training:
            self.estimate_biases(pair_loss.detach(), positions, pairs, plus, minus)
        weighted = pair_loss / (plus * minus)
        per_query = weighted.sum(dim=(-1, -2)) / pairs.sum(dim=(-1, -2)).clamp(min=1)
        return per_query.sum() / max(per_query.shape[0], 1)

    @torch.no_grad()
    def estimate_biases(
        self,
        pair_loss: torch.Tensor,
        positions: torch.Tensor,
        pairs: torch.Tensor,
        plus: torch.Tensor,
        minus: torch.Tensor,
    ) -> None:
        """One batch's t⁺, t⁻ (normalised at position 0), blended into the buffers."""
        k_i = positions.clamp(min=0).unsqueeze(-1).expand_as(pairs)[pairs]
        k_j = positions.clamp(min=0).unsqueeze(-2).expand_as(pairs)[pairs]
        over_minus = (pair_loss / minus)[pairs].to(self.click_bias)
        over_plus = (pair_loss / plus)[pairs].to(self.skip_bias)
        for buffer, index, values in (
            (self.click_bias, k_i, over_minus),
            (self.skip_bias, k_j, over_plus),
        ):
            total = torch.zeros_like(buffer).index_add_(0, index, values)
            # a position without a pair, or a batch without one at the top (nothing to
            # normalise by), keeps its value; no host read, so no device synchronisation
            known = (total > 0) & (total[0] > 0)
            estimate = (total / total[0].clamp(min=torch.finfo(total.dtype).tiny)).pow(
                1.0 / (self.p + 1.0)
            )
            buffer.lerp_(torch.where(known, estimate, buffer), self.update)

    def extra_repr(self) -> str:
        return f"max_positions={self.max_positions}, p={self.p}, update={self.update}"
