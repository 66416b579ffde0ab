"""datamodules/letor_text.py: the compiled scanner's own checks of the arrays it is given (the
text rules themselves are tested through the reader, tests/datamodules/test_reader.py)."""

import numpy as np
import pytest

from differank.datamodules import letor_text

TEXT = np.frombuffer(b"2 qid:7 1:0.5 3:NULL #docid = d1\n", np.uint8)


def arrays(rows=1, width=3, nulls=1):
    return [
        np.zeros((rows, width), np.float32),
        np.zeros(rows, np.uint8),
        *(np.zeros(rows, np.int64) for _ in range(4)),
        *(np.zeros(nulls, np.int64) for _ in range(2)),
        np.zeros(width, bool),
    ]


def test_a_fill_writes_the_row():
    out = arrays()
    result = letor_text.scan(TEXT, True, *out, letor_text.POW10)
    assert result[letor_text.R_ERROR] == letor_text.OK and result[letor_text.R_ROWS] == 1
    features, labels, qids, lines, doc_start, doc_end, null_rows, null_cols, present = out
    np.testing.assert_array_equal(features[0, :2], [0.5, 0.0])
    assert np.isnan(features[0, 2]) and (labels[0], qids[0], lines[0]) == (2, 7, 1)
    assert bytes(TEXT[doc_start[0] : doc_end[0]]) == b"d1"
    assert (null_rows[0], null_cols[0]) == (0, 2) and present.tolist() == [True, False, True]


@pytest.mark.parametrize(
    "position, wrong, name",
    [
        (0, np.zeros((1, 3), np.float64), "features"),
        (1, np.zeros(1, np.int64), "labels"),
        (2, np.zeros(1, np.int32), "qids"),
        (8, np.zeros(3, np.uint8), "present"),
        (0, np.zeros((1, 6), np.float32)[:, ::2], "features"),  # not C-contiguous
    ],
)
def test_an_array_of_another_type_is_refused_by_name(position, wrong, name):
    out = arrays()
    out[position] = wrong
    with pytest.raises((TypeError, ValueError), match=name):
        letor_text.scan(TEXT, True, *out, letor_text.POW10)


def test_arrays_of_disagreeing_sizes_are_refused_before_a_byte_is_written():
    out = arrays()
    out[3] = np.zeros(2, np.int64)  # lines: 2 rows where labels has 1
    with pytest.raises(ValueError, match="must agree"):
        letor_text.scan(TEXT, True, *out, letor_text.POW10)
    assert not out[0].any() and not out[1].any()


def test_a_read_only_output_is_refused():
    out = arrays()
    out[1].flags.writeable = False
    with pytest.raises(TypeError, match="labels must be a writable"):
        letor_text.scan(TEXT, True, *out, letor_text.POW10)
