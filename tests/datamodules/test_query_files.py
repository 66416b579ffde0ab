"""datamodules/query_files.py: query-file data (no qid, ``<file>.query`` group sizes) through the
LETOR DataModule with ``format="query_files"``: reading, the five-part rotation, the cache key,
errors with the source's file:line, and the evaluator reading the parts."""

import gzip
import json
import logging
import os
from pathlib import Path

import numpy as np
import pytest

from differank.datamodules import query_files
from differank.datamodules.letor import LetorDataModule
from differank.rankers.metrics.evaluate import evaluate_arrays, evaluate_files
from tests.conftest import ROOT

LIGHTGBM_RANK = (
    Path(os.environ["LETOR_DIR"]) / "lightgbm_rank"
    if os.environ.get("LETOR_DIR")
    else ROOT.parent / "shared" / "data" / "lightgbm_rank"
)
N_FEATURES = 6


def source_rows(seed: int, n_queries: int):
    """Random rows of ``n_queries`` queries: (dense features [N, 6] with zeros where no value is
    written, labels [N], group sizes). Each query writes every feature on its first row, so
    every feature occurs in every part."""
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 7, size=n_queries)
    n = int(sizes.sum())
    features = rng.integers(1, 100, size=(n, N_FEATURES)) / 100.0
    features[rng.uniform(size=(n, N_FEATURES)) < 0.4] = 0.0
    features[np.cumsum(sizes) - sizes] = rng.integers(1, 100, size=(n_queries, N_FEATURES)) / 100
    labels = rng.integers(0, 5, size=n)
    return features, labels, sizes


def row_text(label, values) -> str:
    return " ".join([str(label), *(f"{j + 1}:{v:.2f}" for j, v in enumerate(values) if v)])


def write_source(folder: Path, name: str, seed: int, n_queries: int, gz: bool = False):
    """``folder/name[.gz]`` (LightGBM rows, no qid) and ``folder/name.query``; returns the
    rows as written."""
    features, labels, sizes = source_rows(seed, n_queries)
    text = "".join(row_text(y, x) + "\n" for y, x in zip(labels, features, strict=True))
    folder.mkdir(parents=True, exist_ok=True)
    data = folder / (name + ".gz" if gz else name)
    data.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    (folder / f"{name}.query").write_text("".join(f"{s}\n" for s in sizes))
    return features, labels, sizes


@pytest.fixture
def source(tmp_path):
    """A LightGBM-style folder: rank.train (plain, 14 queries) and rank.test.gz (6 queries),
    each with its .query file, and a README that is not data."""
    folder = tmp_path / "lightgbm"
    rows = {
        "rank.test.gz": write_source(folder, "rank.test", seed=2, n_queries=6, gz=True),
        "rank.train": write_source(folder, "rank.train", seed=1, n_queries=14),
    }
    (folder / "README.md").write_text("not data\n")
    return folder, rows


def datamodule(root, fold=1, **options) -> LetorDataModule:
    return LetorDataModule(
        root, fold=fold, format="query_files", normalization="none", batch_size=4, **options
    )


def splits(dm) -> dict[str, set[int]]:
    return {name: set(dm.split_data(name).query_ids.tolist()) for name in ("train", "val", "test")}


def test_rows_read_as_written_with_synthesised_qids(source):
    folder, rows = source
    dm = datamodule(folder)
    assert dm.n_features == N_FEATURES  # the largest index written
    got = {}
    for name in ("train", "val", "test"):
        split = dm.split_data(name)
        for docid, qid, label, values in zip(
            split.docids, split.qids, split.labels, split.features, strict=True
        ):
            got[docid] = (int(qid), float(label), values)
    # every source row is in exactly one split, named by its source file and line
    for number, (file, (features, labels, sizes)) in enumerate(sorted(rows.items()), start=1):
        query = np.repeat(np.arange(1, len(sizes) + 1), sizes)
        for line, (values, label, q) in enumerate(zip(features, labels, query, strict=True), 1):
            qid, read_label, read_values = got.pop(f"{file}:{line}")
            assert qid == number * query_files.QID_STRIDE + q  # rank.test.gz is file 1
            assert read_label == label
            np.testing.assert_array_equal(read_values, values.astype(np.float32))  # absent = 0
    assert not got


