"""``data.format=parquet`` and ``read_parquet`` / ``write_parquet``: the text reader's rules, with
errors naming the file, row group, row and column, and the same split tensors as the text path."""

import builtins
import doctest
import re
import subprocess
import sys

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from differank.datamodules import parquet  # noqa: E402
from differank.datamodules.letor import LetorDataModule  # noqa: E402
from differank.datamodules.parquet import (  # noqa: E402
    ParquetColumns,
    read_parquet,
    write_parquet,
)
from differank.datamodules.reader import read_letor_file, write_letor  # noqa: E402
from tests.conftest import ROOT  # noqa: E402


def ranking_data(seed=0, queries=12, width=5):
    rng = np.random.default_rng(seed)
    sizes = rng.integers(2, 9, size=queries)
    qid = np.repeat(np.arange(1, queries + 1) * 10, sizes)
    X = rng.normal(size=(len(qid), width)).astype(np.float32)
    y = rng.integers(0, 5, size=len(qid))
    return X, y, qid


def table(path, **columns):
    pq.write_table(pa.table(columns), path)
    return path


def good_columns(n=4):
    return {"label": [1, 0, 2, 1][:n], "qid": [5, 5, 6, 6][:n], "a": [0.5] * n, "b": [1.0] * n}


def test_round_trip_of_columns_and_list_layouts(tmp_path):
    X, y, qid = ranking_data()
    for list_column in (False, True):
        path = write_parquet(
            tmp_path / f"{list_column}.parquet",
            X,
            y,
            qid,
            list_column=list_column,
            row_group_rows=7,
        )
        assert pq.ParquetFile(path).metadata.num_row_groups > 1
        X2, y2, qid2 = read_parquet(path)
        np.testing.assert_array_equal(X2, X)
        np.testing.assert_array_equal(y2, y.astype(np.float32))
        np.testing.assert_array_equal(qid2, qid)
        assert X2.dtype == np.float32 and qid2.dtype == np.int64


def test_a_folder_is_its_parquet_files_in_name_order(tmp_path):
    X, y, qid = ranking_data()
    write_parquet(tmp_path / "b.parquet", X[10:], y[10:], qid[10:])
    write_parquet(tmp_path / "a.parquet", X[:10], y[:10], qid[:10])
    (tmp_path / "notes.txt").write_text("ignored")
    X2, y2, qid2 = read_parquet(tmp_path)
    np.testing.assert_array_equal(X2, X)
    np.testing.assert_array_equal(qid2, qid)


def test_column_names_are_configurable(tmp_path):
    path = table(tmp_path / "f.parquet", rel=[1, 0], query=[3, 3], x=[0.5, 1.5], y=[2.0, 3.0])
    X, y, qid = read_parquet(path, columns=ParquetColumns("rel", "query", ("y",)))
    assert X.tolist() == [[2.0], [3.0]] and y.tolist() == [1.0, 0.0] and qid.tolist() == [3, 3]


def test_equals_the_text_reader_on_the_same_rows(tmp_path):
    X, y, qid = ranking_data(seed=3)
    text = read_letor_file(write_letor(tmp_path / "f.txt", X, y, qid), cache_dir=tmp_path / "c")
    X2, y2, qid2 = read_parquet(write_parquet(tmp_path / "f.parquet", X, y, qid))
    np.testing.assert_array_equal(X2, text.features)
    np.testing.assert_array_equal(y2, text.labels.astype(np.float32))
    np.testing.assert_array_equal(qid2, text.qids)


def write_fold(root, writer, seed=0):
    """Fold1 of a LETOR set with the rows of ranking_data, by ``writer(path_stem, X, y, qid)``."""
    for index, stem in enumerate(("train", "vali", "test")):
        X, y, qid = ranking_data(seed=seed + index, width=6)
        writer(root / "Fold1" / stem, X, y, qid)


