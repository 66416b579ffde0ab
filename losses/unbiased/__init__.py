"""Unbiased learning to rank from clicks: estimators over differank's losses (imports only torch).

Each estimator is an ``nn.Module`` called as
``estimator(loss, scores, clicks, positions, mask, propensities=None)`` on a click batch
(``clicks [B, L]``, ``positions [B, L]``: 0-based shown position, -1 not shown) and returns
the training loss; docs/objectives/unbiased.md#estimators gives each one's equation and paper.

Example:
    >>> import torch
    >>> from differank.losses import SoftmaxLoss
    >>> from differank.losses.unbiased import IPS
    >>> ips = IPS(propensities=[1.0, 0.5, 0.25], label_sum_weighting=True)
    >>> scores = torch.randn(4, 3, requires_grad=True)
    >>> clicks = torch.tensor([[0.0, 1.0, 0.0]] * 4)
    >>> positions = torch.arange(3).expand(4, 3)
    >>> ips(SoftmaxLoss(), scores, clicks, positions, torch.ones(4, 3, dtype=torch.bool)).backward()
"""

from differank.losses.unbiased.dla import DLA
from differank.losses.unbiased.doubly_robust import DoublyRobust
from differank.losses.unbiased.estimator import ClickEstimator, per_query_loss
from differank.losses.unbiased.ips import IPS
from differank.losses.unbiased.naive import Naive
from differank.losses.unbiased.pairwise import PairwiseDebiasing
from differank.losses.unbiased.regression_em import RegressionEM
from differank.losses.unbiased.two_tower import TwoTower

ESTIMATORS = (Naive, IPS, DLA, RegressionEM, PairwiseDebiasing, TwoTower, DoublyRobust)
"""Every estimator class: what a checkpoint may name in its ``ultr`` config
(``differank.rankers.checkpoints.ALLOWED_TARGETS``)."""

__all__ = [
    "DLA",
    "ESTIMATORS",
    "IPS",
    "ClickEstimator",
    "DoublyRobust",
    "Naive",
    "PairwiseDebiasing",
    "RegressionEM",
    "TwoTower",
    "per_query_loss",
]
