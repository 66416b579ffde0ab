"""Query weights (sample_weight) in RankingModule's training loss: the weighted mean of the
loss's per-query values, exactly the unweighted loss for all-ones weights, a query of weight 0
removed (values and gradients), a float64 oracle, the losses refused, and the paths that refuse
weights instead of dropping them."""

from types import SimpleNamespace

import pytest
import torch
from torch import nn

from differank.losses.domination import DominationLoss
from differank.losses.lambdaloss import LambdaLoss
from differank.losses.listnet import ListNetLoss
from differank.losses.ranknet import RankNetLoss
from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.training.module import (
    FullBatchModule,
    RankingModule,
    per_query_values,
    weighted_query_loss,
)
from tests.rankers.training.test_module import CountingSolver

LOSSES = {
    "listnet": ListNetLoss,
    "lambdaloss": LambdaLoss,
    "ranknet": RankNetLoss,
    "domination": DominationLoss,
}


def sgd(params):
    return torch.optim.SGD(params, lr=0.1)


def module_for(loss, **options):
    """A linear model with weights away from 0 (its zero start scores every document alike)."""
    module = RankingModule(LinearRanker, loss, sgd, n_features=3, **options)
    with torch.no_grad():
        module.ranker.linear.weight.copy_(torch.tensor([[0.7, -1.3, 0.4]]))
    return module


def four_queries(dtype=torch.float32):
    """Three valid queries of different lengths and one without a preference pair (all labels
    equal), so the unweighted mean divides by 3, not 4."""
    g = torch.Generator().manual_seed(1)
    return {
        "features": torch.randn(4, 5, 3, generator=g, dtype=dtype),
        "labels": torch.tensor(
            [
                [2.0, 1.0, 0.0, 0.0, 1.0],
                [1.0, 0.0, 0.0, 0.0, 0.0],
                [1.0, 1.0, 1.0, 0.0, 0.0],  # real documents all 1: invalid
                [0.0, 2.0, 1.0, 0.0, 0.0],
            ],
            dtype=dtype,
        ),
        "mask": torch.tensor(
            [[True] * 5, [True] * 3 + [False] * 2, [True] * 3 + [False] * 2, [True] * 4 + [False]]
        ),
        "qid": torch.arange(4),
        "doc_index": torch.arange(20).view(4, 5),
    }


def loss_and_gradient(module, batch):
    module.zero_grad()
    loss = module.training_step(batch, 0)
    loss.backward()
    return loss.detach(), module.ranker.linear.weight.grad.clone()


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_all_ones_weights_train_as_no_weights(name):
    module = module_for(LOSSES[name]())
    batch = four_queries()
    plain_loss, plain_grad = loss_and_gradient(module, batch)
    ones_loss, ones_grad = loss_and_gradient(module, {**batch, "weights": torch.ones(4)})
    torch.testing.assert_close(ones_loss, plain_loss, rtol=0, atol=1e-7)
    torch.testing.assert_close(ones_grad, plain_grad, rtol=0, atol=1e-7)
    assert plain_loss > 0


@pytest.mark.parametrize("name", sorted(LOSSES))
def test_a_query_of_weight_zero_is_removed_from_the_loss_and_the_gradient(name):
    module = module_for(LOSSES[name]())
    batch = four_queries()
    pair = {key: value[[0, 3]] for key, value in batch.items()}
    first_alone = {key: value[:1] for key, value in pair.items()}
    weighted_loss, weighted_grad = loss_and_gradient(
        module, {**pair, "weights": torch.tensor([2.0, 0.0])}
    )
    alone_loss, alone_grad = loss_and_gradient(module, first_alone)
    torch.testing.assert_close(weighted_loss, alone_loss)
    torch.testing.assert_close(weighted_grad, alone_grad)
    other_loss, _ = loss_and_gradient(module, {key: value[1:] for key, value in pair.items()})
    assert not torch.isclose(alone_loss, other_loss)  # the two queries' losses differ


def listnet_by_hand(scores, labels, mask):
    """ListNet's -Σ softmax(r)_i · log softmax(s)_i of one query's real documents, or None for
    a query without a preference pair (docs/architecture.md#validity-and-reduction)."""
    s, r = scores[mask], labels[mask]
    if r.max() == r.min():
        return None
    return -(r.softmax(0) * s.log_softmax(0)).sum()


