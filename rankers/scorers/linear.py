"""The linear scorer ``s = x·w + b``, the model of every paper reproduced here."""

from __future__ import annotations

import torch
from torch import nn

from differank.rankers.scorers.base import Ranker


class LinearRanker(Ranker):
    """``scores = features @ w + b``.

    Shape:
        features: [B, L, F] -> scores [B, L].

    Example:
        >>> ranker = LinearRanker(n_features=3)
        >>> ranker(torch.zeros(2, 5, 3)).shape
        torch.Size([2, 5])
    """

    def __init__(self, n_features: int, bias: bool = True) -> None:
        super().__init__()
        if n_features < 1:
            raise ValueError(f"n_features must be >= 1, got {n_features}")
        self.n_features = n_features
        self.linear = nn.Linear(n_features, 1, bias=bias)
        nn.init.zeros_(self.linear.weight)  # a zero start is the convex objectives' natural start
        if bias:
            nn.init.zeros_(self.linear.bias)

    def forward(self, features: torch.Tensor) -> torch.Tensor:
        return self.linear(features).squeeze(-1)
