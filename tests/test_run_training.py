"""``train.run_training``: one training run from Python, what ``python train.py`` runs, returning
the run's test metrics and the validation value its epoch was chosen on."""

import json

import pytest

from differank.rankers.checkpoints import load_checkpoint
from tests.conftest import TINY_RUN
from train import run_training


def test_it_returns_the_test_metrics_the_run_wrote_and_its_best_validation_value(tmp_path):
    metrics = run_training([*TINY_RUN, "quiet=true"], tmp_path)
    written = json.loads((tmp_path / "test_metrics.json").read_text())
    del written["conventions"]  # the side-by-side table stays in the file
    best = load_checkpoint(tmp_path / "checkpoints" / "best.ckpt")["differank"]["validation"]
    assert metrics.pop("val/map") == pytest.approx(best["val/map"])
    assert metrics == written and {"map", "mean_ndcg", "ndcg@10"} <= set(metrics)


def test_it_only_trains(tmp_path):
    with pytest.raises(ValueError, match="task=test.*train\\(\\)"):
        run_training(["task=test", "ckpt_path=x.ckpt"], tmp_path)
