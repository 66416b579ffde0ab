"""``python train.py ARGS`` is ``differank ARGS`` (src/differank/cli.py), kept at the root of a
checkout as the project's layout has it.

``compose_run``, ``train`` and ``run_training`` still import from here for one release, with a
DeprecationWarning: use ``differank.compose`` and ``differank.run``.
"""

import warnings
from pathlib import Path

from differank.cli import main


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"train.{old} is deprecated: use {new}", DeprecationWarning, stacklevel=3)


def compose_run(overrides: list[str], run_dir: Path):
    """Deprecated: ``differank.compose(overrides, run_dir=run_dir)`` (resolved, without the
    hydra node). This one returns the hydra node too and sets it as Hydra's current config, as
    0.2.0 did, for :func:`train`."""
    from hydra.core.hydra_config import HydraConfig

    from differank.rankers.run.runs import compose_with_hydra

    _deprecated("compose_run", "differank.compose(overrides, run_dir=...)")
    cfg = compose_with_hydra(overrides, run_dir=run_dir)
    HydraConfig.instance().set_config(cfg)
    return cfg


def train(cfg, run_dir: Path) -> float:
    """Deprecated: ``differank.run(overrides, output_dir=run_dir)``. Runs ``cfg`` from
    :func:`compose_run`, whose overrides Hydra's current config holds."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from differank.rankers.run.tasks import run_task

    _deprecated("train", "differank.run(overrides, output_dir=...)")
    job = HydraConfig.get()
    overrides = list(job.overrides.task)
    return run_task(cfg, run_dir, overrides=overrides, multirun=job.mode == RunMode.MULTIRUN)


def run_training(overrides: list[str], run_dir: Path) -> dict[str, float]:
    """Deprecated: ``differank.run(overrides, output_dir=run_dir)``, whose result holds what
    this returns: the test metrics and, under the name of ``monitor``, the best validation
    value."""
    from differank.rankers.run.runs import compose_config, written_test_metrics
    from differank.rankers.run.tasks import run_task

    _deprecated("run_training", "differank.run(overrides, output_dir=...)")
    cfg = compose_config(overrides, run_dir=run_dir)
    if cfg.task != "fit":
        raise ValueError(f"run_training trains (task=fit), got task={cfg.task}: use differank.run")
    best = run_task(cfg, Path(run_dir), overrides=overrides)  # no logging set-up, as in 0.2.0
    if not (metrics := written_test_metrics(Path(run_dir))):
        raise FileNotFoundError(
            f"{Path(run_dir) / 'test_metrics.json'}: the run wrote no test metrics "
            "(trainer.fast_dev_run and DDP ranks other than 0 write no outputs)"
        )
    return {cfg.monitor: best, **metrics}


if __name__ == "__main__":
    main()
