"""The click log format: written and read back whole, every rule refused with the file and the
row named."""

from __future__ import annotations

import numpy as np
import pytest

from differank.datamodules.clicks.click_log import ClickLog, ClickLogError, read_click_log


def columns(**changes):
    base = dict(
        session=np.array([0, 0, 0, 5, 5]),
        qid=np.array([7, 7, 7, 9, 9]),
        position=np.array([0, 1, 2, 0, 1]),
        click=np.array([1, 0, 0, 0, 1]),
        doc_row=np.array([4, 2, 8, 1, 0]),
        propensity=np.array([1.0, 0.5, 0.25, 1.0, 0.5], dtype=np.float32),
    )
    return {**base, **changes}


def test_a_written_log_reads_back_equal(tmp_path):
    log = ClickLog(**columns(), features=np.arange(10, dtype=np.float32).reshape(5, 2))
    read = read_click_log(log.write(tmp_path / "log.npz"))
    for name in ("session", "qid", "position", "click", "doc_row", "propensity", "features"):
        np.testing.assert_array_equal(getattr(read, name), getattr(log, name))
    assert read.offsets.tolist() == [0, 3, 5]


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"position": np.array([0, 2, 1, 0, 1])}, "row 1 \\(session 0\\): position 2, expected 1"),
        ({"session": np.array([0, 0, 5, 0, 0])}, "row 3 \\(session 0\\): session 0 appears in two"),
        ({"qid": np.array([7, 7, 8, 9, 9])}, "row 2 \\(session 0\\): qid 8 differs"),
        ({"click": np.array([1, 0, 2, 0, 1])}, "row 2 \\(session 0\\): click 2 is not 0 or 1"),
        ({"propensity": np.array([1, 0.5, 0, 1, 1])}, "row 2 .*propensity 0.0 is not in"),
        ({"doc_row": np.array([4, 2, -1, 1, 0])}, "row 2 .*doc_row -1 is negative"),
        ({"doc_row": None}, "needs a doc_row column or a features column"),
        ({"qid": np.array([7, 7, 7, 9])}, "qid must be 1-D with one value per row"),
    ],
)
def test_a_broken_rule_names_the_row_and_what_to_fix(changes, message):
    with pytest.raises(ClickLogError, match=message):
        ClickLog(**columns(**changes))


def test_reading_names_the_file_of_a_broken_log(tmp_path):
    path = tmp_path / "bad.npz"
    np.savez(
        path, format=np.array("differank-click-log-1"), **columns(click=np.array([1, 0, 3, 0, 1]))
    )
    with pytest.raises(ClickLogError, match=f"{path}: row 2"):
        read_click_log(path)
    other = tmp_path / "other.npz"
    np.savez(other, format=np.array("something-else"), **columns())
    with pytest.raises(ClickLogError, match="format is 'something-else'"):
        read_click_log(other)
    missing = tmp_path / "missing.npz"
    np.savez(missing, format=np.array("differank-click-log-1"), session=np.array([0]))
    with pytest.raises(ClickLogError, match="missing columns \\['qid', 'position', 'click'\\]"):
        read_click_log(missing)
    text = tmp_path / "log.tsv"
    text.write_text("session\tqid\n")
    with pytest.raises(ClickLogError, match="not a click log"):
        read_click_log(text)
