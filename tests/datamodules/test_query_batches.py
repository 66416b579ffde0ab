"""datamodules/query_batches.py: length-bucketed batch sampler and the max_list subsampling rule."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from differank.datamodules.query_batches import QueryBatchSampler, subsample_query


def test_short_query_is_kept_whole():
    kept = subsample_query([0, 1, 0], 3, np.random.default_rng(0))
    np.testing.assert_array_equal(kept, [0, 1, 2])


def test_relevant_documents_that_fit_are_all_kept():
    labels = np.array([0, 0, 2, 0, 0, 1, 0, 0, 0, 0])
    for seed in range(10):
        kept = subsample_query(labels, 4, np.random.default_rng(seed))
        assert {2, 5} <= set(kept.tolist()) and len(kept) == 4


def test_too_many_relevant_keeps_one_lowest_document():
    labels = np.array([1, 2, 1, 2, 0, 1, 2, 0])
    for seed in range(10):
        kept = subsample_query(labels, 3, np.random.default_rng(seed))
        assert (labels[kept] == 0).sum() == 1 and len(kept) == 3


def test_lowest_label_need_not_be_zero():
    labels = np.array([1, 1, 1, 1, 2])
    kept = subsample_query(labels, 2, np.random.default_rng(0))
    assert sorted(labels[kept].tolist()) == [1, 2]


@settings(max_examples=200, deadline=None)
@given(
    labels=st.lists(st.integers(0, 2), min_size=1, max_size=40),
    max_list=st.integers(2, 12),
    seed=st.integers(0, 2**32 - 1),
)
def test_subsample_properties(labels, max_list, seed):
    labels = np.asarray(labels)
    kept = subsample_query(labels, max_list, np.random.default_rng(seed))
    assert len(kept) == min(len(labels), max_list)
    assert (np.diff(kept) > 0).all()  # unique, file order
    if len(set(labels.tolist())) >= 2:
        assert len(set(labels[kept].tolist())) >= 2
    relevant = np.flatnonzero(labels > labels.min())
    if len(relevant) <= max_list - 1:
        assert set(relevant.tolist()) <= set(kept.tolist())


LENGTHS = np.clip(np.random.default_rng(0).lognormal(3, 0.8, size=537).astype(int), 1, 300)


@pytest.mark.parametrize("shuffle", [True, False])
@pytest.mark.parametrize("bucket", [True, False])
@pytest.mark.parametrize("batch_size", [1, 7, 32, 1000])
def test_every_query_once_per_epoch(shuffle, bucket, batch_size):
    sampler = QueryBatchSampler(LENGTHS, batch_size, shuffle=shuffle, bucket_by_length=bucket)
    for _ in range(2):
        batches = list(sampler)
        assert len(batches) == len(sampler)
        assert all(1 <= len(b) <= batch_size for b in batches)
        assert sorted(i for b in batches for i in b) == list(range(len(LENGTHS)))


def padding(sampler):
    return sum(len(b) * LENGTHS[b].max() - LENGTHS[b].sum() for b in map(np.asarray, sampler))


def test_bucketing_keeps_padding_small():
    bucketed = padding(QueryBatchSampler(LENGTHS, 32, shuffle=True, bucket_by_length=True))
    plain = padding(QueryBatchSampler(LENGTHS, 32, shuffle=True, bucket_by_length=False))
    best = padding(QueryBatchSampler(LENGTHS, 32, shuffle=False))  # fully sorted
    assert bucketed < 0.15 * plain
    assert bucketed < 1.3 * best  # the per-epoch jitter costs little


def test_training_order_is_seeded_and_changes_per_epoch():
    def epochs(seed):
        sampler = QueryBatchSampler(LENGTHS, 16, shuffle=True, seed=seed)
        return [list(sampler) for _ in range(3)]

    first = epochs(0)
    assert first == epochs(0)
    assert first != epochs(1)
    assert first[0] != first[1]
    sampler = QueryBatchSampler(LENGTHS, 16, shuffle=True, seed=0)
    sampler.set_epoch(2)
    assert list(sampler) == first[2]


def test_eval_order_is_fixed():
    sampler = QueryBatchSampler(LENGTHS, 16, shuffle=False)
    assert list(sampler) == list(sampler)
    flat = [i for b in sampler for i in b]
    assert (np.diff(LENGTHS[flat]) >= 0).all()
    plain = QueryBatchSampler(LENGTHS, 16, shuffle=False, bucket_by_length=False)
    assert [i for b in plain for i in b] == list(range(len(LENGTHS)))


def test_draw_seeds():
    sampler = QueryBatchSampler([3, 4, 5], 2, shuffle=True, draw_seeds=True)
    first, second = list(sampler), list(sampler)
    keys = [k for b in first for k in b]
    assert sorted(i for i, _ in keys) == [0, 1, 2]
    assert all(isinstance(s, int) for _, s in keys)
    assert {s for b in first for _, s in b}.isdisjoint({s for b in second for _, s in b})


@pytest.mark.parametrize("lengths, batch_size", [([], 2), ([3], 0), ([3], True), ([3], 2.0)])
def test_bad_arguments(lengths, batch_size):
    with pytest.raises(ValueError):
        QueryBatchSampler(lengths, batch_size, shuffle=True)
