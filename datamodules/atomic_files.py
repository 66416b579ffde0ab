"""Output files that are whole or absent: each is written under a temporary name in its own
folder, flushed to disk (``fsync``) and renamed over its final name (``os.replace``, atomic on
POSIX), so neither a reader, a crash nor a failing run ever sees half a file. A set of files is
renamed only once every one of them is written, and a rename that fails (a final name that is
a directory, a full or read-only folder) or is interrupted (``KeyboardInterrupt``) puts back the
files the set had already replaced: a run's predictions and metrics, or an export's files,
change together or not at all. Until every rename is done each replaced file is kept as a hard
link beside it (``.NAME.*.old``, a copy where the file system has no hard links), so only a
kill or a power loss between two renames can leave the set mixed, and then the old files are
still there under those names. It lives in ``datamodules/``, the room that the metrics (the
evaluator's ``--json``) and the run layer may both import.

Public API::

    write_files({path: text or bytes, ...})   # all of them, or (on an error) none
    write_file(path, text or bytes) -> Path
"""

from __future__ import annotations

import logging
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)


def write_files(contents: Mapping[Path, str | bytes]) -> None:
    """Write every ``path: data`` of ``contents`` (text as UTF-8), creating missing folders. On
    an error (or an interrupt) no file is left replaced, and no temporary file is left."""
    written: list[tuple[Path, Path]] = []  # (temporary, final)
    old: dict[Path, Path | None] = {}  # final -> its previous file kept aside (None: none)
    replaced: list[Path] = []  # finals that hold the new file
    try:
        for path, data in contents.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = _sibling(path, "tmp")
            # O_EXCL: never another's file; mode 0o666 less the umask, as open() gives
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            written.append((temporary, path))
            with os.fdopen(handle, "wb") as file:
                file.write(data.encode() if isinstance(data, str) else data)
                file.flush()
                os.fsync(file.fileno())
        for temporary, path in written:
            old[path] = _keep_old(path)
            os.replace(temporary, path)
            replaced.append(path)
    except BaseException:
        _put_back(replaced, old)
        raise
    finally:
        for temporary, _ in written:
            temporary.unlink(missing_ok=True)  # renamed: already gone
        for kept in old.values():
            if kept is not None:
                kept.unlink(missing_ok=True)  # put back: already gone


def _sibling(path: Path, kind: str) -> Path:
    return path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.{kind}")


def _keep_old(path: Path) -> Path | None:
    """A second name for the file at ``path`` (a hard link, or a copy), which keeps its old
    content while the new file takes its place; None when there is no file to keep (nothing
    there, or a directory, which the rename then refuses)."""
    if not os.path.lexists(path) or (path.is_dir() and not path.is_symlink()):
        return None
    kept = _sibling(path, "old")
    try:
        os.link(path, kept, follow_symlinks=False)
    except OSError:  # a file system without hard links
        shutil.copy2(path, kept, follow_symlinks=False)
    return kept


def _put_back(replaced: list[Path], old: dict[Path, Path | None]) -> None:
    """Undo the renames of a failed :func:`write_files`, newest first: each replaced file gets
    its old content back; a file that did not exist before is removed (it is the new one)."""
    for path in reversed(replaced):
        kept = old[path]
        try:
            if kept is None:
                path.unlink()
            else:
                os.replace(kept, path)
        except OSError as error:  # the old content stays where it is: say where
            old[path] = None
            where = "it had none" if kept is None else f"its previous content is {kept}"
            log.error("could not put back %s after a failed write (%s); %s", path, error, where)


def write_file(path: str | Path, data: str | bytes) -> Path:
    """:func:`write_files` of one file; returns its path."""
    write_files({Path(path): data})
    return Path(path)
