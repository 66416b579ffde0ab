"""Trust bias (Agarwal et al., 2019; the affine model of Vardasbi et al., 2020): a slot at
position k is examined with probability ``θ_k = p_k^η``; an examined document that is relevant
(with probability ``r(y) = (2^y − 1)/(2^y_max − 1)``) is clicked with probability ``ε⁺_k``, one
that is not with ``ε⁻_k``. Users trust the top of the list, so ``ε⁻_k`` falls with k:

    P(C_k = 1) = θ_k · (ε⁻_k + (ε⁺_k − ε⁻_k) · r(y_k))

an affine function of relevance, so IPS alone (dividing by θ_k) stays biased; the affine
correction ``(C_k / θ_k − ε⁻_k) / (ε⁺_k − ε⁻_k)`` is unbiased. Defaults: ``ε⁺_k = 1`` and
``ε⁻_k = 0.65 / k`` (k 1-based): trusted false clicks fall with the position. The relevance
mapping's ε⁻/ε⁺ of the other models are replaced by these per-position ones.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from differank.datamodules.clicks.base import ClickModel
from differank.datamodules.clicks.examination import examination_curve
from differank.datamodules.clicks.relevance import relevance_probability


def _per_position(name: str, values: float | Sequence[float] | None, positions: int, default):
    """A per-position probability vector from a scalar or a list (``positions`` long)."""
    if values is None:
        values = default
    vector = torch.as_tensor(values, dtype=torch.float64).flatten()
    if vector.numel() == 1:
        vector = vector.expand(positions).clone()
    if vector.numel() != positions:
        raise ValueError(
            f"{name} needs one value per position ({positions}, clicks.top_k), got {vector.numel()}"
        )
    if not bool(((vector >= 0) & (vector <= 1)).all()):
        raise ValueError(f"{name} must hold probabilities in [0, 1], got {vector.tolist()}")
    return vector


class TrustBiasModel(ClickModel):
    """Trust bias (the module docstring). ``eps_plus``/``eps_minus``: a scalar or one value
    per position (None: the defaults above).

    Example:
        >>> model = TrustBiasModel(max_label=2, eta=1.0, examination="inverse", positions=2)
        >>> model.eps_minus
        tensor([0.6500, 0.3250], dtype=torch.float64)
        >>> model.propensities(torch.tensor([[2.0, 0.0]]), torch.ones(1, 2))
        tensor([[1.0000, 0.5000]])
    """

    def __init__(
        self,
        *,
        max_label: float,
        eta: float = 1.0,
        examination: str | Sequence[float] = "eye_tracking",
        positions: int = 10,
        eps_plus: float | Sequence[float] | None = None,
        eps_minus: float | Sequence[float] | None = None,
    ) -> None:
        super().__init__(max_label=max_label, positions=positions)
        self.eta = float(eta)
        self.examination_by_position = examination_curve(examination, positions, eta)
        ranks = torch.arange(1, positions + 1, dtype=torch.float64)
        self.eps_plus = _per_position("eps_plus", eps_plus, positions, 1.0)
        self.eps_minus = _per_position("eps_minus", eps_minus, positions, 0.65 / ranks)

    def attractiveness(self, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        """P(click | examined) = ε⁻_k + (ε⁺_k − ε⁻_k) r(y) of every slot (0 at padding)."""
        labels = labels if labels.is_floating_point() else labels.float()
        length = labels.shape[1]
        plus = self.on("eps_plus", self.eps_plus, labels)[:length]
        minus = self.on("eps_minus", self.eps_minus, labels)[:length]
        return (minus + (plus - minus) * relevance_probability(labels, self.max_label)) * mask

    def examination(self, labels: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        theta = self.on("theta", self.examination_by_position, labels)[: labels.shape[1]]
        return theta.expand(labels.shape)

    def sample(
        self, labels: torch.Tensor, mask: torch.Tensor, uniforms: torch.Tensor
    ) -> torch.Tensor:
        probability = self.examination(labels, mask) * self.attractiveness(labels, mask)
        return (uniforms[..., 0] < probability).to(probability.dtype)
