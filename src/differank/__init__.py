"""differank: learning-to-rank objectives as plain torch losses, with a LETOR data module,
LETOR-exact metrics and a Lightning + Hydra harness.

The installed packages are ``differank.losses`` (the objectives; torch only),
``differank.rankers`` (scorers, solvers, metrics, the Lightning layer and the run layer) and
``differank.datamodules`` (reading and batching LETOR data). ``differank.run(OVERRIDES)`` does
what the ``differank OVERRIDES`` command does, ``differank.compose(OVERRIDES, run_dir=...)``
gives the config it runs (docs/running.md#from-python); ``differank.tune(OVERRIDES)`` runs
``differank tune`` (docs/tuning.md).
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # what type checkers see; at run time these load only when asked for (below)
    from differank.rankers.checkpoints import Scorer
    from differank.rankers.run.estimator import Ranker as Ranker
    from differank.rankers.run.runs import compose_config as compose  # noqa: F401  (re-exported)
    from differank.rankers.run.runs import run as run
    from differank.rankers.tuning.tune import tune as tune

__version__ = "0.3.0"  # also CITATION.cff's version (tests/test_citation.py)


def load_ranker(path: str | os.PathLike[str]) -> Scorer:
    """The trained scorer of a ``train.py`` checkpoint, from the file alone: an ``nn.Module``
    in eval mode scoring raw LETOR features ``ranker(features [B, L, F], mask [B, L])`` as the
    exported scorer does. Only allowlisted differank classes are rebuilt and the file is read
    with ``weights_only=True`` (docs/architecture.md#the-run-layer-and-its-trust-model)."""
    from differank.rankers.checkpoints import load_ranker as load  # torch loads only now

    return load(os.fspath(path))


if not TYPE_CHECKING:  # type checkers see the imports above, and no other lazy name

    def __getattr__(name: str):
        # differank.Ranker, compose, run and tune load the run layer (Lightning, Hydra) only
        # when they are asked for, so `import differank` stays light
        if name == "Ranker":
            from differank.rankers.run.estimator import Ranker

            return Ranker
        if name == "compose":
            from differank.rankers.run.runs import compose_config

            return compose_config
        if name == "run":
            from differank.rankers.run.runs import run

            return run
        if name == "tune":
            from differank.rankers.tuning.tune import tune

            return tune
        raise AttributeError(f"module 'differank' has no attribute {name!r}")
