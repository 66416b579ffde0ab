"""The click validation metrics of ``ultr.select=clicks`` (rankers/metrics/clicks.py): the IPS
estimate of DCG@k against hand-computed float64 values and a loop oracle, its unbiasedness under
the position-based model, the held-out log-likelihood, and the epoch accumulator."""

from __future__ import annotations

import math

import pytest
import torch

from differank.losses.unbiased import DLA, IPS, RegressionEM, TwoTower
from differank.rankers.metrics.clicks import ClickValidation, click_log_likelihood, ips_dcg


def ips_dcg_oracle(scores, clicks, propensities, mask, k, clip):
    """One query and one session at a time, in Python floats: rank by score (ties: shown
    order), gain c / max(θ, 1/clip) / log2(rank + 2) in the top k, mean over sessions."""
    values = []
    for b in range(scores.shape[0]):
        real = [i for i in range(scores.shape[1]) if mask[b, i]]
        ranked = sorted(real, key=lambda i: (-float(scores[b, i]), i))
        per_session = []
        for s in range(clicks.shape[1]):
            total = 0.0
            for rank, i in enumerate(ranked[:k]):
                theta = max(float(propensities[b, i]), 1.0 / clip)
                total += float(clicks[b, s, i]) / theta / math.log2(rank + 2)
            per_session.append(total)
        values.append(sum(per_session) / len(per_session))
    return torch.tensor(values, dtype=torch.float64)


def test_ips_dcg_equals_a_hand_computed_batch_in_float64():
    """Query 0: the third document's θ = 0.004 is clipped to 1/100, the document ranked third
    is past k = 2, the padding slot's click is ignored; query 1: tied scores keep the shown
    order."""
    scores = torch.tensor([[0.2, 0.9, 0.5, 7.0], [1.0, 1.0, 0.0, 0.0]], dtype=torch.float64)
    mask = torch.tensor([[True, True, True, False], [True, True, True, True]])
    propensities = torch.tensor([[1.0, 0.5, 0.004, 1.0], [1.0, 0.5, 0.25, 0.2]])
    clicks = torch.tensor(
        [
            [[1.0, 0.0, 1.0, 1.0], [0.0, 1.0, 1.0, 1.0]],
            [[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 1.0]],
        ]
    )
    value = ips_dcg(scores, clicks, propensities, mask, k=2, clip=100.0)
    # query 0: ranks 1, 2, 0; weights (mean clicks / θ) 0.5, 1, 100 -> 1/log2 2 + 100/log2 3
    # query 1: ranks 0, 1, 2, 3; weights 0, 1, 0, 2.5 -> 0/log2 2 + 1/log2 3 (2.5 is past k)
    expected = torch.tensor([1.0 + 100.0 / math.log2(3), 1.0 / math.log2(3)], dtype=torch.float64)
    assert value.dtype == torch.float64
    torch.testing.assert_close(value, expected, rtol=0, atol=1e-12)
    torch.testing.assert_close(
        value, ips_dcg_oracle(scores, clicks, propensities, mask, 2, 100.0), rtol=0, atol=1e-12
    )


@pytest.mark.parametrize("k", [1, 3, 10])
def test_ips_dcg_equals_the_loop_oracle_on_random_batches(k):
    generator = torch.Generator().manual_seed(k)
    scores = torch.randn(6, 7, generator=generator, dtype=torch.float64)
    scores[0, :3] = 0.5  # ties
    mask = torch.rand(6, 7, generator=generator) < 0.8
    mask[:, 0] = True
    propensities = torch.rand(6, 7, generator=generator) * 0.99 + 0.01
    clicks = (torch.rand(6, 4, 7, generator=generator) < 0.3).float()
    value = ips_dcg(scores, clicks, propensities, mask, k=k, clip=20.0)
    oracle = ips_dcg_oracle(scores, clicks, propensities, mask, k, 20.0)
    torch.testing.assert_close(value, oracle, rtol=0, atol=1e-12)


def test_ips_dcg_is_unbiased_for_the_dcg_of_the_relevance_probabilities():
    """Clicks of the position-based model, P(c_i) = θ_i γ_i: the mean IPS estimate over many
    sessions is DCG@k with gains γ (θ ≥ 1/clip: nothing clipped)."""
    gamma = torch.tensor([0.2, 0.9, 0.5, 0.7], dtype=torch.float64)
    theta = torch.tensor([1.0, 0.6, 0.3, 0.1], dtype=torch.float64)
    scores = torch.tensor([[0.1, 0.3, 0.4, 0.2]], dtype=torch.float64)  # ranks 3, 1, 0, 2
    generator = torch.Generator().manual_seed(0)
    sessions = 400_000
    clicks = torch.rand(1, sessions, 4, generator=generator, dtype=torch.float64) < theta * gamma
    mask = torch.ones(1, 4, dtype=torch.bool)
    value = ips_dcg(scores, clicks.double(), theta.unsqueeze(0), mask, k=3, clip=100.0)
    truth = 0.5 / math.log2(2) + 0.9 / math.log2(3) + 0.7 / math.log2(4)
    assert abs(float(value) - truth) < 0.01
    naive = ips_dcg(scores, clicks.double(), torch.ones(1, 4), mask, k=3, clip=100.0)
    assert abs(float(naive) - truth) > 0.3  # without the propensities: biased


