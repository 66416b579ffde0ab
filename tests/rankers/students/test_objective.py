"""The tree students' custom objective is the neural students' loss: its gradient and diagonal
hessian match torch autograd (float64) of the project's own listwise distillation term and
ListNet, and a query whose labels are all equal still gets the teacher's gradient."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from differank.losses.distill import listwise_distillation
from differank.losses.listnet import listnet_loss
from differank.rankers.students.objective import DistillObjective, QueryGroups

SIZES = [3, 1, 5, 4]  # the third query's labels are all equal, the second has one document


def torch_loss(scores, teacher, labels, alpha, tau) -> torch.Tensor:
    """Σ_q (1 − α) · listwise KD + α · ListNet, from the project's loss functions, per query."""
    total = scores.new_zeros(())
    start = 0
    for size in SIZES:
        s, t, y = (x[start : start + size].unsqueeze(0) for x in (scores, teacher, labels))
        real = torch.ones_like(s, dtype=torch.bool)
        kd = listwise_distillation(s, t, real, tau, None, 1).sum()
        label = listnet_loss(s, y, None, reduction="sum")
        total = total + (1 - alpha) * kd + alpha * label
        start += size
    return total


@pytest.mark.parametrize(("alpha", "tau"), [(0.0, 1.0), (0.5, 2.0), (0.3, 0.5), (1.0, 1.0)])
def test_gradient_and_hessian_match_autograd(alpha, tau):
    rng = np.random.default_rng(3)
    rows = sum(SIZES)
    scores, teacher = rng.normal(size=rows), rng.normal(size=rows) * 2
    labels = rng.integers(0, 3, size=rows).astype(np.float64)
    labels[4:9] = 1.0  # the third query: all equal
    objective = DistillObjective(QueryGroups(np.array(SIZES)), teacher, labels, alpha, tau)
    gradient, hessian = objective.gradient_hessian(scores)

    t, y = torch.from_numpy(teacher), torch.from_numpy(labels)

    def loss(s):
        return torch_loss(s, t, y, alpha, tau)

    s = torch.from_numpy(scores).requires_grad_()
    (expected,) = torch.autograd.grad(loss(s), s)
    full = torch.autograd.functional.hessian(loss, torch.from_numpy(scores))
    np.testing.assert_allclose(gradient, expected.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(hessian, full.diagonal().numpy(), rtol=1e-10, atol=1e-12)


def test_a_query_with_all_equal_labels_gets_the_teachers_gradient():
    """Distillation needs no labels: the all-equal query's documents are pushed towards the
    teacher's order (non-zero gradient), while the label term alone gives them none."""
    sizes = np.array([3, 2])
    labels = np.array([1.0, 1.0, 1.0, 2.0, 0.0])  # the first query: all equal
    teacher = np.array([3.0, 0.0, -3.0, 1.0, 0.0])
    scores = np.zeros(5)
    mixed = DistillObjective(QueryGroups(sizes), teacher, labels, alpha=0.5)
    gradient, hessian = mixed.gradient_hessian(scores)
    assert np.abs(gradient[:3]).min() > 1e-3 and (hessian[:3] > 0).all()
    assert gradient[0] < 0 < gradient[2]  # the teacher's best document is pushed up
    labels_only = DistillObjective(QueryGroups(sizes), teacher, labels, alpha=1.0)
    assert np.array_equal(labels_only.gradient_hessian(scores)[0][:3], np.zeros(3))


def test_bad_options_and_inputs_are_refused():
    groups = QueryGroups(np.array([2]))
    with pytest.raises(ValueError, match="alpha"):
        DistillObjective(groups, np.zeros(2), np.zeros(2), alpha=1.5)
    with pytest.raises(ValueError, match="temperature"):
        DistillObjective(groups, np.zeros(2), np.zeros(2), alpha=0.5, temperature=0.0)
    with pytest.raises(ValueError, match="teacher must be 2 finite"):
        DistillObjective(groups, np.array([0.0, np.nan]), np.zeros(2), alpha=0.5)
    with pytest.raises(ValueError, match="at least one row"):
        QueryGroups(np.array([2, 0]))
