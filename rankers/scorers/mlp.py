"""A multilayer perceptron scorer applied to each document independently."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from differank.rankers.scorers.base import Ranker


class MLPRanker(Ranker):
    """``scores = MLP(features)`` with ReLU hidden layers and dropout.

    Shape:
        features: [B, L, F] -> scores [B, L].

    Example:
        >>> MLPRanker(n_features=4, hidden=(8,))(torch.zeros(2, 3, 4)).shape
        torch.Size([2, 3])
    """

    def __init__(self, n_features: int, hidden: Sequence[int] = (64, 32), dropout: float = 0.1):
        super().__init__()
        if n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.n_features = n_features
        layers: list[nn.Module] = []
        width = n_features
        for size in hidden:
            layers += [nn.Linear(width, int(size)), nn.ReLU(), nn.Dropout(dropout)]
            width = int(size)
        layers.append(nn.Linear(width, 1))
        self.network = nn.Sequential(*layers)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.network(features).squeeze(-1)
