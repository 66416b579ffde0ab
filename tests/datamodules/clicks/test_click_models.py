"""Every click model against its float64 oracle (tests/oracles_clicks.py): the simulated click
rate of each position within 5 standard errors of the exact rate, and the propensities equal to
the oracle's examination probabilities."""

from __future__ import annotations

import math

import pytest
import torch
from hydra.utils import instantiate

from differank.datamodules.clicks.cascade import CascadeModel
from differank.datamodules.clicks.cbcm import ComparisonClickModel
from differank.datamodules.clicks.dcm import DependentClickModel
from differank.datamodules.clicks.examination import browsing_table, examination_curve
from differank.datamodules.clicks.pbm import PositionBasedModel
from differank.datamodules.clicks.trust import TrustBiasModel
from differank.datamodules.clicks.ubm import UserBrowsingModel
from differank.rankers.run.runs import compose_config
from tests.oracles_clicks import (
    cbcm_oracle,
    cbcm_walk,
    pbm_oracle,
    scan_oracle,
    trust_oracle,
    ubm_oracle,
    ubm_walk,
)

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
    if isinstance(model, ComparisonClickModel):
        rates, examined, _ = cbcm_of(model, labels)
        return rates, examined
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


def cbcm_of(model, labels):
    """(rates, examined, sessions) of one list of real labels under a CBCM's parameters."""
    return cbcm_oracle(
        labels,
        MAX_LABEL,
        model.viewport,
        model.comparison,
        model.after_click,
        model.after_skip,
        model.neg_click_prob,
        model.pos_click_prob,
    )


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
    "cbcm": lambda: ComparisonClickModel(
        max_label=MAX_LABEL, viewport=2, continuation=0.9, positions=6
    ),
    "cbcm_wide_strong": lambda: ComparisonClickModel(
        max_label=MAX_LABEL, viewport=3, comparison=2.0, continuation_after_click=0.7, positions=6
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


CBCMS = ["cbcm", "cbcm_wide_strong"]


@pytest.mark.parametrize("name", CBCMS)
def test_cbcm_session_probabilities_are_the_oracle_s_exactly_and_sampled_as_often(name):
    """Every session the oracle enumerates (a click vector of one list) has the model's exact
    probability, the probabilities sum to 1, and the simulated sessions occur as often."""
    model = MODELS[name]()
    clicks = model.simulate(
        LABELS.repeat(SESSIONS, 1), MASK.repeat(SESSIONS, 1), torch.Generator().manual_seed(11)
    ).view(SESSIONS, *LABELS.shape)
    for q in range(len(LABELS)):
        n = int(MASK[q].sum())
        _, _, sessions = cbcm_of(model, LABELS[q, :n].tolist())
        assert math.isclose(sum(sessions.values()), 1.0, abs_tol=1e-12)
        vectors = torch.zeros(len(sessions), LABELS.shape[1], dtype=torch.float64)
        vectors[:, :n] = torch.tensor(list(sessions), dtype=torch.float64)
        exact = model.session_probability(
            LABELS[q].expand(len(sessions), -1), MASK[q].expand(len(sessions), -1), vectors
        )
        expected = torch.tensor(list(sessions.values()), dtype=torch.float64)
        torch.testing.assert_close(exact, expected, rtol=1e-12, atol=1e-15)
        seen: dict[tuple, int] = {}
        for row in clicks[:, q, :n].to(torch.int64).tolist():
            seen[tuple(row)] = seen.get(tuple(row), 0) + 1
        assert set(seen) <= set(sessions), "a session the oracle says cannot happen"
        for vector, p in sessions.items():
            frequency = seen.get(vector, 0) / SESSIONS
            tolerance = 5 * math.sqrt(p * (1 - p) / SESSIONS) + 1e-9
            assert abs(frequency - p) <= tolerance, (name, q, vector, frequency, p)


@pytest.mark.parametrize("name", CBCMS)
def test_the_loop_free_cbcm_clicks_as_the_step_by_step_walk(name):
    model = MODELS[name]()
    labels, mask = LABELS.repeat(300, 1), MASK.repeat(300, 1)
    uniforms = torch.rand(*labels.shape, 2, generator=torch.Generator().manual_seed(13))
    clicks = model.sample(labels, mask, uniforms)
    assert clicks.tolist() == cbcm_walk(model, labels, mask, uniforms)
    assert clicks.sum(1).max() > 1  # sessions with several clicks are covered


def test_cbcm_session_probability_is_zero_for_a_click_on_padding():
    model = MODELS["cbcm"]()
    clicks = torch.zeros_like(LABELS)
    clicks[2, 5] = 1.0  # list 2 has four documents
    assert model.session_probability(LABELS, MASK, clicks)[2] == 0


def test_cbcm_without_comparison_in_viewports_of_one_is_the_dcm():
    cbcm = ComparisonClickModel(
        max_label=MAX_LABEL, viewport=1, comparison=0.0, continuation_after_click=0.6, positions=6
    )
    dcm = DependentClickModel(max_label=MAX_LABEL, continuation_after_click=0.6, positions=6)
    torch.testing.assert_close(
        cbcm.propensities(LABELS, MASK), dcm.propensities(LABELS, MASK), rtol=1e-12, atol=0
    )
    uniforms = torch.rand(*LABELS.shape, 2, generator=torch.Generator().manual_seed(5))
    assert torch.equal(cbcm.sample(LABELS, MASK, uniforms), dcm.sample(LABELS, MASK, uniforms))


def test_cbcm_clicks_a_document_less_beside_a_better_one():
    model = ComparisonClickModel(max_label=MAX_LABEL, viewport=2, comparison=1.0, positions=2)
    labels = torch.tensor([[1.0, 2.0], [1.0, 0.0]], dtype=torch.float64)
    read = model.click_given_read(labels, torch.ones(2, 2, dtype=torch.bool))
    alpha = model.attractiveness(labels, torch.ones(2, 2))
    # the label-1 document: beside a label-2 one its click falls by α(1)/α(2); beside a
    # label-0 one it is the viewport's best and keeps α(1)
    assert math.isclose(float(read[0, 0]), float(alpha[0, 0] ** 2 / alpha[0, 1]), rel_tol=1e-12)
    assert math.isclose(float(read[1, 0]), float(alpha[1, 0]), rel_tol=1e-12)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"viewport": 0}, "viewport"),
        ({"viewport": 1.5}, "viewport"),
        ({"comparison": -1.0}, "comparison"),
        ({"comparison": float("inf")}, "comparison"),
        ({"continuation": 1.2}, "continuation"),
        ({"continuation_after_click": -0.1}, "continuation_after_click"),
    ],
)
def test_bad_cbcm_options_are_refused_with_the_option_named(options, message):
    with pytest.raises(ValueError, match=message):
        ComparisonClickModel(max_label=MAX_LABEL, **options)


