"""Validation metrics from clicks alone (``ultr.select=clicks``,
docs/clicks.md#choosing-a-model-without-labels): what a team with a click log and no labels can
choose an epoch by. Neither reads a relevance label.

* :func:`ips_dcg`: the counterfactual (inverse-propensity) estimate of DCG@k of the ranker's
  ordering of the shown documents. Under the position-based model ``P(c_i) = θ_{k_i} γ_i``, so
  ``E[c_i / θ_{k_i}] = γ_i`` and ``Σ_i (c_i / θ_{k_i}) / log2(1 + rank_i)`` over the ranker's top
  k is an unbiased estimate of DCG@k with gains γ (Joachims, Swaminathan and Schnabel, WSDM
  2017; Agarwal et al., SIGIR 2019), clipped as the IPS loss is (``1/θ ≤ clip``).
* :func:`click_log_likelihood`: ``Σ c log p + (1 − c) log(1 − p)`` of held-out clicks under
  the click probabilities of an estimator that fits a click model (two-tower, DLA, regression
  EM), the click-prediction measure Baidu-ULTR reports (Hager et al., SIGIR 2024).

:class:`ClickValidation` accumulates both over an epoch's validation click batches.
"""

from __future__ import annotations

import torch
from torch import nn

from differank.losses.unbiased.doubly_robust import DoublyRobust
from differank.losses.unbiased.estimator import ClickEstimator
from differank.losses.unbiased.ips import IPS
from differank.losses.unbiased.propensity import document_propensities

# log(0) guard for a predicted click probability of exactly 0 or 1 (float64)
_PROBABILITY_FLOOR = 1e-12


def ips_dcg(
    scores: torch.Tensor,
    clicks: torch.Tensor,
    propensities: torch.Tensor,
    mask: torch.Tensor,
    k: int,
    clip: float,
) -> torch.Tensor:
    """Per query [B] (float64): the IPS estimate of DCG@k, averaged over the query's sessions.

    The ranker orders each list's real documents by ``scores`` (descending; ties keep the shown
    order); a document at rank r < k (0-based) gains ``c / max(θ, 1/clip) / log2(r + 2)`` per
    session.

    Shape:
        scores [B, L]; clicks [B, S, L] (0/1, S sessions); propensities [B, L] in (0, 1] (the
        shown slots'; anything at padding); mask [B, L] bool.

    Example:
        >>> scores = torch.tensor([[0.0, 1.0]])  # the document shown second is ranked first
        >>> clicks = torch.tensor([[[0.0, 1.0], [1.0, 1.0]]])  # two sessions
        >>> ips_dcg(scores, clicks, torch.tensor([[1.0, 0.5]]), torch.tensor([[True, True]]),
        ...         k=10, clip=100.0)  # 2 / log2(2) + 0.5 / log2(3)
        tensor([2.3155], dtype=torch.float64)
    """
    if clicks.dim() != 3 or (clicks.shape[0], *clicks.shape[2:]) != tuple(scores.shape):
        raise ValueError(
            f"clicks must be [B, S, L] for scores {list(scores.shape)}, got {tuple(clicks.shape)}"
        )
    real = mask.bool()
    theta = torch.where(real, propensities.double(), 1.0).clamp(min=1.0 / clip)
    weights = clicks.double().mean(dim=1) / theta  # the mean over sessions of c / θ
    ordered = torch.where(real, scores.double(), -torch.inf)
    order = torch.argsort(ordered, dim=-1, descending=True, stable=True)
    rank = torch.argsort(order, dim=-1, stable=True)  # 0-based rank of every slot
    discount = torch.log2(rank.double() + 2.0)
    gains = torch.where(real & (rank < k), weights / discount, 0.0)
    return gains.sum(dim=-1)


def click_log_likelihood(
    probabilities: torch.Tensor, clicks: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """Per query [B] (float64): the log-likelihood of its sessions' clicks, summed over the
    sessions and the real documents, under click probabilities [B, L] (the same in every
    session: a position-based click model's). Shapes as :func:`ips_dcg`'s.

    Example:
        >>> click_log_likelihood(torch.tensor([[0.5, 0.25]]), torch.tensor([[[1.0, 0.0]]]),
        ...                      torch.tensor([[True, True]]))  # log 0.5 + log 0.75
        tensor([-0.9808], dtype=torch.float64)
    """
    p = probabilities.double().clamp(_PROBABILITY_FLOOR, 1.0 - _PROBABILITY_FLOOR).unsqueeze(1)
    c = clicks.double()
    per_slot = c * p.log() + (1.0 - c) * (-p).log1p()
    return torch.where(mask.bool().unsqueeze(1), per_slot, 0.0).sum(dim=(1, 2))


class ClickValidation:
    """The epoch's click validation metrics, accumulated batch by batch in float64:
    ``click_dcg@k`` (the mean over validation queries of :func:`ips_dcg`) and, for an
    estimator that fits a click model, ``click_loglik`` (the mean log-likelihood per shown
    document and session).

    Args:
        k: DCG's cut-off.
        clip: the largest inverse propensity (the estimator's ``clip``: as in training).
    """

    def __init__(self, k: int, clip: float) -> None:
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"ultr.select_k must be an integer >= 1, got {k!r}")
        if isinstance(clip, bool) or not isinstance(clip, (int, float)) or not clip >= 1:
            raise ValueError(f"ultr.select_clip must be a number >= 1, got {clip!r}")
        self.k, self.clip = k, float(clip)
        self.reset()

    @property
    def dcg_name(self) -> str:
        return f"click_dcg@{self.k}"

    def reset(self) -> None:
        self.totals: dict[str, torch.Tensor] = {}

    def _add(self, name: str, value: torch.Tensor) -> None:
        self.totals[name] = self.totals.get(name, 0.0) + value.detach().double()

    def update(
        self, scores: torch.Tensor, batch: dict[str, torch.Tensor], estimator: nn.Module | None
    ) -> None:
        """Add a validation click batch (docs/clicks.md: ``clicks`` [B, S, L], ``positions``,
        ``propensities`` where known, ``mask``) scored ``scores`` [B, L] by the ranker. The
        propensities are the estimator's fixed ones where it has them (``ultr.propensities``),
        else the batch's logged ones, as the IPS loss reads them."""
        clicks, positions, mask = batch["clicks"], batch["positions"], batch["mask"]
        # IPS and DR may be given known propensities (ultr.propensities); the others' are
        # learned, and a metric that moved with them would not compare epochs
        fixed = estimator.propensities if isinstance(estimator, (IPS, DoublyRobust)) else None
        theta = document_propensities(
            "ultr.select=clicks", fixed, positions, mask, batch.get("propensities")
        )
        self._add("dcg", ips_dcg(scores, clicks, theta, mask, self.k, self.clip).sum())
        self._add("queries", torch.tensor(float(mask.shape[0]), device=scores.device))
        if isinstance(estimator, ClickEstimator) and estimator.fits_click_model:
            probabilities = estimator.click_probabilities(scores, positions)
            self._add("loglik", click_log_likelihood(probabilities, clicks, mask).sum())
            shown = mask.sum() * clicks.shape[1]
            self._add("slots", shown.double())

    def compute(self, reduce=lambda value: value) -> dict[str, torch.Tensor]:
        """The epoch's metrics; ``reduce`` sums a total over processes (DDP)."""
        totals = {name: reduce(value) for name, value in self.totals.items()}
        if not totals:
            return {}
        metrics = {self.dcg_name: totals["dcg"] / totals["queries"]}
        if "loglik" in totals:
            metrics["click_loglik"] = totals["loglik"] / totals["slots"]
        return metrics
