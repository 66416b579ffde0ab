"""The run lifecycle: a run killed with SIGKILL and resumed from ``last.ckpt`` ends exactly like
an uninterrupted one; the same seed gives the same metrics; checkpoints load with
``weights_only=True`` and carry the run's config and data fingerprint, from which ``task=test |
predict | export`` rebuild the run (command-line overrides winning, mismatched data refused);
bad tasks fail clearly."""

import json
import logging
import os
import signal
import subprocess
import sys

import numpy as np
import pytest
import pytorch_lightning as pl
import torch

from differank.datamodules.reader import write_letor
from differank.rankers.checkpoints import restore_run
from differank.rankers.run.runs import compose_config
from tests.conftest import MQ2008, ROOT, TINY_DATA, requires_mq2008, run_config

TINY = [
    *TINY_DATA,
    "data.batch_size=8",
    "trainer.max_epochs=4",
    "logger=csv",
]


class KillAt(pl.Callback):
    """SIGKILL this very process after training batch ``batch`` of epoch ``epoch``: an
    interruption without any chance to clean up (what a preempted cluster job sees)."""

    def __init__(self, epoch: int, batch: int = 1) -> None:
        self.epoch, self.batch = epoch, batch

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            os.kill(os.getpid(), signal.SIGKILL)


class CrashAt(KillAt):
    """Raise instead: the in-process stand-in for SIGKILL (no checkpoint is saved on an
    exception, so the folder is left as a killed job leaves it)."""

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.current_epoch == self.epoch and batch_idx == self.batch:
            raise RuntimeError("crash")


class EpochsTrained(pl.Callback):
    """Records the epochs that train (a class list: Hydra builds the instance inside ``train``)."""

    epochs: list[int] = []

    def on_train_epoch_start(self, trainer, pl_module) -> None:
        EpochsTrained.epochs.append(trainer.current_epoch)


class PlantedBest(pl.Callback):
    """Logs ``val/planted``: 1 at epoch ``best``, 0 at every other, so that ``monitor=val/planted``
    makes that epoch the best whatever the model learns."""

    def __init__(self, best: int = 1) -> None:
        self.best = best

    def on_validation_epoch_end(self, trainer, pl_module) -> None:
        pl_module.log("val/planted", float(trainer.current_epoch == self.best))


def run(overrides, run_dir) -> dict:
    """One in-process run of ``train.py``; its test metrics."""
    run_config(overrides, run_dir)
    return json.loads((run_dir / "test_metrics.json").read_text())


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("uninterrupted")
    return run_dir, run(TINY, run_dir)


@pytest.mark.slow  # two training subprocesses, one killed mid-run
def test_resume_after_sigkill_ends_like_the_uninterrupted_run(uninterrupted, tmp_path):
    run_dir, expected = uninterrupted
    killed = tmp_path / "killed"
    command = [
        sys.executable,
        "train.py",
        *TINY,
        f"hydra.run.dir={killed}",
        "+callbacks.kill._target_=tests.test_lifecycle.KillAt",
        "+callbacks.kill.epoch=2",
    ]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == -signal.SIGKILL, result.stderr[-3000:]
    last = killed / "checkpoints" / "last.ckpt"
    assert not (killed / "test_metrics.json").exists()
    assert torch.load(last, weights_only=True)["epoch"] == 1  # epochs 0 and 1 were saved

    resumed = run([*TINY, f"ckpt_path={last}"], killed)
    assert resumed == expected
    predictions = "predictions/test.txt"
    assert (killed / predictions).read_bytes() == (run_dir / predictions).read_bytes()


def test_resume_after_a_crash_ends_like_the_uninterrupted_run(uninterrupted, tmp_path):
    run_dir, expected = uninterrupted
    crash = ["+callbacks.crash._target_=tests.test_lifecycle.CrashAt", "+callbacks.crash.epoch=2"]
    with pytest.raises(RuntimeError, match="crash"):
        run([*TINY, *crash], tmp_path)
    last = tmp_path / "checkpoints" / "last.ckpt"
    assert not (tmp_path / "test_metrics.json").exists()
    assert torch.load(last, weights_only=True)["epoch"] == 1  # epochs 0 and 1 were saved

    EpochsTrained.epochs.clear()
    record = "+callbacks.epochs._target_=tests.test_lifecycle.EpochsTrained"
    assert run([*TINY, f"ckpt_path={last}", record], tmp_path) == expected
    assert EpochsTrained.epochs == [2, 3]  # resumed, not retrained from the same seed
    predictions = "predictions/test.txt"
    assert (tmp_path / predictions).read_bytes() == (run_dir / predictions).read_bytes()


