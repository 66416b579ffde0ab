"""datamodules/atomic_files.py: output files are whole or absent."""

import os
import stat

import pytest

from differank.datamodules.atomic_files import write_file, write_files


def test_files_are_written_whole_with_the_umask_mode_and_no_temporary_left(tmp_path):
    write_files({tmp_path / "a" / "x.txt": "text\n", tmp_path / "y.bin": b"\x00\xff"})
    assert (tmp_path / "a" / "x.txt").read_text() == "text\n"
    assert (tmp_path / "y.bin").read_bytes() == b"\x00\xff"
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE((tmp_path / "y.bin").stat().st_mode) == 0o666 & ~umask
    assert write_file(tmp_path / "y.bin", "new") == tmp_path / "y.bin"  # replaced
    assert (tmp_path / "y.bin").read_text() == "new"
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["a", "x.txt", "y.bin"]


def test_a_failing_file_leaves_every_file_of_the_set_as_it_was(tmp_path):
    (tmp_path / "old.txt").write_text("old\n")
    (tmp_path / "blocked").write_text("a file, so no folder can be made here")
    with pytest.raises(OSError):
        write_files({tmp_path / "old.txt": "new\n", tmp_path / "blocked" / "z.txt": "z"})
    assert (tmp_path / "old.txt").read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blocked", "old.txt"]