@pytest.mark.parametrize("normalization", ["zscore", "query_minmax"])
def test_the_datamodule_builds_the_same_splits_as_from_text(tmp_path, normalization):
    write_fold(tmp_path / "text", lambda p, *a: write_letor(p.with_suffix(".txt"), *a))
    write_fold(tmp_path / "pq", lambda p, *a: write_parquet(p.with_suffix(".parquet"), *a))
    text = LetorDataModule(
        tmp_path / "text", normalization=normalization, cache_dir=tmp_path / "c1"
    )
    columnar = LetorDataModule(
        tmp_path / "pq", format="parquet", normalization=normalization, cache_dir=tmp_path / "c2"
    )
    assert columnar.n_features == text.n_features == 6
    for split in ("train", "val", "test"):
        a, b = text.split_data(split), columnar.split_data(split)
        np.testing.assert_array_equal(b.features, a.features)
        np.testing.assert_array_equal(b.labels, a.labels)
        np.testing.assert_array_equal(b.qids, a.qids)
        np.testing.assert_array_equal(b.query_ids, a.query_ids)
        batch_a, batch_b = text.full_batch(split), columnar.full_batch(split)
        for key in batch_a:
            assert np.array_equal(batch_a[key].numpy(), batch_b[key].numpy()), key
    np.testing.assert_array_equal(columnar.feature_mean, text.feature_mean)
    assert columnar.split_files("train") == [tmp_path / "pq" / "Fold1" / "train.parquet"]


def test_a_warm_datamodule_serves_the_cached_split(tmp_path):
    write_fold(tmp_path, lambda p, *a: write_parquet(p.with_suffix(".parquet"), *a))
    cold = LetorDataModule(tmp_path, format="parquet", cache_dir=tmp_path / "c")
    cold.setup()
    warm = LetorDataModule(tmp_path, format="parquet", cache_dir=tmp_path / "c")
    np.testing.assert_array_equal(
        warm.split_data("test").features, cold.split_data("test").features
    )
    assert isinstance(warm.split_data("test").features, np.memmap)
    # another choice of feature columns is another cache entry, not the cached features
    narrow = LetorDataModule(
        tmp_path, format="parquet", feature_columns=["feature_2"], cache_dir=tmp_path / "c"
    )
    assert narrow.n_features == 1


def test_split_folders_and_their_errors(tmp_path):
    X, y, qid = ranking_data()
    fold = tmp_path / "Fold1"
    write_parquet(fold / "train" / "part-0.parquet", X[:20], y[:20], qid[:20])
    write_parquet(fold / "train" / "part-1.parquet", X[20:], y[20:], qid[20:])
    write_parquet(fold / "vali.parquet", X, y, qid)
    with pytest.raises(FileNotFoundError, match=r"missing Parquet split: .*test\.parquet"):
        parquet.fold_files(tmp_path, 1)
    write_parquet(fold / "test.parquet", X, y, qid)
    files = parquet.fold_files(tmp_path, 1)
    assert [p.name for p in files["train"]] == ["part-0.parquet", "part-1.parquet"]
    (fold / "test").mkdir()
    with pytest.raises(ValueError, match="ambiguous Parquet split"):
        parquet.fold_files(tmp_path, 1)
    with pytest.raises(FileNotFoundError, match="Fold2/ does not exist"):
        parquet.fold_files(tmp_path, 2)


def test_splits_with_other_feature_columns_are_refused(tmp_path):
    write_fold(tmp_path, lambda p, *a: write_parquet(p.with_suffix(".parquet"), *a))
    X, y, qid = ranking_data(width=6)
    names = tuple(f"feature_{j + 1}" for j in range(5)) + ("other",)
    write_parquet(
        tmp_path / "Fold1" / "test.parquet", X, y, qid, columns=ParquetColumns(features=names)
    )
    module = LetorDataModule(tmp_path, format="parquet", cache_dir=tmp_path / "c")
    with pytest.raises(ValueError, match=r"test\.parquet: its features differ .*'other' where"):
        module.setup()


LOCATED = r"f\.parquet: row group {group}, row {row} \(file row {file_row}\), column '{column}'"


def located(column, row, group=0, file_row=None):
    return LOCATED.format(
        group=group,
        row=row,
        file_row=row if file_row is None else file_row,
        column=re.escape(column),
    )


