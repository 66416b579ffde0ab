"""datamodules/split_tensors.py: a split as flat tensors, the one batch builder (the batch
contract against a per-query oracle), static lengths, the vectorised max_list draw; the letor
loaders' device choice and the moved names."""

import logging

import numpy as np
import pytest
import torch

from differank.datamodules.split_tensors import (
    QueryBatchDataset,
    SplitTensors,
    fits_on_device,
    padded_length,
)
from differank.datamodules.synthetic import SyntheticLetorDataModule
from tests.conftest import run_without_sync


def random_split(seed=0, n_queries=9, shuffled_rows=False):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 30, size=n_queries)
    n = int(lengths.sum())
    order = rng.permutation(n) if shuffled_rows else np.arange(n)
    query_rows = np.split(order, np.cumsum(lengths)[:-1])
    features = torch.from_numpy(rng.standard_normal((n, 4)).astype(np.float32))
    labels = torch.from_numpy(rng.integers(0, 3, size=n).astype(np.float32))
    query_ids = np.arange(100, 100 + n_queries)
    return SplitTensors.from_queries(features, labels, query_rows, query_ids), query_rows


def padded_by_hand(features, labels, query_rows, query_ids, queries, width):
    """The batch contract, one query at a time (the slow oracle): real documents first, in
    file order; padding features 0, labels 0, mask False, doc_index -1."""
    batch = {
        "features": torch.zeros(len(queries), width, features.shape[1], dtype=features.dtype),
        "labels": torch.zeros(len(queries), width, dtype=labels.dtype),
        "mask": torch.zeros(len(queries), width, dtype=torch.bool),
        "qid": torch.tensor([int(query_ids[q]) for q in queries], dtype=torch.int64),
        "doc_index": torch.full((len(queries), width), -1, dtype=torch.int64),
    }
    for b, q in enumerate(queries):
        for j, row in enumerate(query_rows[q]):
            batch["features"][b, j] = features[row]
            batch["labels"][b, j] = labels[row]
            batch["mask"][b, j] = True
            batch["doc_index"][b, j] = int(row)
    return batch


@pytest.mark.parametrize("shuffled_rows", [False, True])
@pytest.mark.parametrize("queries", [[4, 0, 7, 2], [3], [8, 8, 1], list(range(9))])
def test_the_builder_gives_the_batch_contract(shuffled_rows, queries):
    """Rows in file order (one block copy per list) or not (a per-row gather): the same dict
    as the per-query oracle, dtypes included, padded to the static length."""
    split, query_rows = random_split(shuffled_rows=shuffled_rows)
    batch = split.batch(queries)
    width = padded_length(int(split.lengths[queries].max()), split.cap())
    expected = padded_by_hand(
        split.features, split.labels, query_rows, split.query_ids, queries, width
    )
    assert batch.keys() == expected.keys()
    for key, value in expected.items():
        assert batch[key].dtype == value.dtype and torch.equal(batch[key], value), key
    assert batch["features"].dtype == torch.float32 and batch["qid"].dtype == torch.int64


def test_padding_is_zero_even_beside_non_finite_features():
    features = torch.tensor([[float("nan")], [1.0], [float("inf")]])
    split = SplitTensors(features, torch.zeros(3), [0, 1, 2], [0, 1, 3], [1, 2])
    batch = split.batch([0, 1])
    assert batch["features"][0, 1:].eq(0).all() and batch["features"][0, 0].isnan()
    assert batch["features"][1, :2, 0].tolist() == [1.0, float("inf")]


def test_static_lengths_rule():
    assert [padded_length(n, 10_000) for n in (1, 8, 9, 12, 13, 17, 25, 33, 49, 97)] == [
        8,
        8,
        12,
        12,
        16,
        24,
        32,
        48,
        64,
        128,
    ]
    shapes = {padded_length(n, 1251) for n in range(1, 1252)}
    assert len(shapes) == 16 and max(shapes) == 1251  # MSLR-WEB30K's longest list
    for n in range(9, 1252):
        assert n <= padded_length(n, 1251) <= 1.5 * n
    assert padded_length(3, 4) == 4  # never past the split's longest list


