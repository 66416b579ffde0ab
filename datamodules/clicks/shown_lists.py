"""What a production ranker shows: the top ``k`` documents of each query by its scores, or,
for a stochastic ranker, the top ``k`` of a ranking drawn from the Plackett–Luce distribution
of its scores at a temperature.

Public API::

    top_k_rows(scores, query_rows, top_k) -> list[np.ndarray]   # rows of each list, top first
    plackett_luce_rows(scores, query_rows, top_k, temperature, rng) -> list[np.ndarray]
    shown_list_tensors(split, shown_rows, split_name) -> SplitTensors  # the lists as a split
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch

from differank.datamodules.split_tensors import SplitTensors


def top_k_rows(scores, query_rows: Sequence[np.ndarray], top_k: int) -> list[np.ndarray]:
    """For each query (its rows in ``query_rows``), the rows of its ``top_k`` highest
    ``scores`` (indexed by row), highest first; equal scores keep file order (as the metrics
    do). A query with fewer documents shows all of them.

    Example:
        >>> scores = np.array([0.1, 0.9, 0.5, 0.3, 0.2])
        >>> top_k_rows(scores, [np.array([0, 1, 2]), np.array([3, 4])], top_k=2)
        [array([1, 2]), array([3, 4])]
    """
    scores = _checked(scores, top_k)
    shown = []
    for rows in query_rows:
        order = np.argsort(-scores[rows], kind="stable")[:top_k]
        shown.append(rows[order])
    return shown


def plackett_luce_rows(
    scores,
    query_rows: Sequence[np.ndarray],
    top_k: int,
    temperature: float,
    rng: np.random.Generator,
) -> list[np.ndarray]:
    """For each query, the rows of the top ``top_k`` of one ranking drawn from the
    Plackett–Luce distribution of ``scores / temperature``: the first document is row d with
    probability ``softmax(scores / T)_d``, the next from the rest likewise, and so on. Drawn as
    the order of ``scores / T + Gumbel noise`` (the Gumbel-max trick; the same distribution as
    drawing position by position), in float64. A high temperature shows nearly uniform
    rankings, a low one nearly the deterministic top ``k``.

    Example:
        >>> scores = np.array([0.1, 0.9, 0.5, 0.3, 0.2])
        >>> rows = [np.array([0, 1, 2]), np.array([3, 4])]
        >>> [len(r) for r in plackett_luce_rows(scores, rows, 2, 1.0, np.random.default_rng(0))]
        [2, 2]
    """
    scores = _checked(scores, top_k)
    if (
        isinstance(temperature, bool)
        or not isinstance(temperature, (int, float))
        or not (math.isfinite(temperature) and temperature > 0)
    ):
        raise ValueError(
            "clicks.production.temperature must be a finite number > 0 (null: show the "
            f"deterministic top k), got {temperature!r}"
        )
    shown = []
    for rows in query_rows:
        keys = scores[rows] / temperature + rng.gumbel(size=len(rows))
        shown.append(rows[np.argsort(-keys, kind="stable")[:top_k]])
    return shown


def _checked(scores, top_k: int) -> np.ndarray:
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive int (clicks.top_k), got {top_k!r}")
    scores = np.asarray(scores, dtype=np.float64)
    if not np.isfinite(scores).all():
        raise ValueError("the production ranker gave a NaN or infinite score: it cannot rank")
    return scores


def shown_list_tensors(split, shown_rows: Sequence[np.ndarray], split_name: str) -> SplitTensors:
    """The lists ``shown_rows`` (rows of ``split``, top first, one per served query in the
    split's order) as a split of their own, with their true labels (the click models' input);
    a count other than one list per served query is an error naming ``split_name``."""
    if len(shown_rows) != len(split.queries):
        raise ValueError(
            f"{len(shown_rows)} shown lists for {len(split.queries)} {split_name} queries: one "
            f"list per served {split_name} query"
        )
    return SplitTensors.from_queries(
        torch.from_numpy(split.features),
        torch.from_numpy(split.labels),
        [np.asarray(rows, dtype=np.int64) for rows in shown_rows],
        split.query_ids[split.queries],
    )
