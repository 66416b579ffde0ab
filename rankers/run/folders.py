"""Run folders that never collide: ``${unique_dir:outputs/DATE/TIME}`` in
``conf/hydra/default.yaml`` claims the folder by an atomic ``mkdir`` and, when another run (started
in the same second) already holds it, takes ``TIME_1``, ``TIME_2``, ... instead."""

from __future__ import annotations

from pathlib import Path

MAX_TRIES = 10_000  # runs started in one second on one file system


def claim_folder(path: str) -> str:
    """Create ``path`` (its parents too) or the first free ``path_N``; return the one created.

    ``mkdir`` without ``exist_ok`` is atomic, so two processes never get the same folder.
    Registered as a cached resolver (``train.py``): one config (and every job of a sweep, which
    Hydra gives the sweep's resolver cache) resolves it once.
    """
    base = Path(path)
    base.parent.mkdir(parents=True, exist_ok=True)
    for attempt in range(MAX_TRIES):
        folder = base if attempt == 0 else base.with_name(f"{base.name}_{attempt}")
        try:
            folder.mkdir()
        except FileExistsError:
            continue
        return str(folder)
    raise FileExistsError(f"{base} and {MAX_TRIES - 1} numbered siblings exist already")
