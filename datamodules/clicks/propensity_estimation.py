"""Estimating the examination propensities of a position-based user from logged clicks.

The position-based model says ``P(C = 1 | d at position k) = θ_k · α_d``; the relevance part
``α_d`` cancels in a ratio of click rates of the SAME documents shown at two positions, which
gives ``θ_k / θ_1`` (propensities are identified only relative to the top position). Two ways
to see the same documents at two positions:

* **Randomisation** (result swapping, Joachims et al., 2017; RandPair, Wang et al., 2018): each
  session either shows the list as ranked (control) or swaps the top result with the one at a
  random position k. The top document's click rate at position k (swap-k sessions) over its
  click rate at position 1 (control sessions) is ``θ_k / θ_1``:
  :func:`swap_sessions` draws the swaps, :func:`propensities_from_swaps` estimates.
* **Intervention harvesting** (Agarwal et al., 2019): no intervention, but several logging
  rankers that put the same (query, document) at different positions. For every pair of
  positions ``(k, k')`` the documents shown at k by one ranker and at k' by another give
  ``θ_k' / θ_k = Σ_d CTR(d at k') / Σ_d CTR(d at k)``; the ratios of all pairs are combined by
  least squares on their logarithms (``log θ_1 = 0``), so positions that never meet position 1
  directly are reached through others: :func:`propensities_from_rankers`.

:func:`fit_eta` turns relative propensities into the η of a PBM examination curve.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from differank.datamodules.clicks.click_log import ClickLog


def swap_sessions(
    sessions: int, positions: int, generator: torch.Generator | None = None
) -> torch.Tensor:
    """int64 [sessions]: each session's randomisation, 0 for a control session (the list as
    ranked) and ``k`` for "swap position 0 with position k", uniform over ``0..positions-1``.

    Example:
        >>> swap_sessions(4, 3, torch.Generator().manual_seed(0)).tolist()
        [2, 0, 2, 0]
    """
    return torch.randint(0, positions, (sessions,), generator=generator)


def apply_swaps(lists: torch.Tensor, swaps: torch.Tensor) -> torch.Tensor:
    """``lists`` [S, K, ...] (labels, rows, features: slot order = ranked order) as shown after
    each session's swap of slot 0 with slot ``swaps[s]``.

    Example:
        >>> apply_swaps(torch.tensor([[10, 11, 12], [10, 11, 12]]), torch.tensor([2, 0])).tolist()
        [[12, 11, 10], [10, 11, 12]]
    """
    order = torch.arange(lists.shape[1], device=lists.device).repeat(len(lists), 1)
    rows = torch.arange(len(lists), device=lists.device)
    order[rows, swaps] = 0
    order[:, 0] = swaps
    index = order.view(*order.shape, *([1] * (lists.ndim - 2))).expand_as(lists)
    return lists.gather(1, index)


def propensities_from_swaps(clicks: torch.Tensor, swaps: torch.Tensor) -> torch.Tensor:
    """float64 [K]: ``θ_k / θ_1`` from the clicks ``[S, K]`` (in shown positions) of swap
    sessions (``swaps`` from :func:`swap_sessions`): the click rate at position k of the swap-k
    sessions (the top document moved there) over the click rate at position 1 of the control
    sessions. NaN where a position has no session or the control no click."""
    clicks = clicks.double()
    positions = clicks.shape[1]
    control = swaps == 0
    top_rate = clicks[control, 0].mean() if control.any() else torch.tensor(float("nan"))
    ratios = torch.full((positions,), float("nan"), dtype=torch.float64)
    ratios[0] = 1.0
    for k in range(1, positions):
        swapped = swaps == k
        if swapped.any():
            ratios[k] = clicks[swapped, k].mean() / top_rate
    return ratios


def propensities_from_rankers(logs: Sequence[ClickLog], positions: int) -> np.ndarray:
    """float64 [positions]: ``θ_k / θ_1`` by intervention harvesting (module docstring) from
    the click logs of several deterministic logging rankers on the same data (``doc_row``
    identifies a (query, document)). NaN for a position no document links to the others.

    Example:
        >>> def log(rows, clicks):  # one session showing doc_rows ``rows``, top first
        ...     return ClickLog(session=np.zeros(2, int), qid=np.ones(2, int),
        ...         position=np.arange(2), click=np.array(clicks), doc_row=np.array(rows))
        >>> propensities_from_rankers([log([5, 6], [1, 0]), log([6, 5], [1, 1])], 2).tolist()
        [1.0, 0.5]
    """
    if len(logs) < 2:
        raise ValueError("intervention harvesting needs the logs of at least two rankers")
    shown = [_click_rates(log, positions) for log in logs]
    # at_first[k, k2] / at_second[k, k2]: summed click rates of the documents one ranker shows
    # at k and another at k2 > k; count: how many such (document, ranker pair)
    at_first = np.zeros((positions, positions))
    at_second = np.zeros((positions, positions))
    count = np.zeros((positions, positions))
    for a, (rows_a, position_a, rate_a) in enumerate(shown):
        for b, (rows_b, position_b, rate_b) in enumerate(shown):
            if a == b:
                continue
            _, in_a, in_b = np.intersect1d(rows_a, rows_b, assume_unique=True, return_indices=True)
            k, k2 = position_a[in_a], position_b[in_b]
            moved = k < k2
            np.add.at(at_first, (k[moved], k2[moved]), rate_a[in_a][moved])
            np.add.at(at_second, (k[moved], k2[moved]), rate_b[in_b][moved])
            np.add.at(count, (k[moved], k2[moved]), 1.0)
    pairs = np.argwhere((at_first > 0) & (at_second > 0))
    if len(pairs) == 0:
        raise ValueError("no document was shown at two different positions by two rankers")
    design = np.zeros((len(pairs), positions))
    design[np.arange(len(pairs)), pairs[:, 1]] = 1.0
    design[np.arange(len(pairs)), pairs[:, 0]] = -1.0
    target = np.log(at_second[pairs[:, 0], pairs[:, 1]] / at_first[pairs[:, 0], pairs[:, 1]])
    scale = np.sqrt(count[pairs[:, 0], pairs[:, 1]])
    reached = np.any(design != 0, axis=0)
    free = np.flatnonzero(reached[1:]) + 1  # log θ_1 = 0; solve for the positions reached
    fitted, *_ = np.linalg.lstsq(design[:, free] * scale[:, None], target * scale, rcond=None)
    solution = np.full(positions, np.nan)
    solution[0] = 0.0
    solution[free] = fitted
    return np.exp(solution)


def _click_rates(log: ClickLog, positions: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(doc_row, position, click rate)`` per document of a log whose ranker shows each
    document at one position (a deterministic logging ranker); doc_row sorted."""
    if log.doc_row is None:
        raise ValueError(f"{log.source}: intervention harvesting needs a doc_row column")
    keep = log.position < positions
    rows, position, clicks = log.doc_row[keep], log.position[keep], log.click[keep]
    unique, first, inverse = np.unique(rows, return_index=True, return_inverse=True)
    moved = position != position[first][inverse]
    if moved.any():
        row = int(np.flatnonzero(keep)[np.flatnonzero(moved)[0]])
        raise ValueError(
            f"{log.source}: row {row}: doc_row {log.doc_row[row]} is shown at two positions by "
            "one ranker; harvesting expects one log per deterministic ranker"
        )
    rate = np.bincount(inverse, weights=clicks) / np.bincount(inverse)
    return unique, position[first], rate


def fit_eta(relative: np.ndarray | torch.Tensor, curve: np.ndarray | torch.Tensor) -> float:
    """The η of ``θ_k / θ_1 = (p_k / p_1)^η`` that fits ``relative`` (NaN entries skipped)
    best in least squares on logarithms, ``curve`` the examination curve ``p`` (η = 1).

    Example:
        >>> curve = np.array([1.0, 0.5, 0.25])
        >>> round(fit_eta(curve**1.7, curve), 6)
        1.7
    """
    relative = np.asarray(relative, dtype=np.float64)
    curve = np.asarray(curve, dtype=np.float64)
    x = np.log(curve[1:] / curve[0])
    y = np.log(relative[1:])
    usable = np.isfinite(y)
    if not usable.any():
        raise ValueError("no finite relative propensity beyond the first position to fit")
    return float((x[usable] @ y[usable]) / (x[usable] @ x[usable]))
