"""Where names lived before the checkpoint room and the Lightning-free run tasks (issue #40),
kept one release: each old module's ``__getattr__`` (:func:`forward_moved`) returns the name
from its new module with a DeprecationWarning naming the new import.

``MOVED`` maps each old module to ``{name: the module to import it from now}``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from importlib import import_module
from typing import Any

_ROOM = "differank.rankers.checkpoints"
_READING = f"{_ROOM}.reading"
_TRAINER_TASKS = "differank.rankers.run.trainer_tasks"

MOVED: dict[str, dict[str, str]] = {
    "differank.rankers.training.checkpoints": {
        **dict.fromkeys(
            (
                "ALLOWED_TARGETS",
                "MACHINE_ARGUMENTS",
                "SIZE_ARGUMENTS",
                "CheckpointReadError",
                "UnsafeCheckpointError",
                "build",
                "build_model",
                "check_finite",
                "check_restorable",
                "check_weights",
                "load_checkpoint",
                "rebuild_module",
                "restored_estimator",
                "run_record",
                "serving_statistics",
                "without_machine_arguments",
            ),
            _ROOM,
        ),
        # the module's constants: the reading module's, not the room's public names
        **dict.fromkeys(
            ("ESTIMATOR", "LETOR", "MAX_CONFIG_DEPTH", "PARTIAL", "RESTORED", "TARGET"), _READING
        ),
    },
    "differank.rankers.run.restore": {
        **dict.fromkeys(
            (
                "check_data_root",
                "check_same_data",
                "data_fingerprint",
                "load_ranker",
                "local_data_root",
                "resolved",
                "restore_run",
                "restored_config",
                "scorer_from_checkpoint",
            ),
            _ROOM,
        ),
        # a run built from the user's own config is the run layer's (a restored one:
        # differank.rankers.checkpoints.build_restored)
        "build_run": _TRAINER_TASKS,
        "click_estimator": _TRAINER_TASKS,
    },
    # the tasks that need Lightning, imported only for them
    "differank.rankers.run.tasks": dict.fromkeys(
        (
            "check_ddp_launch",
            "distill_teacher",
            "evaluate_restored",
            "fit",
            "make_trainer",
            "transform_none",
            "warn_removed_options",
            "write_curves",
            "write_lightning_outputs",
        ),
        _TRAINER_TASKS,
    ),
    "differank.rankers.run.export": dict.fromkeys(
        ("Scorer", "check_serving_record", "serving_record", "serving_scorer"), _ROOM
    ),
}


def forward_moved(old: str) -> Callable[[str], Any]:
    """The module ``__getattr__`` of the old module ``old``: a moved name is imported from its
    new module with a DeprecationWarning saying where; any other name is an AttributeError."""
    moved = MOVED[old]

    def __getattr__(name: str) -> Any:
        if name not in moved:
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        new = moved[name]
        warnings.warn(
            f"{old}.{name} moved: import it as `from {new} import {name}`; the old import "
            "stops working in the next release",
            DeprecationWarning,
            stacklevel=2,
        )
        return getattr(import_module(new), name)

    return __getattr__
