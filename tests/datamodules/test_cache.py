"""datamodules/cache.py: entries appear whole, race winners are shared, bad entries rebuilt."""

import logging

import numpy as np

from differank.datamodules import cache


def shapes(meta):
    return {"x": (meta["rows"], 2)}


def write(root, value, entry_name="e"):
    folder = cache.new_entry(root)
    x = cache.new_array(folder, "x", np.float32, (3, 2))
    x[:] = value
    meta = {"rows": 3, "value": value}
    return cache.commit(
        folder, root / entry_name, {"x": x}, meta, shapes, same=lambda old: old["value"] == value
    )


def test_commit_loads_the_entry_memory_mapped_and_leaves_no_temporary_folder(tmp_path):
    arrays, meta = write(tmp_path, 1.0)
    assert isinstance(arrays["x"], np.memmap) and arrays["x"].flags.writeable
    np.testing.assert_array_equal(arrays["x"], np.ones((3, 2)))
    assert [p.name for p in tmp_path.iterdir()] == ["e"]
    assert cache.load(tmp_path / "e", shapes)[1] == meta


def test_a_racing_writer_of_the_same_data_maps_the_first_entry(tmp_path):
    write(tmp_path, 1.0)
    inode = (tmp_path / "e" / "x.npy").stat().st_ino
    second, _ = write(tmp_path, 1.0)
    assert (tmp_path / "e" / "x.npy").stat().st_ino == inode  # the first file, not a copy
    assert [p.name for p in tmp_path.iterdir()] == ["e"]


def test_an_entry_of_other_data_is_replaced(tmp_path):
    write(tmp_path, 1.0)
    arrays, meta = write(tmp_path, 2.0)
    assert meta["value"] == 2.0 and (arrays["x"] == 2.0).all()


def test_inconsistent_or_missing_entries_load_as_none(tmp_path, caplog):
    assert cache.load(tmp_path / "absent", shapes) is None
    write(tmp_path, 1.0)
    np.save(tmp_path / "e" / "x.npy", np.zeros((2, 2), np.float32))
    with caplog.at_level(logging.WARNING):
        assert cache.load(tmp_path / "e", shapes) is None
    assert "disagrees with its metadata (x)" in caplog.text


def test_unwritable_root_works_in_memory(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    assert cache.new_entry(blocker / "sub") is None
    assert cache.commit(None, blocker / "e", {}, {}, shapes, same=lambda old: True) is None
    assert type(cache.new_array(None, "x", np.float32, (2,))) is np.ndarray


def test_free_disk_bytes_is_measured_on_the_nearest_existing_folder(tmp_path):
    inside = cache.free_disk_bytes(tmp_path / "not" / "yet" / "made")
    assert abs(inside - cache.free_disk_bytes(tmp_path)) < 2**30  # the same disk, give or take
    assert not (tmp_path / "not").exists()  # measuring creates nothing


def test_concurrent_metadata_refreshes_of_one_entry_never_collide(tmp_path):
    import threading

    write(tmp_path, 1.0)
    entry, errors = tmp_path / "e", []

    def refresh(stamp):
        try:
            for _ in range(200):
                cache.write_meta(entry, {"rows": 3, "value": 1.0, "stamp": stamp})
        except OSError as error:  # a shared temporary name made one writer lose its file
            errors.append(error)

    threads = [threading.Thread(target=refresh, args=(n,)) for n in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert sorted(p.name for p in entry.iterdir()) == ["meta.json", "x.npy"]  # no leftovers
    assert cache.load(entry, shapes)[1]["stamp"] in range(4)
