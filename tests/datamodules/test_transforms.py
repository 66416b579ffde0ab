"""Feature transforms (data.transform): the signed log1p and the Gaussian-rank map, fitted on the
training split only, cached, recorded in the data fingerprint, and applied by an exported
scorer exactly as the data path applies them."""

import numpy as np
import pytest
import torch
from scipy.special import ndtri

from differank.datamodules.synthetic import SyntheticLetorDataModule
from differank.datamodules.transforms import GAUSSRANK_KNOTS, SignedLog1p, fit, load
from differank.rankers.checkpoints import serving_scorer
from differank.rankers.scorers.linear import LinearRanker

SIZES = dict(n_train_queries=30, n_val_queries=10, n_test_queries=10)


def test_signed_log1p_in_place_float32_and_as_a_module():
    x = np.array([[-9.0, -0.5, 0.0, 0.5, 1e6]], dtype=np.float32)
    expected = np.sign(x) * np.log1p(np.abs(x.astype(np.float64)))
    y = x.copy()
    fit("log1p", x).apply_(y)
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, expected, rtol=1e-6)
    np.testing.assert_allclose(SignedLog1p()(torch.from_numpy(x)).numpy(), y, rtol=1e-6)


def test_gaussrank_maps_mid_ranks_through_the_normal_quantiles():
    train = np.array(
        [[0.0, 5.0, 1.0], [0.0, 5.0, 2.0], [0.0, 5.0, 3.0], [7.0, 5.0, 4.0]], dtype=np.float32
    )
    y = train.copy()
    fit("gaussrank", train).apply_(y)
    # ties share the mid-rank: three zeros at (0 + 3) / 2 / 4, the seven at (3 + 4) / 2 / 4
    np.testing.assert_allclose(y[:, 0], ndtri([3 / 8, 3 / 8, 3 / 8, 7 / 8]), rtol=1e-6)
    assert np.all(y[:, 1] == 0.0)  # a constant feature maps to 0
    np.testing.assert_allclose(y[:, 2], ndtri([1 / 8, 3 / 8, 5 / 8, 7 / 8]), rtol=1e-6)


def test_gaussrank_interpolates_clamps_keeps_nan_and_ignores_it_when_fitting():
    train = np.array([[1.0], [2.0], [np.nan], [3.0]], dtype=np.float32)
    fitted = fit("gaussrank", train)
    x = np.array([[1.5], [-10.0], [10.0], [np.nan], [2.0]], dtype=np.float32)
    y = x.copy()
    fitted.apply_(y)
    low, mid, high = ndtri([1 / 6, 3 / 6, 5 / 6])
    np.testing.assert_allclose(y[[0, 1, 2, 4], 0], [(low + mid) / 2, low, high, mid], rtol=1e-6)
    assert np.isnan(y[3, 0])


def test_gaussrank_of_many_values_uses_a_table_and_approximates_the_exact_map():
    rng = np.random.default_rng(0)
    train = rng.lognormal(size=(20000, 2)).astype(np.float32)
    fitted = fit("gaussrank", train)
    assert fitted.arrays["gaussrank_knots"].shape == (2, GAUSSRANK_KNOTS)
    y = train.copy()
    fitted.apply_(y)
    ranks = train.argsort(0).argsort(0)
    exact = ndtri((ranks + 0.5) / len(train))
    error = np.abs(y - exact)  # linear between knots: largest in the tails' wide gaps
    assert error.mean() < 2e-3 and np.quantile(error, 0.99) < 0.02
    np.testing.assert_allclose(y.min(0), exact.min(0), rtol=1e-6)  # the extremes are knots
    assert np.abs(y).max() <= 5.2


def test_the_torch_module_equals_the_data_path():
    rng = np.random.default_rng(1)
    train = np.concatenate([rng.normal(size=(300, 3)), np.zeros((100, 3))]).astype(np.float32)
    train[:, 2] = np.round(train[:, 2])  # few distinct values
    fitted = fit("gaussrank", train)
    x = np.concatenate([train, 5 * rng.normal(size=(50, 3)), [[np.nan] * 3]]).astype(np.float32)
    y = x.copy()
    fitted.apply_(y)
    served = fitted.module()(torch.from_numpy(x).view(1, -1, 3)).view(-1, 3).numpy()
    np.testing.assert_allclose(served, y, rtol=1e-5, atol=1e-6)
    restored = load("gaussrank", fitted.arrays).module()
    assert torch.equal(restored.knots, fitted.module().knots)
    with pytest.raises(ValueError, match="transform must be one of"):
        fit("quantile", train)


def test_the_datamodule_fits_on_train_only_and_caches_the_fit():
    raw = SyntheticLetorDataModule(**SIZES, normalization="none")
    data = SyntheticLetorDataModule(**SIZES, normalization="none", transform="gaussrank")
    fitted = fit("gaussrank", raw.split_data("train").features)
    for split in ("train", "val", "test"):
        expected = np.array(raw.split_data(split).features)
        fitted.apply_(expected)
        np.testing.assert_array_equal(data.split_data(split).features, expected)
    assert torch.equal(data.feature_transform.knots, fitted.module().knots)
    warm = SyntheticLetorDataModule(**SIZES, normalization="none", transform="gaussrank")
    assert torch.equal(warm.feature_transform.values, data.feature_transform.values)  # cache
    assert raw.feature_transform is None


def test_zscore_is_fitted_after_the_transform_and_export_applies_both():
    data = SyntheticLetorDataModule(**SIZES, transform="log1p")
    train = data.split_data("train").features
    np.testing.assert_allclose(train.mean(0), 0.0, atol=1e-4)
    torch.manual_seed(0)
    ranker = LinearRanker(46)
    torch.nn.init.normal_(ranker.linear.weight)
    scorer = serving_scorer(ranker, data)
    raw = SyntheticLetorDataModule(**SIZES, normalization="none").full_batch("test")
    processed = data.full_batch("test")
    mask = raw["mask"]
    with torch.no_grad():
        torch.testing.assert_close(
            scorer(raw["features"])[mask], ranker(processed["features"])[mask], rtol=1e-5, atol=1e-5
        )


def test_the_fingerprint_names_the_transform_and_a_mismatch_is_refused():
    from differank.rankers.checkpoints import check_same_data, data_fingerprint

    plain = data_fingerprint(SyntheticLetorDataModule(**SIZES))
    logged = data_fingerprint(SyntheticLetorDataModule(**SIZES, transform="log1p"))
    assert "transform" not in plain and logged["transform"] == "log1p"
    check_same_data(logged, logged, allow=False)
    with pytest.raises(ValueError, match="log1p then zscore"):
        check_same_data(logged, plain, allow=False)
