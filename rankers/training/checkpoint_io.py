"""Lightning's checkpoint files written whole or not at all.

Lightning's own writer (``TorchCheckpointIO``) opens the final path and writes into it, without
``fsync``: a run killed or out of disk in the middle of a save leaves a truncated
``best.ckpt`` / ``last.ckpt`` where the previous one was, and ``ckpt_path=last`` then cannot
resume. :class:`AtomicCheckpointIO` writes the checkpoint to a temporary file in the same
folder, flushes it to disk (``fsync``) and renames it over the final name (``os.replace``,
atomic on POSIX): the old file stays whole until the new one is. ``conf/trainer/default.yaml``
gives it to every trainer (``plugins``), DDP included (only rank 0 writes).

Public API::

    AtomicCheckpointIO()   # a Lightning CheckpointIO plugin; reading and removing as Lightning's
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import torch
from lightning_fabric.plugins.io.torch_io import TorchCheckpointIO


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` to a temporary file beside the target, ``fsync``, ``os.replace``; on any
    error (or an interrupt) the temporary file is removed and the old checkpoint is kept."""

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: str | Path, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None:
            raise TypeError(
                "Trainer.save_checkpoint(..., storage_options=...) is not supported by "
                f"{type(self).__name__}: differank writes local checkpoint files only"
            )
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        # O_EXCL: never another's file; mode 0o666 less the umask, as Lightning's open() gives
        handle = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        try:
            with os.fdopen(handle, "wb") as file:
                torch.save(checkpoint, file)
                file.flush()
                os.fsync(file.fileno())
            os.replace(temporary, path)
        except BaseException:
            temporary.unlink(missing_ok=True)
            raise