def test_folds_rotate_five_parts_so_every_query_is_tested_once(source):
    folder, rows = source
    everything = set()
    for number, (_, (_, _, sizes)) in enumerate(sorted(rows.items()), start=1):
        everything |= {number * query_files.QID_STRIDE + q for q in range(1, len(sizes) + 1)}
    fold_splits = [splits(datamodule(folder, fold=k)) for k in range(1, 6)]
    tested = [q for s in fold_splits for q in s["test"]]
    assert sorted(tested) == sorted(everything)  # each query tested exactly once
    for k, split in enumerate(fold_splits):
        assert split["train"] | split["val"] | split["test"] == everything
        assert not (split["train"] & split["val"] or split["train"] & split["test"])
        assert not split["val"] & split["test"]
        assert split["val"] == fold_splits[(k + 1) % 5]["test"]  # validation: the next part
        assert len(split["test"]) in (4, 5)  # 20 queries in five parts of equal size
    assert query_files.query_parts(20).tolist() == query_files.query_parts(20).tolist()


def test_parts_are_reproducible_and_a_changed_source_builds_new_ones(source, tmp_path):
    folder, _ = source
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    first = query_files.letor_parts(folder, cache_dir=tmp_path / "one")
    second = query_files.letor_parts(folder, cache_dir=tmp_path / "two")
    for name in ("S1.txt", "S2.txt", "S3.txt", "S4.txt", "S5.txt", "folds.tsv"):
        assert (first / name).read_bytes() == (second / name).read_bytes()
    assert query_files.letor_parts(folder, cache_dir=tmp_path / "one") == first  # reused
    write_source(folder, "rank.train", seed=3, n_queries=14)
    changed = query_files.letor_parts(folder, cache_dir=tmp_path / "one")
    assert changed != first and (first / "S1.txt").is_file()
    assert (changed / "S1.txt").read_bytes() != (first / "S1.txt").read_bytes()
    assert {p.name for p in folder.iterdir()} == set(before)  # the source folder is only read
    assert (folder / "rank.test.gz").read_bytes() == before["rank.test.gz"]


def test_a_cached_part_cut_by_one_query_is_rebuilt_with_a_warning(source, tmp_path, caplog):
    folder, _ = source
    parts = query_files.letor_parts(folder, cache_dir=tmp_path)
    whole = (parts / "S3.txt").read_bytes()
    rows = whole.splitlines(keepends=True)
    last_qid = rows[-1].split()[1]
    kept = [row for row in rows if row.split()[1] != last_qid]  # the last query's rows cut
    (parts / "S3.txt").write_bytes(b"".join(kept))
    with caplog.at_level(logging.WARNING, logger="differank.datamodules.query_files"):
        assert query_files.letor_parts(folder, cache_dir=tmp_path) == parts
    assert (parts / "S3.txt").read_bytes() == whole  # built again from the sources
    assert f"S3.txt holds {len(kept)} rows, source.json {len(rows)}" in caplog.text
    assert "building the parts again" in caplog.text
    caplog.clear()
    (parts / "source.json").write_text("{")  # a damaged record: built again too
    with caplog.at_level(logging.WARNING, logger="differank.datamodules.query_files"):
        assert query_files.letor_parts(folder, cache_dir=tmp_path) == parts
    assert "source.json" in caplog.text and (parts / "S3.txt").read_bytes() == whole
    assert not [p for p in parts.parent.iterdir() if p.name.startswith(".")]  # no leftovers


