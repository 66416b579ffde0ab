"""Hostile Parquet inputs and outputs (issue #41), one class per test name: sizes a footer
claims (``test_claimed_size_...``), special files among a split's parts and repeated column
names (``test_special_file_...``), the source a conversion records (``test_companion_identity_
...``) and conversions that are whole or absent (``test_whole_or_absent_...``)."""

from __future__ import annotations

import hashlib
import os
import shutil
import signal
import subprocess
import sys

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from differank.datamodules import parquet  # noqa: E402
from differank.datamodules.parquet import read_parquet, write_parquet  # noqa: E402
from differank.datamodules.reader import write_letor  # noqa: E402
from differank.datamodules.to_parquet import convert  # noqa: E402
from tests.datamodules.forged_parquet import (  # noqa: E402
    FILE_ROWS,
    forge_footer,
    row_group_rows,
)


def small_file(path, rows=3):
    X = np.arange(2 * rows, dtype=np.float32).reshape(rows, 2)
    return write_parquet(path, X, np.arange(rows) % 3, np.repeat([1, 2], [1, rows - 1]))


def forged(path, changes):
    path.write_bytes(forge_footer(small_file(path).read_bytes(), changes))
    return path


# ---- claimed sizes ----------------------------------------------------------------------------


def test_claimed_size_a_footer_of_10_to_the_12_rows_is_refused_before_numpy_allocates(tmp_path):
    path = forged(tmp_path / "huge.parquet", {FILE_ROWS: 10**12, row_group_rows(0): 10**12})
    assert pq.ParquetFile(path).metadata.num_rows == 10**12  # the forgery holds
    with pytest.raises(ValueError, match=r"huge\.parquet\): 1000000000000 rows.* of memory, but"):
        read_parquet(path)


def test_claimed_size_a_footer_claiming_twice_the_rows_names_the_row_group(tmp_path):
    path = forged(tmp_path / "twice.parquet", {FILE_ROWS: 6, row_group_rows(0): 6})
    with pytest.raises(
        ValueError, match=r"twice\.parquet: row group 0: the footer claims 6 rows, the row group"
    ):
        read_parquet(path)


def test_claimed_size_file_and_row_group_counts_that_disagree_are_refused(tmp_path):
    path = forged(tmp_path / "disagree.parquet", {FILE_ROWS: 7})
    with pytest.raises(ValueError, match=r"disagree\.parquet: the footer claims 7 rows, its row"):
        read_parquet(path)


def test_claimed_size_read_parquet_has_the_budget_of_data_format_parquet(tmp_path, monkeypatch):
    path = small_file(tmp_path / "train.parquet")
    decoded = []
    monkeypatch.setattr(parquet, "_decode", lambda *a, **k: decoded.append(a))
    monkeypatch.setattr(parquet, "available_memory_bytes", lambda: 100)
    message = r"train\.parquet\): 3 rows, 6 feature values .* 0\.00 GiB is available; read fewer"
    with pytest.raises(ValueError, match=message):
        read_parquet(path)
    with pytest.raises(ValueError, match=message):  # the same function, for a fold
        parquet.check_fold_budget({"train": [path]}, parquet.ParquetColumns())
    assert decoded == []


# ---- special files ----------------------------------------------------------------------------


def make_special(path, kind):
    """Make ``path`` a FIFO, a directory, a dangling link or a link loop."""
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "directory":
        path.mkdir()
    elif kind == "dangling link":
        path.symlink_to(path.parent / "nowhere.parquet")
    else:  # a link loop
        path.symlink_to(path)


SPECIAL = {
    "fifo": "is a FIFO",
    "directory": "is a directory",
    "dangling link": "is a dangling symbolic link",
    "link loop": "is a symbolic link loop",
}


@pytest.mark.parametrize("kind", SPECIAL)
def test_special_file_among_a_split_folders_parts_is_refused_by_name(tmp_path, kind):
    split = tmp_path / "Fold1" / "train"
    small_file(split / "part-0.parquet")
    make_special(split / "part-1.parquet", kind)
    message = rf"part-1\.parquet {SPECIAL[kind]}.* must be a regular file"
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        read_parquet(split)
    for other in ("vali", "test"):
        small_file(tmp_path / "Fold1" / f"{other}.parquet")
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        parquet.fold_files(tmp_path, 1)


@pytest.mark.parametrize("kind", ["fifo", "dangling link", "link loop"])  # a folder: its parts
def test_special_file_as_a_fold_split_is_refused_by_name(tmp_path, kind):
    fold = tmp_path / "Fold1"
    for other in ("vali", "test"):
        small_file(fold / f"{other}.parquet")
    make_special(fold / "train.parquet", kind)
    with pytest.raises((ValueError, FileNotFoundError), match=rf"train\.parquet {SPECIAL[kind]}"):
        parquet.fold_files(tmp_path, 1)


