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
        self._examination_by_node: dict[int, torch.Tensor] = {}  # per list length, [L, L + 1]

    def sample(
        self, labels: torch.Tensor, mask: torch.Tensor, uniforms: torch.Tensor
    ) -> torch.Tensor:
        """The user's walk down the list, all lists at once. ``would[k, j, b]`` says whether
        list b's user clicks position k when their last click is node j (0: none, l + 1: a
        click at l): ``u_k < γ_{k, k-l}^η α_k``, one comparison for every pair. The walk then
        reads, position by position, the entry of each list's current node: two small
        operations a step, cheaper than pointer doubling over the same table
        (benchmarks/results/ultra_side_by_side.md)."""
        attractive = self.attractiveness(labels, mask)
        batch, length = attractive.shape
        if length not in self._examination_by_node:  # built once per list length
            self._examination_by_node[length] = self._after_last(length).T.contiguous()
        # examination[k, j]: γ of position k when the last click is node j
        table = self._examination_by_node[length]
        examination = self.on(f"examination_by_node_{length}", table, attractive)
        thresholds = examination[:, :, None] * attractive.T[:, None, :]  # [L, L + 1, B]
        would = torch.lt(uniforms.select(2, 0).T[:, None, :], thresholds)
        last = torch.zeros(1, batch, dtype=torch.int64, device=labels.device)  # node per list
        clicks = torch.empty(length, 1, batch, dtype=torch.bool, device=labels.device)
        steps = zip(would.unbind(0), clicks.unbind(0), strict=True)
        for k, (would_k, clicks_k) in enumerate(steps):
            torch.gather(would_k, 0, last, out=clicks_k)
            last.masked_fill_(clicks_k, k + 1)
        return clicks[:, 0].T.to(attractive.dtype)

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