def test_ips_dcg_refuses_clicks_without_a_session_axis():
    with pytest.raises(ValueError, match=r"\[B, S, L\]"):
        ips_dcg(torch.zeros(2, 3), torch.zeros(2, 3), torch.ones(2, 3), torch.ones(2, 3), 3, 10.0)


def test_the_click_log_likelihood_equals_a_hand_computed_batch():
    probabilities = torch.tensor([[0.5, 0.25, 0.9]])
    clicks = torch.tensor([[[1.0, 0.0, 1.0], [0.0, 0.0, 1.0]]])  # the third slot is padding
    mask = torch.tensor([[True, True, False]])
    value = click_log_likelihood(probabilities, clicks, mask)
    expected = 2 * math.log(0.5) + 2 * math.log(0.75)
    torch.testing.assert_close(value, torch.tensor([expected], dtype=torch.float64))


def click_batch(seed, queries=3, sessions=2, length=4):
    generator = torch.Generator().manual_seed(seed)
    mask = torch.ones(queries, length, dtype=torch.bool)
    mask[0, -1] = False
    positions = torch.arange(length).expand(queries, length).masked_fill(~mask, -1)
    return {
        "clicks": (torch.rand(queries, sessions, length, generator=generator) < 0.4).float(),
        "positions": positions,
        "propensities": torch.tensor([1.0, 0.5, 0.25, 0.125]).expand(queries, length),
        "mask": mask,
    }


def test_click_validation_averages_over_queries_and_shown_slots_across_batches():
    metric = ClickValidation(k=3, clip=100.0)
    tower = TwoTower(max_positions=4)
    with torch.no_grad():
        tower.position_bias.copy_(torch.tensor([0.0, -0.5, -1.0, -2.0]))
    batches = [click_batch(0), click_batch(1, queries=2)]
    all_scores = [torch.randn(3, 4, generator=torch.Generator().manual_seed(9)), torch.zeros(2, 4)]
    for scores, batch in zip(all_scores, batches, strict=True):
        metric.update(scores, batch, tower)
    values = metric.compute()
    dcg = torch.cat(
        [
            ips_dcg(s, b["clicks"], b["propensities"], b["mask"], 3, 100.0)
            for s, b in zip(all_scores, batches, strict=True)
        ]
    )
    torch.testing.assert_close(values["click_dcg@3"], dcg.mean())
    loglik = sum(
        click_log_likelihood(
            tower.click_probabilities(s, b["positions"]), b["clicks"], b["mask"]
        ).sum()
        for s, b in zip(all_scores, batches, strict=True)
    )
    slots = sum(int(b["mask"].sum()) * b["clicks"].shape[1] for b in batches)
    torch.testing.assert_close(values["click_loglik"], loglik / slots)
    metric.reset()
    assert metric.compute() == {}


def test_click_validation_reads_ips_fixed_propensities_and_else_the_logged_ones():
    batch = click_batch(2)
    scores = torch.randn(3, 4, generator=torch.Generator().manual_seed(3))
    known = [1.0, 0.9, 0.8, 0.7]
    fixed, logged = ClickValidation(k=4, clip=100.0), ClickValidation(k=4, clip=100.0)
    fixed.update(scores, batch, IPS(propensities=known))
    logged.update(scores, batch, IPS())
    theta = torch.tensor(known).expand(3, 4)
    expected = ips_dcg(scores, batch["clicks"], theta, batch["mask"], 4, 100.0).mean()
    torch.testing.assert_close(fixed.compute()["click_dcg@4"], expected)
    expected = ips_dcg(scores, batch["clicks"], batch["propensities"], batch["mask"], 4, 100.0)
    torch.testing.assert_close(logged.compute()["click_dcg@4"], expected.mean())
    assert "click_loglik" not in logged.compute()  # IPS fits no click model


def test_the_click_models_of_the_estimators_that_fit_one():
    scores = torch.tensor([[0.5, -1.0, 2.0]])
    positions = torch.tensor([[0, 1, 2]])
    tower = TwoTower(max_positions=3)
    dla = DLA(max_positions=3)
    rem = RegressionEM(max_positions=3)
    with torch.no_grad():
        tower.position_bias.copy_(torch.tensor([0.3, -0.2, -1.0]))
        dla.propensity_logits.copy_(torch.tensor([1.0, 1.5, 0.0]))  # θ̂_1/θ̂_0 > 1: capped at 1
        rem.propensities.copy_(torch.tensor([0.9, 0.5, 0.2]))
    torch.testing.assert_close(
        tower.click_probabilities(scores, positions),
        torch.sigmoid(scores + torch.tensor([0.3, -0.2, -1.0])),
    )
    torch.testing.assert_close(
        dla.click_probabilities(scores, positions),
        torch.tensor([1.0, 1.0, math.exp(-1.0)]) * torch.sigmoid(scores),
    )
    torch.testing.assert_close(
        rem.click_probabilities(scores, positions),
        torch.tensor([0.9, 0.5, 0.2]) * torch.sigmoid(scores),
    )
    assert tower.fits_click_model and dla.fits_click_model and rem.fits_click_model
    assert not IPS().fits_click_model
    with pytest.raises(ValueError, match="fits no click model"):
        IPS().click_probabilities(scores, positions)


@pytest.mark.parametrize("k, clip", [(0, 10.0), (True, 10.0), (3, 0.5)])
def test_bad_selection_settings_are_named(k, clip):
    with pytest.raises(ValueError, match="ultr.select_"):
        ClickValidation(k, clip)
