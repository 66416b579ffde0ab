"""Output files that are whole or absent: each is written under a temporary name in its own
folder, flushed to disk (``fsync``) and renamed over its final name (``os.replace``, atomic on
POSIX), so neither a reader, a crash nor a failing run ever sees half a file. A set of files is
renamed only once every one of them is written: a run's predictions and metrics appear together
or not at all (short of a crash between the renames). It lives in ``datamodules/``, the room
that the metrics (the evaluator's ``--json``) and the run layer may both import.

Public API::

    write_files({path: text or bytes, ...})   # all of them, or (on an error) none
    write_file(path, text or bytes) -> Path
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Mapping
from pathlib import Path


def write_files(contents: Mapping[Path, str | bytes]) -> None:
    """Write every ``path: data`` of ``contents`` (text as UTF-8), creating missing folders. On
    an error no file is replaced and no temporary file is left."""
    written: list[tuple[Path, Path]] = []  # (temporary, final)
    try:
        for path, data in contents.items():
            path = Path(path)
            path.parent.mkdir(parents=True, exist_ok=True)
            temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
            # O_EXCL: never another's file; mode 0o666 less the umask, as open() gives
            handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
            written.append((temporary, path))
            with os.fdopen(handle, "wb") as file:
                file.write(data.encode() if isinstance(data, str) else data)
                file.flush()
                os.fsync(file.fileno())
        for temporary, path in written:
            os.replace(temporary, path)
    finally:
        for temporary, _ in written:
            temporary.unlink(missing_ok=True)  # renamed: already gone


def write_file(path: str | os.PathLike[str], data: str | bytes) -> Path:
    """:func:`write_files` of one file; returns its path."""
    write_files({Path(path): data})
    return Path(path)
