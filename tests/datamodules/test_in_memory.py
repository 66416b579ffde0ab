"""InMemoryDataModule: arrays read by the LETOR data module's own code, so they give exactly
what the same rows written as a fold and read by LetorDataModule give."""

import numpy as np
import pytest
import torch

from differank.datamodules.in_memory import InMemoryDataModule, SplitArrays
from differank.datamodules.letor import LetorDataModule
from differank.datamodules.reader import write_letor


def rows(queries, seed, features=4, first_qid=0):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(3, 9, size=queries)
    X = rng.normal(size=(sizes.sum(), features)).astype(np.float32)
    y = np.digitize(X[:, 0], [0.0, 1.0]).astype(np.float32)
    return X, y, np.repeat(np.arange(queries, dtype=np.int64) + first_qid, sizes)


@pytest.mark.parametrize("transform", ["none", "gaussrank"])
def test_arrays_give_what_their_letor_fold_gives(tmp_path, transform):
    splits = {
        "train": rows(12, 0),
        "vali": rows(5, 1, first_qid=100),
        "test": rows(5, 2, first_qid=200),
    }
    for name, (X, y, qid) in splits.items():
        write_letor(tmp_path / "Fold1" / f"{name}.txt", X, y, qid)
    options = dict(transform=transform, batch_size=4, seed=3)
    files = LetorDataModule(tmp_path, cache_dir=tmp_path / "cache", **options)
    arrays = InMemoryDataModule(
        *(SplitArrays(*splits[name], name=name) for name in ("train", "vali", "test")), **options
    )
    assert arrays.n_features == files.n_features == 4
    for split in ("train", "val", "test"):
        np.testing.assert_array_equal(
            arrays.split_data(split).features, files.split_data(split).features
        )
        for ours, theirs in zip(arrays._loader(split), files._loader(split), strict=True):
            for key in theirs:
                assert torch.equal(ours[key], theirs[key]), (split, key)
    np.testing.assert_array_equal(arrays.feature_mean, files.feature_mean)
    assert arrays.file_sha256("train") != files.file_sha256("train")  # the arrays' own digest
    assert {p.name for p in tmp_path.iterdir()} == {"Fold1", "cache"}  # the arrays wrote nothing


def test_validation_and_test_default_to_the_training_rows():
    data = InMemoryDataModule(SplitArrays(*rows(6, 0)))
    np.testing.assert_array_equal(
        data.split_data("test").features, data.split_data("train").features
    )


def test_a_non_finite_value_is_refused_naming_the_row_and_column():
    X, y, qid = rows(4, 0)
    X[5, 2] = np.inf
    data = InMemoryDataModule(SplitArrays(*rows(4, 1)), SplitArrays(X, y, qid, "eval X"))
    with pytest.raises(ValueError, match=r"eval X: row 5, column 2: not finite"):
        data.setup()


def test_query_weights_reach_the_training_batches_only():
    X, y, qid = rows(6, 0)
    weights = np.arange(6, dtype=np.float64) + 1
    data = InMemoryDataModule(SplitArrays(X, y, qid, query_weights=weights), batch_size=6)
    (batch,) = list(data._loader("train"))
    served = dict(zip(batch["qid"].tolist(), batch["weights"].tolist(), strict=True))
    assert served == {q: float(q + 1) for q in range(6)}
    assert "weights" not in next(iter(data._loader("val")))
    with pytest.raises(ValueError, match="6 finite non-negative numbers"):
        InMemoryDataModule(SplitArrays(X, y, qid, query_weights=weights[:5]))


def test_another_feature_count_is_refused():
    with pytest.raises(ValueError, match="has 3 features, the training rows 4"):
        InMemoryDataModule(SplitArrays(*rows(4, 0)), SplitArrays(*rows(4, 1, features=3), "eval X"))
