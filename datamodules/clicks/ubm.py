"""The user-browsing model (UBM; Dupret and Piwowarski, 2008): whether position k is examined
depends on k and on the distance ``d`` to the last click above it (``d = k`` when there is
none, positions 1-based); given the clicks above, positions are independent:

    P(C_k = 1 | last click above at k − d) = γ_{k,d}^η · α_k

with ``α_k`` the relevance's click probability. ``γ`` is ULTRA's table (``examination=
"eye_tracking"``, fitted by Dupret and Piwowarski; at most 10 positions) or ``1/d``
(``"inverse"``), raised to η. This is ULTRA's ``UserBrowsingModel``. ``propensities`` are the
marginal ``P(E_k) = Σ_d P(last click above at k − d) γ_{k,d}^η`` of each list, computed by a
forward pass over the position of the last click.
"""

from __future__ import annotations

import math

import torch

from differank.datamodules.clicks.base import ClickModel
from differank.datamodules.clicks.examination import browsing_table


class UserBrowsingModel(ClickModel):
    """UBM (the module docstring).

    Example:
        >>> model = UserBrowsingModel(max_label=1, eta=1.0, examination="inverse", positions=2)
        >>> model.gamma
        tensor([[1.0000, 0.5000],
                [1.0000, 0.5000]], dtype=torch.float64)
        >>> model.propensities(torch.tensor([[0.0, 1.0]]), torch.ones(1, 2))
        tensor([[1.0000, 0.5500]])
    """

    def __init__(
        self,
        *,
        max_label: float,
        eta: float = 1.0,
        examination: str = "eye_tracking",
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
        self.eta = float(eta)
        #: γ_{k,d}^η at [k - 1, d - 1] (float64 [positions, positions])
        self.gamma = browsing_table(examination, positions, eta)
        self._after_last_tables: dict[int, torch.Tensor] = {}

    def sample(
        self, labels: torch.Tensor, mask: torch.Tensor, uniforms: torch.Tensor
    ) -> torch.Tensor:
        """Without a loop over positions: ``would[j, k]`` says whether the user clicks position
        k when their last click is node j (0: none, l + 1: position l), ``u_k < γ_{k, k-l}^η
        α_k``; from node j the next click is the first such k. The clicks are the nodes on the
        path from node 0, found by pointer doubling in ceil(log2(L + 1)) steps. The same draws
        give the same clicks as the step-by-step walk (tests/oracles_clicks.py)."""
        attractive = self.attractiveness(labels, mask)
        batch, length = attractive.shape
        if length not in self._after_last_tables:  # built once per list length
            self._after_last_tables[length] = self._after_last(length)
        after = self.on(f"after_last_{length}", self._after_last_tables[length], attractive)
        # would[b, j, k] = 1.0 when u_k < γ α_k: the sign of the threshold minus the draw
        would = (after * attractive[:, None, :]).sub_(uniforms.select(2, 0)[:, None, :]).gt_(0)
        clicked, first = would.max(2)  # the first maximum: the first k clicked, if any
        following = torch.where(clicked.bool(), first, length) + 1  # node of the next click
        terminal = torch.full((batch, 1), length + 1, device=labels.device)
        pointer = torch.cat([following, terminal], dim=1)  # [B, L + 2]: the path's next node
        on_path = torch.zeros(batch, length + 2, dtype=torch.int64, device=labels.device)
        on_path[:, 0] = 1
        for _ in range(math.ceil(math.log2(length + 1))):  # 2^m nodes of the path after m steps
            on_path = on_path.scatter_add(1, pointer, on_path).clamp_(max=1)
            pointer = pointer.gather(1, pointer)
        return on_path[:, 1 : length + 1].to(attractive.dtype)

    def _after_last(self, length: int) -> torch.Tensor:
        """float64 [L + 1, L]: ``γ_{k, k-j+1}^η`` at [j, k] for position k after the last click
        at node j (node 0: no click, so d = k + 1), 0 where k < j (no click above the last)."""
        table = torch.zeros(length + 1, length, dtype=torch.float64)
        for j in range(length + 1):
            for k in range(j, length):
                table[j, k] = self.gamma[k, k - j]
        return table

    def examination(self, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        attractive = self.attractiveness(labels, mask)
        gamma = self.on("gamma", self.gamma, attractive)
        batch, length = labels.shape
        # last[:, j]: P(the last click so far is at position j - 1); j = 0: no click yet
        last = torch.zeros(batch, length + 1, dtype=attractive.dtype, device=labels.device)
        last[:, 0] = 1.0
        examined = torch.empty_like(attractive)
        for k in range(length):
            # from "last click at j - 1" the distance is d = k - j + 1, column k - j
            columns = torch.arange(k, -1, -1, device=labels.device)
            exam = gamma[k].index_select(0, columns)  # [k + 1] for j = 0..k
            examined[:, k] = (last[:, : k + 1] * exam).sum(1)
            click = exam * attractive[:, k : k + 1]
            last[:, k + 1] = (last[:, : k + 1] * click).sum(1)
            last[:, : k + 1] = last[:, : k + 1] * (1 - click)
        return examined
