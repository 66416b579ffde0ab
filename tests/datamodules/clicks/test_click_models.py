"""Every click model against its float64 oracle (tests/oracles_clicks.py): the simulated click
rate of each position within 5 standard errors of the exact rate, and the propensities equal to
the oracle's examination probabilities."""

from __future__ import annotations

import math

import pytest
import torch

from differank.datamodules.clicks.cascade import CascadeModel
from differank.datamodules.clicks.dcm import DependentClickModel
from differank.datamodules.clicks.examination import browsing_table, examination_curve
from differank.datamodules.clicks.pbm import PositionBasedModel
from differank.datamodules.clicks.trust import TrustBiasModel
from differank.datamodules.clicks.ubm import UserBrowsingModel
from tests.oracles_clicks import pbm_oracle, scan_oracle, trust_oracle, ubm_oracle, ubm_walk

MAX_LABEL = 2
# three shown lists of 6 slots; the last has 4 documents (2 padding slots)
LABELS = torch.tensor(
    [[2, 0, 1, 0, 2, 1], [0, 0, 0, 1, 0, 2], [1, 2, 0, 0, 0, 0]], dtype=torch.float64
)
MASK = torch.tensor([[True] * 6, [True] * 6, [True] * 4 + [False] * 2])
SESSIONS = 20_000


def oracle_of(model, labels):
    """(rates, examination) of one list of real labels under ``model``'s parameters."""
    n = len(labels)
    if isinstance(model, TrustBiasModel):
        return trust_oracle(
            labels,
            MAX_LABEL,
            model.examination_by_position.tolist(),
            model.eps_plus.tolist(),
            model.eps_minus.tolist(),
        )
    if isinstance(model, PositionBasedModel):
        return pbm_oracle(labels, MAX_LABEL, model.examination_by_position.tolist())
    if isinstance(model, (CascadeModel, DependentClickModel)):
        return scan_oracle(labels, MAX_LABEL, model.after_click.tolist()[:n], model.after_skip)
    return ubm_oracle(labels, MAX_LABEL, model.gamma.tolist())


MODELS = {
    "pbm_eye_eta1": lambda: PositionBasedModel(max_label=MAX_LABEL, eta=1.0, positions=6),
    "pbm_inverse_eta2": lambda: PositionBasedModel(
        max_label=MAX_LABEL, eta=2.0, examination="inverse", positions=6
    ),
    "trust": lambda: TrustBiasModel(max_label=MAX_LABEL, eta=1.0, positions=6),
    "cascade": lambda: CascadeModel(max_label=MAX_LABEL, positions=6),
    "cascade_abandon": lambda: CascadeModel(max_label=MAX_LABEL, continuation=0.8, positions=6),
    "dcm": lambda: DependentClickModel(
        max_label=MAX_LABEL, continuation_after_click=[0.9, 0.8, 0.7, 0.6, 0.5, 0.4], positions=6
    ),
    "ubm_eye": lambda: UserBrowsingModel(max_label=MAX_LABEL, eta=1.0, positions=6),
    "ubm_inverse_eta2": lambda: UserBrowsingModel(
        max_label=MAX_LABEL, eta=2.0, examination="inverse", positions=6
    ),
}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_simulated_click_rates_match_the_oracle(name):
    model = MODELS[name]()
    labels, mask = LABELS.repeat(SESSIONS, 1), MASK.repeat(SESSIONS, 1)
    clicks = model.simulate(labels, mask, torch.Generator().manual_seed(7))
    assert set(clicks.unique().tolist()) <= {0.0, 1.0}
    assert not clicks[~mask].any(), "a padding slot was clicked"
    rates = clicks.view(SESSIONS, *LABELS.shape).mean(0)
    for q in range(len(LABELS)):
        n = int(MASK[q].sum())
        expected, _ = oracle_of(model, LABELS[q, :n].tolist())
        for k in range(n):
            p = expected[k]
            tolerance = 5 * math.sqrt(max(p * (1 - p), 0.0) / SESSIONS) + 1e-9
            assert abs(float(rates[q, k]) - p) <= tolerance, (name, q, k, float(rates[q, k]), p)


