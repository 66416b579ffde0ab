"""datamodules/normalization.py: the z-score kernels."""

import numpy as np

from differank.datamodules import normalization


def test_zscore_kernels_equal_blockwise_numpy_to_the_bit():
    """The compiled statistics add in numpy's block-wise ``nansum`` order: same bits."""
    rng = np.random.default_rng(4)
    features = (rng.standard_normal((1000, 7)) * [1, 10, 1e3, 1e-3, 0, 5, 1] + 3).astype(np.float32)
    features[[3, 500, 999], [0, 2, 6]] = np.nan
    block = 128
    total, count = np.zeros(7), np.zeros(7)
    normalization._add_column_sums(features, block, np.zeros(7), False, total, count)
    mean = total / count
    squares = np.zeros(7)
    normalization._add_column_sums(features, block, mean, True, squares, np.zeros(7))
    blocks = [features[s : s + block].astype(np.float64) for s in range(0, 1000, block)]
    expected_total = sum((np.nansum(b, axis=0) for b in blocks), np.zeros(7))
    expected_squares = sum((np.nansum((b - mean) ** 2, axis=0) for b in blocks), np.zeros(7))
    np.testing.assert_array_equal(total, expected_total)
    np.testing.assert_array_equal(count, 1000 - np.isnan(features).sum(axis=0))
    np.testing.assert_array_equal(squares, expected_squares)
    std = np.where(squares > 0, np.sqrt(squares / count), 1.0)
    expected = ((features.astype(np.float64) - mean) / std).astype(np.float32)
    normalization.apply_zscore(features, mean, std)
    np.testing.assert_array_equal(features, expected)
