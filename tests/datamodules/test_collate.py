"""datamodules/collate.py: the batch contract (dtypes, shapes, padding values, dynamic L)."""

import numpy as np
import pytest
import torch

from differank.datamodules.collate import collate_queries


def query(n, n_features=3, qid=1, start=0):
    return {
        "features": torch.arange(n * n_features, dtype=torch.float64).reshape(n, n_features) + 1,
        "labels": torch.arange(n, dtype=torch.float64) % 3,
        "qid": qid,
        "doc_index": torch.arange(start, start + n),
    }


def test_batch_contract():
    items = [query(2, qid=5, start=10), query(4, qid=6, start=0), query(1, qid=7, start=20)]
    batch = collate_queries(items)
    assert set(batch) == {"features", "labels", "mask", "qid", "doc_index"}
    assert batch["features"].dtype == torch.float32 and batch["features"].shape == (3, 4, 3)
    assert batch["labels"].dtype == torch.float32 and batch["labels"].shape == (3, 4)
    assert batch["mask"].dtype == torch.bool
    assert batch["qid"].dtype == torch.int64 and batch["qid"].tolist() == [5, 6, 7]
    assert batch["doc_index"].dtype == torch.int64
    assert batch["mask"].sum(1).tolist() == [2, 4, 1]
    pad = ~batch["mask"]
    assert (batch["features"][pad] == 0).all()
    assert (batch["labels"][pad] == 0).all()
    assert (batch["doc_index"][pad] == -1).all()
    assert batch["doc_index"][0, :2].tolist() == [10, 11]
    for b, item in enumerate(items):
        n = len(item["labels"])
        torch.testing.assert_close(batch["features"][b, :n], item["features"].float())
        torch.testing.assert_close(batch["labels"][b, :n], item["labels"].float())


def test_length_is_the_longest_list_in_the_batch():
    assert collate_queries([query(3), query(2)])["features"].shape[1] == 3
    assert collate_queries([query(7)])["mask"].all()


def test_numpy_items_are_accepted():
    item = {k: (v.numpy() if torch.is_tensor(v) else v) for k, v in query(2).items()}
    batch = collate_queries([item])
    assert batch["features"].dtype == torch.float32
    np.testing.assert_array_equal(batch["doc_index"][0].numpy(), [0, 1])


def test_errors():
    with pytest.raises(ValueError, match="at least one query"):
        collate_queries([])
    with pytest.raises(ValueError, match=r"query 1: features must be \[n, 3\]"):
        collate_queries([query(2), query(2, n_features=4)])
    bad = query(2)
    bad["labels"] = bad["labels"][:1]
    with pytest.raises(ValueError, match="query 0: labels"):
        collate_queries([bad])
