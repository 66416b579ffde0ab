"""Output files that are whole or absent: each is written under a temporary name in its own
folder, flushed to disk (``fsync``) and renamed over its final name (``os.replace``, atomic on
POSIX), so neither a reader, a crash nor a failing run ever sees half a file. A set of files is
renamed only once every one of them is written, and a rename that fails (a final name that is
a directory, a full or read-only folder) or is interrupted (``KeyboardInterrupt``) puts back the
files the set had already replaced: a run's predictions and metrics, or an export's files,
change together or not at all. Until every rename is done each replaced file is kept as a hard
link beside it (``.NAME.*.old``, a copy where the file system has no hard links), so only a
kill or a power loss between two renames can leave the set mixed, and then the old files are
still there under those names. A folder of outputs is written whole under a temporary name and
swapped in at once (:func:`replace_folder`), which a kill cannot leave mixed. It lives in
``datamodules/``, the room that the metrics (the evaluator's ``--json``) and the run layer may
both import.

Public API::

    write_files({path: text or bytes, ...}, *, overwrite=True)   # all of them, or none
    write_file(path, text or bytes, *, overwrite=True) -> Path
    replace_folder(new, dst) -> Path     # the written folder new becomes dst in one step
"""

from __future__ import annotations

import ctypes
import errno
import logging
import os
import shutil
import uuid
from collections.abc import Mapping
from pathlib import Path

log = logging.getLogger(__name__)
_AT_FDCWD = -100  # renameat2's "relative to the working directory"
_RENAME_EXCHANGE = 2  # renameat2's flag: swap the two names atomically


def write_files(contents: Mapping[Path, str | bytes], *, overwrite: bool = True) -> None:
    """Write every ``path: data`` of ``contents`` (text as UTF-8), creating missing folders. On
    an error (or an interrupt) no file is left replaced, and no temporary file is left.
    ``overwrite=False``: a path that exists when its file is put in place (checked at that
    moment, by a hard link that cannot replace) is a ``FileExistsError``, and the files of the
    set put in place before it are removed again."""
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
            if overwrite:
                old[path] = _keep_old(path)
                os.replace(temporary, path)
            else:
                try:
                    os.link(temporary, path)  # never replaces: fails when path exists
                except FileExistsError:
                    raise FileExistsError(
                        errno.EEXIST, f"{path} exists and is not replaced (overwrite=False)"
                    ) from None
                old[path] = None
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


def write_file(path: str | os.PathLike[str], data: str | bytes, *, overwrite: bool = True) -> Path:
    """:func:`write_files` of one file; returns its path."""
    write_files({Path(path): data}, overwrite=overwrite)
    return Path(path)


def replace_folder(new: str | Path, dst: str | Path) -> Path:
    """Put the folder ``new`` (every file in it written, on ``dst``'s file system: a sibling
    of ``dst``) at ``dst`` in one step; returns ``dst``. A reader, a crash or a kill sees the
    old folder at ``dst`` or the new one, never a mix of their files.

    Without ``dst`` this is a rename. An existing folder ``dst`` is exchanged with ``new`` in
    one atomic step (Linux's ``renameat2(RENAME_EXCHANGE)``) and then removed, as
    ``os.replace`` removes the file it replaces: the caller decides that ``dst`` may be
    replaced whole. Where the exchange is not available (another system, or a file system
    without it), the old folder is first renamed to a hidden sibling ``.<name>.<hex>.old``,
    then ``new`` renamed to ``dst``: a kill between the two renames leaves the old folder whole
    under that name and no ``dst``, still never a mix. A ``dst`` that is not a folder (a file,
    a symbolic link) is refused, never replaced.
    """
    new, dst = Path(new), Path(dst)
    if not new.is_dir() or new.is_symlink():
        raise ValueError(f"{new} is not a folder: only a written folder replaces {dst}")
    for folder, _, _ in os.walk(new):  # its files' names on disk before it is swapped in
        _fsync_folder(Path(folder))
    if not os.path.lexists(dst):
        os.rename(new, dst)
        _fsync_folder(dst.parent)
        return dst
    if dst.is_symlink() or not dst.is_dir():
        raise ValueError(f"{dst} is not a folder (a file or a link): it is not replaced by {new}")
    if _exchange(new, dst):
        old = new  # the names are swapped: the old folder is now at new's name
    else:
        old = dst.with_name(f".{dst.name}.{uuid.uuid4().hex[:8]}.old")
        os.rename(dst, old)
        os.rename(new, dst)
    _fsync_folder(dst.parent)
    shutil.rmtree(old)
    return dst


def _exchange(first: Path, second: Path) -> bool:
    """Swap the names ``first`` and ``second`` atomically; False where this system or file
    system cannot (then nothing was changed)."""
    renameat2 = getattr(ctypes.CDLL(None, use_errno=True), "renameat2", None)
    if renameat2 is None:  # not glibc >= 2.28: no exchange
        return False
    done = renameat2(
        _AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE
    )
    if done == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.EINVAL, errno.ENOSYS, errno.ENOTSUP):  # the file system has no exchange
        return False
    raise OSError(code, f"cannot exchange {first} and {second}: {os.strerror(code)}")


def _fsync_folder(folder: Path) -> None:
    """Flush a folder's entries (a rename in it) to disk."""
    handle = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(handle)
    finally:
        os.close(handle)
