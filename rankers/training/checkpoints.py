"""Moved to :mod:`differank.rankers.checkpoints` (reading, validating, restoring and
serving a checkpoint are one room). Each old name still imports from here for one release,
with a DeprecationWarning naming its new import."""

from differank.rankers.checkpoints.old_paths import forward_moved

__getattr__ = forward_moved(__name__)
