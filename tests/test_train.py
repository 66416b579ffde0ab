"""End to end: ``python train.py`` writes what DESIGN "Runs write" promises, and the prediction
file scored by ``python -m rankers.evaluate`` reproduces ``test_metrics.json`` exactly."""

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT, requires_mq2008


@pytest.fixture(scope="module")
def default_run(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("default-run")
    command = [sys.executable, "train.py", f"hydra.run.dir={run_dir}", "trainer.max_epochs=5"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return run_dir, result.stdout


def test_run_writes_checkpoints_logs_predictions_and_metrics(default_run):
    run_dir, stdout = default_run
    for name in [
        "checkpoints/best.ckpt",
        "checkpoints/last.ckpt",
        "predictions/test.txt",
        "test_metrics.json",
        ".hydra/config.yaml",
    ]:
        assert (run_dir / name).is_file(), name
    assert list((run_dir / "csv").rglob("metrics.csv")) and list(
        (run_dir / "tensorboard").rglob("events.*")
    )
    metrics = json.loads((run_dir / "test_metrics.json").read_text())
    assert set(metrics) == {
        "map",
        "mean_ndcg",
        *(f"{m}@{k}" for m in ("ndcg", "p") for k in (1, 3, 5, 10)),
    }
    assert f"{metrics['map']:.4f}" in stdout  # the printed table
    assert metrics["map"] > 0.5  # the synthetic set's planted signal is learnable (random ≈ 0.4)


def test_prediction_file_is_aligned_and_full_precision(default_run):
    run_dir, _ = default_run
    sources = (run_dir / "predictions" / "test.sources").read_text().splitlines()
    rows = sum(len(open(path).read().splitlines()) for path in sources)
    lines = (run_dir / "predictions" / "test.txt").read_text().splitlines()
    assert len(lines) == rows
    assert all(repr(float(line)) == repr(float(f"{float(line):.17g}")) for line in lines)


def test_evaluate_cli_reproduces_test_metrics_exactly(default_run, tmp_path):
    run_dir, _ = default_run
    sources = (run_dir / "predictions" / "test.sources").read_text().splitlines()
    cli_json = tmp_path / "cli.json"
    command = [
        sys.executable,
        "-m",
        "rankers.evaluate",
        *sources,
        str(run_dir / "predictions" / "test.txt"),
        "--json",
        str(cli_json),
    ]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True)
    assert json.loads(cli_json.read_text()) == json.loads(
        (run_dir / "test_metrics.json").read_text()
    )


def test_logged_test_metrics_agree_with_the_prediction_file(default_run):
    run_dir, _ = default_run
    written = json.loads((run_dir / "test_metrics.json").read_text())
    import csv

    rows = list(csv.DictReader(next((run_dir / "csv").rglob("metrics.csv")).open()))
    logged = next(row for row in rows if row.get("test/map"))
    for key, value in written.items():
        assert float(logged[f"test/{key}"]) == pytest.approx(value, abs=1e-6)


@requires_mq2008
@pytest.mark.slow
@pytest.mark.xfail(
    reason="issue 2's target; measured Fold1 test MAP 0.4509 (5-fold mean 0.4747), see README",
    strict=False,
)
def test_ranknet_reaches_the_letor_baseline_on_mq2008_fold1(tmp_path):
    command = [
        sys.executable,
        "train.py",
        "data=mq2008",
        "data.fold=1",
        "loss=ranknet",
        f"hydra.run.dir={tmp_path}",
    ]
    subprocess.run(command, cwd=ROOT, check=True, capture_output=True, timeout=900)
    assert json.loads((tmp_path / "test_metrics.json").read_text())["map"] >= 0.46
