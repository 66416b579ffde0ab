"""Tracking (conf/logger/, conf/callbacks/default.yaml): every logger gets the run's resolved
config as hyperparameters, ``val/loss`` and the learning rate; W&B runs offline without an
account and MLflow writes a local store; ``model.scheduler=warmup_cosine`` warms up, then decays."""

import math

import pytest
import torch
import yaml

from differank.rankers.training.module import warmup_cosine
from tests.conftest import TINY_DATA, run_config

# a tiny run that logs every step (the learning rate included)
TRACKED_RUN = [*TINY_DATA, "trainer.max_epochs=2", "trainer.log_every_n_steps=1", "quiet=true"]


def test_warmup_cosine_rises_linearly_then_decays_to_zero():
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=2.0)
    schedule = warmup_cosine(optimizer, total_steps=7, warmup_fraction=0.4)  # 3 warm-up steps
    rates = []
    for _ in range(8):
        rates.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        schedule.step()
    warm = [2.0 * (step + 1) / 4 for step in range(3)]
    cosine = [2.0 * 0.5 * (1 + math.cos(math.pi * t / 4)) for t in range(5)]
    assert rates == pytest.approx([*warm, *cosine, 0.0][:8])


def test_transformer_warms_up_and_others_keep_a_constant_rate(train_config):
    warm = "differank.rankers.training.module.warmup_cosine"
    assert train_config(["model=transformer"]).model.scheduler._target_ == warm
    assert train_config(["model=transformer", "model.scheduler=null"]).model.scheduler is None
    for model in ("linear", "mlp", "conerank"):
        assert train_config([f"model={model}"]).model.scheduler is None
        chosen = train_config([f"model={model}", "model/scheduler=warmup_cosine"])
        assert chosen.model.scheduler._target_ == warm
    with pytest.raises(ValueError, match="warmup_fraction"):
        warmup_cosine(torch.optim.SGD([torch.zeros(1, requires_grad=True)]), 10, 1.0)


def test_csv_and_tensorboard_get_hyperparameters_val_loss_and_the_learning_rate(tmp_path):
    run_dir = tmp_path / "run"
    overrides = [*TRACKED_RUN, "logger=default", "model/scheduler=warmup_cosine"]
    overrides.append("model.scheduler.warmup_fraction=0.5")  # 2 of the run's 4 steps
    run_config(overrides, run_dir)
    for logger in ("csv", "tensorboard"):
        hparams = yaml.safe_load(next((run_dir / logger).rglob("hparams.yaml")).read_text())
        assert hparams["model"]["scheduler"]["warmup_fraction"] == 0.5
        assert hparams["metrics"] == {"convention": "letor"}
    header, *rows = next((run_dir / "csv").rglob("metrics.csv")).read_text().splitlines()
    columns = header.split(",")
    assert {"val/loss", "val/map", "lr-Adam"} <= set(columns)
    rates = [row.split(",")[columns.index("lr-Adam")] for row in rows]
    rates = [float(rate) for rate in rates if rate]
    assert rates[0] < max(rates) and rates[-1] < max(rates)  # warm-up, then decay


@pytest.mark.slow
def test_wandb_offline_run_holds_config_metrics_and_learning_rate(tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb", reason="wandb is in the dev and track extras")
    for variable in ("WANDB_CONFIG_DIR", "WANDB_CACHE_DIR", "WANDB_DATA_DIR"):
        monkeypatch.setenv(variable, str(tmp_path / "wandb-home"))
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    run_dir = tmp_path / "run"
    run_config([*TRACKED_RUN, "logger=wandb"], run_dir)
    wandb.finish()  # the command line's exit does these two; in-process the test must
    wandb.teardown()  # waits for the service to write the run file
    (record,) = (run_dir / "wandb").glob("offline-run-*/run-*.wandb")
    content = record.read_bytes()  # protobuf records: names are stored as plain UTF-8
    for name in (b"val/map", b"val/loss", b"lr-Adam", b"allow_data_mismatch", b"convention"):
        assert name in content, name


@pytest.mark.slow
def test_mlflow_local_store_holds_params_metrics_and_learning_rate(tmp_path):
    pytest.importorskip("mlflow", reason="mlflow-skinny is in the dev and track extras")
    from mlflow.tracking import MlflowClient

    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    run_dir = tmp_path / "run"
    overrides = [*TRACKED_RUN, "logger=mlflow", f"logger.mlflow.tracking_uri={store}"]
    run_config(overrides, run_dir)
    client = MlflowClient(store)
    (run,) = client.search_runs([client.get_experiment_by_name("differank").experiment_id])
    assert {"val/loss", "val/map", "val/ndcg10", "lr-Adam", "test/map"} <= set(run.data.metrics)
    assert run.data.params["metrics/convention"] == "letor"
    assert run.data.params["seed"] == "0"