def test_a_cached_part_edited_in_place_is_rebuilt(source, tmp_path, caplog):
    folder, _ = source
    parts = query_files.letor_parts(folder, cache_dir=tmp_path)
    whole = (parts / "S1.txt").read_bytes()
    (parts / "S1.txt").write_bytes(whole.replace(b" 1:", b" 1:9", 1))  # same row count
    with caplog.at_level(logging.WARNING, logger="differank.datamodules.query_files"):
        query_files.letor_parts(folder, cache_dir=tmp_path)
    assert "S1.txt does not have the sha256 in source.json" in caplog.text
    assert (parts / "S1.txt").read_bytes() == whole


def test_fewer_queries_than_parts_are_refused(tmp_path):
    write_source(tmp_path / "small", "tiny.train", seed=0, n_queries=4)
    with pytest.raises(ValueError, match="4 queries cannot fill 5 parts"):
        _ = datamodule(tmp_path / "small").n_features


def test_fold_table_matches_the_documented_rotation():
    lines = query_files.folds_table().splitlines()
    assert lines[0] == "fold\ttrain\tvali\ttest"
    assert lines[1] == "Fold1\tS3,S4,S5\tS2\tS1"
    assert lines[5] == "Fold5\tS2,S3,S4\tS1\tS5"


def test_evaluator_reads_labels_and_qids_aligned_with_the_source(source, tmp_path):
    folder, rows = source
    dm = datamodule(folder, fold=2)
    split = dm.split_data("test")
    # a perfect ranker from the SOURCE labels, found through each row's "file:line" doc id
    label_of = {
        f"{file}:{line}": label
        for file, (_, labels, _) in rows.items()
        for line, label in enumerate(labels, start=1)
    }
    scores = np.array([label_of[d] for d in split.docids], dtype=np.float64)
    predictions = tmp_path / "test.txt"
    predictions.write_text("".join(f"{s}\n" for s in scores))
    metrics = evaluate_files(dm.split_files("test"), predictions)
    assert metrics["map"] == 1.0 and metrics["mean_ndcg"] == pytest.approx(1.0)
    reversed_scores = -scores
    predictions.write_text("".join(f"{s}\n" for s in reversed_scores))
    worst = evaluate_files(dm.split_files("test"), predictions)
    expected = evaluate_arrays(reversed_scores, split.labels, split.qids)
    assert worst == expected and worst["map"] < 1.0


def test_group_sizes_that_do_not_sum_to_the_rows_are_refused(source, tmp_path):
    folder, rows = source
    sizes = rows["rank.train"][2]
    (folder / "rank.train.query").write_text("".join(f"{s}\n" for s in sizes[:-1]))
    with pytest.raises(ValueError, match=r"rank\.train:\d+: row \d+, but .*rank\.train\.query"):
        _ = datamodule(folder).n_features
    (folder / "rank.train.query").write_text("".join(f"{s}\n" for s in [*sizes, 3]))
    with pytest.raises(ValueError, match=r"rank\.train: \d+ rows, but .*fix the \.query"):
        _ = datamodule(folder).n_features
    (folder / "rank.train.query").write_text("4\nfour\n")
    with pytest.raises(ValueError, match=r"rank\.train\.query:2: 'four' is not a group size"):
        _ = datamodule(folder).n_features
    assert not list((Path(os.environ["DIFFERANK_CACHE"]) / "query_files").glob(".*"))


@pytest.mark.parametrize(
    "value, shown",
    [("²".encode(), "'²'"), ("٣".encode(), "'٣'"), (b"\xff", "byte 0xff")],
    ids=["superscript-two", "arabic-indic-three", "byte-0xff"],
)
def test_a_group_size_not_in_ascii_digits_names_file_line_and_value(source, value, shown):
    folder, _ = source
    (folder / "rank.train.query").write_bytes(b"4\n" + value + b"\n")
    with pytest.raises(ValueError) as error:
        _ = datamodule(folder).n_features
    message = str(error.value)
    assert message.startswith(f"{folder / 'rank.train.query'}:2: ") and shown in message
    assert "ASCII digits" in message


def test_a_row_with_a_qid_is_refused_with_its_line(source):
    folder, _ = source
    lines = (folder / "rank.train").read_text().splitlines()
    lines[2] = lines[2].replace(" ", " qid:7 ", 1)
    (folder / "rank.train").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"rank\.train:3: the row has a qid.*format=letor"):
        _ = datamodule(folder).n_features


