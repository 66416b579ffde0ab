"""datamodules/reader.py: parsing, doc ids, .gz, validation errors (file:line), cache, writer."""

import gzip
import math

import numpy as np
import pytest

from datamodules import reader
from datamodules.reader import read_letor_file, write_letor

GOOD = b"""2 qid:7 1:0.5 2:1.0 3:0.25 #docid = GX-1 inc = 1 prob = 0.5
0 qid:7 1:0.1 3:0.75 #just a comment

# a comment-only line
1 qid:8 1:0.0 2:2.0 3:1.0
"""


def write(tmp_path, text: bytes, name="part.txt"):
    path = tmp_path / name
    if name.endswith(".gz"):
        path.write_bytes(gzip.compress(text))
    else:
        path.write_bytes(text)
    return path


def read(path, **options):
    options.setdefault("cache_dir", path.parent / "cache")
    return read_letor_file(path, **options)


def test_parses_rows_labels_qids_docids_and_line_numbers(tmp_path):
    parsed = read(write(tmp_path, GOOD))
    np.testing.assert_array_equal(
        parsed.features.toarray(), [[0.5, 1.0, 0.25], [0.1, 0.0, 0.75], [0.0, 2.0, 1.0]]
    )
    np.testing.assert_array_equal(parsed.labels, [2, 0, 1])
    np.testing.assert_array_equal(parsed.qids, [7, 7, 8])
    assert parsed.docids.tolist() == ["GX-1", "just a comment", ""]
    np.testing.assert_array_equal(parsed.line_numbers, [1, 2, 5])
    assert parsed.max_feature_index == 3 and parsed.num_rows == 3


def test_gz_is_read_transparently(tmp_path):
    plain = read(write(tmp_path, GOOD))
    packed = read(write(tmp_path, GOOD, "part.txt.gz"))
    np.testing.assert_array_equal(plain.features.toarray(), packed.features.toarray())
    assert plain.docids.tolist() == packed.docids.tolist()


def test_crlf_line_endings(tmp_path):
    parsed = read(write(tmp_path, GOOD.replace(b"\n", b"\r\n")))
    assert parsed.docids.tolist() == ["GX-1", "just a comment", ""]
    assert parsed.features.shape == (3, 3)