def draws(split, queries, max_list, seeds):
    dataset = QueryBatchDataset(split, max_list)
    for seed in seeds:
        yield dataset.__getitems__([(q, seed + i) for i, q in enumerate(queries)])


def test_max_list_draw_keeps_the_rule_in_every_case():
    # query 0: 2 relevant of 12 (fit); 1: 8 relevant of 10 (crowded); 2: one level; 3: short
    labels = [0] * 5 + [2] + [0] * 5 + [1] + [1, 2] * 4 + [0, 0] + [0] * 9 + [0, 1, 0]
    lengths = [12, 10, 9, 3]
    features = torch.arange(len(labels), dtype=torch.float32)[:, None]
    offsets = np.concatenate([[0], np.cumsum(lengths)])
    split = SplitTensors(
        features,
        torch.tensor(labels, dtype=torch.float32),
        np.arange(len(labels)),
        offsets,
        np.arange(4),
    )
    low_of_crowded, kept_of_flat = set(), set()
    for batch in draws(split, [0, 1, 2, 3], 4, range(60)):
        assert batch["features"].shape[1] == 4
        kept = [batch["doc_index"][b][batch["mask"][b]].tolist() for b in range(4)]
        assert all(k == sorted(k) for k in kept)
        assert [len(k) for k in kept] == [4, 4, 4, 3]
        assert {5, 11} <= set(kept[0])  # the relevant documents fit: all kept
        crowded_labels = [labels[i] for i in kept[1]]
        assert crowded_labels.count(0) == 1  # one lowest-label document, 3 relevant
        low_of_crowded |= {i for i in kept[1] if labels[i] == 0}
        kept_of_flat |= set(kept[2])
        assert kept[3] == [31, 32, 33]
        torch.testing.assert_close(
            batch["features"][..., 0], batch["doc_index"].clamp(min=0).float() * batch["mask"]
        )
    assert low_of_crowded == {20, 21}  # the lowest-label document is drawn among all of them
    assert kept_of_flat == set(range(22, 31))  # a single-level query: any subset


def test_max_list_draws_are_seeded_per_batch():
    split, _ = random_split(seed=2, n_queries=12)
    first = [b["doc_index"] for b in draws(split, range(12), 5, [1, 2])]
    again = [b["doc_index"] for b in draws(split, range(12), 5, [1, 2])]
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert not torch.equal(first[0], first[1])


def test_whole_lists_without_draw_seeds_and_len():
    split, query_rows = random_split()
    dataset = QueryBatchDataset(split, max_list=5)
    assert len(dataset) == 9 and dataset.lengths.tolist() == np.minimum(split.lengths, 5).tolist()
    batch = dataset.__getitems__([0, 1])  # plain keys: evaluation, whole lists
    assert batch["mask"].sum(1).tolist() == [len(query_rows[0]), len(query_rows[1])]


def test_split_checks_and_device_rule():
    with pytest.raises(ValueError, match="Q \\+ 1 offsets"):
        SplitTensors(torch.zeros(2, 1), torch.zeros(2), [0, 1], [0, 2], [5, 6])
    split, _ = random_split()
    assert split.to("cpu") is split and split.nbytes > split.features.nbytes
    assert fits_on_device(10**15, torch.device("cpu"))  # host tensors are the arrays themselves
    assert not fits_on_device(1, torch.device("meta"))  # unknown devices stream


def test_a_split_that_does_not_go_on_the_device_is_streamed(tmp_path, caplog):
    dm = SyntheticLetorDataModule(8, 4, 4, cache_dir=tmp_path)
    with caplog.at_level(logging.WARNING, logger="differank.datamodules.letor"):
        assert dm._device_dataset("train", torch.device("meta")) is None
    assert "streaming" in caplog.text
    assert dm._device_dataset("train", torch.device("cpu")) is dm.dataset("train")


