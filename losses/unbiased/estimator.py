"""What every click estimator shares: the click batch it reads, and the per-query values of the
loss it wraps.

An estimator turns one click batch (``clicks [B, L]``, ``positions [B, L]``: 0-based shown
position, -1 where nothing was shown) into training signal for an existing loss: it builds the
labels (or scores) the loss sees, calls the loss per query and averages over the batch's
queries. docs/objectives/unbiased.md#estimators states each estimator's equation and its paper.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from differank.losses.module_form import LossModule


class ClickEstimator(nn.Module):
    """Base of the estimators of ``differank.losses.unbiased``.

    ``estimator(loss, scores, clicks, positions, mask, propensities=None)`` returns the batch's
    training loss (a scalar): the mean over the ``B`` queries of the per-query value of
    ``loss`` on the estimator's targets (queries without a click contribute 0). The loss's own
    ``reduction`` is not used: an estimator needs per-query values.

    ``label_sum_weighting``: multiply each query's loss by the sum of its targets. This is
    ULTRA's listwise form: it turns :func:`~differank.losses.softmax_loss`, whose targets are
    ``l / Σ l``, into ``-Σ_i l_i log softmax(s)_i``, which is linear in the labels, so an
    estimate of the labels that is unbiased gives a loss that is unbiased.
    """

    max_positions: int = 0  # estimators with per-position parameters set it
    # the training module's learning rate for the estimator's parameters is the optimizer's
    # times this (DLA and the two-tower model take it as an option)
    lr_scale: float = 1.0
    # True where the estimator fits a click model (two-tower, DLA, regression EM): it then gives
    # click_probabilities, whose held-out log-likelihood ultr.select=clicks can choose by
    fits_click_model: bool = False

    def __init__(self, *, label_sum_weighting: bool = False) -> None:
        super().__init__()
        self.label_sum_weighting = bool(label_sum_weighting)

    def forward(
        self,
        loss: nn.Module,
        scores: torch.Tensor,
        clicks: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
        propensities: torch.Tensor | None = None,
    ) -> torch.Tensor:
        raise NotImplementedError

    def click_probabilities(self, scores: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """P(click) [B, L] of every slot under the estimator's fitted click model, from the
        ranker's ``scores`` and the shown ``positions`` (any value where nothing was shown);
        only where :attr:`fits_click_model`."""
        raise ValueError(
            f"{type(self).__name__} fits no click model, so held-out clicks have no likelihood "
            "under it: choose by ultr.select_metric=ips_dcg, or an estimator that fits one "
            "(ultr=twotower|dla|rem)"
        )

    def check(
        self,
        scores: torch.Tensor,
        clicks: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
    ) -> None:
        """Raise ValueError naming the tensor when a click batch is malformed."""
        check_click_batch(scores, clicks, positions, mask, self.max_positions)

    def shown_clicks(
        self,
        scores: torch.Tensor,
        clicks: torch.Tensor,
        positions: torch.Tensor,
        mask: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The checked batch's shown slots and its clicks there (0 elsewhere), in the scores'
        dtype: what every estimator starts from."""
        self.check(scores, clicks, positions, mask)
        visible = shown(positions, mask)
        return visible, torch.where(visible, clicks.to(scores.dtype), 0.0)

    def weighted_mean(
        self, loss: nn.Module, scores: torch.Tensor, targets: torch.Tensor, mask: torch.Tensor
    ) -> torch.Tensor:
        """Mean over the batch's queries of ``loss`` per query on ``targets`` (times the
        targets' sum with ``label_sum_weighting``)."""
        per_query = per_query_loss(loss, scores, targets, mask)
        if self.label_sum_weighting:
            per_query = per_query * torch.where(mask, targets, 0.0).sum(dim=-1).to(per_query)
        return per_query.sum() / max(per_query.shape[0], 1)

    def extra_repr(self) -> str:
        return f"label_sum_weighting={self.label_sum_weighting}"