@pytest.mark.parametrize(
    ("change", "column", "row", "message"),
    [
        ({"label": [1, 0, 1.5, 1]}, "label", 2, "label 1.5 is not an integer 0..31"),
        ({"label": [1, 0, 2, 32]}, "label", 3, "label 32 is not an integer 0..31"),
        ({"label": [1, -1, 2, 1]}, "label", 1, "label -1 is not an integer"),
        ({"label": [1, None, 2, 1]}, "label", 1, "null label"),
        ({"qid": [5, 5, -6, 6]}, "qid", 2, "qid -6 is not an integer 0..10"),
        ({"qid": [5, 5, 10**18, 6]}, "qid", 2, "qid 1000000000000000000 is not an integer"),
        ({"qid": [5, None, 6, 6]}, "qid", 1, "null qid"),
        ({"qid": [5.0, 5.0, 6.0, 6.0]}, "qid", 0, "the qid column has type double"),
        ({"label": ["a", "b", "c", "d"]}, "label", 0, "the label column has type string"),
    ],
)
def test_label_and_qid_rules_name_the_row_and_column(tmp_path, change, column, row, message):
    path = table(tmp_path / "f.parquet", **{**good_columns(), **change})
    with pytest.raises(ValueError, match=located(column, row) + ": " + re.escape(message)):
        read_parquet(path)


def test_errors_name_the_row_group(tmp_path):
    X, y, qid = ranking_data()
    y = y.copy()
    y[9] = 40
    path = write_parquet(tmp_path / "f.parquet", X, y, qid, row_group_rows=4)
    with pytest.raises(ValueError, match=located("label", 1, group=2, file_row=9)):
        read_parquet(path)


@pytest.mark.parametrize("value", [np.nan, np.inf, -np.inf, 1e39])
def test_non_finite_values_follow_nan_policy(tmp_path, value):
    columns = good_columns()
    columns["b"] = pa.array([1.0, 2.0, value, value], pa.float64())
    path = table(tmp_path / "f.parquet", **columns)
    shown = "value 1e+39 is beyond float32's range" if np.isfinite(value) else f"value {value}"
    with pytest.raises(
        ValueError,
        match=located("b", 2) + r": not finite \(" + re.escape(shown) + r".*2 such value",
    ):
        read_parquet(path)
    X, _, _ = read_parquet(path, nan_policy="zero")
    assert X[:, 1].tolist() == [1.0, 2.0, 0.0, 0.0]
    X, _, _ = read_parquet(path, nan_policy="allow")
    assert not np.isfinite(X[2:, 1]).any()


def test_null_feature_values_need_null_value(tmp_path):
    columns = good_columns()
    columns["a"] = [0.5, None, 0.25, 1.0]
    path = table(tmp_path / "f.parquet", **columns)
    with pytest.raises(ValueError, match=located("a", 1) + ": null feature value; set null_value"):
        read_parquet(path)
    X, _, _ = read_parquet(path, null_value=-1)
    assert X[:, 0].tolist() == [0.5, -1.0, 0.25, 1.0]


def test_label_range_is_enforced_with_the_location(tmp_path):
    path = table(tmp_path / "f.parquet", **good_columns())
    with pytest.raises(ValueError, match=located("label", 2) + r": label 2 outside label_range"):
        read_parquet(path, label_range=[0, 1])


def test_list_column_rules(tmp_path):
    base = {"label": [1, 0], "qid": [5, 5]}
    path = table(tmp_path / "f.parquet", **base, features=[[1.0, 2.0], [3.0]])
    with pytest.raises(
        ValueError,
        match=located("features", 1) + ": 1 features in the list, the file's first row has 2",
    ):
        read_parquet(path)
    path = table(tmp_path / "f.parquet", **base, features=[[1.0, 2.0], None])
    with pytest.raises(ValueError, match=located("features", 1) + ": null feature list"):
        read_parquet(path)
    path = table(tmp_path / "f.parquet", **base, features=[[1.0, None], [3.0, 4.0]])
    with pytest.raises(ValueError, match=located("features[1]", 0) + ": null feature value"):
        read_parquet(path)
    path = table(tmp_path / "f.parquet", **base, features=[[1.0, np.nan], [3.0, 4.0]])
    with pytest.raises(ValueError, match=located("features[1]", 0) + ": not finite"):
        read_parquet(path)
    path = table(tmp_path / "f.parquet", **base, features=[[1.0], [3.0]], extra=[1.0, 2.0])
    with pytest.raises(ValueError, match="column 'features' is a list among 2 feature columns"):
        read_parquet(path)


