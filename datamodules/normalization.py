"""Feature normalisation kernels over a split's float32 rows, in place, in row blocks.

Public API::

    NORMALIZATIONS                            # the data modules' normalization options
    column_stats(features) -> (mean, std)     # float64 [F]; std 0 -> 1
    apply_zscore(features, mean, std)         # (x - mean) / std in place
    query_minmax(features, query_rows)        # LETOR QueryLevelNorm in place

Statistics are accumulated in float64; nothing holds a float64 copy of the matrix.
"""

from __future__ import annotations

import numpy as np

BLOCK_ROWS = 65536  # rows per block when copying and normalising features
NORMALIZATIONS = ("none", "zscore", "query_minmax")


def column_stats(features: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per-feature mean and std (NaN ignored), accumulated in float64 over row blocks; a std
    of 0 becomes 1 (a constant feature is centred only)."""
    n_features = features.shape[1]
    total, count = np.zeros(n_features), np.zeros(n_features)
    _add_column_sums(features, BLOCK_ROWS, np.zeros(n_features), False, total, count)
    mean = total / np.maximum(count, 1)
    squares = np.zeros(n_features)
    _add_column_sums(features, BLOCK_ROWS, mean, True, squares, np.zeros(n_features))
    std = np.sqrt(squares / np.maximum(count, 1))
    return mean, np.where(std > 0, std, 1.0)


def _add_column_sums(features, block_rows, center, square, total, count) -> None:
    """``total += Σ (x - center)`` (or its square) and ``count += Σ 1`` per column over the
    non-NaN values, summed per block of ``block_rows`` rows (numpy's ``nansum(block, axis=0)``
    adds row after row within a block; each block's sum is then added to the total)."""
    for start in range(0, len(features), block_rows):
        block = features[start : start + block_rows].astype(np.float64)
        missing = np.isnan(block)
        block -= center
        if square:
            block *= block
        np.copyto(block, 0.0, where=missing)  # what nansum adds for a NaN, without its copy
        total += np.add.reduce(block, axis=0)
        count += len(block) - np.count_nonzero(missing, axis=0)


def apply_zscore(features: np.ndarray, mean: np.ndarray, std: np.ndarray) -> None:
    """``(x - mean) / std`` in place, computed in float64 one row block at a time and stored
    as float32."""
    for start in range(0, len(features), BLOCK_ROWS):
        block = features[start : start + BLOCK_ROWS]
        scaled = block.astype(np.float64)
        scaled -= mean
        scaled /= std
        block[:] = scaled


def query_minmax(features: np.ndarray, query_rows: list[np.ndarray]) -> None:
    """LETOR QueryLevelNorm in place: per query and feature (x - min) / (max - min), 0 where
    max == min; computed in float64 over blocks of queries."""
    first = 0
    while first < len(query_rows):
        last, rows_in_block = first, 0
        while last < len(query_rows) and (last == first or rows_in_block < BLOCK_ROWS):
            rows_in_block += len(query_rows[last])
            last += 1
        block_rows = query_rows[first:last]
        order = np.concatenate(block_rows)
        lengths = np.asarray([len(r) for r in block_rows])
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        grouped = features[order].astype(np.float64)
        low = np.minimum.reduceat(grouped, starts, axis=0)
        high = np.maximum.reduceat(grouped, starts, axis=0)
        low, span = np.repeat(low, lengths, axis=0), np.repeat(high - low, lengths, axis=0)
        safe = np.where(span > 0, span, 1.0)
        features[order] = np.where(span > 0, (grouped - low) / safe, 0.0)
        first = last
