"""The paired bootstrap over queries: its interval, its verdicts and its errors."""

from __future__ import annotations

import pytest
import torch

from differank.rankers.metrics.significance import paired_bootstrap


def test_the_interval_matches_the_normal_approximation_of_the_mean_difference():
    generator = torch.Generator().manual_seed(1)
    b = torch.rand(800, generator=generator, dtype=torch.float64)
    a = b + 0.02 + 0.1 * torch.randn(800, generator=generator, dtype=torch.float64)
    result = paired_bootstrap(a, b, resamples=4000)
    differences = a - b
    half_width = 1.96 * differences.std() / len(differences) ** 0.5
    assert result.mean == pytest.approx(float(differences.mean()), abs=1e-12)
    assert result.low == pytest.approx(float(differences.mean() - half_width), abs=0.002)
    assert result.high == pytest.approx(float(differences.mean() + half_width), abs=0.002)
    assert result.queries == 800 and result.confidence == 0.95


@pytest.mark.parametrize(
    ("shift", "verdict"), [(0.05, "better"), (-0.05, "worse"), (0.0, "indistinguishable")]
)
def test_the_verdict_says_whether_the_interval_excludes_zero(shift, verdict):
    generator = torch.Generator().manual_seed(2)
    b = torch.rand(500, generator=generator, dtype=torch.float64)
    noise = 0.05 * torch.randn(500, generator=generator, dtype=torch.float64)
    noise -= noise.mean()  # the sample mean difference is exactly `shift`
    assert paired_bootstrap(b + shift + noise, b).verdict == verdict


def test_the_seed_fixes_the_resamples_and_pairing_matters():
    generator = torch.Generator().manual_seed(3)
    difficulty = torch.rand(300, generator=generator, dtype=torch.float64)
    a, b = difficulty + 0.01, difficulty  # same queries: a constant gain is certain
    first, second = paired_bootstrap(a, b, seed=5), paired_bootstrap(a, b, seed=5)
    assert first == second
    assert first.low == pytest.approx(0.01) and first.high == pytest.approx(0.01)
    unpaired = paired_bootstrap(a, b[torch.randperm(300, generator=generator)])
    assert unpaired.high - unpaired.low > 0.05  # breaking the pairing lets difficulty in


@pytest.mark.parametrize(
    ("a", "b", "options", "message"),
    [
        ([1.0, 2.0], [1.0], {}, "one entry per query in both, got 2 and 1"),
        ([], [], {}, "no queries"),
        ([1.0, float("nan")], [1.0, 1.0], {}, "must be finite"),
        ([1.0], [1.0], {"confidence": 1.0}, r"confidence must be in \(0, 1\)"),
        ([1.0], [1.0], {"resamples": 0}, "resamples must be >= 1"),
    ],
)
def test_bad_input_is_refused_with_the_reason(a, b, options, message):
    with pytest.raises(ValueError, match=message):
        paired_bootstrap(torch.tensor(a), torch.tensor(b), **options)
