"""RankNet and ListNet against their float64 per-query oracles
(docs/architecture.md#how-a-loss-is-tested)."""

import pytest
import torch

from differank.losses.listnet import ListNetLoss, listnet_loss
from differank.losses.ranknet import RankNetLoss, ranknet_loss
from tests.oracles import listnet_oracle, ranknet_oracle

CASES = [
    pytest.param(ranknet_loss, RankNetLoss, ranknet_oracle, id="ranknet"),
    pytest.param(listnet_loss, ListNetLoss, listnet_oracle, id="listnet"),
]


def padded_batch(seed=0, batch=6, length=9, levels=3):
    """Random queries of lengths 0..length with NaN padding; includes n=1 and single-label rows."""
    g = torch.Generator().manual_seed(seed)
    lengths = torch.tensor([length, 1, 0, 4, 7, 5])[:batch]
    mask = torch.arange(length)[None, :] < lengths[:, None]
    scores = torch.randn(batch, length, generator=g, dtype=torch.float64)
    labels = torch.randint(0, levels, (batch, length), generator=g).to(torch.float64)
    labels[3, :4] = 1.0  # a single-label query
    scores = torch.where(mask, scores, torch.full_like(scores, float("nan")))
    labels = torch.where(mask, labels, torch.full_like(labels, float("nan")))
    return scores, labels, mask


@pytest.mark.parametrize(("function", "module", "oracle"), CASES)
class TestBaselineLoss:
    def test_value_and_gradient_match_oracle(self, function, module, oracle):
        scores, labels, mask = padded_batch()
        scores.requires_grad_(True)
        per_query = function(scores, labels, mask, reduction="none")
        per_query.sum().backward()
        for b in range(scores.shape[0]):
            n = int(mask[b].sum())
            real = scores.detach()[b, :n].clone().requires_grad_(True)
            expected = oracle(real, labels[b, :n].tolist()) if n else torch.zeros(())
            torch.testing.assert_close(
                per_query[b], expected.to(per_query.dtype), rtol=1e-9, atol=1e-12
            )
            if n:
                expected.backward()
                grad = real.grad if real.grad is not None else torch.zeros(n, dtype=torch.float64)
                torch.testing.assert_close(scores.grad[b, :n], grad, rtol=1e-9, atol=1e-12)
            assert torch.equal(scores.grad[b, n:], torch.zeros_like(scores.grad[b, n:]))

    def test_padding_values_change_nothing(self, function, module, oracle):
        scores, labels, mask = padded_batch()
        other_scores = torch.where(mask, scores, torch.full_like(scores, 1e30))
        other_labels = torch.where(mask, labels, torch.full_like(labels, 7.0))
        assert torch.equal(
            function(scores, labels, mask, reduction="none"),
            function(other_scores, other_labels, mask, reduction="none"),
        )

    def test_permutation_within_query_is_invariant(self, function, module, oracle):
        scores, labels, mask = padded_batch()
        order = torch.randperm(9, generator=torch.Generator().manual_seed(3))
        torch.testing.assert_close(
            function(scores, labels, mask, reduction="none"),
            function(scores[:, order], labels[:, order], mask[:, order], reduction="none"),
        )

    def test_reductions(self, function, module, oracle):
        scores, labels, mask = padded_batch()
        per_query = function(scores, labels, mask, reduction="none")
        assert per_query.shape == (6,)
        valid = torch.tensor([True, False, False, False, True, True])
        assert torch.equal(per_query[~valid], torch.zeros(3, dtype=torch.float64))
        torch.testing.assert_close(function(scores, labels, mask, reduction="sum"), per_query.sum())
        torch.testing.assert_close(
            function(scores, labels, mask, reduction="mean"), per_query.sum() / valid.sum()
        )

    def test_gradcheck(self, function, module, oracle):
        scores, labels, mask = padded_batch()
        scores = torch.where(mask, scores, torch.zeros_like(scores)).requires_grad_(True)
        assert torch.autograd.gradcheck(
            lambda s: function(s, labels, mask, reduction="sum"), (scores,)
        )

    def test_extreme_scores_stay_finite(self, function, module, oracle):
        scores, labels, mask = padded_batch()
        big = (torch.where(mask, scores.sign(), torch.zeros_like(scores)) * 1e3).requires_grad_(
            True
        )
        loss = function(big, labels, mask)
        loss.backward()
        assert torch.isfinite(loss) and torch.isfinite(big.grad).all()

    def test_batch_without_pairs_is_connected_zero(self, function, module, oracle):
        scores = torch.randn(2, 3, requires_grad=True)
        loss = function(scores, torch.zeros(2, 3), torch.ones(2, 3, dtype=torch.bool))
        loss.backward()
        assert loss.item() == 0.0 and torch.equal(scores.grad, torch.zeros(2, 3))

    def test_module_equals_function(self, function, module, oracle):
        scores, labels, mask = padded_batch()
        assert torch.equal(
            module(reduction="sum")(scores, labels, mask),
            function(scores, labels, mask, reduction="sum"),
        )

    def test_bad_inputs_raise_clear_errors(self, function, module, oracle):
        scores, labels, mask = padded_batch()
        with pytest.raises(ValueError, match=r"scores must be \[B, L\]"):
            function(torch.zeros(6, 9, 4), labels, mask)
        with pytest.raises(ValueError, match="labels must match"):
            function(scores, labels[:, :3], mask)
        with pytest.raises(ValueError, match="mask must be bool, or 0/1"):
            function(scores, labels, mask.float() / 2)
        with pytest.raises(ValueError, match="reduction"):
            module(reduction="avg")
