"""The child process that scores a LightGBM or XGBoost model file, so that the library's crash
on a damaged or forged file ends this process, not the run.

LightGBM's and XGBoost's C++ loaders trust the file: a forged tree size (``tree_sizes=``,
``num_leaves=``) or one value too many in a tree ends the process that loaded it with SIGABRT
or SIGSEGV, which no ``try`` can catch. :func:`differank.rankers.run.teachers.BoosterTeacher`
therefore runs::

    python -m differank.rankers.run.booster_child LIBRARY MODEL FEATURES.npy SCORES.npy MEMORY

and turns any failure of it (a signal, an exception, a refusal) into a named error. The child
caps its own address space at ``MEMORY`` bytes first (the parent's free memory; 0: no cap), so
a file that claims a huge model fails here with ``MemoryError`` / ``bad_alloc`` instead of
taking the machine's memory. It imports numpy and the one library only (no torch), reads the
features with ``allow_pickle=False``, refuses a model whose feature count is not the data's
and writes float64 scores; a refusal, its own or the library's, is exit status 1 and one line
on stderr.

Public API::

    BOOSTERS = {"lightgbm": ..., "xgboost": ...}   # library -> loader of (features, predict)
    cap_memory(limit)   # the address-space cap of a child (0: none)
    main(argv) -> int
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import numpy as np

Predict = Callable[[np.ndarray], np.ndarray]


def _lightgbm(model: str) -> tuple[int, Predict]:
    import lightgbm

    booster = lightgbm.Booster(model_file=model)
    return booster.num_feature(), lambda features: np.asarray(booster.predict(features))


def _xgboost(model: str) -> tuple[int, Predict]:
    import xgboost

    booster = xgboost.Booster(model_file=model)
    return booster.num_features(), lambda features: booster.predict(xgboost.DMatrix(features))


# Each loader returns the model's feature count and its scorer of a [rows, features] array.
BOOSTERS: dict[str, Callable[[str], tuple[int, Predict]]] = {
    "lightgbm": _lightgbm,
    "xgboost": _xgboost,
}


def cap_memory(limit: int) -> None:
    if limit > 0:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))


def main(argv: Sequence[str]) -> int:
    """Score ``FEATURES.npy`` with the model into ``SCORES.npy``: 0, or 1 with one line on
    stderr saying why not (the library's error, or a feature count other than the data's)."""
    library, model, features_file, scores_file, memory = argv
    cap_memory(int(memory))
    features = np.load(features_file, allow_pickle=False)
    try:
        count, predict = BOOSTERS[library](model)
        if count != features.shape[1]:
            print(
                f"the model reads {count} features, the data has {features.shape[1]}",
                file=sys.stderr,
            )
            return 1
        scores = np.asarray(predict(features), dtype=np.float64)
    except Exception as error:  # the library's own refusal: its first line (not its C++ stack)
        lines = str(error).strip().splitlines() or [""]
        print(f"{type(error).__name__}: {lines[0]}", file=sys.stderr)
        return 1
    np.save(scores_file, scores, allow_pickle=False)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