def test_structural_errors_name_the_file_and_column(tmp_path):
    cases = [
        ({"qid": [1], "a": [1.0]}, r"no label column 'label' \(columns: qid, a\)"),
        ({"label": [1], "a": [1.0]}, "no qid column 'qid'"),
        ({"label": [1], "qid": [1]}, "no feature column besides 'label' and 'qid'"),
        ({"label": [1], "qid": [1], "a": ["x"]}, "feature column 'a' has type string"),
    ]
    for columns, message in cases:
        path = table(tmp_path / "f.parquet", **columns)
        with pytest.raises(ValueError, match=r"f\.parquet: " + message):
            read_parquet(path)
    path = table(tmp_path / "f.parquet", **good_columns())
    with pytest.raises(ValueError, match="no feature column 'c'"):
        read_parquet(path, columns=ParquetColumns(features=("a", "c")))
    empty = pa.table(
        {
            "label": pa.array([], pa.int32()),
            "qid": pa.array([], pa.int64()),
            "a": pa.array([], pa.float32()),
        }
    )
    pq.write_table(empty, tmp_path / "e.parquet")
    with pytest.raises(ValueError, match=r"e\.parquet: empty file \(no rows\)"):
        read_parquet(tmp_path / "e.parquet")
    (tmp_path / "bad.parquet").write_text("label qid\n")
    with pytest.raises(ValueError, match=r"bad\.parquet: not a readable Parquet file"):
        read_parquet(tmp_path / "bad.parquet")
    (tmp_path / "none").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no"):
        read_parquet(tmp_path / "none")
    with pytest.raises(ValueError, match="label and qid columns must differ"):
        ParquetColumns("q", "q")


def test_a_clear_error_without_pyarrow(monkeypatch, tmp_path):
    real_import = builtins.__import__

    def no_pyarrow(name, *args, **kwargs):
        if name.startswith("pyarrow"):
            raise ImportError(f"No module named {name!r}")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pyarrow)
    with pytest.raises(ImportError, match=r"pip install 'differank\[parquet\]'"):
        read_parquet(tmp_path / "f.parquet")


