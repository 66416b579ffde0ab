"""datamodules/synthetic.py: deterministic, LETOR-like, real LETOR text, linearly learnable."""

import time

import numpy as np
import pytest

from differank.datamodules import reader
from differank.datamodules.synthetic import N_FEATURES, SyntheticLetorDataModule, generate_queries

SMALL = {"n_train_queries": 60, "n_val_queries": 20, "n_test_queries": 20}


def average_precision(scores, labels):
    order = np.argsort(-scores, kind="stable")
    relevant = labels[order] > 0
    if not relevant.any():
        return 0.0
    return float((np.cumsum(relevant) / np.arange(1, len(relevant) + 1))[relevant].mean())


def mean_ap(split, weights):
    return np.mean(
        [average_precision(split.features[r] @ weights, split.labels[r]) for r in split.query_rows]
    )


@pytest.fixture(scope="module")
def default_data(tmp_path_factory):
    start = time.perf_counter()
    dm = SyntheticLetorDataModule(cache_dir=tmp_path_factory.mktemp("synthetic-cache"))
    dm.setup()
    return dm, time.perf_counter() - start


def test_default_set_is_fast_and_letor_like(default_data):
    dm, seconds = default_data
    assert seconds < 15  # generation + writing + parsing; typically ~1 s
    assert dm.n_features == N_FEATURES == 46
    assert dm.label_levels == (0.0, 1.0, 2.0)
    counts = {s: len(dm.split_data(s).query_ids) for s in ("train", "val", "test")}
    assert counts == {"train": 300, "val": 100, "test": 100}
    lengths = np.concatenate(
        [[len(r) for r in dm.split_data(s).query_rows] for s in ("train", "val", "test")]
    )
    assert lengths.min() >= 5 and lengths.max() <= 120 and np.median(lengths) >= 10
    train = dm.split_data("train")
    no_relevant = np.mean([(train.labels[r] == 0).all() for r in train.query_rows])
    assert 0.03 < no_relevant < 0.4
    share = np.bincount(train.labels.astype(int)) / train.num_rows
    assert share[0] > 0.6 and share[2] > 0.03


def test_files_are_real_letor_text(default_data):
    dm, _ = default_data
    files = [dm.split_files(s)[0] for s in ("train", "val", "test")]
    assert [p.relative_to(p.parents[1]).as_posix() for p in files] == [
        "Fold1/train.txt",
        "Fold1/vali.txt",
        "Fold1/test.txt",
    ]
    first = files[0].read_text().splitlines()[0].split()
    assert first[1] == "qid:1" and first[2].startswith("1:") and first[47].startswith("46:")
    assert first[48:50] == ["#docid", "="]
    parsed = reader.read_letor_file(files[2], cache_dir=files[2].parents[2] / "other")
    assert parsed.num_rows == dm.num_rows("test")
    assert dm.split_data("test").docids[0] == parsed.docids[0] == f"SYN-{parsed.qids[0]}-0"
    assert (parsed.features >= 0).all() and (parsed.features <= 1).all()


def test_linear_model_beats_random(default_data):
    dm, _ = default_data
    train, test = dm.split_data("train"), dm.split_data("test")
    weights = np.linalg.lstsq(train.features.astype(np.float64), train.labels, rcond=None)[0]
    random = np.mean([mean_ap(test, w) for w in np.random.default_rng(0).normal(size=(5, 46))])
    assert mean_ap(test, weights) > random + 0.15


def test_deterministic_from_seed(tmp_path):
    a = SyntheticLetorDataModule(**SMALL, seed=3, cache_dir=tmp_path / "a")
    b = SyntheticLetorDataModule(**SMALL, seed=3, cache_dir=tmp_path / "b")
    c = SyntheticLetorDataModule(**SMALL, seed=4, cache_dir=tmp_path / "a")
    for split in ("train", "val", "test"):
        assert a.split_files(split)[0].read_bytes() == b.split_files(split)[0].read_bytes()
        assert a.split_files(split)[0].read_bytes() != c.split_files(split)[0].read_bytes()
    assert a.split_files("train")[0].parent != c.split_files("train")[0].parent
    np.testing.assert_array_equal(a.full_batch("val")["features"], b.full_batch("val")["features"])


def test_changing_one_split_size_keeps_the_others(tmp_path):
    a = SyntheticLetorDataModule(**SMALL, cache_dir=tmp_path)
    b = SyntheticLetorDataModule(**{**SMALL, "n_test_queries": 7}, cache_dir=tmp_path)
    for split in ("train", "val"):
        assert a.split_files(split)[0].read_bytes() == b.split_files(split)[0].read_bytes()
    assert b.split_data("test").query_ids.tolist() == list(range(81, 88))
    features, labels, qids, docids = generate_queries(5, seed=0, split_index=2, first_qid=10)
    assert features.shape == (len(labels), 46) and qids[0] == 10 and docids[0] == "SYN-10-0"


def test_explicit_root_and_reuse(tmp_path, monkeypatch):
    root = tmp_path / "synthetic"
    dm = SyntheticLetorDataModule(**SMALL, root=root, cache_dir=tmp_path / "cache")
    assert dm.split_files("test") == [root / "Fold1" / "test.txt"]
    stamp = (root / "Fold1" / "train.txt").stat().st_mtime_ns

    def no_writing(*args, **kwargs):
        raise AssertionError("existing files for the same parameters must be reused")

    monkeypatch.setattr("differank.datamodules.synthetic._write_fold", no_writing)
    again = SyntheticLetorDataModule(**SMALL, root=root, cache_dir=tmp_path / "cache")
    assert again.n_features == 46
    assert (root / "Fold1" / "train.txt").stat().st_mtime_ns == stamp


def test_options_pass_through_and_validation(tmp_path):
    dm = SyntheticLetorDataModule(
        **SMALL, cache_dir=tmp_path, normalization="query_minmax", max_list=8, batch_size=4
    )
    batch = next(iter(dm.train_dataloader()))
    assert batch["features"].shape[0] == 4 and batch["features"].shape[1] <= 8
    assert dm.full_batch("test")["mask"].sum() == dm.num_rows("test")
    with pytest.raises(ValueError, match="single fold"):
        SyntheticLetorDataModule(fold=2)
    with pytest.raises(ValueError, match="n_train_queries must be a positive int"):
        SyntheticLetorDataModule(n_train_queries=0)
    with pytest.raises(ValueError, match="normalization"):
        SyntheticLetorDataModule(normalization="bad")
