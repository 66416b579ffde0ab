"""Preference masks, validity, label levels, pair differences and bounded pair sampling."""

import pytest
import torch

from differank.losses.algorithms.pairs import (
    label_levels,
    pair_counts,
    pair_differences,
    preference_mask,
    sample_pairs,
    valid_queries,
)
from differank.losses.reduction import check_reduction, reduce_queries

NAN = float("nan")


def example():
    labels = torch.tensor(
        [[2.0, 0.0, 1.0, 1.0, NAN], [1.0, 1.0, NAN, NAN, NAN], [0.0, 3.0, 0.0, 0.0, 2.0]]
    )
    mask = torch.tensor([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0], [1, 1, 1, 1, 1]], dtype=torch.bool)
    return labels, mask


def test_preference_mask_matches_loops():
    labels, mask = example()
    pref = preference_mask(labels, mask)
    for b in range(3):
        for i in range(5):
            for j in range(5):
                expected = bool(mask[b, i] and mask[b, j] and labels[b, i] > labels[b, j])
                assert bool(pref[b, i, j]) == expected


def test_valid_queries_and_pair_counts():
    labels, mask = example()
    assert valid_queries(labels, mask).tolist() == [True, False, True]
    assert pair_counts(labels, mask).tolist() == [[3, 0, 1, 1, 0], [0, 0, 0, 0, 0], [0, 4, 0, 0, 3]]
    assert torch.equal(
        pair_counts(labels, mask).sum(-1), preference_mask(labels, mask).sum((-1, -2))
    )


def test_label_levels_rank_the_distinct_real_labels_from_the_lowest():
    labels = torch.tensor(
        [
            [2.5, 0.0, 2.5, 1.0, NAN, 9.0],  # ties; padding, NaN or above every real label
            [3.0, NAN, NAN, NAN, NAN, NAN],  # a single document
            [1.0, 1.0, 1.0, 1.0, 1.0, 1.0],  # all labels equal
            [0.0, 4.0, 4.0, 7.5, 0.0, 2.0],
            [NAN, NAN, NAN, NAN, NAN, NAN],  # padding only
        ],
        dtype=torch.float64,
    )
    mask = torch.tensor(
        [[1, 1, 1, 1, 0, 0], [1, 0, 0, 0, 0, 0], [1] * 6, [1] * 6, [0] * 6], dtype=torch.bool
    )
    levels = label_levels(labels, mask)
    assert levels.dtype == torch.int64
    assert levels.tolist() == [
        [2, 0, 2, 1, 0, 0],
        [0, 0, 0, 0, 0, 0],
        [0, 0, 0, 0, 0, 0],
        [0, 2, 2, 3, 0, 1],
        [0, 0, 0, 0, 0, 0],
    ]
    # levels order documents as the labels do: a higher level is exactly a preference pair
    both = mask.unsqueeze(-1) & mask.unsqueeze(-2)
    higher = both & (levels.unsqueeze(-1) > levels.unsqueeze(-2))
    assert torch.equal(higher, preference_mask(labels, mask))


def test_pair_differences_for_scores_and_vectors():
    values = torch.arange(10.0).reshape(1, 5, 2)
    high, low = torch.tensor([[4, 1]]), torch.tensor([[0, 3]])
    assert pair_differences(values, high, low).tolist() == [[[8.0, 8.0], [-4.0, -4.0]]]
    assert pair_differences(values[..., 0], high, low).tolist() == [[8.0, -4.0]]


def test_sampled_pairs_are_uniform_over_all_pairs():
    labels, mask = example()
    high, low, ok = sample_pairs(labels, mask, 70000, generator=torch.Generator().manual_seed(1))
    assert high.shape == low.shape == ok.shape == (3, 70000)
    assert ok.tolist()[1] == [False] * 70000 and bool(ok[0].all()) and bool(ok[2].all())
    assert bool((high[1] == 0).all() and (low[1] == 0).all())
    pref = preference_mask(labels, mask)
    for b in (0, 2):
        assert bool(pref[b, high[b], low[b]].all())
        counts = torch.zeros(5, 5).index_put_((high[b], low[b]), torch.ones(70000), accumulate=True)
        frequencies = counts[pref[b]] / 70000
        expected = 1.0 / int(pref[b].sum())
        assert torch.allclose(frequencies, torch.full_like(frequencies, expected), atol=0.01)


def test_sampling_is_reproducible_and_rejects_bad_counts():
    labels, mask = example()
    first = sample_pairs(labels, mask, 5, generator=torch.Generator().manual_seed(0))
    second = sample_pairs(labels, mask, 5, generator=torch.Generator().manual_seed(0))
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))
    with pytest.raises(ValueError, match="num_pairs"):
        sample_pairs(labels, mask, 0)


def test_reduction_definitions():
    per_query = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    valid = torch.tensor([False, False, False])
    mean = reduce_queries(per_query, valid, "mean")
    mean.backward()
    assert mean.item() == 0.0 and torch.equal(per_query.grad, torch.zeros(3))
    with pytest.raises(ValueError, match="reduction must be one of"):
        check_reduction("average")
