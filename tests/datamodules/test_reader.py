"""datamodules/reader.py: the format rules, errors (file:line), value rules, gzip, the cache."""

import gzip
import hashlib
import logging
import math
import os
import re
import threading

import numpy as np
import pytest

from differank.datamodules import letor_text, reader
from differank.datamodules.letor import LetorDataModule
from differank.datamodules.reader import check_read_options, read_letor_file, write_letor

GOOD = b"""2 qid:7 1:0.5 2:1.0 3:0.25 #docid = GX-1 inc = 1 prob = 0.5
0 qid:7 1:0.1 3:0.75 #just a comment

   # a comment-only line
1\tqid:8\t1:0.0 2:2.0 3:1.0
"""
GOOD_FEATURES = np.float32([[0.5, 1.0, 0.25], [0.1, 0.0, 0.75], [0.0, 2.0, 1.0]])


def write(tmp_path, text: bytes, name="part.txt", compress=None):
    path = tmp_path / name
    compress = name.endswith(".gz") if compress is None else compress
    path.write_bytes(gzip.compress(text) if compress else text)
    return path


def read(path, **options):
    options.setdefault("cache_dir", path.parent / "cache")
    return read_letor_file(path, **options)


def check(parsed, **options):
    defaults = {"nan_policy": "error", "null_value": None, "label_range": None}
    parsed.check_values(**{**defaults, **options})
    return parsed


def dense(parsed, nan_policy="error", null_value=None):
    out = np.zeros(parsed.features.shape, np.float32)
    parsed.copy_rows(out, 0, parsed.num_rows, nan_policy=nan_policy, null_value=null_value)
    return out


def test_parses_rows_labels_qids_docids_and_line_numbers(tmp_path):
    parsed = read(write(tmp_path, GOOD))
    assert parsed.features.dtype == np.float32
    np.testing.assert_array_equal(parsed.features, GOOD_FEATURES)
    np.testing.assert_array_equal(parsed.labels, [2, 0, 1])
    np.testing.assert_array_equal(parsed.qids, [7, 7, 8])
    assert parsed.docids.tolist() == ["GX-1", "just a comment", ""]
    np.testing.assert_array_equal(parsed.line_numbers, [1, 2, 5])
    np.testing.assert_array_equal(parsed.present, [True, True, True])
    assert parsed.max_feature_index == 3 and parsed.num_rows == 3


def test_gzip_is_detected_by_magic_bytes_not_by_name(tmp_path):
    plain = read(write(tmp_path, GOOD))
    packed = read(write(tmp_path, GOOD, "packed.txt", compress=True))
    named = read(write(tmp_path, GOOD, "plain.txt.gz", compress=False))
    for other in (packed, named):
        np.testing.assert_array_equal(plain.features, other.features)
        assert plain.docids.tolist() == other.docids.tolist()


def test_concatenated_gzip_members(tmp_path):
    path = tmp_path / "two.txt.gz"
    path.write_bytes(gzip.compress(GOOD) + gzip.compress(b"0 qid:9 2:1\n"))
    assert read(path).qids.tolist() == [7, 7, 8, 9]


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda raw: raw[: len(raw) // 2], "truncated gzip"),
        (lambda raw: raw[:12] + bytes(b ^ 0x55 for b in raw[12:40]) + raw[40:], "corrupt gzip"),
        (lambda raw: raw + b"trailing junk", "corrupt gzip"),
    ],
)
def test_damaged_gzip_names_the_file(tmp_path, damage, message):
    path = tmp_path / "bad.txt.gz"
    path.write_bytes(damage(gzip.compress(GOOD * 50)))
    with pytest.raises(ValueError, match=f"bad.txt.gz: {message}"):
        read(path)


@pytest.mark.parametrize("ending", [b"\n", b"\r\n", b"\r"])
def test_line_endings_lf_crlf_and_cr_are_one_line_end_each(tmp_path, ending):
    parsed = read(write(tmp_path, GOOD.replace(b"\n", ending)))
    np.testing.assert_array_equal(parsed.features, GOOD_FEATURES)
    np.testing.assert_array_equal(parsed.line_numbers, [1, 2, 5])
    assert parsed.docids.tolist() == ["GX-1", "just a comment", ""]