def test_the_converter_writes_a_parquet_fold_equal_to_the_text(tmp_path):
    write_fold(tmp_path / "text", lambda p, *a: write_letor(p.with_suffix(".txt"), *a))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "differank.datamodules.to_parquet",
            str(tmp_path / "text"),
            str(tmp_path / "pq"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    for stem in ("train", "vali", "test"):
        text = read_letor_file(
            tmp_path / "text" / "Fold1" / f"{stem}.txt", cache_dir=tmp_path / "c"
        )
        X, y, qid = read_parquet(tmp_path / "pq" / "Fold1" / f"{stem}.parquet")
        np.testing.assert_array_equal(X, text.features)
        np.testing.assert_array_equal(qid, text.qids)


def test_the_converter_keeps_null_cells_null(tmp_path):
    source = tmp_path / "f.txt"
    source.write_text("1 qid:1 1:0.5 2:NULL\n0 qid:1 1:NULL 2:2\n")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "differank.datamodules.to_parquet",
            str(source),
            str(tmp_path / "f.parquet"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    with pytest.raises(ValueError, match=located("feature_2", 0) + ": null feature value"):
        read_parquet(tmp_path / "f.parquet")
    X, _, _ = read_parquet(tmp_path / "f.parquet", null_value=7)
    assert X.tolist() == [[0.5, 7.0], [7.0, 2.0]]


def docs_section(title: str) -> str:
    text = (ROOT / "docs" / "data.md").read_text()
    start = text.index(f"## {title}\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def test_the_docs_examples_run():
    """docs/data.md#parquet-data's examples, run as doctests."""
    section = docs_section("Parquet data")
    test = doctest.DocTestParser().get_doctest(section, {}, "docs/data.md", "docs/data.md", 0)
    assert len(test.examples) >= 8
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_the_public_names_are_reached_from_the_package():
    import differank.datamodules as package

    assert package.read_parquet is read_parquet and package.write_parquet is write_parquet
    with pytest.raises(AttributeError):
        package.read_nothing  # noqa: B018


def test_the_datamodule_applies_nan_policy_and_null_value_as_for_text(tmp_path):
    """A NaN and a NULL cell in training, read as text and as Parquet: the same refusal by
    default, the same split features with nan_policy="zero" and null_value."""
    X, y, qid = ranking_data(seed=5, width=4)
    X[3, 1] = np.nan
    nulls = np.zeros(X.shape, bool)
    nulls[5, 2] = True
    for stem in ("train", "vali", "test"):
        text = write_letor(tmp_path / "text" / "Fold1" / f"{stem}.txt", X, y, qid)
        if stem == "train":  # LETOR 3.0's NULL token in the text, a null cell in Parquet
            lines = text.read_text().splitlines()
            lines[5] = lines[5].replace(f" 3:{X[5, 2]:.9g} ", " 3:NULL ")
            text.write_text("\n".join(lines) + "\n")
        write_parquet(
            tmp_path / "pq" / "Fold1" / f"{stem}.parquet",
            X,
            y,
            qid,
            null_mask=nulls if stem == "train" else None,
        )
    options = {"nan_policy": "zero", "null_value": 0.5, "normalization": "none"}
    text = LetorDataModule(tmp_path / "text", cache_dir=tmp_path / "c1", **options)
    columnar = LetorDataModule(
        tmp_path / "pq", format="parquet", cache_dir=tmp_path / "c2", **options
    )
    for split in ("train", "val", "test"):
        a, b = text.split_data(split).features, columnar.split_data(split).features
        np.testing.assert_array_equal(b, a)
    train = columnar.split_data("train").features
    assert train[3, 1] == 0.0 and train[5, 2] == 0.5
    refused = LetorDataModule(
        tmp_path / "pq", format="parquet", cache_dir=tmp_path / "c3", null_value=0.5
    )
    with pytest.raises(
        ValueError,
        match=r"train\.parquet: row group 0, row 3 \(file row 3\), "
        r"column 'feature_2': not finite \(value nan",
    ):
        refused.setup()
    refused = LetorDataModule(tmp_path / "pq", format="parquet", cache_dir=tmp_path / "c4")
    with pytest.raises(ValueError, match=r"column 'feature_3': null feature value"):
        refused.setup()


def test_a_fold_too_large_for_memory_or_the_cache_disk_is_refused_before_decoding(
    tmp_path, monkeypatch
):
    from differank.datamodules import cache

    write_fold(tmp_path, lambda p, *a: write_parquet(p.with_suffix(".parquet"), *a))
    monkeypatch.setattr(parquet, "available_memory_bytes", lambda: 1000)
    decoded = []
    monkeypatch.setattr(parquet, "_decode", lambda *a, **k: decoded.append(a))
    module = LetorDataModule(tmp_path, format="parquet", cache_dir=tmp_path / "c")
    with pytest.raises(
        ValueError,
        match=r"Fold1/train\.parquet.*need .* GiB of memory, but "
        r"0\.00 GiB is available; read fewer feature columns",
    ):
        module.setup()
    monkeypatch.setattr(parquet, "available_memory_bytes", lambda: 2**40)
    monkeypatch.setattr(cache, "free_disk_bytes", lambda folder: 10)
    with pytest.raises(
        ValueError,
        match=r"in the cache .* for the normalised splits, but its "
        r"disk has 0\.00 GiB free; set data.cache_dir",
    ):
        module.setup()
    assert decoded == []


def test_doc_ids_are_read_like_the_texts(tmp_path):
    X, y, qid = ranking_data(seed=2, width=3)
    names = [f"doc-{i}" for i in range(len(y))]
    for stem in ("train", "vali", "test"):
        write_letor(tmp_path / "text" / "Fold1" / f"{stem}.txt", X, y, qid, docids=names)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "differank.datamodules.to_parquet",
            str(tmp_path / "text"),
            str(tmp_path / "pq"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    text = LetorDataModule(tmp_path / "text", cache_dir=tmp_path / "c1")
    columnar = LetorDataModule(tmp_path / "pq", format="parquet", cache_dir=tmp_path / "c2")
    assert columnar.split_data("test").docids.tolist() == text.split_data("test").docids.tolist()
    assert columnar.split_data("test").docids.tolist() == names
    # integer ids are read as text, a null as an empty id; without the column ids are empty
    path = table(tmp_path / "ids.parquet", **good_columns(), docid=[7, None, 9, 10])
    assert parquet.read_parquet_file(path).docids.tolist() == ["7", "", "9", "10"]
    X2, _, _ = read_parquet(path)
    assert X2.shape == (4, 2)  # the doc id is not a feature
    path = table(tmp_path / "none.parquet", **good_columns())
    assert parquet.read_parquet_file(path).docids.tolist() == [""] * 4
    groups = write_parquet(tmp_path / "rg.parquet", X, y, qid, docids=names, row_group_rows=5)
    assert pq.ParquetFile(groups).metadata.num_row_groups > 2
    assert parquet.read_parquet_file(groups).docids.tolist() == names
