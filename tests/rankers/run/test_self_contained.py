"""A trained model is self-contained: from its checkpoint alone, with no training data anywhere,
``task=export``, ``task=predict|test files=[...]``, :func:`differank.load_ranker` and
``RankingModule.load_from_checkpoint`` score raw LETOR rows exactly as the run did; an old
checkpoint without the serving record says what it lacks."""

import json
import shutil
import subprocess
import sys

import numpy as np
import pytest
import torch

import differank
from differank.datamodules.reader import read_letor_file
from differank.datamodules.synthetic import SyntheticLetorDataModule
from differank.rankers.metrics.evaluate import evaluate_files
from differank.rankers.training.module import RankingModule
from tests.conftest import run_config

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")
SIZES = dict(n_train_queries=40, n_val_queries=20, n_test_queries=20)


def scores_of(folder):
    lines = (folder / "predictions" / "test.txt").read_text().split()
    return torch.tensor([float(line) for line in lines], dtype=torch.float64)


@pytest.fixture(scope="module")
def alone(tmp_path_factory):
    """A run trained on a LETOR folder that is then deleted; its best checkpoint copied to a
    fresh folder, and the test file kept elsewhere as a standalone file."""
    base = tmp_path_factory.mktemp("self-contained")
    data = base / "data"
    source = SyntheticLetorDataModule(**SIZES)
    shutil.copytree(source.split_files("train")[0].parent, data / "Fold1")
    run = base / "run"
    overrides = [
        "data=letor",
        f"data.root={data}",
        "data.transform=log1p",
        "trainer.max_epochs=2",
        "logger=csv",
    ]
    run_config(overrides, run)
    standalone = base / "standalone.txt"
    shutil.copy(data / "Fold1" / "test.txt", standalone)
    shutil.rmtree(data)
    fresh = base / "fresh"
    fresh.mkdir()
    shutil.copy(run / "checkpoints" / "best.ckpt", fresh / "best.ckpt")
    return run, fresh / "best.ckpt", standalone


def test_predict_and_test_score_a_standalone_file_from_the_checkpoint_alone(alone, tmp_path):
    run, checkpoint, standalone = alone
    for task in ("predict", "test"):
        out = tmp_path / task
        overrides = [f"task={task}", f"ckpt_path={checkpoint}", f"files=[{standalone}]"]
        run_config([*overrides, "logger=csv"], out)
        torch.testing.assert_close(scores_of(out), scores_of(run), rtol=0, atol=1e-6)
        sources = (out / "predictions" / "test.sources").read_text().split()
        assert sources == [str(standalone)] and (out / "predictions" / "test.run").is_file()
    assert not (tmp_path / "predict" / "test_metrics.json").exists()
    metrics = json.loads((tmp_path / "test" / "test_metrics.json").read_text())
    original = json.loads((run / "test_metrics.json").read_text())
    for name, values in original.pop("conventions").items():
        assert metrics["conventions"][name] == pytest.approx(values, abs=1e-9), name
    metrics.pop("conventions")
    assert metrics == pytest.approx(original, abs=1e-9)
    expected = evaluate_files([standalone], tmp_path / "test" / "predictions" / "test.txt")
    assert metrics == pytest.approx(expected)
    qrels = (tmp_path / "test" / "predictions" / "test.qrels").read_text().splitlines()
    assert len(qrels) == len(scores_of(run)) and len(qrels[0].split()) == 4


def test_load_ranker_scores_raw_rows_like_the_run(alone):
    run, checkpoint, standalone = alone
    ranker = differank.load_ranker(checkpoint)
    assert not ranker.training and isinstance(ranker, torch.nn.Module)
    rows = read_letor_file(standalone)
    features = torch.from_numpy(np.array(rows.features))[None]  # one list of every row
    scores = ranker(features, torch.ones(features.shape[:2], dtype=torch.bool))[0].double()
    torch.testing.assert_close(scores, scores_of(run), rtol=0, atol=1e-6)


