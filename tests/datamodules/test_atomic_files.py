"""datamodules/atomic_files.py: output files are whole or absent."""

import os
import stat
from pathlib import Path

import pytest

from differank.datamodules import atomic_files
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


def test_whole_or_absent_a_failing_rename_puts_back_the_files_it_replaced(tmp_path, monkeypatch):
    """The last of four renames fails: the files already replaced get their old content back,
    the new file that had no predecessor is removed, and no temporary or kept copy is left."""
    (tmp_path / "a.txt").write_text("old a\n")
    (tmp_path / "b.txt").write_text("old b\n")
    (tmp_path / "c.txt").write_text("old c\n")
    real_replace, renames = os.replace, []

    def last_fails(source, target):
        if Path(source).name.endswith(".tmp"):
            renames.append(target)
            if len(renames) == 4:
                raise OSError(28, "No space left on device")
        return real_replace(source, target)

    monkeypatch.setattr(os, "replace", last_fails)
    contents = {tmp_path / name: f"new {name}\n" for name in ("a.txt", "new.txt", "b.txt")}
    with pytest.raises(OSError, match="No space"):
        write_files({**contents, tmp_path / "c.txt": "new c\n"})
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {
        "a.txt": "old a\n",
        "b.txt": "old b\n",
        "c.txt": "old c\n",
    }


def test_whole_or_absent_a_directory_in_the_way_leaves_the_set_as_it_was(tmp_path):
    (tmp_path / "model.json").write_text("old model\n")
    (tmp_path / "features.json").mkdir()
    with pytest.raises(IsADirectoryError, match="features.json"):
        write_files({tmp_path / "model.json": "new\n", tmp_path / "features.json": "new\n"})
    assert (tmp_path / "model.json").read_text() == "old model\n"
    assert (tmp_path / "features.json").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["features.json", "model.json"]


def test_whole_or_absent_an_interrupt_between_renames_puts_back_the_old_file(tmp_path, monkeypatch):
    (tmp_path / "scores.txt").write_text("old\n")
    real_replace = os.replace

    def interrupted(source, target):
        if Path(target).name == "metrics.json" and Path(source).name.endswith(".tmp"):
            raise KeyboardInterrupt
        return real_replace(source, target)

    monkeypatch.setattr(os, "replace", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_files({tmp_path / "scores.txt": "new\n", tmp_path / "metrics.json": "{}"})
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == {"scores.txt": "old\n"}


def test_whole_or_absent_replace_folder_swaps_a_written_folder_in_at_once(tmp_path):
    old, new = tmp_path / "out", tmp_path / ".out.new"
    (old / "Fold1").mkdir(parents=True)
    (old / "Fold1" / "train.parquet").write_text("old train")
    (old / "Fold1" / "vali.parquet").write_text("old vali")
    (new / "Fold1").mkdir(parents=True)
    (new / "Fold1" / "train.parquet").write_text("new train")
    assert atomic_files.replace_folder(new, old) == old
    assert [p.name for p in old.rglob("*")] == ["Fold1", "train.parquet"]
    assert (old / "Fold1" / "train.parquet").read_text() == "new train"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]  # the old folder is gone
    (new / "x").mkdir(parents=True)
    assert atomic_files.replace_folder(new, tmp_path / "fresh").is_dir()  # no dst: a rename
    (tmp_path / "file").write_text("a file is never replaced by a folder")
    (new / "x").mkdir(parents=True)
    with pytest.raises(ValueError, match=r"file is not a folder"):
        atomic_files.replace_folder(new, tmp_path / "file")
    assert (tmp_path / "file").read_text() == "a file is never replaced by a folder"


def test_whole_or_absent_replace_folder_without_the_exchange_renames_the_old_aside(
    tmp_path, monkeypatch
):
    monkeypatch.setattr(atomic_files, "_exchange", lambda first, second: False, raising=False)
    old, new = tmp_path / "out", tmp_path / ".out.new"
    old.mkdir()
    (old / "a").write_text("old")
    new.mkdir()
    (new / "b").write_text("new")
    atomic_files.replace_folder(new, old)
    assert [p.name for p in old.iterdir()] == ["b"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_whole_or_absent_write_without_overwrite_never_replaces_a_file(tmp_path):
    (tmp_path / "kept.npz").write_text("the user's file")
    with pytest.raises(FileExistsError, match=r"kept\.npz exists and is not replaced"):
        atomic_files.write_files(
            {tmp_path / "new.npz": "new", tmp_path / "kept.npz": "other"}, overwrite=False
        )
    assert (tmp_path / "kept.npz").read_text() == "the user's file"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kept.npz"]  # the set: none of it
    assert atomic_files.write_file(tmp_path / "new.npz", "new", overwrite=False).exists()
