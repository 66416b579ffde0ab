"""Run folders never collide (conf/hydra/default.yaml's ``unique_dir``): a run claims its
folder by an atomic mkdir, and a second run started in the same second gets ``TIME_1``."""

import subprocess
import sys

import pytest
import yaml
from omegaconf import OmegaConf

from differank.rankers.run.folders import claim_folder
from tests.conftest import ROOT, TINY_DATA


def test_a_taken_folder_gives_the_next_numbered_one(tmp_path):
    base = tmp_path / "outputs" / "2026-01-01" / "12-00-00"
    claimed = [claim_folder(str(base)) for _ in range(3)]
    assert claimed == [str(base), f"{base}_1", f"{base}_2"]
    assert all((tmp_path / "outputs" / "2026-01-01" / name).is_dir() for name in claimed)


def test_the_resolver_claims_once_per_config(tmp_path):
    """train.py registers it cached: every read of hydra.run.dir (and every job of a sweep,
    which gets the sweep's resolver cache) sees the one folder claimed."""
    import train  # noqa: F401  (registers the resolver)

    config = OmegaConf.create({"dir": "${unique_dir:" + str(tmp_path / "run") + "}"})
    assert config.dir == config.dir == str(tmp_path / "run")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]


def test_hydra_run_and_sweep_folders_are_claimed():
    hydra = yaml.safe_load((ROOT / "conf" / "hydra" / "default.yaml").read_text())  # unresolved
    assert hydra["run"]["dir"].startswith("${unique_dir:outputs/")
    assert hydra["sweep"]["dir"].startswith("${unique_dir:multirun/")


@pytest.mark.slow
def test_two_runs_started_together_write_two_folders_each_with_its_checkpoint(tmp_path):
    """Both runs ask for the same folder (as two runs started in one second do)."""
    base = tmp_path / "outputs" / "same-second"
    command = [
        sys.executable,
        "train.py",
        "hydra.run.dir=${unique_dir:" + str(base) + "}",
        *TINY_DATA,
        "trainer.max_epochs=1",
        "logger=csv",
        "quiet=true",
    ]
    runs = [
        subprocess.Popen(
            [*command, f"seed={seed}"],
            cwd=ROOT,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for seed in (0, 1)
    ]
    for run in runs:
        assert run.wait(timeout=300) == 0, run.stderr.read()[-3000:]
    folders = sorted(p for p in base.parent.iterdir())
    assert [p.name for p in folders] == ["same-second", "same-second_1"]
    seeds = set()
    for folder in folders:
        assert (folder / "checkpoints" / "best.ckpt").is_file()
        seeds.add(OmegaConf.load(folder / ".hydra" / "config.yaml").seed)
    assert seeds == {0, 1}  # each folder holds its own run