def test_last_ckpt_is_the_last_completed_epoch_resumed_or_not(tmp_path):
    """Four epochs, the best at epoch 1: last.ckpt is epoch 3 (Lightning's save_last saves only
    when the best improves, so it held epoch 1), and the same after a crash and a resume."""

    def epoch(run_dir, name):
        return torch.load(run_dir / "checkpoints" / name, weights_only=True)["epoch"]

    planted = [
        "+callbacks.planted._target_=tests.test_lifecycle.PlantedBest",
        "monitor=val/planted",
    ]
    run([*TINY, *planted], tmp_path / "whole")
    assert (epoch(tmp_path / "whole", "best.ckpt"), epoch(tmp_path / "whole", "last.ckpt")) == (
        1,
        3,
    )

    resumed = tmp_path / "resumed"
    crash = ["+callbacks.crash._target_=tests.test_lifecycle.CrashAt", "+callbacks.crash.epoch=3"]
    with pytest.raises(RuntimeError, match="crash"):
        run([*TINY, *planted, *crash], resumed)
    assert (epoch(resumed, "best.ckpt"), epoch(resumed, "last.ckpt")) == (1, 2)
    run([*TINY, *planted, f"ckpt_path={resumed / 'checkpoints' / 'last.ckpt'}"], resumed)
    assert (epoch(resumed, "best.ckpt"), epoch(resumed, "last.ckpt")) == (1, 3)


def test_same_seed_same_metrics_and_scores(uninterrupted, tmp_path):
    run_dir, expected = uninterrupted
    assert run(TINY, tmp_path) == expected
    predictions = "predictions/test.txt"
    assert (tmp_path / predictions).read_bytes() == (run_dir / predictions).read_bytes()


def test_ckpt_path_last_without_a_checkpoint_starts_fresh(uninterrupted, tmp_path):
    # Set-and-forget for preemptible jobs: resume if the folder has last.ckpt, else start.
    assert run([*TINY, "ckpt_path=last"], tmp_path) == uninterrupted[1]


def test_checkpoints_load_with_weights_only_and_carry_the_run(uninterrupted):
    run_dir, _ = uninterrupted
    for name in ("best.ckpt", "last.ckpt"):
        checkpoint = torch.load(run_dir / "checkpoints" / name, weights_only=True)
        assert {"state_dict", "optimizer_states", "callbacks", "loops"} <= set(checkpoint)
        record = checkpoint["differank"]
        assert record["config"]["data"]["n_train_queries"] == 40  # resolved, with overrides
        assert record["config"]["model"]["optimizer"]["lr"] == 0.01
        data = record["data"]
        assert (data["n_features"], data["normalization"], len(data["feature_mean"])) == (
            46,
            "zscore",
            46,
        )
        assert len(data["content_sha256"]) == 64 and "val/map" in record["validation"]
    best = torch.load(run_dir / "checkpoints" / "best.ckpt", weights_only=True)["differank"]
    states = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["callbacks"]
    saver = next(v for k, v in states.items() if k.startswith("ModelCheckpoint"))
    assert best["validation"]["val/map"] == pytest.approx(float(saver["best_model_score"]))


def test_task_test_with_only_ckpt_path_reproduces_the_run(uninterrupted, tmp_path):
    run_dir, expected = uninterrupted
    best = run_dir / "checkpoints" / "best.ckpt"
    assert run(["task=test", f"ckpt_path={best}", "logger=csv"], tmp_path) == expected
    assert (tmp_path / "predictions/test.txt").read_bytes() == (
        run_dir / "predictions/test.txt"
    ).read_bytes()
    assert not (tmp_path / "checkpoints").exists()  # nothing trained, nothing saved


def test_task_predict_and_export_restore_the_run(uninterrupted, tmp_path, caplog):
    caplog.set_level(logging.INFO)
    run_dir, _ = uninterrupted
    best = run_dir / "checkpoints" / "best.ckpt"
    run_only = ["logger=csv", f"ckpt_path={best}"]
    run_config(["task=predict", *run_only], tmp_path / "p")
    assert (tmp_path / "p/predictions/test.txt").read_bytes() == (
        run_dir / "predictions/test.txt"
    ).read_bytes()
    run_config(["task=export", *run_only], tmp_path / "e")
    assert (tmp_path / "e/export/scorer.pt").is_file()
    assert "No unused functions" not in caplog.text  # the ONNX passes' INFO noise is filtered


@pytest.mark.parametrize(
    ("weight", "refusal"),
    [
        # Non-finite weights: the checkpoint is refused when read, naming the entry.
        (float("nan"), r"state_dict\['ranker\.linear\.weight'\]\[0, 0\] is nan"),
        # Finite weights whose scores overflow float32: the first bad row is named.
        (3e38, r"score of row 1 \(.*test\.txt:1\) is (nan|-?inf)"),
    ],
)
def test_predict_with_non_finite_scores_writes_nothing_and_names_why(
    uninterrupted, tmp_path, weight, refusal
):
    checkpoint = torch.load(uninterrupted[0] / "checkpoints" / "best.ckpt", weights_only=True)
    checkpoint["state_dict"] = {
        key: torch.full_like(value, weight) if value.is_floating_point() else value
        for key, value in checkpoint["state_dict"].items()
    }
    broken = tmp_path / "broken.ckpt"
    torch.save(checkpoint, broken)
    run_dir = tmp_path / "predict"
    with pytest.raises(ValueError, match=refusal):
        run_config(["task=predict", f"ckpt_path={broken}", "logger=csv"], run_dir)
    assert not (run_dir / "predictions").exists() and not (run_dir / "test_metrics.json").exists()


