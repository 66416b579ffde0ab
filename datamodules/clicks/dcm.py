"""The dependent click model (DCM; Guo et al., 2009): the cascade walk of
:mod:`~differank.datamodules.clicks.cascade` in which a skip always leads on (``γ = 1``) and a
click at position k leads on with probability ``λ_k``, so a session may hold several clicks:

    e_1 = 1,   e_{k+1} = e_k · (α_k λ_k + 1 − α_k),   P(C_k = 1) = e_k α_k
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from differank.datamodules.clicks.cascade import SequentialScan


class DependentClickModel(SequentialScan):
    """DCM (the module docstring); ``continuation_after_click``: λ, a scalar or one value per
    position (default 0.5 everywhere).

    Example:
        >>> model = DependentClickModel(max_label=1, positions=3, neg_click_prob=0.0)
        >>> model.propensities(torch.tensor([[1.0, 0.0, 1.0]]), torch.ones(1, 3))
        tensor([[1.0000, 0.5000, 0.5000]])
    """

    def __init__(
        self,
        *,
        max_label: float,
        continuation_after_click: float | Sequence[float] = 0.5,
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
        after_click = torch.as_tensor(continuation_after_click, dtype=torch.float64).flatten()
        if after_click.numel() == 1:
            after_click = after_click.expand(positions).clone()
        if after_click.numel() != positions or not bool(
            ((after_click >= 0) & (after_click <= 1)).all()
        ):
            raise ValueError(
                "continuation_after_click must be a probability or one per position "
                f"({positions}, clicks.top_k), got {continuation_after_click!r}"
            )
        self.after_click = after_click
        self.after_skip = 1.0