def test_a_stray_cr_after_a_comment_ends_that_line_only(tmp_path):
    text = b"1 qid:1 1:1 #doc a\r\n0 qid:1 1:2 #doc b\r0 qid:2 1:3\n"
    parsed = read(write(tmp_path, text))
    np.testing.assert_array_equal(parsed.line_numbers, [1, 2, 3])
    np.testing.assert_array_equal(parsed.features[:, 0], [1, 2, 3])


def test_no_final_line_end_and_trailing_blank_lines(tmp_path):
    assert read(write(tmp_path, b"1 qid:1 1:1\n0 qid:1 1:2")).num_rows == 2
    assert read(write(tmp_path, b"1 qid:1 1:1\n\n  \n\t\n", "b.txt")).num_rows == 1


def test_a_data_line_without_features_is_a_row_of_zeros(tmp_path):
    parsed = read(write(tmp_path, b"1 qid:1 2:5\n0 qid:1\n0 qid:1 # only a comment\n"))
    np.testing.assert_array_equal(parsed.features, [[0, 5], [0, 0], [0, 0]])


HEAD = b"1 qid:1 1:0.5 2:0.5\n"
BAD_INPUTS = {
    "no_qid": (HEAD + b"0 1:0.3 2:0.1\n", 2, "expected 'qid:<integer>' after the label"),
    "bad_value": (HEAD + HEAD + b"0 qid:1 1:abc 2:0.1\n", 3, "value in '1:abc' is not a number"),
    "empty_value": (HEAD + b"0 qid:1 1: 2:0.1\n", 2, "value in '1:' is not a number"),
    "bad_label": (HEAD + b"x qid:1 1:0.3\n", 2, "label 'x' is not an integer 0..31"),
    "decimal_label": (HEAD + b"1.5 qid:1 1:0.3\n", 2, "label '1.5' is not an integer"),
    "plus_label": (HEAD + b"+1 qid:1 1:0.3\n", 2, "label '+1' is not an integer"),
    "exp_label": (HEAD + b"1e0 qid:1 1:0.3\n", 2, "label '1e0' is not an integer"),
    "negative_label": (HEAD + b"-1 qid:1 1:0.3\n", 2, "label '-1' is not an integer"),
    "nan_label": (HEAD + b"nan qid:1 1:0.3\n", 2, "label 'nan' is not an integer"),
    "huge_label": (HEAD + b"1024 qid:1 1:0.3\n", 2, "label 1024 is larger than 31"),
    "label_32": (HEAD + b"32 qid:1 1:0.3\n", 2, "label 32 is larger than 31"),
    "bad_qid": (HEAD + b"1 qid:q1 1:0.3\n", 2, "'qid:q1': a qid is a decimal integer"),
    "empty_qid": (HEAD + b"1 qid: 1:0.3\n", 2, "'qid:': a qid is"),
    "leading_zero_qid": (HEAD + b"1 qid:0201 1:0.3\n", 2, "without leading zeros"),
    "huge_qid": (HEAD + b"1 qid:9223372036854775808 1:0.3\n", 2, "at most 18 digits"),
    "index_zero": (HEAD + b"1 qid:1 0:0.3\n", 2, "index in '0:0.3' is not an integer >= 1"),
    "index_word": (HEAD + b"1 qid:1 a:0.3\n", 2, "index in 'a:0.3' is not an integer >= 1"),
    "unsorted": (HEAD + b"1 qid:1 2:0.3 1:0.3\n", 2, "'1:0.3' does not increase"),
    "duplicate": (HEAD + b"1 qid:1 2:0.3 2:0.3\n", 2, "'2:0.3' does not increase"),
    "no_colon": (HEAD + b"1 qid:1 2 0.3\n", 2, "feature '2' is not of the form index:value"),
    "control_char": (HEAD + b"1 qid:1 1:0.3\x0b\n", 2, r"value in '1:0.3\x0b' is not a number"),
    "value_junk": (HEAD + b"1 qid:1 1:0.3x\n", 2, "value in '1:0.3x' is not a number"),
    "cr_split_line": (HEAD + b"1 qid:1 1:0.3\r2:0.1\n", 3, "label '2:0.1' is not an integer"),
}


