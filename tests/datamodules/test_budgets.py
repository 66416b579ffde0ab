"""Resource budgets stated before allocation (datamodules/reader.py ``check_fold_budget``): a
fold whose dense float32 matrices (parsed and normalised) exceed the available memory, or whose
cache writes exceed the cache disk's free space, is refused with the numbers before any large
allocation."""

import gzip
import tracemalloc

import numpy as np
import pytest

from differank.datamodules import cache, reader
from differank.datamodules.letor import LetorDataModule

ROWS = b"2 qid:1 1:0.5 2:1\n0 qid:1 1:0.1 2:0\n1 qid:2 1:0.3 2:2\n0 qid:2 1:0.2 2:1\n"


def sparse_fold(tmp_path, index=10**7):
    """28 rows over train/vali/test, one training row with a feature index of ``index``."""
    fold = tmp_path / "data" / "Fold1"
    fold.mkdir(parents=True)
    wide = f"1 qid:3 1:0.4 {index}:1\n".encode()
    (fold / "train.txt").write_bytes(ROWS * 3 + wide + ROWS * 2 + b"0 qid:9 1:0\n" * 3)
    (fold / "vali.txt").write_bytes(ROWS)
    (fold / "test.txt").write_bytes(ROWS)
    return tmp_path / "data"


GiB = 2**30


def test_a_sparse_index_of_ten_million_is_refused_before_any_big_allocation(tmp_path, monkeypatch):
    root = sparse_fold(tmp_path)
    monkeypatch.setattr(reader, "available_memory_bytes", lambda: 2 * GiB)
    data = LetorDataModule(root=root, cache_dir=tmp_path / "cache")
    tracemalloc.start()
    try:
        with pytest.raises(ValueError) as refused:
            data.setup()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    message = str(refused.value)
    # 24 training rows x 10^7 parsed + (24 + 4 + 4) rows x 10^7 normalised, float32; the
    # rows' bookkeeping; parsing train.txt scans its whole text at once into 24 x 10^7 floats
    parsed = 4 * (24 * 10**7 + 2 * 4 * 2)
    normalised = 4 * 32 * 10**7
    rows = 32 * reader._ROW_BYTES
    parsing = (root / "Fold1" / "train.txt").stat().st_size + 24 * (4 * 10**7 + 33)
    assert "train.txt, feature index 10000000" in message
    assert f"parsed ({parsed / GiB:.2f} GiB)" in message
    assert f"normalised to 10000000 features ({normalised / GiB:.2f} GiB)" in message
    assert f"document ids ({rows / GiB:.2f} GiB) and the parse buffers ({parsing / GiB:.2f} GiB)"
    need = parsed + normalised + rows + parsing
    assert f"need {need / GiB:.2f} GiB of memory, but 2.00 GiB" in message
    assert "renumber the features densely" in message
    assert peak < 64 * 2**20  # nothing near the 2.1 GiB the matrices would take
    assert not any((tmp_path / "cache").rglob("*.npy"))  # and nothing written to the cache


def test_the_cache_disk_is_checked_for_what_a_cold_start_writes(tmp_path, monkeypatch):
    root = sparse_fold(tmp_path, index=1000)
    monkeypatch.setattr(reader, "available_memory_bytes", lambda: 64 * GiB)
    monkeypatch.setattr(cache, "free_disk_bytes", lambda folder: 100_000)
    with pytest.raises(ValueError, match=r"in the cache .*letor, but its disk has 0.00 GiB free"):
        LetorDataModule(root=root, cache_dir=tmp_path / "cache").setup()
    monkeypatch.setattr(cache, "free_disk_bytes", lambda folder: 10 * GiB)
    LetorDataModule(root=root, cache_dir=tmp_path / "cache").setup()
    # warm: every file parsed already, so the check asks for memory only
    monkeypatch.setattr(cache, "free_disk_bytes", lambda folder: 0)
    data = LetorDataModule(root=root, cache_dir=tmp_path / "cache")
    assert data.n_features == 1000


def test_a_fold_that_fits_is_read_as_before(tmp_path):
    root = sparse_fold(tmp_path, index=7)
    data = LetorDataModule(root=root, cache_dir=tmp_path / "cache", normalization="none")
    assert data.n_features == 7
    np.testing.assert_array_equal(
        data.split_data("test").features[:, :2],
        np.float32([[0.5, 1], [0.1, 0], [0.3, 2], [0.2, 1]]),
    )


def test_a_single_file_read_alone_is_checked_too(tmp_path, monkeypatch):
    path = tmp_path / "wide.txt"
    path.write_bytes(b"1 qid:1 2000:1\n0 qid:1 1:1\n")
    monkeypatch.setattr(reader, "available_memory_bytes", lambda: 1000)
    with pytest.raises(ValueError, match=r"wide.txt: 2 rows x 2000 features .* need 0.00 GiB"):
        reader.read_letor_file(path, cache_dir=tmp_path / "cache")


def test_a_gzipped_file_is_estimated_at_its_text_size(tmp_path):
    text = b"1 qid:1 1:0.5 2:0.25\n" * 200_000  # 4 MB of text, a few KB gzipped
    path = tmp_path / "part.txt.gz"
    path.write_bytes(gzip.compress(text))
    assert path.stat().st_size < 100_000
    assert reader._text_size(path) == len(text)


def test_the_budget_counts_the_rows_not_only_the_features(tmp_path):
    """A narrow fold (one feature) is mostly bookkeeping: labels, qids, line numbers, document
    ids, grouping. The budget counts them and stays within 1.5x of what the load allocates
    (traced by tracemalloc: numpy's arrays; benchmarks/reader_budget.py measures the RSS)."""
    fold = tmp_path / "data" / "Fold1"
    fold.mkdir(parents=True)
    rows = 200_000
    lines = (f"{i % 3} qid:{i // 20} 1:0.{i % 997} #docid = D{i}\n" for i in range(rows))
    (fold / "train.txt").write_text("".join(lines))
    (fold / "vali.txt").write_bytes(b"2 qid:1 1:0.5\n0 qid:1 1:0.1\n")
    (fold / "test.txt").write_bytes(b"2 qid:1 1:0.5\n0 qid:1 1:0.1\n")
    files = {split: [fold / f"{name}.txt"] for split, name in
             (("train", "train"), ("val", "vali"), ("test", "test"))}  # fmt: skip
    budget = reader.fold_memory_bytes(files, cache_dir=tmp_path / "cache")
    features_only = 2 * 4 * (rows + 8)  # parsed and normalised, one feature
    assert budget > 10 * features_only
    tracemalloc.start()
    try:
        LetorDataModule(root=tmp_path / "data", cache_dir=tmp_path / "cache").setup()
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert budget / 1.5 <= peak <= 1.5 * budget, (budget, peak)
