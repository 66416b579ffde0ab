"""Domination loss (docs/objectives/domination.md#the-loss): batched closed form vs the naive O(n²)
per-query oracle on more levels and margins than the contract's entries (tests/loss_registry.py:
domination, _flat, _label_margins, _layer_margins), its static path and paper properties."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from differank.losses.domination import DominationLoss, domination_loss, label_margins
from tests.oracles import domination_query_oracle


def random_batch(seed: int, batch: int = 5, length: int = 9, levels: int = 4):
    """Padded float64 batch with NaN padding; some queries single-label or empty."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, length, generator=g, dtype=torch.float64) * 2
    labels = torch.randint(0, levels, (batch, length), generator=g).double()
    mask = torch.rand(batch, length, generator=g) < 0.8
    mask[0, 0] = True
    mask[-1] = False  # an all-padding query
    labels[1] = 2.0  # a single-label query
    scores = torch.where(mask, scores, torch.full_like(scores, float("nan")))
    labels = torch.where(mask, labels, torch.full_like(labels, float("nan")))
    return scores, labels, mask


def oracle_per_query(scores, labels, mask, pairwise=None):
    values = []
    for b in range(scores.shape[0]):
        keep = mask[b]
        delta = None if pairwise is None else pairwise[b][keep][:, keep]
        values.append(domination_query_oracle(scores[b][keep], labels[b][keep], delta))
    return torch.stack(values)


def check_against_oracle(scores, labels, mask, oracle_scores=None, pairwise=None, **kwargs):
    """Value and gradient of the batched loss == oracle, per query, to 1e-9
    (docs/architecture.md#how-a-loss-is-tested)."""
    leaf = scores.detach().clone().requires_grad_(True)
    value = domination_loss(leaf, labels, mask, reduction="none", **kwargs)
    (grad,) = torch.autograd.grad(value.sum(), leaf)
    ref_leaf = (scores if oracle_scores is None else oracle_scores).detach().clone()
    ref_leaf = torch.where(mask, ref_leaf, torch.zeros_like(ref_leaf)).requires_grad_(True)
    expected = oracle_per_query(ref_leaf, labels, mask, pairwise)
    (ref_grad,) = torch.autograd.grad(expected.sum(), ref_leaf)
    torch.testing.assert_close(value, expected, rtol=1e-9, atol=1e-12)
    torch.testing.assert_close(grad, ref_grad, rtol=1e-9, atol=1e-12)
    assert torch.all(grad[~mask] == 0)
    return value, grad


class TestDominationLoss:
    @pytest.mark.parametrize("seed", range(4))
    def test_matches_oracle_multilayer(self, seed):
        check_against_oracle(*random_batch(seed, levels=5))

    @pytest.mark.parametrize("seed", range(2))
    def test_static_path_matches_oracle(self, seed, monkeypatch):
        """The path compiled or accelerator runs take: no host read, level axis L wide."""
        monkeypatch.setattr("differank.losses.domination.may_read_values", lambda tensor: False)
        check_against_oracle(*random_batch(seed, levels=5))

    def test_real_valued_labels(self):
        scores, _, mask = random_batch(7)
        g = torch.Generator().manual_seed(1)
        labels = torch.rand(scores.shape, generator=g, dtype=torch.float64).round(decimals=1)
        check_against_oracle(scores, labels, mask)

    def test_separable_margins_equal_shifted_scores(self):
        scores, labels, mask = random_batch(2)
        margins = torch.rand(scores.shape, dtype=torch.float64, generator=torch.Generator())
        direct = domination_loss(scores, labels, mask, margins=margins, reduction="none")
        shifted = domination_loss(scores - margins, labels, mask, reduction="none")
        torch.testing.assert_close(direct, shifted, rtol=1e-12, atol=0)
        real = torch.where(mask, labels, torch.zeros_like(labels))
        pairwise = margins.unsqueeze(-1) - margins.unsqueeze(-2)  # Δ(i, j) = m_i − m_j
        check_against_oracle(scores, labels, mask, margins=margins, pairwise=pairwise)
        assert real.shape == pairwise.shape[:2]

    def test_label_margins_are_the_thesis_offsets_on_positives(self):
        # the loss with these margins vs the oracle: tests/loss_registry.py's
        # domination_label_margins entry
        _, labels, mask = random_batch(3)
        real = torch.where(mask, labels, torch.zeros_like(labels))
        m = label_margins(real, 0.5, 0.25)
        assert torch.all(m[real == 0] == 0)
        assert torch.all(m[real > 0] == 0.5 * real[real > 0] + 0.25)

    def test_general_pairwise_margins(self):
        scores, labels, mask = random_batch(5)
        g = torch.Generator().manual_seed(3)
        pairwise = torch.rand(*scores.shape, scores.shape[-1], generator=g, dtype=torch.float64)
        pairwise = torch.where(mask.unsqueeze(-1), pairwise, torch.full_like(pairwise, torch.nan))
        check_against_oracle(scores, labels, mask, margins=pairwise, pairwise=pairwise)

    def test_pool_is_one_list(self):
        scores, labels, mask = random_batch(8)
        pooled = domination_loss(scores, labels, mask, pool=True, reduction="none")
        assert pooled.shape == (1,)
        expected = domination_query_oracle(scores[mask], labels[mask])
        torch.testing.assert_close(pooled[0], expected, rtol=1e-9, atol=0)

    def test_one_relevant_is_softmax_cross_entropy(self):
        g = torch.Generator().manual_seed(0)
        scores = torch.randn(6, 8, generator=g, dtype=torch.float64)
        target = torch.randint(0, 8, (6,), generator=g)
        labels = F.one_hot(target, 8).double()
        mask = torch.ones(6, 8, dtype=torch.bool)
        value = domination_loss(scores, labels, mask, reduction="none")
        torch.testing.assert_close(value, F.cross_entropy(scores, target, reduction="none"))

    @pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
    def test_extreme_scores_finite(self, dtype):
        scores, labels, mask = random_batch(11)
        scores = (torch.sign(scores) * 1e3).to(dtype).requires_grad_(True)
        matrix = [[0.0, 0.0, 0.0, 0.0], [1.0, 0.0, 0.0, 0.0], [2.0, 1.0, 0.0, 0.0], [3, 2, 1, 0]]
        for kwargs in ({}, {"layer_margins": matrix}, {"margin_scale": 1.0}, {"pool": True}):
            value = domination_loss(scores, labels.to(dtype), mask, **kwargs)
            (grad,) = torch.autograd.grad(value, scores)
            assert torch.isfinite(value) and torch.isfinite(grad).all(), kwargs
            assert torch.all(grad[~mask] == 0)

    def test_bad_hyperparameters(self):
        with pytest.raises(ValueError, match="reduction"):
            DominationLoss(reduction="avg")
        with pytest.raises(ValueError, match="layer_margins"):
            DominationLoss(layer_margins=[[0.0, 1.0, 2.0]])
        with pytest.raises(ValueError, match="margin_scale"):
            DominationLoss(margin_scale=float("nan"))
        scores, labels, mask = random_batch(15)
        with pytest.raises(ValueError, match="margins"):
            domination_loss(scores, labels, mask, margins=torch.zeros(2, 2))
        with pytest.raises(ValueError, match=r"scores must be \[B, L\]"):
            domination_loss(scores.unsqueeze(-1).expand(-1, -1, 3), labels, mask)
