"""The protocol every ranker follows, so RankingModule can pair any ranker with any loss."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol

import torch
from torch import nn


class Ranker(nn.Module):
    """A scorer of documents: ``forward(features [B, L, F]) -> scores [B, L]``.

    The three hooks below have scalar-ranker defaults; a feature-space ranker (ConeRank)
    overrides them:

    * ``loss_target(features)``: the tensor the loss ranks (scores here; ConeRank gives the
      features the cone lives in);
    * ``loss_inputs()``: extra tensors the loss takes by keyword (ConeRank: ``{"basis": U}``);
    * ``constrain()``: re-imposes parameter constraints after each optimizer step;
    * ``serving_ranker()``: what export writes (ConeRank: its equivalent linear scorer).

    A ranker whose scores depend on the other documents of the query (attention over the list,
    :class:`~differank.rankers.scorers.transformer.TransformerRanker`) sets ``uses_mask = True``:
    the modules then call ``forward(features, mask)`` and ``loss_target(features, mask)`` with the
    batch mask (bool [B, L], True = real document), and an exported scorer takes ``(features,
    mask)``. Per-document rankers keep ``uses_mask = False`` and the one-argument calls.
    """

    n_features: int
    uses_mask: bool = False

    def loss_target(self, features: torch.Tensor) -> torch.Tensor:
        return self(features)

    def loss_inputs(self) -> dict[str, torch.Tensor]:
        return {}

    @torch.no_grad()
    def constrain(self) -> None:
        """Called after every optimizer step; scalar rankers have nothing to enforce."""

    def serving_ranker(self) -> Ranker:
        """The module to export for serving: the same scores, in plain exportable operations."""
        return self

    def regularized_weights(self) -> Iterator[torch.Tensor]:
        """The weight matrices that ℓ1 / ℓ2² penalties apply to (biases are never penalised)."""
        for module in self.modules():
            if isinstance(module, nn.Linear):
                yield module.weight


class FullBatchSolver(Protocol):
    """A solver that fits a ranker on the whole training set at once (coordinate descent,
    cutting planes) instead of by gradient steps on mini-batches.

    ``FullBatchModule`` calls :meth:`fit_step` once per epoch on the full training batch and
    stops when :attr:`converged`; :attr:`ranker` is what validation, test and prediction use.
    Constructed as ``Solver(n_features=F, **hyperparameters)``.
    """

    ranker: Ranker
    converged: bool

    def fit_step(
        self, features: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
    ) -> dict[str, float]:
        """One outer iteration; returns statistics to log (objective, non-zeros, gap, ...)."""
        ...
