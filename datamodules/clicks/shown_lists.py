"""What a production ranker shows: the top ``k`` documents of each query by its scores.

Public API::

    top_k_rows(scores, query_rows, top_k) -> list[np.ndarray]   # rows of each list, top first
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def top_k_rows(scores, query_rows: Sequence[np.ndarray], top_k: int) -> list[np.ndarray]:
    """For each query (its rows in ``query_rows``), the rows of its ``top_k`` highest
    ``scores`` (indexed by row), highest first; equal scores keep file order (as the metrics
    do). A query with fewer documents shows all of them.

    Example:
        >>> scores = np.array([0.1, 0.9, 0.5, 0.3, 0.2])
        >>> top_k_rows(scores, [np.array([0, 1, 2]), np.array([3, 4])], top_k=2)
        [array([1, 2]), array([3, 4])]
    """
    if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < 1:
        raise ValueError(f"top_k must be a positive int (clicks.top_k), got {top_k!r}")
    scores = np.asarray(scores, dtype=np.float64)
    if not np.isfinite(scores).all():
        raise ValueError("the production ranker gave a NaN or infinite score: it cannot rank")
    shown = []
    for rows in query_rows:
        order = np.argsort(-scores[rows], kind="stable")[:top_k]
        shown.append(rows[order])
    return shown
