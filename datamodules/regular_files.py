"""Paths that are not regular files, refused before they are opened: opening a FIFO for reading
blocks until a process writes to it (forever, if none does), and a directory, a device or a
socket holds no file's data (``/dev/zero`` reads forever). A file of more bytes than its kind
can hold (``max_bytes``) is refused by its size, before a byte of it is read.

Public API::

    require_regular_file(path, what, max_bytes=None) -> Path
        # path, or an error saying what it is instead (or how much larger than allowed)
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


def require_regular_file(path: str | Path, what: str, max_bytes: int | None = None) -> Path:
    """``path`` when it is a regular file (symbolic links followed) of at most ``max_bytes``
    bytes (None: any size). A missing path (a dangling link included) raises
    ``FileNotFoundError``; any other kind of file (a symbolic link loop included), or a larger
    one, a ``ValueError`` naming the path, what it is and ``what`` it should have been (e.g.
    ``"a scores file"``); it is never opened."""
    path = Path(path)
    try:
        info = path.stat()  # stat never blocks, not even on a FIFO
    except OSError as error:
        if error.errno == errno.ENOENT and path.is_symlink():
            raise FileNotFoundError(
                f"{path} is a dangling symbolic link (to {os.readlink(path)}, which does not "
                f"exist): {what} must be a regular file"
            ) from None
        if error.errno != errno.ELOOP:
            raise
        raise ValueError(
            f"{path} is a symbolic link loop, not a regular file: {what} must be a regular file"
        ) from None
    mode = info.st_mode
    if stat.S_ISREG(mode):
        if max_bytes is not None and info.st_size > max_bytes:
            raise ValueError(
                f"{path} holds {info.st_size} bytes, more than {what} may hold ({max_bytes} bytes)"
            )
        return path
    kind = next((name for test, name in _KINDS if test(mode)), f"of file mode {mode:o}")
    raise ValueError(f"{path} is {kind}, not a regular file: {what} must be a regular file")
