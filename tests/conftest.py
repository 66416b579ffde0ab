"""Shared fixtures: composing the Hydra config tree the way the ``differank`` command sees it,
and running its task in this process."""

import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from differank.rankers.run.runs import compose_config

ROOT = Path(__file__).resolve().parents[1]
# benchmarks/ on the path as `python benchmarks/<name>.py` has it: the scripts import each other
# and benchmarks/measure.py by bare name (no installed module shares those names)
sys.path.append(str(ROOT / "benchmarks"))
MQ2008 = ROOT.parent / "shared" / "data" / "MQ2008"


# the tiny synthetic set most end-to-end tests train on (Hydra overrides)
TINY_DATA = ["data.n_train_queries=40", "data.n_val_queries=20", "data.n_test_queries=20"]
TINY_RUN = [*TINY_DATA, "trainer.max_epochs=2", "logger=csv"]
# every loss config, each with the model it pairs with (ConeRank's loss needs its basis)
LOSS_RUNS = {
    path.stem: [f"model={'conerank' if path.stem == 'cone' else 'linear'}", f"loss={path.stem}"]
    for path in sorted((ROOT / "conf" / "loss").glob("*.yaml"))
    if path.stem
    != "distill"  # it needs a teacher file: tests/rankers/run/test_teacher_scores.py trains it
}


@pytest.fixture(scope="session", autouse=True)
def private_data_cache(tmp_path_factory):
    """Parsed-data caches of the test session go to a temporary folder, never to ~/.cache."""
    patch = pytest.MonkeyPatch()
    patch.setenv("DIFFERANK_CACHE", str(tmp_path_factory.mktemp("differank-cache")))
    yield
    patch.undo()


@pytest.fixture(scope="session", autouse=True)
def private_tracking_store(tmp_path_factory):
    """logger=mlflow's store (conf/logger/mlflow.yaml) goes to a temporary folder, never to
    ./mlflow.db in the clone; a file store, which opens in milliseconds where a new SQLite
    store takes seconds (tests/test_tracking.py writes a SQLite store, as the default does)."""
    patch = pytest.MonkeyPatch()
    patch.setenv("MLFLOW_TRACKING_URI", f"file:{tmp_path_factory.mktemp('mlflow')}")
    patch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
    yield
    patch.undo()


@pytest.fixture
def train_config(tmp_path):
    """Compose a run config (resolved, no hydra node) whose run directory is a fresh temporary
    folder."""
    return lambda overrides: compose_config(overrides, run_dir=tmp_path / "run")


def run_config(overrides: Sequence[str], run_dir: str | Path) -> float:
    """What ``differank OVERRIDES hydra.run.dir=RUN_DIR`` runs, in this process: the composed
    config's task into ``run_dir`` (the best validation value of a fit, else NaN), without the
    command line's logging set-up, so pytest's capture sees every line."""
    from differank.rankers.run.tasks import run_task  # torch and Lightning load only now

    cfg = compose_config(overrides, run_dir=run_dir)
    return run_task(cfg, Path(run_dir), overrides=overrides)


requires_mq2008 = pytest.mark.skipif(
    not MQ2008.is_dir(), reason=f"MQ2008 not found at {MQ2008} (the shared data folder)"
)


def run_without_sync(step):
    """Run ``step`` once to warm up (lazy CUDA init, constant tables copied to the device
    once), then again under sync debug "error", where any host-device synchronisation raises."""
    import torch

    step()
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        step()
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()