HEAD = b"1 qid:1 1:0.5 2:0.5\n"
BAD_INPUTS = {
    "no_qid": (HEAD + b"0 1:0.3 2:0.1\n", 2, "no 'qid:'"),
    "bad_value": (HEAD + HEAD + b"0 qid:1 1:abc 2:0.1\n", 3, "is not a number"),
    "bad_label": (HEAD + b"x qid:1 1:0.3\n", 2, "label 'x' is not a number"),
    "bad_qid": (HEAD + b"1 qid:q1 1:0.3\n", 2, "qid 'q1' is not an integer"),
    "index_zero": (HEAD + b"1 qid:1 0:0.3\n", 2, "start at 1"),
    "unsorted": (HEAD + b"1 qid:1 2:0.3 1:0.3\n", 2, "increasing"),
    "no_colon": (HEAD + b"1 qid:1 2 0.3\n", 2, "index:value"),
    "nan_feature": (HEAD + b"1 qid:1 1:0.3 2:nan\n", 2, "feature 2 is nan"),
    "inf_feature": (HEAD + HEAD + b"1 qid:1 1:inf\n", 3, "feature 1 is inf"),
    "nan_label": (HEAD + b"nan qid:1 1:0.3\n", 2, "not finite"),
    "negative_label": (HEAD + b"-1 qid:1 1:0.3\n", 2, "label -1 labels must be >= 0"),
    "null": (HEAD + b"1 qid:1 1:NULL 2:0.1\n", 2, "has NULL; set null_value="),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_names_file_and_line(tmp_path, case):
    text, line, message = BAD_INPUTS[case]
    path = write(tmp_path, text, f"{case}.txt")
    with pytest.raises(ValueError, match=f"{case}.txt:{line}") as info:
        read(path)
    assert message in str(info.value)


def test_label_outside_declared_range(tmp_path):
    path = write(tmp_path, HEAD + HEAD + b"3 qid:2 1:0.1\n")
    with pytest.raises(ValueError, match=r"part.txt:3: label 3 outside label_range \(0.0, 2.0\)"):
        read(path, label_range=(0, 2))
    assert read(path, label_range=[0, 3]).labels.max() == 3
    assert read(path, label_range=(-5, 5)).num_rows == 3


@pytest.mark.parametrize("text", [b"", b"\n\n", b"# only a comment\n   \n"])
def test_empty_file(tmp_path, text):
    with pytest.raises(ValueError, match="empty.txt: empty file"):
        read(write(tmp_path, text, "empty.txt"))


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.txt"):
        read(tmp_path / "nothere.txt")


def test_nan_policy_allow_and_zero(tmp_path):
    path = write(tmp_path, HEAD + b"1 qid:1 1:nan 2:-inf\n")
    allowed = read(path, nan_policy="allow").features.toarray()
    assert math.isnan(allowed[1, 0]) and allowed[1, 1] == -math.inf
    np.testing.assert_array_equal(read(path, nan_policy="zero").features.toarray()[1], [0, 0])


def test_null_value_replaces_null_tokens_but_not_comments(tmp_path):
    path = write(tmp_path, HEAD + b"1 qid:1 1:NULL 2:0.1 #docid = NULL-doc note:NULL\n")
    parsed = read(path, null_value=-1.0)
    np.testing.assert_array_equal(parsed.features.toarray()[1], [-1.0, 0.1])
    assert parsed.docids[1] == "NULL-doc"
    # NULL in a comment only is not an error, even without null_value
    only_comment = write(tmp_path, HEAD + b"1 qid:1 1:0.2 #docid = x y:NULL\n", "c.txt")
    assert read(only_comment).num_rows == 2
    nan_null = read(path, null_value=float("nan"), nan_policy="allow").features.toarray()
    assert math.isnan(nan_null[1, 0])


@pytest.mark.parametrize(
    "options, message",
    [
        ({"nan_policy": "ignore"}, "nan_policy"),
        ({"null_value": "zero"}, "null_value"),
        ({"null_value": float("nan")}, "nan_policy"),
        ({"label_range": (2, 0)}, "lo <= hi"),
        ({"label_range": "0-2"}, "pair"),
        ({"label_range": (0, 1, 2)}, "pair"),
    ],
)
def test_bad_options(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        read(write(tmp_path, GOOD), **options)


def test_second_read_hits_the_cache_and_skips_the_parser(tmp_path, monkeypatch):
    path = write(tmp_path, GOOD)
    first = read(path)
    assert list((tmp_path / "cache" / "letor").glob("*.npz"))

    def no_parsing(*args, **kwargs):
        raise AssertionError("the parser must not run on a cache hit")

    monkeypatch.setattr(reader, "load_svmlight_file", no_parsing)
    monkeypatch.setattr(reader, "_scan_rows", no_parsing)
    second = read(path)
    np.testing.assert_array_equal(first.features.toarray(), second.features.toarray())
    np.testing.assert_array_equal(first.line_numbers, second.line_numbers)
    assert first.docids.tolist() == second.docids.tolist()
    # validation still runs on cached arrays (options are not part of what is cached)
    with pytest.raises(ValueError, match="part.txt:1: label 2 outside"):
        read(path, label_range=(0, 1))
    # changed bytes -> a different key -> parsed again
    path.write_bytes(GOOD + b"0 qid:9 1:1\n")
    with pytest.raises(AssertionError, match="parser must not run"):
        read(path)


def test_cache_key_includes_null_value(tmp_path, monkeypatch):
    path = write(tmp_path, HEAD + b"1 qid:1 1:NULL\n")
    assert read(path, null_value=0.0).features[1, 0] == 0.0
    assert read(path, null_value=5.0).features[1, 0] == 5.0


def test_write_letor_round_trips_float32_exactly(tmp_path):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(6, 4)).astype(np.float32)
    labels = np.array([0, 1, 2, 0, 0, 1])
    qids = np.array([3, 3, 3, 5, 5, 5])
    for name in ("w.txt", "w.txt.gz"):
        path = write_letor(tmp_path / name, features, labels, qids, [f"d{i}" for i in range(6)])
        parsed = read(path)
        np.testing.assert_array_equal(parsed.features.toarray().astype(np.float32), features)
        np.testing.assert_array_equal(parsed.labels, labels)
        np.testing.assert_array_equal(parsed.qids, qids)
        assert parsed.docids.tolist() == [f"d{i}" for i in range(6)]
    gz = (tmp_path / "w.txt.gz").read_bytes()
    write_letor(tmp_path / "w.txt.gz", features, labels, qids, [f"d{i}" for i in range(6)])
    assert (tmp_path / "w.txt.gz").read_bytes() == gz  # reproducible bytes
    with pytest.raises(ValueError, match="must agree"):
        write_letor(tmp_path / "x.txt", features, labels[:3], qids)