def test_special_file_repeated_column_names_are_a_named_error(tmp_path):
    path = tmp_path / "twice.parquet"
    values = [pa.array([1, 0]), pa.array([5, 5]), pa.array([0.5, 1.0]), pa.array([2.0, 3.0])]
    pq.write_table(pa.Table.from_arrays(values, names=["label", "qid", "f", "f"]), path)
    with pytest.raises(ValueError, match=r"twice\.parquet: column name\(s\) \['f'\] appear more"):
        read_parquet(path)


# ---- companion identity -----------------------------------------------------------------------


def text_fold(root, seed):
    rng = np.random.default_rng(seed)
    for stem in ("train", "vali", "test"):
        write_letor(root / "Fold1" / f"{stem}.txt", rng.normal(size=(4, 3)), [1, 0, 2, 0], [1] * 4)
    return root


def test_companion_identity_a_conversion_records_each_files_source_digest(tmp_path):
    convert(text_fold(tmp_path / "text", 0), tmp_path / "pq")
    conversions = set()
    for stem in ("train", "vali", "test"):
        footer = pq.read_metadata(tmp_path / "pq" / "Fold1" / f"{stem}.parquet").metadata
        source = (tmp_path / "text" / "Fold1" / f"{stem}.txt").read_bytes()
        assert footer[parquet.SOURCE_SHA256.encode()].decode() == hashlib.sha256(source).hexdigest()
        conversions.add(footer[parquet.CONVERSION_SHA256.encode()])
    assert len(conversions) == 1


def test_companion_identity_a_fold_mixing_two_conversions_is_refused(tmp_path):
    convert(text_fold(tmp_path / "a", 0), tmp_path / "pq")
    convert(text_fold(tmp_path / "b", 1), tmp_path / "other")
    assert len(parquet.fold_files(tmp_path / "pq", 1)["val"]) == 1  # one conversion: read
    shutil.copy(tmp_path / "other" / "Fold1" / "vali.parquet", tmp_path / "pq" / "Fold1")
    with pytest.raises(ValueError, match=r"vali\.parquet and .*train\.parquet come from two conv"):
        parquet.fold_files(tmp_path / "pq", 1)


# ---- whole or absent --------------------------------------------------------------------------

# Run in a child process: convert SRC DST, killed (SIGKILL) at a point of the conversion
KILLED_CONVERSION = """
import os, shutil, signal, sys
from differank.datamodules import to_parquet
source, target, point = sys.argv[1:]
def die(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)
if point == "after the first split":
    write = to_parquet.write_parquet
    def write_then_die(*args, **kwargs):
        write(*args, **kwargs)
        die()
    to_parquet.write_parquet = write_then_die
else:  # after the swap, before the old fold is removed
    shutil.rmtree = die
to_parquet.convert(source, target)
"""


def fold_bytes(root):
    return {p.name: p.read_bytes() for p in sorted((root / "Fold1").iterdir())}


@pytest.mark.parametrize("point", ["after the first split", "after the swap"])
def test_whole_or_absent_a_conversion_killed_leaves_the_old_fold_or_the_new(tmp_path, point):
    convert(text_fold(tmp_path / "old", 0), tmp_path / "pq")
    old = fold_bytes(tmp_path / "pq")
    convert(text_fold(tmp_path / "new", 1), tmp_path / "reference")
    new = fold_bytes(tmp_path / "reference")
    arguments = [str(tmp_path / "new"), str(tmp_path / "pq"), point]
    child = subprocess.run(
        [sys.executable, "-c", KILLED_CONVERSION, *arguments], capture_output=True, text=True
    )
    assert child.returncode == -signal.SIGKILL, child.stderr
    assert fold_bytes(tmp_path / "pq") == (old if point == "after the first split" else new)
    assert len(parquet.fold_files(tmp_path / "pq", 1)["train"]) == 1  # one conversion


def test_whole_or_absent_a_conversion_replaces_only_its_own_earlier_output(tmp_path):
    convert(text_fold(tmp_path / "text", 0), tmp_path / "pq")
    (tmp_path / "pq" / "notes.txt").write_text("the user's notes")
    with pytest.raises(ValueError, match=r"pq holds notes\.txt, which this conversion does not"):
        convert(text_fold(tmp_path / "text", 1), tmp_path / "pq")
    assert (tmp_path / "pq" / "notes.txt").read_text() == "the user's notes"
    (tmp_path / "pq" / "notes.txt").unlink()
    before = fold_bytes(tmp_path / "pq")
    convert(tmp_path / "text", tmp_path / "pq")  # its own output: replaced whole
    assert fold_bytes(tmp_path / "pq") != before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pq", "text"]  # nothing left beside
