"""The position-based model (PBM; Richardson et al., 2007; Craswell et al., 2008): a slot at
position k is examined with probability ``θ_k = p_k^η`` whatever else happens, and an examined
document is clicked with its relevance's click probability ``α(y)``:

    P(C_k = 1) = p_k^η · (ε⁻ + (ε⁺ − ε⁻)(2^y_k − 1)/(2^y_max − 1))

``p_k`` is an examination curve (:mod:`~differank.datamodules.clicks.examination`: ULTRA's
eye-tracking vector or 1/k) and η the severity of the position bias (η = 0: no bias). This is
ULTRA's ``PositionBiasedModel``.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from differank.datamodules.clicks.base import ClickModel
from differank.datamodules.clicks.examination import examination_curve


class PositionBasedModel(ClickModel):
    """PBM (the module docstring); ``examination``: "eye_tracking" (default), "inverse",
    "baidu" or a vector of examination probabilities by position
    (:func:`~differank.datamodules.clicks.examination.examination_curve`).

    Example:
        >>> model = PositionBasedModel(max_label=2, eta=1.0, positions=3)
        >>> model.examination_by_position
        tensor([0.6800, 0.6100, 0.4800], dtype=torch.float64)
        >>> labels, mask = torch.tensor([[2.0, 0.0, 1.0]]), torch.ones(1, 3, dtype=torch.bool)
        >>> model.simulate(labels, mask, torch.Generator().manual_seed(0)).shape
        torch.Size([1, 3])
    """

    def __init__(
        self,
        *,
        max_label: float,
        eta: float = 1.0,
        examination: str | Sequence[float] = "eye_tracking",
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
        #: θ_k = p_k^η for 0-based position k (float64 [positions])
        self.examination_by_position = examination_curve(examination, positions, eta)

    def examination(self, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        theta = self.on("theta", self.examination_by_position, labels)[: labels.shape[1]]
        return theta.expand(labels.shape)

    def sample(
        self, labels: torch.Tensor, mask: torch.Tensor, uniforms: torch.Tensor
    ) -> torch.Tensor:
        probability = self.examination(labels, mask) * self.attractiveness(labels, mask)
        return (uniforms[..., 0] < probability).to(probability.dtype)
