"""The Parquet click log: written and read back row group by row group; every rule of its schema
refused naming the file, the row group and the row; files that are not logs refused by name."""

from __future__ import annotations

import os

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from differank.datamodules.clicks import parquet_log  # noqa: E402
from differank.datamodules.clicks.click_log import ClickLog, ClickLogError  # noqa: E402
from differank.datamodules.clicks.parquet_log import (  # noqa: E402
    FORMAT,
    FORMAT_KEY,
    ClickLogWriter,
    FeatureTable,
    ParquetClickLog,
    write_click_log_parquet,
)

FOOTER = {FORMAT_KEY: FORMAT}


def columns(**changes):
    """Two sessions (3 and 2 documents) of a features log, as Parquet columns."""
    base = {
        "session": pa.array([0, 0, 0, 5, 5], pa.int64()),
        "qid": pa.array([7, 7, 7, 9, 9], pa.int64()),
        "position": pa.array([1, 2, 3, 1, 2], pa.int32()),
        "click": pa.array([1, 0, 0, 0, 1], pa.uint8()),
        "dwell": pa.array([3.5, 0, 0, 0, 12.0], pa.float32()),
        "propensity": pa.array([1.0, 0.5, 0.25, 1.0, 0.5], pa.float64()),
        "features": pa.array([[1.0, 2.0]] * 5, pa.list_(pa.float32())),
    }
    base.update(changes)
    return {name: value for name, value in base.items() if value is not None}


def write(path, row_group_size=None, footer=FOOTER, **changes):
    table = pa.table(columns(**changes)).replace_schema_metadata(footer)
    pq.write_table(table, path, row_group_size=row_group_size)
    return path


def test_a_written_log_reads_back_equal_by_row_group(tmp_path):
    features = np.arange(10, dtype=np.float32).reshape(5, 2)
    log = ClickLog(
        session=np.array([0, 0, 0, 5, 5]),
        qid=np.array([7, 7, 7, 9, 9]),
        position=np.array([0, 1, 2, 0, 1]),
        click=np.array([1, 0, 0, 0, 1]),
        features=features,
        propensity=np.array([1.0, 0.5, 0.25, 1.0, 0.5]),
    )
    path = write_click_log_parquet(log, tmp_path / "log.parquet", row_group_rows=3)
    opened = ParquetClickLog(path)
    assert (opened.row_groups, opened.rows, opened.document) == (2, 5, "features")
    groups = [opened.read_group(g) for g in range(2)]
    assert [g.first_row for g in groups] == [0, 3]
    assert np.concatenate([g.session for g in groups]).tolist() == [0, 0, 0, 1, 1]  # renumbered
    assert np.concatenate([g.position for g in groups]).tolist() == [1, 2, 3, 1, 2]  # 1-based
    np.testing.assert_array_equal(np.concatenate([g.features for g in groups]), features)
    np.testing.assert_array_equal(np.concatenate([g.click for g in groups]), log.click)
    np.testing.assert_array_equal(np.concatenate([g.propensity for g in groups]), log.propensity)
    with pytest.raises(FileExistsError, match="exists"):
        write_click_log_parquet(log, path)


def test_optional_columns_and_stored_widths_are_read(tmp_path):
    path = write(tmp_path / "log.parquet", click=pa.array([True, False, False, False, True]))
    rows = ParquetClickLog(path).read_group(0)
    assert rows.click.tolist() == [1, 0, 0, 0, 1] and rows.dwell.tolist()[0] == 3.5
    assert rows.offsets.tolist() == [0, 3, 5]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"position": pa.array([1, 3, 2, 1, 2])}, r"row 1 \(file row 1\): session 0: position 3"),
        ({"position": pa.array([0, 1, 2, 0, 1])}, r"row 0 .*position 0, expected 1"),
        ({"session": pa.array([0, 0, 5, 0, 0])}, r"row 3 .*session 0 follows session 5"),
        ({"qid": pa.array([7, 7, 8, 9, 9])}, r"row 2 .*qid 8 differs"),
        ({"click": pa.array([1, 0, 0, 0, 256], pa.int32())}, r"row 4 .*click 256 is not 0 or 1"),
        ({"click": pa.array([1, None, 0, 0, 1], pa.int32())}, r"row 1 .*click is null"),
        ({"propensity": pa.array([1.0, 0, 1, 1, 1])}, r"row 1 .*propensity 0.0 is not in"),
        ({"propensity": pa.array([1, 1e-50, 1, 1, 1])}, r"row 1 .*propensity 1e-50 is not in"),
        ({"dwell": pa.array([1, float("nan"), 1, 1, 1])}, r"row 1 .*dwell nan is not a finite"),
        (
            {"session": pa.array([0, 0, 0, 2**63, 2**63], pa.uint64())},
            r"row 3 .*session 9223372036854775808 is outside",
        ),
        (
            {"features": pa.array([[1.0, 2.0]] * 4 + [[1.0]], pa.list_(pa.float32()))},
            r"row 4 .*features holds 1 values, expected 2",
        ),
        (
            {"features": pa.array([[1.0, 2.0]] * 4 + [[1.0, 1e39]], pa.list_(pa.float64()))},
            r"row 4 .*features\[1\] is 1e\+39",
        ),
    ],
)
def test_a_broken_row_is_refused_naming_the_row_group_and_row(tmp_path, changes, message):
    path = write(tmp_path / "log.parquet", **changes)
    with pytest.raises(ClickLogError, match=f"log.parquet: row group 0, {message}"):
        ParquetClickLog(path).read_group(0)