def test_missing_query_files_are_refused(source, tmp_path):
    folder, _ = source
    (folder / "rank.test").write_bytes(gzip.decompress((folder / "rank.test.gz").read_bytes()))
    with pytest.raises(ValueError, match=r"both .*rank\.test and .*rank\.test\.gz exist"):
        _ = datamodule(folder).n_features
    (folder / "rank.test").unlink()
    (folder / "rank.test.query").unlink()
    with pytest.raises(FileNotFoundError, match=r"rank\.test\.gz has no query file .*\.query"):
        _ = datamodule(folder).n_features
    (folder / "rank.test.gz").unlink()
    (folder / "rank.train").unlink()
    with pytest.raises(FileNotFoundError, match=r"rank\.train\.query has no data file"):
        _ = datamodule(folder).n_features
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(FileNotFoundError, match=r"holds no query-file data.*format=letor"):
        _ = datamodule(empty).n_features


def test_a_bad_row_is_reported_at_its_source_line(source):
    folder, _ = source
    lines = (folder / "rank.train").read_text().splitlines()
    lines[4] = lines[4] + " 9:abc"
    (folder / "rank.train").write_text("\n".join(lines) + "\n")
    with pytest.raises(ValueError, match=r"^.*lightgbm/rank\.train:5: feature value in '9:abc'"):
        for fold in range(1, 6):  # the row's part is read by every fold
            _ = datamodule(folder, fold=fold).n_features


def test_letor_format_is_the_default_and_the_format_is_checked(tmp_path):
    assert LetorDataModule(tmp_path).format == "letor"
    with pytest.raises(ValueError, match="format must be one of"):
        LetorDataModule(tmp_path, format="libsvm")


def test_the_lightgbm_rank_config_reads_query_files_under_letor_dir(train_config, monkeypatch):
    monkeypatch.setenv("LETOR_DIR", "/somewhere")
    data = train_config(["data=lightgbm_rank", "data.fold=3"]).data
    assert data.format == "query_files" and data.fold == 3
    assert data.root == "/somewhere/lightgbm_rank"


def test_reproduce_runs_query_file_data_by_one_option(source, tmp_path):
    import reproduce

    folder, _ = source
    overrides = [
        "model=linear",
        "loss=domination",
        "data=letor",
        f"data.root={folder}",
        "data.format=query_files",
        "trainer.max_epochs=1",
        "logger=csv",
    ]
    row = reproduce.run_one(reproduce.Config("q", overrides), 3, tmp_path / "runs", False, None)
    assert "error" not in row and 0.0 < row["map"] <= 1.0
    assert (tmp_path / "runs" / "q" / "fold3" / "predictions" / "test.txt").is_file()


@pytest.mark.skipif(not LIGHTGBM_RANK.is_dir(), reason=f"no data at {LIGHTGBM_RANK}")
def test_train_one_epoch_on_the_lightgbm_rank_example(train_config, tmp_path, monkeypatch):
    from hydra.utils import instantiate

    from tests.conftest import run_config

    monkeypatch.setenv("LETOR_DIR", str(LIGHTGBM_RANK.parent))
    overrides = ["data=lightgbm_rank", "data.fold=1", "trainer.max_epochs=1"]
    cfg = train_config(overrides)
    run_config(overrides, tmp_path / "run")
    rows = (tmp_path / "run" / "predictions" / "test.txt").read_text().splitlines()
    datamodule = instantiate(cfg.data)
    assert len(rows) == datamodule.num_rows("test")
    assert datamodule.n_features == 300  # fold 1's training parts write index 300
    written = json.loads((tmp_path / "run" / "test_metrics.json").read_text())
    rescored = evaluate_files(datamodule.split_files("test"), tmp_path / "run/predictions/test.txt")
    assert written["map"] == pytest.approx(rescored["map"], abs=1e-12)
