"""The cascade family: users scan the list from the top and stop.

At position k (reached with probability ``e_k``) the document is examined and clicked with its
relevance's click probability ``α_k = ε⁻ + (ε⁺ − ε⁻)(2^y_k − 1)/(2^y_max − 1)``; then the user
goes on to position k + 1 with probability ``λ_k`` after a click and ``γ`` after none:

    e_1 = 1,   e_{k+1} = e_k · (α_k λ_k + (1 − α_k) γ),   P(C_k = 1) = e_k α_k

* :class:`CascadeModel` (Craswell et al., 2008): ``λ = 0`` (the user stops after a click) and a
  continuation probability ``γ`` after a skip (1: the classic cascade; below 1 the user may
  also abandon). At most one click per session.
* :class:`~differank.datamodules.clicks.dcm.DependentClickModel` (Guo et al., 2009): ``γ = 1``
  and a per-position ``λ_k`` after a click: several clicks per session.

``propensities`` are the ``e_k`` of each list (they depend on the documents above).
"""

from __future__ import annotations

import torch

from differank.datamodules.clicks.base import ClickModel
from differank.datamodules.clicks.relevance import check_probability


class SequentialScan(ClickModel):
    """The top-down walk shared by the cascade family (the module docstring); subclasses set
    ``after_click`` (λ_k, float64 [positions]) and ``after_skip`` (γ)."""

    draws_per_slot = 2  # one for the click, one for going on

    after_click: torch.Tensor
    after_skip: float

    def sample(
        self, labels: torch.Tensor, mask: torch.Tensor, uniforms: torch.Tensor
    ) -> torch.Tensor:
        """The walk without a loop over positions: decide at every slot what the user would do
        if they read it (click: ``u0 < α_k``; go on: ``u1 < λ_k`` after that click, ``u1 < γ``
        after a skip); they read slot k exactly when they would have gone on at every slot
        above, an exclusive cumulative product. The same draws give the same clicks as the
        step-by-step walk."""
        attractive = self.attractiveness(labels, mask)
        length = labels.shape[1]
        go_on_after_click = self.on("after_click", self.after_click, attractive)[:length]
        click_draw, go_on_draw = uniforms.unbind(2)
        would_click = (click_draw < attractive).to(attractive.dtype)  # 0 at padding (α = 0)
        go_on = self.after_skip + (go_on_after_click - self.after_skip) * would_click
        would_go_on = (go_on_draw < go_on).to(attractive.dtype)
        reading = torch.ones_like(would_go_on)
        torch.cumprod(would_go_on[:, :-1], dim=1, out=reading[:, 1:])
        return reading * would_click

    def examination(self, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        attractive = self.attractiveness(labels, mask)
        go_on_after_click = self.on("after_click", self.after_click, attractive)
        steps = attractive * go_on_after_click[: labels.shape[1]]
        steps = steps + (1 - attractive) * self.after_skip
        # e_k = prod_{j<k} step_j: an exclusive cumulative product
        reached = torch.cumprod(steps, dim=1)
        return torch.cat([torch.ones_like(reached[:, :1]), reached[:, :-1]], dim=1)


class CascadeModel(SequentialScan):
    """The cascade model (the module docstring): stop after a click; go on after a skip with
    probability ``continuation`` (γ, default 1).

    Example:
        >>> model = CascadeModel(max_label=1, positions=3, neg_click_prob=0.0)
        >>> model.propensities(torch.tensor([[0.0, 1.0, 1.0]]), torch.ones(1, 3))
        tensor([[1., 1., 0.]])
    """

    def __init__(
        self,
        *,
        max_label: float,
        continuation: float = 1.0,
        positions: int = 10,
        neg_click_prob: float = 0.1,
        pos_click_prob: float = 1.0,
    ) -> None:
        super().__init__(
            max_label=max_label,
            positions=positions,
            neg_click_prob=neg_click_prob,
            pos_click_prob=pos_click_prob,
        )
        self.after_skip = check_probability("continuation", continuation)
        self.after_click = torch.zeros(positions, dtype=torch.float64)
