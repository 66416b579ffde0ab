"""A multilayer perceptron scorer applied to each document independently."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from torch import nn

from differank.rankers.scorers.base import Ranker

# The hidden layers' nonlinearity (``model.ranker.activation``): relu trains best by default;
# sigmoid is what RankLib's RankNet neurons compute (``export.format=ranklib`` needs it)
Activation = Literal["relu", "sigmoid", "tanh"]
HIDDEN_ACTIVATIONS: dict[Activation, type[nn.Module]] = {
    "relu": nn.ReLU,
    "sigmoid": nn.Sigmoid,
    "tanh": nn.Tanh,
}


class MLPRanker(Ranker):
    """``scores = MLP(features)``: hidden layers ``activation(W x + b)`` with dropout, then a
    linear output.

    ``activation`` is one of :data:`HIDDEN_ACTIVATIONS` (``relu``, ``sigmoid``, ``tanh``); a
    checkpoint saved before the option existed restores as ``relu``, what it was trained with.

    Shape:
        features: [B, L, F] -> scores [B, L].

    Example:
        >>> MLPRanker(n_features=4, hidden=(8,))(torch.zeros(2, 3, 4)).shape
        torch.Size([2, 3])
        >>> MLPRanker(n_features=4, hidden=(8,), activation="sigmoid").network[1]
        Sigmoid()
    """

    def __init__(
        self,
        n_features: int,
        hidden: Sequence[int] = (64, 32),
        dropout: float = 0.1,
        activation: Activation = "relu",
    ):
        super().__init__()
        if n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        if activation not in HIDDEN_ACTIVATIONS:
            raise ValueError(
                f"model.ranker.activation must be one of {list(HIDDEN_ACTIVATIONS)}, "
                f"got {activation!r}"
            )
        self.n_features = n_features
        self.activation = activation
        layers: list[nn.Module] = []
        width = n_features
        for size in hidden:
            layers += [
                nn.Linear(width, int(size)),
                HIDDEN_ACTIVATIONS[activation](),
                nn.Dropout(dropout),
            ]
            width = int(size)
        layers.append(nn.Linear(width, 1))
        self.network = nn.Sequential(*layers)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.network(features).squeeze(-1)