def test_a_session_across_row_groups_is_refused_from_the_footer(tmp_path):
    path = write(tmp_path / "log.parquet", row_group_size=2)  # session 0 spans groups 0 and 1
    with pytest.raises(ClickLogError, match="row group 1 holds sessions 0..5, row group 0 up to 0"):
        ParquetClickLog(path)


@pytest.mark.parametrize(
    ("changes", "footer", "message"),
    [
        ({}, {}, "footer's differank.click_log is None"),
        ({"features": None}, FOOTER, r"exactly one of \['features', 'doc_key', 'doc_row'\]"),
        ({"doc_key": pa.array([1] * 5)}, FOOTER, "document columns \\['features', 'doc_key'\\]"),
        ({"extra": pa.array([1] * 5)}, FOOTER, "unknown \\['extra'\\]"),
        ({"click": pa.array(["1"] * 5)}, FOOTER, "column 'click' has type string"),
        ({"propensity": pa.array([1] * 5)}, FOOTER, "column 'propensity' has type int64"),
    ],
)
def test_a_file_of_another_layout_is_refused_by_name(tmp_path, changes, footer, message):
    path = write(tmp_path / "log.parquet", footer=footer, **changes)
    with pytest.raises(ClickLogError, match=message):
        ParquetClickLog(path)


def test_what_is_not_a_regular_parquet_file_is_refused_by_name(tmp_path):
    fifo = tmp_path / "fifo.parquet"
    os.mkfifo(fifo)
    with pytest.raises(ValueError, match="fifo.parquet is a FIFO"):
        ParquetClickLog(fifo)
    text = tmp_path / "text.parquet"
    text.write_text("session,qid\n")
    with pytest.raises(ClickLogError, match="text.parquet: not a readable Parquet file"):
        ParquetClickLog(text)


def test_the_writer_refuses_sessions_out_of_order_and_leaves_no_file(tmp_path):
    path = tmp_path / "log.parquet"
    one = dict(session=[0], qid=[1], position=[1], click=[0], doc_row=[3])
    with pytest.raises(ValueError, match="starts at session 0, after session 0"):
        with ClickLogWriter(path, "doc_row") as writer:
            writer.write(**one)
            writer.write(**one)
    assert list(tmp_path.iterdir()) == []  # neither the log nor its temporary file


def test_a_feature_table_maps_keys_to_features_and_names_a_missing_key(tmp_path):
    table = pa.table(
        {"doc_key": pa.array([30, 10, 20]), "features": pa.array([[3.0], [1.0], [2.0]])}
    )
    pq.write_table(table, tmp_path / "table.parquet")
    features = FeatureTable.read(tmp_path / "table.parquet")
    path = write(tmp_path / "log.parquet", features=None, doc_key=pa.array([10, 30, 20, 20, 40]))
    rows = ParquetClickLog(path).read_group(0)
    assert features.lookup(rows.doc_key[:4], rows, path)[:, 0].tolist() == [1, 3, 2, 2]
    with pytest.raises(ClickLogError, match=r"file row 4 \(session 5\): doc_key 40 is not in"):
        features.lookup(rows.doc_key, rows, path)
    twice = pa.table({"doc_key": pa.array([1, 1]), "features": pa.array([[1.0], [2.0]])})
    pq.write_table(twice, tmp_path / "twice.parquet")
    with pytest.raises(ClickLogError, match="doc_key 1 appears more than once"):
        FeatureTable.read(tmp_path / "twice.parquet")


def test_a_row_group_larger_than_the_memory_is_refused_before_it_is_read(tmp_path, monkeypatch):
    path = write(tmp_path / "log.parquet")
    monkeypatch.setattr(parquet_log, "available_memory_bytes", lambda: 100)
    with pytest.raises(ClickLogError, match="log.parquet: its largest row group takes"):
        ParquetClickLog(path)
