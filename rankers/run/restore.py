"""Moved to :mod:`differank.rankers.checkpoints` (reading, validating, restoring and serving a
checkpoint are one room); ``build_run`` and ``click_estimator``, which build a run from the
user's own config, to :mod:`differank.rankers.run.trainer_tasks`. Each old name still imports
from here for one release, with a DeprecationWarning naming its new import."""

from differank.rankers.checkpoints.old_paths import forward_moved

__getattr__ = forward_moved(__name__)
