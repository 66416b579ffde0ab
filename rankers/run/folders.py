"""Run folders that never collide, and that a failed run does not leave behind.

``${unique_dir:outputs/DATE/TIME}`` in ``conf/hydra/default.yaml`` claims the folder by an atomic
``mkdir`` and, when another run (started in the same second) already holds it, takes
``TIME_1``, ``TIME_2``, ... instead. A run that fails before writing any output (its folder
holds only Hydra's ``.hydra/`` and the ``train.log``) removes the folder it claimed
(:func:`remove_if_unused`, called by ``train.py``), and the parents the claim created when they
are left empty: the error is on the terminal, and no empty run folders pile up.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

MAX_TRIES = 10_000  # runs started in one second on one file system
# The folders this process claimed (absolute) -> the parent folders the claim created.
_claimed: dict[Path, list[Path]] = {}


def claim_folder(path: str) -> str:
    """Create ``path`` (its parents too) or the first free ``path_N``; return the one created.

    ``mkdir`` without ``exist_ok`` is atomic, so two processes never get the same folder.
    Registered as a cached resolver (``train.py``): one config (and every job of a sweep, which
    Hydra gives the sweep's resolver cache) resolves it once.
    """
    base = Path(path)
    missing = [parent for parent in (base.parent, *base.parent.parents) if not parent.exists()]
    base.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(MAX_TRIES):
        folder = base if attempt == 0 else base.with_name(f"{base.name}_{attempt}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        _claimed[Path(os.path.abspath(folder))] = [Path(os.path.abspath(p)) for p in missing]
        return str(folder)
    raise FileExistsError(f"{base} and {MAX_TRIES - 1} numbered siblings exist already")


def remove_if_unused(folder: str | Path) -> bool:
    """Remove ``folder`` if this process claimed it and it holds no output, only Hydra's records
    (``.hydra/`` and ``*.log``), and then each parent the claim created that is left empty
    (another run's folder keeps it). True when removed; a folder given as ``hydra.run.dir=DIR``
    (not claimed) is always kept."""
    folder = Path(os.path.abspath(folder))
    if folder not in _claimed or not folder.is_dir():
        return False
    records = all(
        (entry.name == ".hydra" and entry.is_dir()) or (entry.suffix == ".log" and entry.is_file())
        for entry in folder.iterdir()
    )
    if not records:
        return False
    shutil.rmtree(folder)
    for parent in _claimed.pop(folder):  # innermost first
        try:
            parent.rmdir()
        except OSError:  # not empty: another run's folder is in it
            break
    return True