def test_command_line_overrides_win_over_the_checkpoint(uninterrupted, tmp_path):
    run_dir, expected = uninterrupted
    best = run_dir / "checkpoints" / "best.ckpt"
    # Same training split (same normalization), a larger test split: the override is used.
    run(["task=test", f"ckpt_path={best}", "logger=csv", "data.n_test_queries=30"], tmp_path)
    rows = len((tmp_path / "predictions/test.txt").read_text().splitlines())
    assert rows > len((run_dir / "predictions/test.txt").read_text().splitlines())


def test_restore_applies_keys_and_deletions_and_tolerates_old_checkpoints(uninterrupted, caplog):
    best = torch.load(uninterrupted[0] / "checkpoints" / "best.ckpt", weights_only=True)
    overrides = ["task=test", "ckpt_path=x", "data.fold=1", "~data.num_workers"]
    cfg = compose_config(overrides, run_dir=ROOT)
    restored = restore_run(cfg, best, "x", overrides)
    assert restored.data.n_train_queries == 40 and "num_workers" not in restored.data
    assert restored.model.optimizer.lr == 0.01 and restored.data.fold == 1
    assert restore_run(cfg, {"state_dict": {}}, "old.ckpt", overrides) is cfg
    assert "old.ckpt carries no run config" in caplog.text


def test_data_normalized_otherwise_is_refused_unless_allowed(uninterrupted, tmp_path):
    best = uninterrupted[0] / "checkpoints" / "best.ckpt"
    overrides = ["task=test", f"ckpt_path={best}", "logger=csv", "data.normalization=none"]
    with pytest.raises(
        ValueError,
        match="normalized as zscore .*sha256 .*normalized as none.*allow_data_mismatch=true",
    ):
        run(overrides, tmp_path)
    assert 0 <= run([*overrides, "allow_data_mismatch=true"], tmp_path)["map"] <= 1


def test_data_with_another_feature_count_is_refused(uninterrupted, tmp_path):
    best = uninterrupted[0] / "checkpoints" / "best.ckpt"
    rng = np.random.default_rng(0)
    for name in ("train", "vali", "test"):
        write_letor(
            tmp_path / "five" / "Fold1" / f"{name}.txt",
            rng.normal(size=(6, 5)),
            [0, 1, 2, 0, 1, 0],
            [1, 1, 1, 2, 2, 2],
        )
    overrides = [
        "task=test",
        f"ckpt_path={best}",
        "data=letor",
        f"data.root={tmp_path / 'five'}",
        "allow_data_mismatch=true",
    ]
    with pytest.raises(ValueError, match="reads 46 features, the data has 5"):
        run(overrides, tmp_path / "run")


@requires_mq2008
def test_mq2008_fold1_test_from_the_checkpoint_alone_reproduces_the_run(tmp_path, monkeypatch):
    monkeypatch.setenv("LETOR_DIR", str(MQ2008.parent))
    fit = ["data=mq2008", "data.fold=1", "loss=listnet", "trainer.max_epochs=2", "logger=csv"]
    expected = run(fit, tmp_path / "fit")
    best = tmp_path / "fit" / "checkpoints" / "best.ckpt"
    monkeypatch.delenv("LETOR_DIR")  # the checkpoint names its set; the default folder has it
    assert run(["task=test", f"ckpt_path={best}"], tmp_path / "test") == expected
    record = torch.load(best, weights_only=True)["differank"]
    assert record["config"]["data"]["root"] == str(MQ2008) and record["data"]["n_features"] == 46


@pytest.mark.parametrize(
    "overrides, message",
    [(["task=test"], "ckpt_path"), (["task=serve", "ckpt_path=x.ckpt"], "task must be one of")],
)
def test_bad_tasks_fail_before_any_work(tmp_path, overrides, message):
    with pytest.raises(ValueError, match=message):
        run_config([*TINY, *overrides], tmp_path)


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_a_damaged_checkpoint_is_named_and_never_loaded_unsafely(uninterrupted, tmp_path, damage):
    good = (uninterrupted[0] / "checkpoints" / "best.ckpt").read_bytes()
    content = {"truncated": good[: len(good) // 2], "garbage": b"not a checkpoint" * 64}
    bad = tmp_path / "bad.ckpt"
    bad.write_bytes(content.get(damage, b""))
    with pytest.raises(OSError) as error:
        run(["task=test", f"ckpt_path={bad}"], tmp_path / "run")
    message = str(error.value)
    assert str(bad) in message and "truncated or corrupt" in message
    assert "weights_only=False" not in message and "Errno" not in message
