"""The distillation objective of a tree student, as a boosting library's custom objective: the
gradient and the diagonal hessian of the neural students' loss (``loss=distill`` with
``form: listwise`` and ListNet on the labels) with respect to each document's score.

For one query with scores s, teacher scores t, labels y, temperature τ and label weight α
(docs/objectives/distill.md#tree-students):

    L_q = (1 − α) · τ² · CE(softmax(t/τ), softmax(s/τ)) + α · CE(softmax(y), softmax(s))

    ∂L_q/∂s_i  = (1 − α) · τ · (q_i − p_i) + α · (r_i − y'_i)
    ∂²L_q/∂s_i² = (1 − α) · q_i (1 − q_i) + α · r_i (1 − r_i)

with p = softmax(t/τ), q = softmax(s/τ), y' = softmax(y), r = softmax(s). The distillation
term applies to every query: it needs no labels, so a query whose labels are all equal is
still taught the teacher's order. The label term keeps ListNet's own rule (such a query
carries no preference and gets 0). The objective is the sum of L_q over the queries (a
boosting library's gradients are per document, not averaged).

The rows of a :class:`QueryGroups` are contiguous per query, as the libraries' ``group``
sizes describe them; everything is computed for all queries at once (``np.*.reduceat``).

Example:
    >>> groups = QueryGroups(np.array([2]))
    >>> objective = DistillObjective(groups, teacher=np.array([1.0, 0.0]),
    ...                              labels=np.array([1.0, 1.0]), alpha=0.5)
    >>> gradient, hessian = objective.gradient_hessian(np.zeros(2))
    >>> bool(gradient[0] < 0 < gradient[1])  # all-equal labels: the teacher still orders them
    True
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class QueryGroups:
    """Rows grouped by query, each query's rows contiguous: ``sizes`` [queries] in row order."""

    sizes: np.ndarray

    def __post_init__(self) -> None:
        if len(self.sizes) == 0 or (np.asarray(self.sizes) < 1).any():
            raise ValueError("QueryGroups: every query needs at least one row")

    @property
    def starts(self) -> np.ndarray:
        return np.concatenate([[0], np.cumsum(self.sizes)[:-1]])

    def per_row(self, per_query: np.ndarray) -> np.ndarray:
        """A value per query repeated over its rows."""
        return np.repeat(per_query, self.sizes)

    def softmax(self, values: np.ndarray) -> np.ndarray:
        """The softmax of ``values`` within each query (float64, shifted by the query's max)."""
        shifted = values - self.per_row(np.maximum.reduceat(values, self.starts))
        exp = np.exp(shifted)
        return exp / self.per_row(np.add.reduceat(exp, self.starts))

    def all_equal(self, values: np.ndarray) -> np.ndarray:
        """bool [queries]: the query's values are all equal (no preference among its rows)."""
        starts = self.starts
        return np.maximum.reduceat(values, starts) == np.minimum.reduceat(values, starts)


class DistillObjective:
    """Gradient and hessian of the summed distillation loss (module docstring) at the scores
    of the rows of ``groups``, for the fixed ``teacher`` scores and ``labels`` of those rows."""

    def __init__(
        self,
        groups: QueryGroups,
        teacher: np.ndarray,
        labels: np.ndarray,
        alpha: float,
        temperature: float = 1.0,
    ) -> None:
        if not 0.0 <= alpha <= 1.0:
            raise ValueError(f"student.alpha is the label loss's weight in [0, 1], got {alpha}")
        if not temperature > 0:
            raise ValueError(f"student.temperature must be > 0, got {temperature}")
        rows = int(np.sum(groups.sizes))
        for name, values in (("teacher", teacher), ("labels", labels)):
            if np.shape(values) != (rows,) or not np.isfinite(values).all():
                raise ValueError(f"DistillObjective: {name} must be {rows} finite values")
        self.groups, self.alpha, self.temperature = groups, alpha, temperature
        self.teacher_probabilities = groups.softmax(np.asarray(teacher, np.float64) / temperature)
        # ListNet's targets; a query without a preference has no label term (ListNet's rule)
        labelled = ~groups.all_equal(np.asarray(labels, np.float64))
        self.label_rows = groups.per_row(labelled)
        self.label_probabilities = groups.softmax(np.asarray(labels, np.float64))

    def gradient_hessian(self, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """float64 ``(∂L/∂s, ∂²L/∂s²)`` per row at ``scores`` [rows]."""
        scores = np.asarray(scores, np.float64)
        tau, alpha = self.temperature, self.alpha
        student = self.groups.softmax(scores / tau)
        gradient = (1.0 - alpha) * tau * (student - self.teacher_probabilities)
        hessian = (1.0 - alpha) * student * (1.0 - student)
        if alpha > 0:
            top_one = self.groups.softmax(scores)
            gradient += np.where(self.label_rows, alpha * (top_one - self.label_probabilities), 0)
            hessian += np.where(self.label_rows, alpha * top_one * (1.0 - top_one), 0.0)
        return gradient, hessian