def test_export_needs_no_data_and_scores_like_the_run(alone, tmp_path):
    run, checkpoint, standalone = alone
    run_config(["task=export", f"ckpt_path={checkpoint}"], tmp_path)
    scripted = torch.jit.load(str(tmp_path / "export" / "scorer.pt"))
    features = torch.from_numpy(np.array(read_letor_file(standalone).features))[None]
    torch.testing.assert_close(scripted(features)[0].double(), scores_of(run), rtol=0, atol=1e-6)


def test_lightning_load_from_checkpoint_rebuilds_the_module(alone):
    run, checkpoint, _ = alone
    module = RankingModule.load_from_checkpoint(checkpoint)
    assert isinstance(module, RankingModule) and not module.training
    saved = torch.load(checkpoint, weights_only=True)["state_dict"]
    for key, value in module.state_dict().items():
        torch.testing.assert_close(value, saved[key])


def test_the_fold_layout_is_not_needed_but_its_absence_names_files(alone, tmp_path):
    _, checkpoint, _ = alone
    with pytest.raises(FileNotFoundError, match=r"files=\[a.txt"):
        run_config(["task=test", f"ckpt_path={checkpoint}"], tmp_path)


def test_an_old_checkpoint_says_what_it_lacks(alone, tmp_path):
    _, checkpoint, standalone = alone
    old = torch.load(checkpoint, weights_only=True)
    del old["differank"]["serving"]
    torch.save(old, tmp_path / "old.ckpt")
    message = "lacks the serving record .feature count, feature transform and normalization"
    with pytest.raises(ValueError, match=message):
        differank.load_ranker(tmp_path / "old.ckpt")
    overrides = ["task=predict", f"ckpt_path={tmp_path / 'old.ckpt'}", f"files=[{standalone}]"]
    with pytest.raises(ValueError, match=message):
        run_config(overrides, tmp_path / "run")


def test_a_feature_beyond_the_models_is_refused(alone, tmp_path):
    _, checkpoint, _ = alone
    wide = tmp_path / "wide.txt"
    wide.write_text("1 qid:1 1:0.5 47:2.0\n0 qid:1 1:0.1\n")
    overrides = ["task=predict", f"ckpt_path={checkpoint}", f"files=[{wide}]"]
    with pytest.raises(ValueError, match="wide.txt: feature 47 is beyond the 46 features"):
        run_config(overrides, tmp_path / "run")


# What a command that trains nothing loads (issue #40): scoring files with a checkpoint and
# exporting it cost what their work costs, so neither loads Lightning or torchmetrics (nor,
# for export, the compiler: the ONNX exporter is torch's TorchScript-based one).
TRAINING_ONLY = ("pytorch_lightning", "lightning_fabric", "torchmetrics")


def imported(overrides, run_dir) -> set[str]:
    """The top-level packages ``differank OVERRIDES`` imports (``python -X importtime -m
    differank``), run from ``run_dir``'s parent."""
    command = [sys.executable, "-X", "importtime", "-m", "differank", f"hydra.run.dir={run_dir}"]
    command += overrides
    cwd = run_dir.parent
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.startswith("import time:")]
    return {line.rsplit("|", 1)[1].strip().split(".")[0] for line in lines}


def test_predict_on_files_loads_no_lightning(alone, tmp_path):
    _, checkpoint, standalone = alone
    overrides = ["task=predict", f"ckpt_path={checkpoint}", f"files=[{standalone}]"]
    packages = imported(overrides, tmp_path / "run")
    assert "torch" in packages and not packages & set(TRAINING_ONLY), packages
    assert (tmp_path / "run" / "predictions" / "test.txt").is_file()


def test_export_loads_no_lightning_and_no_compiler(alone, tmp_path):
    pytest.importorskip("onnx", reason="onnx is the optional export extra")
    _, checkpoint, _ = alone
    overrides = ["task=export", "export.format=onnx", f"ckpt_path={checkpoint}"]
    packages = imported(overrides, tmp_path / "run")
    assert not packages & {*TRAINING_ONLY, "onnxscript"}, packages
    assert (tmp_path / "run" / "export" / "scorer.onnx").is_file()
