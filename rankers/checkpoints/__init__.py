"""Checkpoint trust in one room: reading a checkpoint file as data, validating its run record,
restoring the run it describes and serving the scorer it holds. Everything that reads a
checkpoint (``task=test|predict|export``, ``files=[...]``, the ensemble, the estimator,
:func:`differank.load_ranker`, ``RankingModule.load_from_checkpoint``) enters here.

Files by role:

* :mod:`~differank.rankers.checkpoints.reading`: the file read with ``weights_only=True``, the
  allowlist, the record's checks and the guarded builder;
* :mod:`~differank.rankers.checkpoints.restore`: the run's config made this machine's and merged
  with the command line; the data, model and trained module rebuilt;
* :mod:`~differank.rankers.checkpoints.serving`: the raw-feature scorer and its serving record.

docs/architecture.md#the-run-layer-and-its-trust-model states the rules.
"""

from differank.rankers.checkpoints.reading import (
    ALLOWED_TARGETS,
    MACHINE_ARGUMENTS,
    SIZE_ARGUMENTS,
    CheckpointReadError,
    UnsafeCheckpointError,
    build,
    build_model,
    build_ranker,
    check_finite,
    check_restorable,
    check_weights,
    load_checkpoint,
    run_record,
    serving_statistics,
    without_machine_arguments,
)
from differank.rankers.checkpoints.restore import (
    build_restored,
    check_data_root,
    check_same_data,
    data_fingerprint,
    local_data_root,
    rebuild_module,
    rebuild_ranker,
    resolved,
    restore_run,
    restored_config,
    restored_estimator,
)
from differank.rankers.checkpoints.serving import (
    MISSING_FEATURE_VALUE,
    Scorer,
    check_serving_record,
    checkpoint_scorer,
    load_ranker,
    scorer_from_checkpoint,
    serving_record,
    serving_scorer,
)

__all__ = [
    "ALLOWED_TARGETS",
    "MACHINE_ARGUMENTS",
    "MISSING_FEATURE_VALUE",
    "SIZE_ARGUMENTS",
    "CheckpointReadError",
    "Scorer",
    "UnsafeCheckpointError",
    "build",
    "build_model",
    "build_ranker",
    "build_restored",
    "check_data_root",
    "check_finite",
    "check_restorable",
    "check_same_data",
    "check_serving_record",
    "checkpoint_scorer",
    "check_weights",
    "data_fingerprint",
    "load_checkpoint",
    "load_ranker",
    "local_data_root",
    "rebuild_module",
    "rebuild_ranker",
    "resolved",
    "restore_run",
    "restored_config",
    "restored_estimator",
    "run_record",
    "scorer_from_checkpoint",
    "serving_record",
    "serving_scorer",
    "serving_statistics",
    "without_machine_arguments",
]