def test_baidu_s_measured_curve_is_the_published_values_and_refuses_longer_lists():
    curve = examination_curve("baidu", 5, eta=1.0)
    assert curve.tolist() == [1.0, 0.674, 0.414, 0.293, 0.208]
    torch.testing.assert_close(examination_curve("baidu", 3, eta=2.0), curve[:3] ** 2)
    with pytest.raises(ValueError, match=r"knows .* for 5 positions, the lists have 6.*vector"):
        PositionBasedModel(max_label=MAX_LABEL, examination="baidu", positions=6)
    with pytest.raises(ValueError, match="user-browsing model needs a table"):
        UserBrowsingModel(max_label=MAX_LABEL, examination="baidu", positions=5)
    with pytest.raises(ValueError, match="user-browsing model needs a table"):
        UserBrowsingModel(max_label=MAX_LABEL, examination=[1.0, 0.5], positions=2)


def test_a_vector_examination_curve_is_used_as_given_and_raised_to_eta():
    vector = [1.0, 0.674, 0.414, 0.293, 0.208, 0.15, 0.1]
    model = PositionBasedModel(max_label=MAX_LABEL, eta=2.0, examination=vector, positions=6)
    expected = torch.tensor(vector[:6], dtype=torch.float64) ** 2
    assert torch.equal(model.examination_by_position, expected)
    _, examined = oracle_of(model, LABELS[0].tolist())
    torch.testing.assert_close(
        model.propensities(LABELS, MASK)[0], torch.tensor(examined, dtype=torch.float64)
    )


@pytest.mark.parametrize(
    ("vector", "message"),
    [
        ([1.0, 0.5], r"clicks.propensity has 2 values, the lists have 3 positions"),
        ([1.0, 0.0, 0.3], r"clicks.propensity\[1\] \(position 2\) is 0.0: .* \(0, 1\]"),
        ([1.0, -0.2, 0.3], r"clicks.propensity\[1\] \(position 2\) is -0.2"),
        ([1.0, float("nan"), 0.3], r"clicks.propensity\[1\] \(position 2\) is nan: .* finite"),
        ([1.0, 0.5, float("inf")], r"clicks.propensity\[2\] \(position 3\) is inf"),
        ([1.2, 0.5, 0.3], r"clicks.propensity\[0\] \(position 1\) is 1.2"),
        ([1.0, "high", 0.3], r"clicks.propensity\[1\] \(position 2\) is 'high'"),
        ([1.0, True, 0.3], r"clicks.propensity\[1\] \(position 2\) is True"),
    ],
)
def test_a_bad_examination_vector_is_refused_naming_the_option_and_position(vector, message):
    with pytest.raises(ValueError, match=message):
        PositionBasedModel(max_label=MAX_LABEL, examination=vector, positions=3)


@pytest.mark.parametrize(
    ("overrides", "expected"),
    [
        (["clicks=pbm", "clicks.propensity=baidu", "clicks.top_k=5"], "baidu"),
        (["clicks=trust", "clicks.propensity=[1,0.6,0.5]", "clicks.top_k=3"], [1.0, 0.6, 0.5]),
        (["clicks=pbm", "clicks.model.examination=inverse", "clicks.top_k=2"], [1.0, 0.5]),
    ],
)
def test_clicks_propensity_chooses_the_curve_from_the_command_line(tmp_path, overrides, expected):
    cfg = compose_config(overrides, run_dir=tmp_path)
    model = instantiate(cfg.clicks.model)(max_label=MAX_LABEL, positions=int(cfg.clicks.top_k))
    if expected == "baidu":
        expected = [1.0, 0.674, 0.414, 0.293, 0.208]
    assert model.examination_by_position.tolist() == expected


def test_clicks_cbcm_composes_into_the_comparison_click_model(tmp_path):
    cfg = compose_config(["clicks=cbcm", "clicks.model.viewport=2"], run_dir=tmp_path)
    model = instantiate(cfg.clicks.model)(max_label=MAX_LABEL, positions=int(cfg.clicks.top_k))
    assert isinstance(model, ComparisonClickModel) and model.viewport == 2
    assert cfg.clicks.mode == "online"
