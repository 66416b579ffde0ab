"""The click estimators of differank.losses.unbiased: each one against its float64 oracle
(tests/oracles_unbiased.py), IPS's unbiasedness (and naive's bias) under a position-based click
model sampled here from its equation, DLA's learned propensities, and the clear errors."""

from __future__ import annotations

from functools import partial

import pytest
import torch

from differank.losses import DominationLoss, RankNetLoss, SigmoidBCELoss, SoftmaxLoss
from differank.losses.unbiased import (
    DLA,
    IPS,
    DoublyRobust,
    Naive,
    PairwiseDebiasing,
    RegressionEM,
    TwoTower,
)
from tests import oracles_unbiased as oracles
from tests.oracles import ranknet_oracle
from tests.oracles_standard import sigmoid_bce_oracle, softmax_oracle

BASES = [
    (SoftmaxLoss(), softmax_oracle),
    (SigmoidBCELoss(max_label=4.0), partial(sigmoid_bce_oracle, max_label=4.0)),
]


def click_batch(seed=0, batch=6, length=5):
    """Scores [B, L] (float64, requiring grad), random clicks, shown positions (a permutation of
    the shown slots, -1 for one real document left unshown in query 1) and padding."""
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(batch, length, generator=g, dtype=torch.float64)
    mask = torch.ones(batch, length, dtype=torch.bool)
    mask[2, 3:] = False
    positions = torch.stack([torch.randperm(length, generator=g) for _ in range(batch)])
    positions = positions.masked_fill(~mask, -1)
    positions[2, :3] = torch.tensor([2, 0, 1])
    positions[1, positions[1].argmax()] = -1  # a real document that was not shown
    clicks = (torch.rand(batch, length, generator=g) < 0.4).double()
    clicks = torch.where(mask & (positions >= 0), clicks, 0.0)
    clicks[0, 0], clicks[0, 1] = 1.0, 0.0
    return scores.requires_grad_(), clicks, positions, mask


