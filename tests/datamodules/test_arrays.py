"""``read_letor`` and ``read_query_files``: LETOR and query-file data as ``X, y, qid`` arrays,
the very values the data module reads, under the reader's rules."""

import numpy as np
import pytest

from differank.datamodules.arrays import read_letor, read_query_files
from differank.datamodules.letor import LetorDataModule
from differank.datamodules.reader import write_letor


def test_read_letor_gives_the_raw_values_the_data_module_reads(tmp_path):
    rng = np.random.default_rng(0)
    for name in ("train", "vali", "test"):
        features = rng.normal(size=(30, 4)).astype(np.float32)
        labels = rng.integers(0, 3, size=30)
        write_letor(tmp_path / "Fold1" / f"{name}.txt", features, labels, np.arange(30) // 5)
    X, y, qid = read_letor([tmp_path / "Fold1" / "train.txt"])
    split = LetorDataModule(tmp_path, normalization="none").split_data("train")
    np.testing.assert_array_equal(X, split.features)
    np.testing.assert_array_equal(y, split.labels)
    np.testing.assert_array_equal(qid, split.qids)
    wide, _, _ = read_letor(tmp_path / "Fold1" / "train.txt", n_features=6)
    assert wide.shape == (30, 6) and not wide[:, 4:].any()
    with pytest.raises(ValueError, match="writes feature 4, beyond n_features=3"):
        read_letor(tmp_path / "Fold1" / "train.txt", n_features=3)


def test_read_letor_keeps_the_readers_rules(tmp_path):
    path = tmp_path / "bad.txt"
    path.write_text("1 qid:1 1:0.5\n0 qid:1 1:nan\n")
    with pytest.raises(ValueError, match=r"bad.txt:2: feature 1 is not finite"):
        read_letor(path)
    assert read_letor(path, nan_policy="zero")[0].tolist() == [[0.5], [0.0]]
    path.write_text("1 qid:1 1:0.5\nx qid:1 1:1\n")
    with pytest.raises(ValueError, match=r"bad.txt:2"):
        read_letor(path)


def query_folder(root, rows, sizes):
    root.mkdir()
    (root / "rank.train").write_text("".join(line + "\n" for line in rows))
    (root / "rank.train.query").write_text("".join(f"{s}\n" for s in sizes))
    (root / "rank.test").write_text("2 1:9\n0 2:9\n")
    (root / "rank.test.query").write_text("1\n1\n")
    return root


def test_read_query_files_keeps_each_files_rows_in_order(tmp_path):
    rows = [f"{i % 3} 1:{i} 2:{-i}" for i in range(12)]
    folder = query_folder(tmp_path / "q", rows, [3, 2, 2, 1, 1, 3])
    arrays = read_query_files(folder, cache_dir=tmp_path / "cache")
    X, y, qid = arrays["rank.train"]
    assert X[:, 0].tolist() == list(range(12)) and y.tolist() == [i % 3 for i in range(12)]
    assert qid.tolist() == [1, 1, 1, 2, 2, 3, 3, 4, 5, 6, 6, 6]
    Xt, yt, qt = arrays["rank.test"]
    assert Xt.tolist() == [[9.0, 0.0], [0.0, 9.0]] and qt.tolist() == [1, 2]


def test_read_query_files_names_the_source_line(tmp_path):
    rows = [f"{i % 3} 1:{i}" for i in range(12)]
    rows[6] = "1 1:inf"
    folder = query_folder(tmp_path / "q", rows, [3, 2, 2, 1, 1, 3])
    with pytest.raises(ValueError, match=r"rank.train:7: feature 1 is not finite"):
        read_query_files(folder, cache_dir=tmp_path / "cache")
