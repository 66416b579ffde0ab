"""Names that become paths: a name from a config or a command line (``export.name``, a run's or
an output's name) is joined to an output folder, so it must stay one folder entry there. A
separator or ``..`` would write outside the folder, and ``.`` or an empty name into the folder
itself. Every such name is checked here, once, before any path is built from it.

Public API::

    path_component(name, option) -> str   # name, or a ValueError naming the option

Example:
    >>> path_component("mq2008-v2", "export.name")
    'mq2008-v2'
    >>> path_component("..", "export.name")
    Traceback (most recent call last):
    ...
    ValueError: export.name must be one file or folder name, got '..': ...
"""

from __future__ import annotations

import os

MAX_BYTES = 255  # NAME_MAX of Linux and macOS file systems (bytes of the UTF-8 name)
_SEPARATORS = {"/", "\\", os.sep, *([os.altsep] if os.altsep else [])}


def path_component(name: str, option: str) -> str:
    """``name`` when it is one safe path component: non-empty, not ``.`` or ``..``, without a
    separator (``/`` or ``\\``) or NUL, at most ``MAX_BYTES`` bytes in UTF-8. Otherwise a
    ``ValueError`` naming ``option`` (the config key or flag that gave it)."""
    name = str(name)
    why = None
    if name in ("", ".", ".."):
        why = "not empty, '.' or '..'"
    elif any(separator in name for separator in _SEPARATORS) or "\0" in name:
        why = "no '/', '\\' or NUL in it"
    elif len(name.encode("utf-8", "surrogateescape")) > MAX_BYTES:
        why = f"at most {MAX_BYTES} bytes"
    if why is not None:
        raise ValueError(
            f"{option} must be one file or folder name, got {name!r}: {why} (it names a "
            "folder or file inside the output folder, e.g. differank)"
        )
    return name