def per_query_loss(
    loss: nn.Module, scores: torch.Tensor, labels: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """``loss`` per query [B] (``reduction="none"``), its other options kept: a
    :class:`~differank.losses.module_form.LossModule` through its function, another loss
    module (:class:`~differank.losses.DominationLoss`) through a copy with
    ``reduction="none"``.

    Example:
        >>> from differank.losses import ListNetLoss
        >>> per_query_loss(ListNetLoss(), torch.zeros(2, 2), torch.tensor([[1.0, 0.0]] * 2),
        ...                torch.ones(2, 2, dtype=torch.bool))
        tensor([0.6931, 0.6931])
    """
    if isinstance(loss, LossModule):
        options = {**loss.options, "reduction": "none"}
        per_query = type(loss).function(scores, labels, mask, **options)
    elif isinstance(getattr(loss, "reduction", None), str):
        per_query_form = copy.copy(loss)  # shares the loss's tensors; only reduction differs
        # nn.Module types unknown attributes as Tensor | Module; a loss's reduction is a str
        per_query_form.reduction = "none"  # type: ignore[assignment]
        per_query = per_query_form(scores, labels, mask)
    else:
        per_query = None
    if per_query is None or per_query.shape != scores.shape[:1]:
        raise ValueError(
            f"click estimators read a loss per query, which {type(loss).__name__} does not "
            "give (reduction='none' -> [B]): use a scalar loss of differank.losses (loss="
            "softmax, listnet, ranknet, bce, mse, lambdaloss, listmle, domination without pool)"
        )
    return per_query


def check_click_batch(
    scores: torch.Tensor,
    clicks: torch.Tensor,
    positions: torch.Tensor,
    mask: torch.Tensor,
    max_positions: int = 0,
) -> None:
    """Shapes and dtypes of a click batch: ``scores`` [B, L] floating, ``clicks`` [B, L],
    ``positions`` [B, L] integer, ``mask`` [B, L] bool; with ``max_positions`` every shown
    position must be below it (values are read on the CPU only)."""
    if scores.dim() != 2:
        raise ValueError(
            f"click estimators take scores [B, L], got shape {tuple(scores.shape)}: a "
            "feature-space ranker (model=conerank) cannot learn from clicks"
        )
    for name, tensor in (("clicks", clicks), ("positions", positions), ("mask", mask)):
        if tensor.shape != scores.shape:
            raise ValueError(
                f"{name} must match scores {list(scores.shape)}, got shape {tuple(tensor.shape)}"
            )
    if positions.is_floating_point() or positions.dtype == torch.bool:
        raise ValueError(f"positions must be an integer tensor (0-based), got {positions.dtype}")
    if mask.dtype != torch.bool:
        raise ValueError(f"mask must be bool, got {mask.dtype}")
    if max_positions and positions.is_cpu and positions.numel():
        highest = int(positions.max())
        if highest >= max_positions:
            raise ValueError(
                f"positions holds {highest}, but the estimator models {max_positions} "
                f"positions (0..{max_positions - 1}): raise its max_positions (ultr."
                "max_positions) to the number of documents shown per query"
            )


def check_lr_scale(name: str, lr_scale: float) -> float:
    """``lr_scale`` as a float, or a ValueError unless it is a finite number > 0."""
    if isinstance(lr_scale, bool) or not isinstance(lr_scale, (int, float)):
        raise ValueError(f"{name}: lr_scale must be a finite number > 0, got {lr_scale!r}")
    if not 0 < lr_scale < float("inf"):
        raise ValueError(f"{name}: lr_scale must be a finite number > 0, got {lr_scale!r}")
    return float(lr_scale)


def shown(positions: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The real documents that were shown: ``mask & positions >= 0``."""
    return mask & (positions >= 0)


def at_positions(values: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """``values[positions]`` [B, L] for per-position ``values`` [K]; position -1 (not shown)
    reads position 0 and must be masked by the caller."""
    return values[positions.clamp(min=0)]