def test_the_weighted_listnet_loss_and_its_gradient_match_a_float64_oracle():
    module = module_for(ListNetLoss()).double()
    batch = {**four_queries(torch.float64), "weights": torch.tensor([0.5, 3.0, 7.0, 1.25])}
    loss, gradient = loss_and_gradient(module, batch)

    weight = module.ranker.linear.weight.detach().clone().requires_grad_(True)
    bias = module.ranker.linear.bias.detach()
    scores = batch["features"] @ weight[0] + bias
    terms = [
        (w, listnet_by_hand(s, r, m))
        for w, s, r, m in zip(batch["weights"], scores, batch["labels"], batch["mask"], strict=True)
    ]
    valid = [(w, value) for w, value in terms if value is not None]
    expected = sum(w * value for w, value in valid) / sum(w for w, _ in valid)
    expected.backward()
    assert len(valid) == 3
    torch.testing.assert_close(loss, expected.detach(), rtol=1e-12, atol=0)
    torch.testing.assert_close(gradient, weight.grad, rtol=1e-12, atol=1e-15)


def test_without_weights_the_training_step_is_the_batch_loss_and_the_reduction_is_restored():
    loss = ListNetLoss()
    module = module_for(loss)
    batch = four_queries()
    assert torch.equal(module.training_step(batch, 0), module.batch_loss(batch))
    module.training_step({**batch, "weights": torch.rand(4)}, 0)
    assert loss.reduction == loss.options["reduction"] == "mean"
    assert module.batch_loss(batch).shape == ()


def test_the_reduction_is_restored_when_the_loss_raises():
    loss = DominationLoss()
    with pytest.raises(RuntimeError, match="inside"), per_query_values(loss):
        assert loss.reduction == "none"
        raise RuntimeError("inside")
    assert loss.reduction == "mean"


def test_weighted_query_loss_follows_the_losss_reduction():
    per_query = torch.tensor([2.0, 0.0, 5.0])
    valid = torch.tensor([True, False, True])
    weights = torch.tensor([3.0, 7.0, 1.0])
    assert weighted_query_loss(per_query, weights, valid, "sum").item() == 11.0
    assert weighted_query_loss(per_query, weights, valid, "mean").item() == 11.0 / 4.0
    nothing = weighted_query_loss(per_query, torch.tensor([0.0, 7.0, 0.0]), valid, "mean")
    assert nothing.item() == 0.0  # only an invalid query weighs: a zero, not 0 / 0


def test_a_sum_loss_gives_the_weighted_sum():
    module = module_for(RankNetLoss(reduction="sum"))
    batch = four_queries()
    plain = module.training_step(batch, 0)
    doubled = module.training_step({**batch, "weights": torch.full((4,), 2.0)}, 0)
    torch.testing.assert_close(doubled, 2 * plain)


class ScalarLoss(nn.Module):
    """A loss of the user's own with no reduction option."""

    def forward(self, scores, labels, mask):
        return scores.sum()


@pytest.mark.parametrize(
    "loss, named",
    [
        (DominationLoss(pool=True), "DominationLoss \\(pool=True\\)"),
        (ScalarLoss(), "ScalarLoss \\(reduction=None\\)"),
        (ListNetLoss(reduction="none"), "ListNetLoss \\(reduction='none'\\)"),
    ],
)
def test_a_loss_without_per_query_values_is_refused_naming_it(loss, named):
    message = f"{named} gives no per-query loss values.*need a per-query loss"
    with pytest.raises(ValueError, match=message):
        module_for(loss, query_weights=True)  # at set-up
    module = module_for(loss)  # unweighted: accepted as before
    with pytest.raises(ValueError, match=message):  # at the first weighted batch
        module.training_step({**four_queries(), "weights": torch.ones(4)}, 0)


def test_the_pooled_domination_loss_trains_unweighted_as_before():
    module = module_for(DominationLoss(pool=True))
    assert module.training_step(four_queries(), 0).shape == ()


def test_a_click_batch_with_weights_is_refused():
    module = module_for(ListNetLoss())
    batch = {**four_queries(), "weights": torch.ones(4), "clicks": torch.zeros(4, 5)}
    with pytest.raises(ValueError, match="click batch carries query weights"):
        module.training_step(batch, 0)


def test_a_full_batch_solver_refuses_weights():
    module = FullBatchModule(CountingSolver, RankNetLoss(), n_features=3)
    weighted = {**four_queries(), "weights": torch.ones(4)}
    module.trainer = SimpleNamespace(datamodule=SimpleNamespace(full_batch=lambda _: weighted))
    with pytest.raises(ValueError, match="CountingSolver fits the unweighted objective"):
        module.on_fit_start()
