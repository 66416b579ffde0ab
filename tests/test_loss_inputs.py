"""The one input rule of every loss (``losses/inputs.py``): empty shapes, integer labels,
non-finite labels and scores, half precision; and every objective trains with bf16-mixed."""

from __future__ import annotations

from functools import partial
from pathlib import Path

import pytest
import torch

from differank.losses import (
    cone_loss,
    convex_loss,
    domination_loss,
    listnet_loss,
    ranknet_loss,
    structured_hinge_loss,
)
from differank.losses.inputs import compute_dtype, finite_label_mask, may_read_values
from tests.conftest import ROOT


def cone_of_scores(scores, labels, mask, reduction="mean"):
    """The cone loss on one-feature documents made from the scores ([B, L] -> [B, L, 1], no
    arithmetic), so the rule's cases written for scores apply to it as they are; every pair,
    so that two calls compare without a shared random draw."""
    basis = torch.tensor([[0.5]], dtype=scores.dtype)  # F = K = 1: the hull is one point
    return cone_loss(scores.unsqueeze(-1), labels, mask, basis, reduction=reduction,
                     max_pairs_per_query=None)  # fmt: skip


def sampled_convex(scores, labels, mask, reduction="mean"):
    """ConvexLoss with its sampler on a fresh seeded generator: every call draws the same."""
    generator = torch.Generator().manual_seed(0)
    return convex_loss(scores, labels, mask, num_samples=20, generator=generator,
                       reduction=reduction)  # fmt: skip


LOSSES = {
    "ranknet": ranknet_loss,
    "listnet": listnet_loss,
    "domination": domination_loss,
    "hinge": partial(structured_hinge_loss, k=3),
    "cone": cone_of_scores,
    "convex": sampled_convex,
    "convex_pairs": partial(convex_loss, delta="auc", space="pairs"),
}
OBJECTIVES = sorted(path.stem for path in (ROOT / "conf" / "objective").glob("*.yaml"))