def test_float16_or_strided_features_give_the_same_batch():
    split, _ = random_split()
    half = SplitTensors(
        split.features.half(), split.labels, split.rows, split.offsets, split.query_ids
    )
    strided = SplitTensors(
        torch.randn(len(split.labels), 8)[:, ::2],
        split.labels,
        split.rows,
        split.offsets,
        split.query_ids,
    )
    assert half.batch([0, 1])["features"].dtype == torch.float16
    torch.testing.assert_close(
        half.batch([0, 1])["features"], split.batch([0, 1])["features"].half()
    )
    torch.testing.assert_close(
        strided.batch([0])["features"][0, : split.lengths[0]], strided.features[: split.lengths[0]]
    )


def three_rows(rows=(0, 1, 2), offsets=(0, 1, 3), labels=3):
    return SplitTensors(torch.ones(3, 2), torch.zeros(labels), list(rows), list(offsets), [7, 8])


@pytest.mark.parametrize(
    ("layout", "message"),
    [
        (dict(rows=(0, 1, 10**12)), r"rows must index the 3 rows .* got row 1000000000000"),
        (dict(rows=(0, -1, 2)), r"rows must index the 3 rows .* got row -1"),
        (dict(offsets=(0, 2, 1)), r"offsets must run from 0 to len\(rows\) = 3; got 0 \.\. 1"),
        (dict(offsets=(0, 3, 3)), r"offsets must increase .* query 1 has offsets 3 \.\. 3"),
        (dict(rows=(0, 1, 2, 0), offsets=(0, 3, 2, 4)), "Q \\+ 1 offsets"),
        (dict(offsets=(0, 1, 5)), r"offsets must run from 0 to len\(rows\) = 3; got 0 \.\. 5"),
        (dict(labels=2), r"features must be \[N, F\] and labels \[N\]"),
    ],
)
def test_a_split_with_a_bad_layout_is_refused_when_built(layout, message):
    """Issue #33: an out-of-range row killed the process (SIGSEGV), decreasing offsets gave a
    mask over uninitialised memory; the constructor now checks the layout once."""
    with pytest.raises(ValueError, match=message):
        three_rows(**layout)
    assert three_rows().batch([1])["mask"].tolist() == [[True, True]]


def test_decreasing_offsets_are_refused():
    features, labels = torch.ones(4, 2), torch.zeros(4)
    with pytest.raises(ValueError, match="query 1 has offsets 3 .. 1"):
        SplitTensors(features, labels, [0, 1, 2, 3], [0, 3, 1, 4], [7, 8, 9])


@pytest.mark.parametrize("shuffled_rows", [False, True])
@pytest.mark.parametrize("max_list", [None, 2])
@pytest.mark.parametrize(
    ("queries", "message"),
    [
        ([], "non-empty 1-D list of query positions"),
        ([[0, 1]], "non-empty 1-D list of query positions"),
        ([0, 9], "query position 9 is outside this split's 9 queries"),
        ([-1], "query position -1 is outside"),
        ([0.5], "must be integers"),
    ],
)
def test_bad_query_positions_are_the_same_error_on_every_path(
    shuffled_rows, max_list, queries, message
):
    """Rows in order or not, whole lists or max_list draws: one ValueError. An empty batch is
    refused (a batch has at least one query: B = 0 has no meaningful static length)."""
    split, _ = random_split(shuffled_rows=shuffled_rows)
    generator = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match=message):
        split.batch(queries, max_list=max_list, generator=generator)


