"""train.py's Python names of 0.2.0 (``run_training``, ``compose_run``, ``train``) still work for
one release and warn, naming ``differank.run`` and ``differank.compose``."""

import pytest
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton

from differank.rankers.checkpoints import load_checkpoint
from tests.conftest import TINY_RUN
from train import compose_run, run_training, train


def test_run_training_warns_and_returns_the_metrics_and_the_best_validation_value(tmp_path):
    with pytest.warns(DeprecationWarning, match=r"train\.run_training .*differank\.run"):
        metrics = run_training([*TINY_RUN, "quiet=true"], tmp_path)
    best = load_checkpoint(tmp_path / "checkpoints" / "best.ckpt")["differank"]["validation"]
    assert metrics.pop("val/map") == pytest.approx(best["val/map"])
    assert {"map", "mean_ndcg", "ndcg@10"} <= set(metrics) and "conventions" not in metrics


def test_run_training_only_trains(tmp_path):
    with pytest.warns(DeprecationWarning), pytest.raises(ValueError, match="task=test"):
        run_training(["task=test", "ckpt_path=x.ckpt"], tmp_path)


def test_compose_run_and_train_warn_and_still_run_a_task(tmp_path):
    """0.2.0's pair: compose_run returns the hydra node and sets it as Hydra's config, from
    which train reads the overrides."""
    try:
        with pytest.warns(DeprecationWarning, match=r"train\.compose_run .*differank\.compose"):
            cfg = compose_run(["task=predict", "ckpt_path=missing.ckpt"], tmp_path)
        assert cfg.hydra.runtime.output_dir == str(tmp_path)
        with (
            pytest.warns(DeprecationWarning, match=r"train\.train .*differank\.run"),
            pytest.raises(OSError, match="checkpoint not found: missing.ckpt"),
        ):
            train(cfg, tmp_path)
    finally:
        Singleton._instances.pop(HydraConfig, None)  # compose_run set it, as it always did
