"""The run lifecycle: a run killed with SIGKILL and resumed from ``last.ckpt`` ends exactly like
an uninterrupted one; the same seed gives the same metrics; checkpoints load with
``weights_only=True``; ``task=test`` re-evaluates a checkpoint; bad tasks fail clearly."""

import json
import os
import signal
import subprocess
import sys

import pytest
import pytorch_lightning as pl
import torch

from tests.conftest import ROOT
from train import compose_run, train

TINY = ["data.n_train_queries=40", "data.n_val_queries=20", "data.n_test_queries=20",
        "data.batch_size=8", "trainer.max_epochs=4", "logger=csv"]


class KillAt(pl.Callback):
    """SIGKILL this very process after training batch ``batch`` of epoch ``epoch``: an
    interruption without any chance to clean up (what a preempted cluster job sees)."""

    def __init__(self, epoch: int, batch: int = 1) -> None:
        self.epoch, self.batch = epoch, batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            os.kill(os.getpid(), signal.SIGKILL)


def run(overrides, run_dir) -> dict:
    """One in-process run of ``train.py``; its test metrics."""
    train(compose_run(overrides, run_dir), run_dir)
    return json.loads((run_dir / "test_metrics.json").read_text())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    return run_dir, run(TINY, run_dir)


def test_resume_after_sigkill_ends_like_the_uninterrupted_run(uninterrupted, tmp_path):
    run_dir, expected = uninterrupted
    killed = tmp_path / "killed"
    command = [sys.executable, "train.py", *TINY, f"hydra.run.dir={killed}",
               "+callbacks.kill._target_=tests.test_lifecycle.KillAt", "+callbacks.kill.epoch=2"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    last = killed / "checkpoints" / "last.ckpt"
    assert not (killed / "test_metrics.json").exists()
    assert torch.load(last, weights_only=True)["epoch"] == 1  # epochs 0 and 1 were saved

    resumed = run([*TINY, f"ckpt_path={last}"], killed)
    assert resumed == expected
    predictions = "predictions/test.txt"
    assert (killed / predictions).read_bytes() == (run_dir / predictions).read_bytes()


def test_same_seed_same_metrics_and_scores(uninterrupted, tmp_path):
    run_dir, expected = uninterrupted
    assert run(TINY, tmp_path) == expected
    predictions = "predictions/test.txt"
    assert (tmp_path / predictions).read_bytes() == (run_dir / predictions).read_bytes()


def test_ckpt_path_last_without_a_checkpoint_starts_fresh(uninterrupted, tmp_path):
    # Set-and-forget for preemptible jobs: resume if the folder has last.ckpt, else start.
    assert run([*TINY, "ckpt_path=last"], tmp_path) == uninterrupted[1]


def test_checkpoints_load_with_weights_only(uninterrupted):
    run_dir, _ = uninterrupted
    for name in ("best.ckpt", "last.ckpt"):
        checkpoint = torch.load(run_dir / "checkpoints" / name, weights_only=True)
        assert {"state_dict", "optimizer_states", "callbacks", "loops"} <= set(checkpoint)


def test_task_test_reevaluates_a_checkpoint_exactly(uninterrupted, tmp_path):
    run_dir, expected = uninterrupted
    best = run_dir / "checkpoints" / "best.ckpt"
    assert run([*TINY, "task=test", f"ckpt_path={best}"], tmp_path) == expected
    assert not (tmp_path / "checkpoints").exists()  # nothing trained, nothing saved


@pytest.mark.parametrize(
    "overrides, message",
    [(["task=test"], "ckpt_path"), (["task=serve", "ckpt_path=x.ckpt"], "task must be one of")],
)
def test_bad_tasks_fail_before_any_work(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        train(compose_run([*TINY, *overrides], tmp_path), tmp_path)
