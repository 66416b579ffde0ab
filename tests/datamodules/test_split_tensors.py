"""datamodules/split_tensors.py: a split as flat tensors, batches by one gather, static lengths,
the vectorised max_list draw; the letor loaders' device choice and the moved names."""

import logging

import numpy as np
import pytest
import torch

from differank.datamodules.collate import collate_queries
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


@pytest.mark.parametrize("shuffled_rows", [False, True])
def test_gather_equals_the_per_query_collate(shuffled_rows):
    split, query_rows = random_split(shuffled_rows=shuffled_rows)
    queries = [4, 0, 7, 2]
    batch = split.batch(queries)
    items = [
        {
            "features": split.features[rows],
            "labels": split.labels[rows],
            "qid": 100 + q,
            "doc_index": torch.from_numpy(rows),
        }
        for q, rows in ((q, query_rows[q]) for q in queries)
    ]
    expected = collate_queries(items)
    longest = expected["features"].shape[1]
    width = padded_length(longest, split.cap())
    assert batch["features"].shape == (4, width, 4)
    for key in ("features", "labels", "mask", "doc_index"):
        torch.testing.assert_close(batch[key][:, :longest], expected[key])
    assert not batch["mask"][:, longest:].any()
    assert (batch["features"][:, longest:] == 0).all() and (
        batch["doc_index"][:, longest:] == -1
    ).all()
    assert batch["qid"].tolist() == expected["qid"].tolist()
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


@pytest.mark.parametrize("shuffled_rows", [False, True])
@pytest.mark.parametrize("queries", [[4, 0, 7, 2], [3], [8, 8, 1], list(range(9))])
def test_the_cpu_kernel_and_the_device_gather_give_the_same_batch(shuffled_rows, queries):
    """CPU batches come from the compiled kernel; accelerators run the torch gather (here on
    the CPU): the same dict, dtypes included, padded to the same static length."""
    split, _ = random_split(seed=5, shuffled_rows=shuffled_rows)
    assert split._copied_on_host
    queries = np.asarray(queries)
    counts = split.lengths[queries]
    width = padded_length(int(counts.max()), split.cap())
    copied = split._copied_batch(queries, counts, width)
    gathered = split._gathered_batch(queries, counts, width)
    assert copied.keys() == gathered.keys()
    for key, value in gathered.items():
        assert copied[key].dtype == value.dtype and torch.equal(copied[key], value), key


def test_float16_or_strided_features_take_the_torch_gather():
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
    assert not half._copied_on_host and not strided._copied_on_host
    assert half.batch([0, 1])["features"].dtype == torch.float16
    torch.testing.assert_close(
        strided.batch([0])["features"][0, : split.lengths[0]], strided.features[: split.lengths[0]]
    )


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