def assert_close_with_grad(value, oracle, inputs):
    torch.testing.assert_close(value, oracle, rtol=1e-9, atol=1e-12)
    got = torch.autograd.grad(value, inputs, allow_unused=True)
    want = torch.autograd.grad(oracle, inputs, allow_unused=True)
    for g, w in zip(got, want, strict=True):
        torch.testing.assert_close(g, w, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("base", BASES, ids=["softmax", "bce"])
@pytest.mark.parametrize("weighting", [False, True])
def test_naive_and_ips_equal_their_oracles(base, weighting):
    loss, oracle = base
    scores, clicks, positions, mask = click_batch()
    value = Naive(label_sum_weighting=weighting)(loss, scores, clicks, positions, mask)
    want = oracles.naive_oracle(oracle, scores, clicks, positions, mask, weighting)
    assert_close_with_grad(value, want, [scores])
    theta = [1.0, 0.5, 0.25, 0.125, 0.02]
    ips = IPS(propensities=theta, clip=20.0, label_sum_weighting=weighting).double()
    value = ips(loss, scores, clicks, positions, mask)
    want = oracles.ips_oracle(oracle, scores, clicks, positions, mask, theta, 20.0, weighting)
    assert_close_with_grad(value, want, [scores])
    logged = torch.rand(scores.shape, dtype=torch.float64) * 0.9 + 0.1
    value = IPS(label_sum_weighting=weighting)(loss, scores, clicks, positions, mask, logged)
    want = oracles.ips_oracle(oracle, scores, clicks, positions, mask, logged, 100.0, weighting)
    assert_close_with_grad(value, want, [scores])


@pytest.mark.parametrize("base", BASES, ids=["softmax", "bce"])
def test_dla_equals_its_oracle_for_both_models(base):
    loss, oracle = base
    scores, clicks, positions, mask = click_batch(1)
    dla = DLA(max_positions=5, clip=6.0).double()
    with torch.no_grad():
        dla.propensity_logits.copy_(torch.tensor([0.0, -0.5, -1.0, -3.0, 0.4]))
    value = dla(loss, scores, clicks, positions, mask)
    want = oracles.dla_oracle(oracle, scores, clicks, positions, mask, dla.propensity_logits, 6.0)
    assert_close_with_grad(value, want, [scores, dla.propensity_logits])


def test_regression_em_equals_its_oracle_and_takes_its_m_step():
    scores, clicks, positions, mask = click_batch(2)
    rem = RegressionEM(max_positions=5, update=0.3).double()
    theta = [0.9, 0.7, 0.5, 0.4, 0.2]
    rem.propensities.copy_(torch.tensor(theta, dtype=torch.float64))
    value = rem(SigmoidBCELoss(), scores, clicks, positions, mask)
    want, new_theta = oracles.rem_oracle(
        sigmoid_bce_oracle, scores, clicks, positions, mask, theta, 0.3
    )
    assert_close_with_grad(value, want, [scores])
    torch.testing.assert_close(rem.propensities, torch.tensor(new_theta, dtype=torch.float64))
    rem.eval()  # no M-step outside training
    rem(SigmoidBCELoss(), scores, clicks, positions, mask)
    torch.testing.assert_close(rem.propensities, torch.tensor(new_theta, dtype=torch.float64))


def test_pairwise_debiasing_equals_its_oracle_and_estimates_its_biases():
    scores, clicks, positions, mask = click_batch(3)
    debias = PairwiseDebiasing(max_positions=5, p=0.5, update=0.5).double()
    t_plus, t_minus = [1.0, 0.8, 0.6, 0.5, 0.3], [1.0, 1.1, 1.2, 1.3, 1.5]
    debias.click_bias.copy_(torch.tensor(t_plus, dtype=torch.float64))
    debias.skip_bias.copy_(torch.tensor(t_minus, dtype=torch.float64))
    debias.eval()
    value = debias(RankNetLoss(), scores, clicks, positions, mask)
    want = oracles.pairwise_oracle(scores, clicks, positions, mask, t_plus, t_minus)
    assert_close_with_grad(value, want, [scores])
    debias.train()
    debias(RankNetLoss(), scores, clicks, positions, mask)
    plus, minus = oracles.pairwise_bias_oracle(
        scores, clicks, positions, mask, t_plus, t_minus, 0.5, 0.5
    )
    torch.testing.assert_close(debias.click_bias, torch.tensor(plus, dtype=torch.float64))
    torch.testing.assert_close(debias.skip_bias, torch.tensor(minus, dtype=torch.float64))


@pytest.mark.parametrize("base", BASES, ids=["softmax", "bce"])
def test_two_tower_equals_its_oracle(base):
    loss, oracle = base
    scores, clicks, positions, mask = click_batch(4)
    tower = TwoTower(max_positions=5).double()
    with torch.no_grad():
        tower.position_bias.copy_(torch.tensor([0.5, 0.0, -0.3, -1.0, -2.0]))
    value = tower(loss, scores, clicks, positions, mask)
    want = oracles.two_tower_oracle(oracle, scores, clicks, positions, mask, tower.position_bias)
    assert_close_with_grad(value, want, [scores, tower.position_bias])


@pytest.mark.parametrize("base", BASES, ids=["softmax", "bce"])
def test_doubly_robust_equals_its_oracle(base):
    loss, oracle = base
    scores, clicks, positions, mask = click_batch(5)
    theta = [1.0, 0.6, 0.3, 0.2, 0.05]
    value = DoublyRobust(propensities=theta, clip=10.0).double()(
        loss, scores, clicks, positions, mask
    )
    want = oracles.dr_oracle(oracle, scores, clicks, positions, mask, theta, 10.0)
    assert_close_with_grad(value, want, [scores])


# ---- a position-based click model, sampled from its equation: P(c) = θ_k · γ ----


def pbm_sessions(gamma, theta, sessions, seed):
    """``sessions`` click vectors per query, each list shown in its fixed order (position =
    index): clicks [sessions·Q, L] with P(c_qi = 1) = θ_i γ_qi."""
    g = torch.Generator().manual_seed(seed)
    probability = (gamma * theta).repeat(sessions, 1)
    return (torch.rand(probability.shape, generator=g, dtype=torch.float64) < probability).double()


def monte_carlo(estimator, loss, scores, clicks, positions, chunks=20):
    """Mean estimator value and gradient over the sessions, and their standard errors from
    ``chunks`` equal slices of them."""
    Q, L = scores.shape
    values, grads = [], []
    for part in clicks.view(chunks, -1, Q, L):
        s = scores.detach().clone().requires_grad_()
        repeated = s.repeat(part.shape[0], 1)
        value = estimator(
            loss,
            repeated,
            part.reshape(-1, L),
            positions.repeat(part.shape[0], 1),
            torch.ones(repeated.shape, dtype=torch.bool),
        )
        (grad,) = torch.autograd.grad(value, s)
        values.append(value.detach())
        grads.append(grad)
    values, grads = torch.stack(values), torch.stack(grads)
    error = lambda x: x.std(dim=0) / chunks**0.5  # noqa: E731
    return values.mean(0), error(values), grads.mean(0), error(grads)


def test_ips_converges_to_the_full_information_loss_and_naive_does_not():
    """With true propensities and 40,000 sessions per query, IPS's loss and gradient (softmax
    loss, label-sum weighted: linear in the labels) agree with the full-information value
    ``Σγ · softmax_loss(s, γ)`` (relevance probabilities as labels) within 4 standard errors;
    clicks as labels (naive) miss it by far more."""
    loss = SoftmaxLoss()
    g = torch.Generator().manual_seed(0)
    Q, L = 4, 6
    gamma = torch.rand(Q, L, generator=g, dtype=torch.float64) * 0.9 + 0.1
    theta = 1.0 / torch.arange(1, L + 1, dtype=torch.float64) ** 1.0  # PBM, η = 1
    scores = torch.randn(Q, L, generator=g, dtype=torch.float64)
    positions = torch.arange(L).expand(Q, L)
    clicks = pbm_sessions(gamma, theta, sessions=40_000, seed=1)
    s = scores.clone().requires_grad_()
    truth = (softmax_oracle(s, gamma, torch.ones(Q, L, dtype=torch.bool)) * gamma.sum(-1)).mean()
    (truth_grad,) = torch.autograd.grad(truth, s)

    ips = IPS(propensities=theta.tolist(), label_sum_weighting=True)
    value, value_error, grad, grad_error = monte_carlo(ips, loss, scores, clicks, positions)
    assert abs(value - truth) < 4 * value_error, (value, truth, value_error)
    assert bool(((grad - truth_grad).abs() < 4 * grad_error + 1e-9).all())
    assert value_error < 0.01 * truth.abs()  # the tolerance is tight, not vacuous

    naive = Naive(label_sum_weighting=True)
    naive_value, naive_error, naive_grad, _ = monte_carlo(naive, loss, scores, clicks, positions)
    assert abs(naive_value - truth) > 20 * (value_error + naive_error)
    assert (naive_grad - truth_grad).abs().max() > 20 * grad_error.max()


def test_dla_learns_the_true_relative_propensities():
    """Free per-document scores and DLA trained jointly on PBM clicks (η = 1, positions shuffled
    per session so position and relevance are not confounded): θ̂_k / θ̂_0 within 0.06 of
    1 / (k + 1) at every position."""
    g = torch.Generator().manual_seed(0)
    Q, L, repeats = 40, 5, 20
    gamma = torch.rand(Q, L, generator=g, dtype=torch.float64) * 0.8 + 0.2
    theta = 1.0 / torch.arange(1, L + 1, dtype=torch.float64)
    scores = torch.zeros(Q, L, dtype=torch.float64, requires_grad=True)
    dla = DLA(max_positions=L).double()
    optimizer = torch.optim.Adam([scores, *dla.parameters()], lr=0.05)
    mask = torch.ones(Q * repeats, L, dtype=torch.bool)
    for _ in range(400):
        positions = torch.rand(Q * repeats, L, generator=g).argsort(dim=1)
        probability = gamma.repeat(repeats, 1) * theta[positions]
        clicks = torch.rand(probability.shape, generator=g, dtype=torch.float64) < probability
        loss = dla(SoftmaxLoss(), scores.repeat(repeats, 1), clicks.double(), positions, mask)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    learned = dla.relative_propensities()
    assert (learned - theta).abs().max() < 0.06, learned


def test_bad_click_batches_are_named():
    scores, clicks, positions, mask = click_batch()
    with pytest.raises(ValueError, match="positions must be an integer"):
        Naive()(SoftmaxLoss(), scores, clicks, positions.double(), mask)
    with pytest.raises(ValueError, match="clicks must match scores"):
        Naive()(SoftmaxLoss(), scores, clicks[:, :2], positions, mask)
    with pytest.raises(ValueError, match="raise its max_positions"):
        DLA(max_positions=3)(SoftmaxLoss(), scores, clicks, positions, mask)
    with pytest.raises(ValueError, match="needs examination propensities"):
        IPS()(SoftmaxLoss(), scores, clicks, positions, mask)
    with pytest.raises(ValueError, match="one propensity per shown position"):
        IPS(propensities=[1.0, 0.5])(SoftmaxLoss(), scores, clicks, positions, mask)
    with pytest.raises(ValueError, match="loss=ranknet"):
        PairwiseDebiasing(max_positions=5)(SoftmaxLoss(), scores, clicks, positions, mask)
    with pytest.raises(ValueError, match="per query"):
        Naive()(DominationLoss(pool=True), scores, clicks, positions, mask)
    with pytest.raises(ValueError, match=r"in \(0, 1\]"):
        IPS(propensities=[1.0, 0.0])
    with pytest.raises(ValueError, match="lr_scale must be"):
        DLA(lr_scale=0.0)
    with pytest.raises(ValueError, match="clip must be"):
        IPS(clip=0.5)
    with pytest.raises(ValueError, match="feature-space"):
        Naive()(SoftmaxLoss(), scores.unsqueeze(-1), clicks, positions, mask)


def test_the_ranknet_base_of_pairwise_debiasing_with_unit_biases_is_ranknet_on_clicks():
    scores, clicks, positions, mask = click_batch(6)
    visible = mask & (positions >= 0)
    value = PairwiseDebiasing(max_positions=5).eval()(
        RankNetLoss(), scores, clicks, positions, mask
    )
    per_query = [
        ranknet_oracle(scores[b][visible[b]], clicks[b][visible[b]].tolist())
        for b in range(scores.shape[0])
    ]
    want = torch.stack(per_query).mean()
    torch.testing.assert_close(value, want)


@pytest.mark.parametrize("value", [float("nan"), 0.0, -0.5, 1.5])
@pytest.mark.parametrize(
    "estimator",
    [IPS(), DoublyRobust(), DoublyRobust(propensities=[1.0, 0.5, 0.25])],
    ids=["ips", "doubly_robust", "doubly_robust_rho"],
)
def test_narrowed_value_logged_propensities_out_of_range_are_refused(estimator, value):
    scores, clicks = torch.zeros(2, 3), torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0]])
    positions, mask = torch.tensor([[0, 1, 2], [0, 1, -1]]), torch.ones(2, 3, dtype=torch.bool)
    logged = torch.tensor([[1.0, 0.5, 0.25], [1.0, value, 1.0]])
    with pytest.raises(ValueError, match=r"propensities\[1, 1\] \(query 1, shown position 1\)"):
        estimator(SoftmaxLoss(), scores, clicks, positions, mask, logged)
    logged[1, 2] = value  # not shown (position -1): never read, not refused
    logged[1, 1] = 0.5
    assert torch.isfinite(estimator(SoftmaxLoss(), scores, clicks, positions, mask, logged))