@pytest.mark.parametrize("name", sorted(MODELS))
def test_propensities_are_the_oracle_examination_probabilities(name):
    model = MODELS[name]()
    propensities = model.propensities(LABELS, MASK)
    assert propensities.dtype == torch.float64
    assert torch.equal(propensities[~MASK], torch.ones(int((~MASK).sum()), dtype=torch.float64))
    for q in range(len(LABELS)):
        n = int(MASK[q].sum())
        _, examined = oracle_of(model, LABELS[q, :n].tolist())
        torch.testing.assert_close(
            propensities[q, :n], torch.tensor(examined, dtype=torch.float64), rtol=1e-12, atol=0
        )


def test_the_same_generator_seed_gives_the_same_clicks_and_another_seed_others():
    model = UserBrowsingModel(max_label=MAX_LABEL, positions=6)
    labels, mask = LABELS.repeat(100, 1), MASK.repeat(100, 1)
    first = model.simulate(labels, mask, torch.Generator().manual_seed(3))
    again = model.simulate(labels, mask, torch.Generator().manual_seed(3))
    other = model.simulate(labels, mask, torch.Generator().manual_seed(4))
    assert torch.equal(first, again) and not torch.equal(first, other)


def test_the_cascade_stops_after_the_first_click():
    model = CascadeModel(max_label=MAX_LABEL, positions=6)
    clicks = model.simulate(LABELS.repeat(500, 1), MASK.repeat(500, 1), torch.Generator())
    assert clicks.sum(1).max() == 1


def test_examination_curves_are_the_documented_values():
    eye = [0.68, 0.61, 0.48, 0.34, 0.28, 0.20, 0.11, 0.10, 0.08, 0.06, 0.06]
    curve = examination_curve("eye_tracking", 11, eta=2.0)
    torch.testing.assert_close(curve, torch.tensor(eye, dtype=torch.float64) ** 2)
    inverse = examination_curve("inverse", 4, eta=0.5)
    expected = torch.tensor([1, 1 / 2, 1 / 3, 1 / 4], dtype=torch.float64) ** 0.5
    torch.testing.assert_close(inverse, expected)
    table = browsing_table("eye_tracking", 10, eta=1.0)
    assert table[3, :4].tolist() == [1.0, 0.77, 0.42, 0.82]  # ULTRA's row for position 4


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: PositionBasedModel(max_label=2, eta=-1.0), "eta"),
        (lambda: PositionBasedModel(max_label=2, examination="eyes"), "examination must be one of"),
        (lambda: CascadeModel(max_label=2, continuation=1.5), "continuation"),
        (lambda: TrustBiasModel(max_label=2, positions=3, eps_minus=[0.1, 0.2]), "eps_minus"),
        (lambda: UserBrowsingModel(max_label=2, positions=11), "clicks.top_k <= 10"),
        (lambda: PositionBasedModel(max_label=0), "max_label"),
    ],
)
def test_bad_options_are_refused_with_the_option_named(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_lists_longer_than_the_model_are_refused():
    model = PositionBasedModel(max_label=2, positions=4)
    with pytest.raises(ValueError, match="clicks.top_k"):
        model.simulate(LABELS, MASK)


def test_the_loop_free_user_browsing_model_clicks_as_the_step_by_step_walk():
    model = UserBrowsingModel(max_label=MAX_LABEL, eta=1.0, positions=6)
    labels, mask = LABELS.float().repeat(200, 1), MASK.repeat(200, 1)
    uniforms = torch.rand(*labels.shape, 1, generator=torch.Generator().manual_seed(9))
    clicks = model.sample(labels, mask, uniforms)
    assert clicks.tolist() == ubm_walk(model, labels, mask, uniforms)
    assert clicks.sum(1).max() > 1  # sessions with several clicks are covered
