"""The SLURM launcher for real: a single-node SLURM cluster on 127.0.0.1 (scripts/slurm_local.sh)
runs a two-job sweep; one job, signalled with USR1 mid-training, is requeued and resumes from its
last.ckpt to exactly the metrics of an uninterrupted run. Slow (about 4 minutes: SLURM holds a
requeued job for 2 minutes); needs root and apt-get (Debian) to install slurm-wlm and munge.
The CPU-partition launcher's composition is checked in the default suite."""

from __future__ import annotations

import csv
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

from differank.rankers.run.runs import compose_with_hydra
from tests.conftest import ROOT

needs_root_on_debian = pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0 or shutil.which("apt-get") is None,
    reason="starts a local SLURM cluster: needs root on Debian/Ubuntu (apt-get)",
)
RUN = [
    "data.n_train_queries=200",
    "data.n_val_queries=20",
    "data.n_test_queries=20",
    "trainer.max_epochs=30",
    "logger=csv",
    "ckpt_path=last",
]
SWEEP = [
    "hydra/launcher=slurm_cpu",
    "hydra.launcher.cpus_per_task=1",
    "hydra.launcher.mem_gb=2",
    "hydra.launcher.timeout_min=20",
    "seed=0,1",
]


@pytest.fixture(scope="module")
def slurm():
    script = ROOT / "scripts" / "slurm_local.sh"
    subprocess.run(["bash", str(script), "start"], check=True, timeout=900)
    yield
    subprocess.run(["bash", str(script), "stop"], check=False, timeout=60)


def wait_for(path, seconds):
    deadline = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear in {seconds} s"
        time.sleep(0.2)


def logged(run_dir, version=-1):
    """``{(epoch, key): value}`` of train/loss and val/map in one CSV logger version."""
    versions = sorted((run_dir / "csv").glob("version_*"), key=lambda p: int(p.name[8:]))
    with open(versions[version] / "metrics.csv") as handle:
        return {
            (row["epoch"], key): row[key]
            for row in csv.DictReader(handle)
            for key in ("train/loss", "val/map")
            if row.get(key)
        }


@pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None,
    reason="hydra-submitit-launcher (the optional 'cluster' extra) is not installed",
)
def test_cpu_partition_launcher_asks_for_one_task_and_no_gpu(tmp_path):
    launcher = compose_with_hydra(["hydra/launcher=slurm_cpu"], run_dir=tmp_path).hydra.launcher
    assert (launcher.gpus_per_node, launcher.tasks_per_node) == (0, 1)  # sbatch rejects 0 tasks


@pytest.mark.slow
@needs_root_on_debian
@pytest.mark.usefixtures("slurm")
def test_sweep_runs_on_slurm_and_a_signalled_job_resumes_from_last_ckpt(tmp_path):
    sweep_dir = tmp_path / "sweep"
    command = [sys.executable, "train.py", "-m", *RUN, *SWEEP, f"hydra.sweep.dir={sweep_dir}"]
    sweep = subprocess.Popen(
        command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        wait_for(sweep_dir / "0" / "checkpoints" / "last.ckpt", 300)
        job = next(p.name for p in (sweep_dir / ".submitit").iterdir() if p.name.endswith("_0"))
        subprocess.run(["scancel", "--signal=USR1", job], check=True, timeout=60)
        output, _ = sweep.communicate(timeout=900)
    finally:
        sweep.kill()
    assert sweep.returncode == 0, output[-3000:]

    with open(sweep_dir / "summary.csv") as handle:
        rows = list(csv.DictReader(handle))
    assert [(row["overrides"], row["status"]) for row in rows] == [
        ("seed=0", "ok"),
        ("seed=1", "ok"),
    ]

    log = "".join(path.read_text() for path in (sweep_dir / ".submitit" / job).glob("*_log.out"))
    assert "Requeued SLURM job" in log
    last = sweep_dir / "0" / "checkpoints" / "last.ckpt"  # rich wraps long lines: drop spaces
    assert f"Restoredallstatesfromthecheckpointat{last}" in "".join(log.split())

    reference_dir = tmp_path / "uninterrupted"
    subprocess.run(
        [sys.executable, "train.py", *RUN, "seed=0", f"hydra.run.dir={reference_dir}"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        timeout=600,
    )
    reference, resumed = logged(reference_dir, 0), logged(sweep_dir / "0")
    assert min(int(epoch) for epoch, _ in resumed) >= 1  # continued, not restarted from scratch
    assert resumed.items() <= reference.items()  # the same epochs, to the last digit
    metrics = json.loads((sweep_dir / "0" / "test_metrics.json").read_text())
    assert metrics == json.loads((reference_dir / "test_metrics.json").read_text())
