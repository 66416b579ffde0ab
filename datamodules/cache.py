"""On-disk cache entries of memory-mapped arrays (the parsed files and the normalised splits).

Public API::

    new_entry(root) -> Path | None            # a private temporary folder under root (None:
                                              #   root is not writable; work in memory)
    new_array(folder, name, dtype, shape)     # a zeroed .npy array written in place (memmap),
                                              #   or in memory when folder is None
    commit(folder, entry, arrays, meta, shapes, same) -> (arrays, meta) | None
                                              # save, then rename into place
    load(entry, shapes) -> (arrays, meta) | None          # memory-mapped; checked against shapes
    free_disk_bytes(folder) -> int            # free space on the disk that holds folder

An entry is a folder of ``<name>.npy`` files and ``meta.json``; it becomes visible only by the
final rename, so a reader never sees half an entry. When concurrent writers (DDP ranks starting
cold) race, the first complete entry wins and the others map it, so they share its pages.
Arrays load copy-on-write (``mmap_mode="c"``): writable, yet processes on one machine share the
unmodified pages. An entry whose arrays do not have the shapes its metadata promises
is reported (a warning) and ignored, so the caller rebuilds it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)


def free_disk_bytes(folder: Path) -> int:
    """Free bytes on the filesystem that holds ``folder`` (or its nearest existing parent)."""
    folder = Path(folder).absolute()
    while not folder.exists():
        folder = folder.parent
    return shutil.disk_usage(folder).free


def new_entry(root: Path) -> Path | None:
    try:
        root.mkdir(parents=True, exist_ok=True)
        return Path(tempfile.mkdtemp(dir=root, prefix=".tmp-"))
    except OSError as error:
        log.warning("cache folder %s is not writable (%s): working in memory", root, error)
        return None


def new_array(folder: Path | None, name: str, dtype, shape) -> np.ndarray:
    if folder is None:
        return np.zeros(shape, dtype)
    return np.lib.format.open_memmap(folder / f"{name}.npy", "w+", dtype, shape)


def commit(
    folder: Path | None,
    entry: Path,
    arrays: dict[str, np.ndarray],
    meta: dict,
    shapes: Callable[[dict], dict],
    same: Callable[[dict], bool],
) -> tuple | None:
    """Save ``arrays`` and ``meta`` in ``folder`` and rename it to ``entry``; returns the entry
    loaded back (memory-mapped), or None when it could not be written. An existing entry
    whose metadata ``same`` accepts (another process wrote the same data) is kept and
    returned; any other existing entry is replaced."""
    if folder is None:
        return None
    existing = load(entry, shapes) if entry.exists() else None
    if existing is not None and same(existing[1]):
        shutil.rmtree(folder, ignore_errors=True)
        return existing
    try:
        for name, array in arrays.items():
            if isinstance(array, np.memmap):
                array.flush()
            else:
                np.save(folder / f"{name}.npy", array)
        write_meta(folder, meta)
        if entry.exists():  # a stale or inconsistent entry
            shutil.rmtree(entry, ignore_errors=True)
        os.rename(folder, entry)
    except OSError as error:  # another process committed first, or the disk is full
        shutil.rmtree(folder, ignore_errors=True)
        log.debug("cache entry %s not committed (%s)", entry, error)
    return load(entry, shapes)


def write_meta(folder: Path, meta: dict) -> None:
    """Replace ``folder/meta.json`` atomically. Each writer has its own temporary file: two
    processes refreshing one entry at once (DDP ranks, parallel runs) each replace it whole."""
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=".meta-", suffix=".json")
    try:
        with os.fdopen(handle, "w") as file:
            file.write(json.dumps(meta, indent=1))
        os.replace(tmp, folder / "meta.json")
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def load(entry: Path, shapes: Callable[[dict], dict]) -> tuple[dict, dict] | None:
    """The entry's arrays (memory-mapped) and metadata, if every array has the shape that
    ``shapes(meta)`` gives for it; else None (with a warning when the entry exists)."""
    meta_file = entry / "meta.json"
    if not meta_file.is_file():
        return None
    try:
        meta = json.loads(meta_file.read_text())
        expected = shapes(meta)
        arrays = {name: np.load(entry / f"{name}.npy", mmap_mode="c") for name in expected}
    except (OSError, ValueError, KeyError, TypeError) as error:
        log.warning("cache entry %s is unreadable (%s); rebuilding it", entry, error)
        return None
    wrong = [name for name, shape in expected.items() if arrays[name].shape != tuple(shape)]
    if wrong:
        log.warning(
            "cache entry %s disagrees with its metadata (%s); rebuilding it",
            entry,
            ", ".join(wrong),
        )
        return None
    return arrays, meta
