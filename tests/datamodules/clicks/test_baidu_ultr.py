"""The Baidu-ULTR click layout (one row per session, list columns; the Hugging Face subsets'
``clicks`` configuration) converted to a Parquet click log, on small files written here in that
layout (Feather and Parquet); broken sessions refused naming the source file and row."""

from __future__ import annotations

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
feather = pytest.importorskip("pyarrow.feather")
pq = pytest.importorskip("pyarrow.parquet")

from differank.datamodules.clicks.baidu_ultr import LTR_FEATURES, convert_baidu_ultr, main  # noqa: E402
from differank.datamodules.clicks.click_log import ClickLogError  # noqa: E402
from differank.datamodules.clicks.parquet_log import ParquetClickLog  # noqa: E402

LENGTHS = [3, 1, 4]


def session_table(**changes) -> pa.Table:
    """Three sessions in the subsets' layout: feature j of document k of session s is
    100 s + 10 j + k; the columns the converter does not read are there too."""
    rng = np.random.default_rng(0)
    columns = {
        "query_id": pa.array(["12", "7", "12"]),
        "query_md5": pa.array(["a", "b", "a"]),
        "url_md5": pa.array([["u"] * n for n in LENGTHS]),
        "position": pa.array([list(range(1, n + 1)) for n in LENGTHS], pa.list_(pa.int32())),
        "click": pa.array([[1, 0, 0], [0], [0, 1, 1, 0]], pa.list_(pa.int32())),
        "displayed_time": pa.array([[2.5] * n for n in LENGTHS], pa.list_(pa.float32())),
        "query_document_embedding": pa.array(
            [rng.normal(size=(n, 4)).astype(np.float16).tolist() for n in LENGTHS],
            pa.list_(pa.list_(pa.float16())),
        ),
    }
    for j, name in enumerate(LTR_FEATURES):
        values = [[100.0 * s + 10 * j + k for k in range(n)] for s, n in enumerate(LENGTHS)]
        columns[name] = pa.array(values, pa.list_(pa.float32()))
    columns.update(changes)
    return pa.table(columns)


def write_feather(path, **changes):
    feather.write_feather(session_table(**changes), path, chunksize=2)  # two record batches
    return path


def test_feather_and_parquet_files_convert_to_one_log(tmp_path):
    first = write_feather(tmp_path / "part-0_split-0.feather")
    second = tmp_path / "part-0_split-1.parquet"
    pq.write_table(session_table(), second)
    log = ParquetClickLog(convert_baidu_ultr([first, second], tmp_path / "baidu.parquet"))
    assert log.document == "features" and log.n_features == len(LTR_FEATURES)
    assert log.row_groups == 3  # the feather's two record batches, the Parquet's one
    rows = [log.read_group(g) for g in range(log.row_groups)]
    session = np.concatenate([r.session for r in rows])
    assert session.tolist() == np.repeat(np.arange(6), LENGTHS * 2).tolist()
    assert (
        np.concatenate([r.qid for r in rows]).tolist()
        == np.repeat([12, 7, 12] * 2, LENGTHS * 2).tolist()
    )
    expected_clicks = [1, 0, 0, 0, 0, 1, 1, 0] * 2
    assert np.concatenate([r.click for r in rows]).tolist() == expected_clicks
    features = np.concatenate([r.features for r in rows])
    position = np.concatenate([r.position for r in rows])
    source_session = session % 3
    expected = 100 * source_session[:, None] + 10 * np.arange(12) + (position - 1)[:, None]
    np.testing.assert_array_equal(features, expected.astype(np.float32))
    assert all(r.dwell is None for r in rows)  # the subsets' click files hold no dwell time


def test_a_dwell_column_is_read_when_named(tmp_path):
    source = write_feather(tmp_path / "part.feather")
    path = tmp_path / "baidu.parquet"
    main([str(path), str(source), "--dwell-column", "displayed_time"])
    rows = ParquetClickLog(path).read_group(0)
    assert rows.dwell.tolist() == [2.5] * 4


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"query_id": pa.array(["12", "q7", "12"])}, r"row 1 \(a session\): query_id 'q7'"),
        (
            {"position": pa.array([[1, 2, 3], [1], [1, 3, 2, 4]], pa.list_(pa.int32()))},
            r"row 2 \(a session\): positions \[1, 3, 2, 4\]",
        ),
        (
            {"click": pa.array([[1, 0, 0], [0], [0, 1, 1]], pa.list_(pa.int32()))},
            r"row 2 \(a session\): click holds 3 values, position 4",
        ),
        (
            {"bm25": pa.array([[1.0, 2, 3], [None], [1, 2, 3, 4]], pa.list_(pa.float32()))},
            r"row 1 \(a session\): null in bm25",
        ),
        ({"click": pa.array([[1, 0, 0], [2], [0, 1, 1, 0]])}, r"click 2 is not 0 or 1"),
    ],
)
def test_a_broken_session_is_refused_naming_the_source_row(tmp_path, changes, message):
    source = tmp_path / "part.parquet"
    pq.write_table(session_table(**changes), source)
    with pytest.raises(ClickLogError, match=f"part.parquet.*{message}"):
        convert_baidu_ultr([source], tmp_path / "baidu.parquet")
    assert not (tmp_path / "baidu.parquet").exists()


def test_a_file_of_another_layout_is_refused_by_name(tmp_path):
    text = tmp_path / "part.feather"
    text.write_text("query_id\tposition\n")
    with pytest.raises(ClickLogError, match="part.feather: neither a Feather"):
        convert_baidu_ultr([text], tmp_path / "baidu.parquet")
    missing = tmp_path / "no_bm25.feather"
    feather.write_feather(session_table().drop_columns(["bm25"]), missing)
    with pytest.raises(ClickLogError, match=r"no_bm25.feather: no column\(s\) \['bm25'\]"):
        convert_baidu_ultr([missing], tmp_path / "baidu.parquet")
