"""loss=distill on queries whose labels are all equal: the teacher still orders their documents,
so the distillation term counts them (a gradient, a place in the mean), while the label term
keeps the label loss's own rule (0 there). Closed forms and oracles in float64, written here
from docs/objectives/distill.md without the loss's code."""

from __future__ import annotations

import pytest
import torch

from differank.losses.distill import DistillLoss, distill_loss
from differank.losses.listnet import ListNetLoss, listnet_loss

TEMPERATURE = 2.0


def equal_label_query() -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One query of four documents, every label 1, and a teacher that orders them."""
    scores = torch.tensor([[0.3, -1.2, 0.8, 0.1]], dtype=torch.float64)
    labels = torch.ones(1, 4, dtype=torch.float64)
    teacher = torch.tensor([[2.0, -1.0, 0.5, 1.5]], dtype=torch.float64)
    return scores, labels, teacher


def gradient(form: str, scores, labels, teacher, **options) -> torch.Tensor:
    leaf = scores.clone().requires_grad_(True)
    distill_loss(leaf, labels, None, teacher, form=form, **options).backward()
    return leaf.grad


@pytest.mark.parametrize("form", ["listwise", "regression", "rankdistil"])
def test_a_query_of_equal_labels_gets_a_distillation_gradient(form):
    scores, labels, teacher = equal_label_query()
    torch.manual_seed(0)  # rankdistil's sampled orders
    grad = gradient(form, scores, labels, teacher, temperature=TEMPERATURE)
    assert grad.abs().sum() > 1e-3

    def term(values):  # the same sampled orders for rankdistil
        torch.manual_seed(0)
        return distill_loss(values, labels, None, teacher, form=form, temperature=TEMPERATURE)

    assert term(scores - 0.1 * grad) < term(scores)  # it pulls the student towards the teacher


def test_the_gradient_on_equal_labels_is_the_closed_form():
    """listwise: d/ds τ²·CE(softmax(t/τ), softmax(s/τ)) = τ·(softmax(s/τ) − softmax(t/τ));
    regression: d/ds (1/n)Σ(s − t)² = 2(s − t)/n."""
    scores, labels, teacher = equal_label_query()
    listwise = gradient("listwise", scores, labels, teacher, temperature=TEMPERATURE)
    expected = TEMPERATURE * (
        torch.softmax(scores / TEMPERATURE, -1) - torch.softmax(teacher / TEMPERATURE, -1)
    )
    torch.testing.assert_close(listwise, expected, rtol=1e-12, atol=1e-14)
    regression = gradient("regression", scores, labels, teacher)
    torch.testing.assert_close(regression, 2.0 * (scores - teacher) / 4, rtol=1e-12, atol=1e-14)


def mixed_batch():
    """Query 0 has a preference pair; query 1's real labels are all 2 (one padded slot, NaN);
    query 2's are all 0; query 3 has no document."""
    scores = torch.tensor(
        [
            [0.5, -0.3, 1.1, 0.2],
            [1.4, 0.1, -0.7, float("nan")],
            [-0.2, 0.9, 0.4, 0.6],
            [0.0, 0.0, 0.0, 0.0],
        ],
        dtype=torch.float64,
    )
    labels = torch.tensor(
        [[2.0, 0.0, 1.0, 0.0], [2.0, 2.0, 2.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0] * 4],
        dtype=torch.float64,
    )
    mask = torch.tensor(
        [[True] * 4, [True, True, True, False], [True] * 4, [False] * 4],
    )
    teacher = torch.tensor(
        [[1.0, -0.5, 0.3, 0.0], [0.2, 1.7, -0.4, 0.0], [0.8, -0.1, 1.2, 0.5], [0.0] * 4],
        dtype=torch.float64,
    )
    return scores, labels, mask, teacher


def mixed_oracle(scores, labels, mask, teacher, alpha):
    """Per query: (1 − α)·τ²·(−Σ p log q) + α·(ListNet if the query has a pair, else 0), from
    the equations with a loop over the real documents; the mean counts every query with a
    document (α < 1)."""
    per_query, counted = [], 0
    for b in range(len(mask)):
        keep = mask[b].nonzero().flatten()
        if len(keep) == 0:
            per_query.append(scores[b, 0] * 0.0)
            continue
        s, t, y = scores[b, keep], teacher[b, keep], labels[b, keep]
        p = torch.softmax(t / TEMPERATURE, -1)
        kd = TEMPERATURE**2 * -(p * torch.log_softmax(s / TEMPERATURE, -1)).sum()
        has_pair = bool(y.max() > y.min())
        label = -(torch.softmax(y, -1) * torch.log_softmax(s, -1)).sum() if has_pair else 0.0
        per_query.append((1 - alpha) * kd + alpha * label)
        counted += 1
    per_query = torch.stack(per_query)
    return per_query, per_query.sum() / counted


def test_the_mixed_loss_on_equal_label_queries_matches_the_oracle():
    scores, labels, mask, teacher = mixed_batch()
    alpha = 0.4
    options = {"alpha": alpha, "label_loss": ListNetLoss(reduction="none")}
    options["temperature"] = TEMPERATURE
    got = scores.clone().requires_grad_(True)
    per_query = distill_loss(got, labels, mask, teacher, reduction="none", **options)
    mean = distill_loss(got, labels, mask, teacher, **options)
    (grad,) = torch.autograd.grad(mean, got)
    clean = scores.masked_fill(~mask, 0.0).requires_grad_(True)
    want_per_query, want_mean = mixed_oracle(clean, labels, mask, teacher, alpha)
    (want_grad,) = torch.autograd.grad(want_mean, clean)
    torch.testing.assert_close(per_query.detach(), want_per_query.detach(), rtol=1e-12, atol=0)
    torch.testing.assert_close(mean.detach(), want_mean.detach(), rtol=1e-12, atol=0)
    torch.testing.assert_close(grad, want_grad, rtol=1e-12, atol=1e-15)
    # the queries of equal labels carry (1 − α) of their teacher term and their gradient
    assert (per_query[1:3] > 0).all() and grad[1:3][mask[1:3]].abs().min() > 0
    assert per_query[3] == 0 and not grad[3].any()


def test_alpha_one_is_the_label_loss_with_its_own_rule():
    """No weight on the teacher: the label loss alone, its mean over the queries with a pair."""
    scores, labels, mask, teacher = mixed_batch()
    label_loss = ListNetLoss(reduction="none")
    got = distill_loss(scores, labels, mask, teacher, alpha=1.0, label_loss=label_loss)
    torch.testing.assert_close(got, listnet_loss(scores, labels, mask), rtol=1e-12, atol=0)


def test_counted_queries_for_a_weighing_caller():
    """The module's query weights weigh the queries the loss counts (RankingModule)."""
    _, labels, mask, _ = mixed_batch()
    assert DistillLoss().counted_queries(labels, mask).tolist() == [True, True, True, False]
    only_labels = DistillLoss(alpha=1.0, label_loss=ListNetLoss(reduction="none"))
    assert only_labels.counted_queries(labels, mask).tolist() == [True, False, False, False]
    nan_label = labels.clone()
    nan_label[1, 0] = float("nan")  # the input rule drops the query, teacher or not
    assert DistillLoss().counted_queries(nan_label, mask).tolist() == [True, False, True, False]
