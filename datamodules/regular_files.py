"""Paths that are not regular files, refused before they are opened: opening a FIFO for reading
blocks until a process writes to it (forever, if none does), and a directory, a device or a
socket holds no file's data.

Public API::

    require_regular_file(path, what) -> Path   # path, or an error saying what it is instead
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def require_regular_file(path: str | Path, what: str) -> Path:
    """``path`` when it is a regular file (symbolic links followed). A missing path raises
    ``FileNotFoundError`` (a dangling symbolic link: one naming the link and its target); any
    other kind of file (a symbolic link loop included) a ``ValueError`` naming the path, what
    it is and ``what`` it should have been (e.g. ``"a scores file"``); it is never opened."""
    path = Path(path)
    try:
        mode = path.stat().st_mode  # stat never blocks, not even on a FIFO
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise ValueError(
                f"{path} is a symbolic link loop, not a regular file: {what} must be a regular file"
            ) from None
        if error.errno == errno.ENOENT and path.is_symlink():
            raise FileNotFoundError(
                f"{path} is a dangling symbolic link (to {os.readlink(path)}, which does not "
                f"exist): {what} must be a regular file"
            ) from None
        raise
    if stat.S_ISREG(mode):
        return path
    kind = next((name for test, name in _KINDS if test(mode)), f"of file mode {mode:o}")
    raise ValueError(f"{path} is {kind}, not a regular file: {what} must be a regular file")