@pytest.mark.parametrize("case", sorted(BAD_INPUTS))
def test_bad_input_names_file_line_and_token(tmp_path, case):
    text, line, message = BAD_INPUTS[case]
    path = write(tmp_path, text, f"{case}.txt")
    with pytest.raises(ValueError, match=f"{case}.txt:{line}: ") as info:
        read(path)
    assert message in str(info.value)


def test_error_line_is_counted_across_chunks_and_threads(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "_CHUNK", 64)
    lines = [b"%d qid:%d 1:%d.5 2:7 # doc %d" % (i % 3, i // 4, i, i) for i in range(300)]
    text = b"\r\n".join(lines) + b"\r\n"
    parsed = read(write(tmp_path, text))
    np.testing.assert_array_equal(parsed.line_numbers, np.arange(1, 301))
    np.testing.assert_array_equal(parsed.features[:, 0], np.arange(300) + 0.5)
    assert parsed.docids[299] == "doc 299"
    lines[237] = b"1 qid:3 1:oops"
    with pytest.raises(ValueError, match=r"broken.txt:238: feature value in '1:oops'"):
        read(write(tmp_path, b"\n".join(lines), "broken.txt"))


def test_a_file_changed_before_its_single_pass_is_read_as_it_is_then(tmp_path, monkeypatch):
    """Rows and hash come from the same single read of the bytes."""
    path = write(tmp_path, GOOD)
    changed = GOOD + b"0 qid:9 1:1\n"
    real, calls = reader._chunks, []

    def changing(p, hasher=None, size=None):
        calls.append(p)
        if len(calls) == 2:  # after the first chunk's width scan, before the filling scan
            p.write_bytes(changed)
        yield from real(p, hasher, size)

    monkeypatch.setattr(reader, "_chunks", changing)
    parsed = read(path)
    assert parsed.num_rows == 4 and parsed.qids[-1] == 9
    assert parsed.meta["sha256"] == hashlib.sha256(changed).hexdigest()


NARROW_THEN_WIDE = b"".join(b"%d qid:%d 1:0.5 2:1\n" % (i % 2, i // 4) for i in range(40))
NARROW_THEN_WIDE += b"1 qid:10 1:2 3:4 5:6\n0 qid:10 2:1\n"


def test_a_row_wider_than_the_first_chunk_counts_every_chunk_first(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "_CHUNK", 64)  # a few lines per chunk
    parsed = read(write(tmp_path, NARROW_THEN_WIDE))
    assert parsed.features.shape == (42, 5)
    np.testing.assert_array_equal(parsed.features[40], [2, 0, 4, 0, 6])
    np.testing.assert_array_equal(parsed.features[:40], np.tile([0.5, 1, 0, 0, 0], (40, 1)))
    assert parsed.line_numbers[-1] == 42
    assert parsed.meta["sha256"] == hashlib.sha256(NARROW_THEN_WIDE).hexdigest()


def test_a_file_that_widens_between_counting_and_filling_is_an_error(tmp_path, monkeypatch):
    """What the counting scan did not see is never written past the arrays' ends."""
    monkeypatch.setattr(reader, "_CHUNK", 64)
    path = write(tmp_path, NARROW_THEN_WIDE)
    real, calls = reader._chunks, []

    def changing(p, hasher=None, size=None):
        calls.append(p)
        if len(calls) == 4:  # width scan, guessed fill, counting scan, then this fill
            p.write_bytes(NARROW_THEN_WIDE.replace(b"5:6\n", b"5:6 7:1\n"))
        yield from real(p, hasher, size)

    monkeypatch.setattr(reader, "_chunks", changing)
    with pytest.raises(ValueError, match="part.txt:41: the file changed while it was read"):
        read(path)


@pytest.mark.parametrize("text", [b"", b"\n\n", b"# only a comment\n   \n", b"\r\r\r"])
def test_empty_file(tmp_path, text):
    with pytest.raises(ValueError, match="empty.txt: empty file"):
        read(write(tmp_path, text, "empty.txt"))


def test_missing_file(tmp_path):
    with pytest.raises(FileNotFoundError, match="nothere.txt"):
        read(tmp_path / "nothere.txt")


def test_value_syntax(tmp_path):
    text = b"0 qid:1 1:3 2:-0.5 3:.5 4:1e-3 5:+2E2 6:1.0e+1 7:-0 8:12345678901234567890\n"
    parsed = read(write(tmp_path, text))
    expected = [3, -0.5, 0.5, 1e-3, 200, 10, 0, 12345678901234567890]
    np.testing.assert_array_equal(parsed.features[0], np.float32(expected))


def test_non_finite_values_follow_nan_policy(tmp_path):
    path = write(tmp_path, HEAD + b"1 qid:1 1:nan 2:-INF\n0 qid:1 1:Infinity\n")
    parsed = read(path)
    with pytest.raises(
        ValueError, match=r"part.txt:2: feature 1 is not finite \(value nan; 3 such"
    ):
        check(parsed)
    check(parsed, nan_policy="allow")
    allowed = dense(parsed, nan_policy="allow")
    assert math.isnan(allowed[1, 0]) and allowed[1, 1] == -math.inf and allowed[2, 0] == math.inf
    np.testing.assert_array_equal(dense(parsed, nan_policy="zero")[1:], [[0, 0], [0, 0]])


@pytest.mark.parametrize("written", [b"3.5e38", b"1e39", b"-1e39", b"340282357e30"])
def test_a_value_beyond_float32s_range_is_refused_with_file_line_feature_and_value(
    tmp_path, written
):
    """Finite as float64, inf as float32: z-scoring would make the feature NaN everywhere."""
    path = write(tmp_path, HEAD + b"1 qid:1 1:0.5 2:" + written + b"\n")
    parsed = read(path)
    value = float(written)
    pattern = f"part.txt:2: feature 2 is not finite (value {value:.9g} is beyond float32's range"
    with pytest.raises(ValueError, match=re.escape(pattern)):
        check(parsed)
    assert dense(parsed, nan_policy="zero")[1, 1] == 0.0  # the documented alternatives
    assert abs(dense(parsed, nan_policy="allow")[1, 1]) == math.inf


def test_float32_max_itself_is_finite(tmp_path):
    parsed = check(read(write(tmp_path, HEAD + b"1 qid:1 1:3.4028234e38 2:-3.4028234e38\n")))
    assert dense(parsed)[1].tolist() == [reader.FLOAT32_MAX, -reader.FLOAT32_MAX]


@pytest.mark.parametrize("split", ["train", "vali", "test"])
def test_every_split_refuses_a_float32_overflow_before_training(tmp_path, split):
    rows = b"2 qid:1 1:0.5 2:1\n0 qid:1 1:0.1 2:0\n1 qid:2 1:0.3 2:2\n0 qid:2 1:0.2 2:1\n"
    fold = tmp_path / "Fold1"
    fold.mkdir()
    for name in ("train", "vali", "test"):
        text = rows + (b"1 qid:3 1:0.4 2:1e39\n" if name == split else b"")
        (fold / f"{name}.txt").write_bytes(text)
    data = LetorDataModule(root=tmp_path, cache_dir=tmp_path / "cache")
    with pytest.raises(
        ValueError, match=rf"{split}.txt:5: feature 2 is not finite \(value 1e\+39 is beyond"
    ):
        assert data.n_features


def test_null_needs_null_value_and_is_replaced_by_it(tmp_path):
    path = write(tmp_path, HEAD + b"1 qid:1 1:0.1 2:NULL #docid = NULL-doc note:NULL\n")
    parsed = read(path)
    with pytest.raises(ValueError, match="part.txt:2: feature 2 is NULL; set null_value"):
        check(parsed)
    check(parsed, null_value=-1.0)
    np.testing.assert_array_equal(dense(parsed, null_value=-1.0)[1], np.float32([0.1, -1.0]))
    assert parsed.docids[1] == "NULL-doc"
    only_comment = read(write(tmp_path, HEAD + b"1 qid:1 1:0.2 #docid = x y:NULL\n", "c.txt"))
    check(only_comment)
    nan_null = dense(parsed, nan_policy="allow", null_value=float("nan"))
    assert math.isnan(nan_null[1, 1])


def test_label_range_narrows_the_labels(tmp_path):
    parsed = read(write(tmp_path, HEAD + HEAD + b"3 qid:2 1:0.1\n"))
    with pytest.raises(ValueError, match=r"part.txt:3: label 3 outside label_range \(0.0, 2.0\)"):
        check(parsed, label_range=(0.0, 2.0))
    check(parsed, label_range=(0.0, 3.0))


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
def test_bad_options(options, message):
    arguments = {"nan_policy": "error", "null_value": None, "label_range": None, **options}
    with pytest.raises(ValueError, match=message):
        check_read_options(**arguments)


def no_parsing(*args, **kwargs):
    raise AssertionError("the parser must not run on a cache hit")


def test_cache_is_memory_mapped_and_skips_the_parser(tmp_path, monkeypatch):
    path = write(tmp_path, GOOD)
    first = read(path)
    assert isinstance(first.features, np.memmap)
    monkeypatch.setattr(letor_text, "scan", no_parsing)
    second = read(path)
    np.testing.assert_array_equal(first.features, second.features)
    np.testing.assert_array_equal(first.line_numbers, second.line_numbers)
    assert first.docids.tolist() == second.docids.tolist()
    path.write_bytes(GOOD + b"0 qid:9 1:1\n")  # new bytes (size changes): parsed again
    with pytest.raises(AssertionError, match="parser must not run"):
        read(path)


def test_same_content_with_a_new_mtime_is_rehashed_not_reparsed(tmp_path, monkeypatch):
    path = write(tmp_path, GOOD)
    read(path)
    os.utime(path, ns=(1, 1))
    hashed = []
    real_hash = reader.file_sha256
    monkeypatch.setattr(reader, "file_sha256", lambda p: hashed.append(p) or real_hash(p))
    monkeypatch.setattr(letor_text, "scan", no_parsing)
    assert read(path).num_rows == 3 and len(hashed) == 1
    assert read(path).num_rows == 3 and len(hashed) == 1  # stat stored again: no re-hash
    assert read(path, verify_hash=True).num_rows == 3 and len(hashed) == 2
    path.write_bytes(GOOD.replace(b"0.5", b"0.6"))  # same size, new content
    os.utime(path, ns=(1, 1))  # ... and the old mtime: only verify_hash notices
    assert read(path).features[0, 0] == 0.5
    with pytest.raises(AssertionError, match="parser must not run"):
        read(path, verify_hash=True)


def test_an_entry_whose_arrays_disagree_is_reparsed_with_a_warning(tmp_path, caplog):
    path = write(tmp_path, GOOD)
    read(path)
    (entry,) = [p for p in (tmp_path / "cache" / "letor").iterdir() if not p.name.startswith(".")]
    np.save(entry / "labels.npy", np.zeros(2, np.uint8))  # 2 labels for 3 rows
    with caplog.at_level(logging.WARNING):
        parsed = read(path)
    assert "disagrees with its metadata (labels)" in caplog.text
    np.testing.assert_array_equal(parsed.labels, [2, 0, 1])
    (entry / "meta.json").write_text("{not json")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        assert read(path).num_rows == 3
    assert "unreadable" in caplog.text


def test_unwritable_cache_parses_in_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    parsed = read(write(tmp_path, GOOD), cache_dir=blocker)
    np.testing.assert_array_equal(parsed.features, GOOD_FEATURES)


def test_write_letor_round_trips_float32_exactly(tmp_path):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(6, 4)).astype(np.float32)
    labels = np.array([0, 1, 2, 0, 0, 1])
    qids = np.array([3, 3, 3, 5, 5, 5])
    for name in ("w.txt", "w.txt.gz"):
        path = write_letor(tmp_path / name, features, labels, qids, [f"d{i}" for i in range(6)])
        parsed = read(path)
        np.testing.assert_array_equal(parsed.features, features)
        np.testing.assert_array_equal(parsed.labels, labels)
        np.testing.assert_array_equal(parsed.qids, qids)
        assert parsed.docids.tolist() == [f"d{i}" for i in range(6)]
    gz = (tmp_path / "w.txt.gz").read_bytes()
    write_letor(tmp_path / "w.txt.gz", features, labels, qids, [f"d{i}" for i in range(6)])
    assert (tmp_path / "w.txt.gz").read_bytes() == gz  # reproducible bytes
    with pytest.raises(ValueError, match="must agree"):
        write_letor(tmp_path / "x.txt", features, labels[:3], qids)


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux /proc")
def test_release_pages_drops_read_features_from_this_process_memory(tmp_path):
    rows = b"".join(
        b"%d qid:%d " % (i % 3, i // 9)
        + b" ".join(b"%d:%d.25" % (j, i) for j in range(1, 257))
        + b"\n"
        for i in range(1000)
    )
    parsed = read(write(tmp_path, rows))  # 1000 x 256 float32: 1 MiB of features

    def resident():
        return int(open("/proc/self/statm").read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    total = float(parsed.features.sum(dtype=np.float64))
    before = resident()
    parsed.release_pages()
    assert before - resident() > 2**19
    assert float(parsed.features.sum(dtype=np.float64)) == total  # mapped again on access


def test_a_failed_parse_leaves_no_partial_cache_entry(tmp_path, monkeypatch):
    monkeypatch.setattr(reader, "_CHUNK", 64)  # the error is in a later chunk, while filling
    path = write(tmp_path, NARROW_THEN_WIDE + b"1 qid:11 1:x\n", "bad.txt")
    with pytest.raises(ValueError, match="bad.txt:43: feature value in '1:x'"):
        read_letor_file(path, cache_dir=tmp_path / "c")
    assert not any((tmp_path / "c" / "letor").iterdir())


def _within(seconds, call):
    """``call()``'s outcome (its value or its exception), or None when it still runs after
    ``seconds`` (it blocked, e.g. opening a FIFO nobody writes to)."""
    outcome = []

    def run():
        try:
            outcome.append(call())
        except Exception as error:  # noqa: BLE001 - handed to the test to inspect
            outcome.append(error)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    return outcome[0] if outcome else None


def _not_regular(tmp_path, kind):
    """A path under a LETOR file's name that is ``kind`` and what the error calls it."""
    path = tmp_path / f"{kind}.txt"
    if kind == "directory":
        path.mkdir()
        return path, "a directory"
    if kind == "fifo":
        os.mkfifo(path)
        return path, r"a FIFO \(named pipe\)"
    if kind == "device":
        path.symlink_to(os.devnull)
        return path, "a character device"
    path.symlink_to(path.name)  # "loop": the link points at itself
    return path, "a symbolic link loop"


@pytest.mark.parametrize("kind", ["directory", "fifo", "device", "loop"])
def test_a_letor_file_that_is_not_a_regular_file_is_refused_without_blocking(tmp_path, kind):
    path, what = _not_regular(tmp_path, kind)
    error = _within(20, lambda: read(path))
    if error is None and kind == "fifo":  # unblock the reader so the thread can end
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
    assert isinstance(error, ValueError), f"read_letor_file blocked or returned {error!r}"
    assert re.search(f"{re.escape(str(path))} is {what}, not a regular file", str(error))
    assert "a LETOR file must be a regular file" in str(error)