def test_the_dataset_refuses_an_empty_batch_and_a_max_list_below_one():
    split, _ = random_split()
    with pytest.raises(ValueError, match="non-empty"):
        QueryBatchDataset(split).__getitems__([])
    with pytest.raises(ValueError, match="max_list must be at least 1"):
        split.batch([0], max_list=0)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_split_batches_equal_the_host_ones():
    split, _ = random_split(seed=3, shuffled_rows=True)
    on_gpu = split.to("cuda")
    host, device = split.batch([1, 5, 3]), on_gpu.batch([1, 5, 3])
    for key, value in host.items():
        assert device[key].device.type == "cuda"
        torch.testing.assert_close(device[key].cpu(), value)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_cuda_batches_are_built_without_a_device_sync():
    """Whole lists and ``max_list`` draws: the index arrays go up through pinned memory and
    nothing is read back, so building a batch never waits for the step's kernels."""
    split = random_split(seed=3, shuffled_rows=True)[0].to("cuda")
    generator = torch.Generator("cuda").manual_seed(0)

    def build():
        split.batch([1, 5, 3])
        split.batch([0, 2, 4], max_list=3, generator=generator)

    run_without_sync(build)


def weighted(split, weights):
    """``split`` with query weights, the same tensors otherwise."""
    return SplitTensors(
        split.features, split.labels, split.rows, split.offsets, split.query_ids, weights
    )


@pytest.mark.parametrize("shuffled_rows", [False, True])
def test_query_weights_ride_along_and_change_nothing_else(shuffled_rows):
    split, query_rows = random_split(shuffled_rows=shuffled_rows)
    weights = np.linspace(0.0, 2.0, 9)  # float64 in, float32 kept
    heavy = SplitTensors.from_queries(
        split.features, split.labels, query_rows, np.arange(100, 109), weights
    )
    assert split.weights is None and heavy.weights.dtype == torch.float32
    assert heavy.nbytes == split.nbytes + 9 * 4
    queries = [4, 0, 7, 2]
    plain, batch = split.batch(queries), heavy.batch(queries)
    assert "weights" not in plain
    assert torch.equal(batch.pop("weights"), torch.tensor(weights[queries], dtype=torch.float32))
    assert batch.keys() == plain.keys()
    assert all(torch.equal(batch[key], plain[key]) for key in plain)
    generator = torch.Generator().manual_seed(3)
    drawn = heavy.batch(queries, max_list=4, generator=generator)
    assert torch.equal(drawn["weights"], torch.tensor(weights[queries], dtype=torch.float32))


def test_a_dataloader_of_the_dataset_yields_the_weights():
    from torch.utils.data import DataLoader

    split = weighted(random_split()[0], torch.arange(1.0, 10.0))
    dataset = QueryBatchDataset(split, max_list=5)
    batches = [[0, 3], [8]]
    loader = DataLoader(dataset, batch_sampler=batches, collate_fn=dataset.collate_fn)
    assert [b["weights"].tolist() for b in loader] == [[1.0, 4.0], [9.0]]
    drawn = [[(2, 11), (5, 12)]]  # (position, draw seed) keys: max_list draws
    loader = DataLoader(dataset, batch_sampler=drawn, collate_fn=dataset.collate_fn)
    assert [b["weights"].tolist() for b in loader] == [[3.0, 6.0]]


@pytest.mark.parametrize(
    "weights, message",
    [
        (np.ones(8), "one per query, shape \\(9,\\); got \\(8,\\)"),
        (np.ones((9, 1)), "one per query, shape \\(9,\\); got \\(9, 1\\)"),
        ([1.0] * 4 + [-0.5] + [1.0] * 4, "query 4 \\(id 104\\) has weight -0.5"),
        ([1.0] * 2 + [np.nan] + [1.0] * 6, "query 2 \\(id 102\\) has weight nan"),
        ([np.inf] + [1.0] * 8, "query 0 \\(id 100\\) has weight inf"),
        (np.zeros(9), "every one of the 9 query weights is 0"),
    ],
)
def test_bad_query_weights_are_refused_naming_the_query(weights, message):
    with pytest.raises(ValueError, match=message):
        weighted(random_split()[0], weights)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_query_weights_move_with_the_split():
    split = weighted(random_split(seed=3)[0], torch.arange(9.0))
    on_gpu = split.to("cuda")
    assert on_gpu.weights.device.type == "cuda"
    batch = on_gpu.batch([1, 5, 3])
    assert batch["weights"].device.type == "cuda"
    assert batch["weights"].cpu().tolist() == [1.0, 5.0, 3.0]