def batch(dtype=torch.float64, seed=0):
    """Four queries of up to 6 documents, padding filled with NaN; query 3 is single-label."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(4, 6, generator=g, dtype=dtype)
    labels = torch.tensor(
        [[2, 0, 1, 0, 1, 0], [1, 0, 0, 1, 0, 0], [0, 2, 2, 1, 0, 0], [1, 1, 1, 0, 0, 0]]
    )
    mask = torch.ones(4, 6, dtype=torch.bool)
    mask[1, 4:] = False
    mask[3, 3:] = False
    scores = scores.masked_fill(~mask, float("nan"))
    return scores, labels.to(dtype).masked_fill(~mask, float("nan")), mask


def value_and_grad(loss, scores, labels, mask, reduction="none"):
    leaf = scores.detach().clone().requires_grad_(True)
    value = loss(leaf, labels, mask, reduction=reduction)
    (grad,) = torch.autograd.grad(value.sum(), leaf)
    return value, grad


@pytest.mark.parametrize("name", LOSSES)
class TestInputRule:
    @pytest.mark.parametrize("shape", [(0, 5), (3, 0), (0, 0)])
    @pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
    def test_empty_batch_or_lists_give_connected_zero(self, name, shape, reduction):
        scores = torch.zeros(shape, requires_grad=True)
        value = LOSSES[name](
            scores, torch.zeros(shape), torch.zeros(shape, dtype=torch.bool), reduction=reduction
        )
        assert value.shape == ((shape[0],) if reduction == "none" else ())
        assert torch.equal(value, torch.zeros_like(value)) and value.requires_grad
        value.sum().backward()
        assert scores.grad.shape == shape and not scores.grad.any()

    @pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8])
    def test_integer_labels_equal_float_labels(self, name, dtype):
        scores, labels, mask = batch()
        integer = labels.nan_to_num(0.0).to(dtype)
        torch.testing.assert_close(
            value_and_grad(LOSSES[name], scores, integer, mask),
            value_and_grad(LOSSES[name], scores, labels, mask),
            rtol=0,
            atol=0,
        )

    def test_bool_labels_are_two_grades(self, name):
        scores, labels, mask = batch()
        binary = labels.nan_to_num(0.0) > 0
        torch.testing.assert_close(
            value_and_grad(LOSSES[name], scores, binary, mask),
            value_and_grad(LOSSES[name], scores, binary.double(), mask),
            rtol=0,
            atol=0,
        )

    @pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
    def test_nonfinite_label_drops_its_query(self, name, bad):
        scores, labels, mask = batch()
        clean_value, clean_grad = value_and_grad(LOSSES[name], scores, labels, mask)
        labels[0, 2] = bad
        value, grad = value_and_grad(LOSSES[name], scores, labels, mask)
        assert value[0] == 0 and not grad[0].any()
        torch.testing.assert_close(value[1:], clean_value[1:], rtol=0, atol=0)
        torch.testing.assert_close(grad[1:], clean_grad[1:], rtol=0, atol=0, equal_nan=True)

    @pytest.mark.parametrize("bad", [float("nan"), float("inf"), float("-inf")])
    def test_nonfinite_score_makes_its_query_nan(self, name, bad):
        scores, labels, mask = batch()
        clean_value, clean_grad = value_and_grad(LOSSES[name], scores, labels, mask)
        scores[0, 1] = bad
        scores[3, 0] = bad  # query 3 has no preference pair: its scores are never used
        value, grad = value_and_grad(LOSSES[name], scores, labels, mask)
        assert torch.isnan(value[0]) and torch.isnan(grad[0]).all()
        assert value[3] == 0 and not grad[3].any()
        torch.testing.assert_close(value[1:3], clean_value[1:3], rtol=0, atol=0)
        torch.testing.assert_close(grad[1:3], clean_grad[1:3], rtol=0, atol=0)
        assert (grad[~mask] == 0).all()
        assert torch.isnan(LOSSES[name](scores, labels, mask))  # "mean" sees the NaN

    @pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
    def test_half_inputs_compute_in_float32(self, name, dtype):
        scores, labels, mask = batch(torch.float32, seed=3)
        scores = (scores * 1e4).to(dtype)  # fp16 pair sums and A(r)·s overflow near 1e4
        value, grad = value_and_grad(LOSSES[name], scores, labels, mask, reduction="sum")
        assert value.dtype == torch.float32 and grad.dtype == dtype
        assert torch.isfinite(value) and torch.isfinite(grad).all()
        want, want_grad = value_and_grad(LOSSES[name], scores.float(), labels, mask, "sum")
        torch.testing.assert_close(value, want, rtol=0, atol=0)
        torch.testing.assert_close(grad, want_grad.to(dtype), rtol=0, atol=0)


def test_helpers():
    assert compute_dtype(torch.bfloat16) == compute_dtype(torch.float16) == torch.float32
    assert compute_dtype(torch.float64) == torch.float64
    assert may_read_values(torch.zeros(1)) and not may_read_values(torch.zeros(1, device="meta"))
    labels = torch.tensor([[0.0, float("nan")], [1.0, 0.0]])
    mask = torch.tensor([[True, False], [True, True]])
    assert torch.equal(finite_label_mask(labels, mask), mask)  # NaN only at padding


def test_hinge_more_label_levels_than_num_levels_is_an_error_on_cpu():
    scores, labels, mask = batch()
    with pytest.raises(ValueError, match="num_levels=2"):
        structured_hinge_loss(scores, labels, mask, num_levels=2)
    with pytest.raises(ValueError, match="num_levels"):
        structured_hinge_loss(scores, labels, mask, num_levels=0)


@pytest.mark.parametrize("objective", OBJECTIVES)
def test_every_objective_trains_with_bf16_mixed(train_config, objective):
    from train import train

    cfg = train_config(
        [
            f"+objective={objective}",
            "++trainer.precision=bf16-mixed",
            "trainer.fast_dev_run=true",
            "logger=csv",
            "callbacks=none",
        ]
    )
    value = train(cfg, Path(cfg.hydra.runtime.output_dir))
    assert 0.0 <= value <= 1.0
