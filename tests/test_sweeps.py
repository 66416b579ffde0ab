"""Sweeps: Hydra multirun gives one folder per job and a summary table; the sweep, search-space
and launcher configs compose into runnable jobs; the Optuna sweeper and the submitit local
launcher run tiny sweeps end to end."""

import csv
import importlib.util
import json
import subprocess
import sys

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.utils import instantiate
from omegaconf import OmegaConf

from differank.rankers.run.runs import compose_with_hydra
from differank.rankers.run.sweep_summary import summarize
from tests.conftest import ROOT, TINY_RUN

CONF = ROOT / "conf"
TINY = TINY_RUN
needs_optuna = pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None,
    reason="hydra-optuna-sweeper (the optional 'cluster' extra) is not installed",
)
needs_submitit = pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_submitit_launcher") is None,
    reason="hydra-submitit-launcher (the optional 'cluster' extra) is not installed",
)


def multirun(sweep_dir, *overrides):
    command = [sys.executable, "train.py", "-m", *TINY, *overrides, f"hydra.sweep.dir={sweep_dir}"]
    result = subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    with open(sweep_dir / "summary.csv") as handle:
        return list(csv.DictReader(handle)), result.stdout


@pytest.mark.slow  # a real Hydra multirun: four training subprocesses
def test_multirun_grid_writes_one_folder_per_job_and_a_summary(tmp_path):
    rows, stdout = multirun(tmp_path, "loss=ranknet,listnet", "seed=0,1")
    assert [row["overrides"] for row in rows] == [
        "loss=ranknet seed=0",
        "loss=ranknet seed=1",
        "loss=listnet seed=0",
        "loss=listnet seed=1",
    ]
    for job, row in enumerate(rows):
        metrics = json.loads((tmp_path / str(job) / "test_metrics.json").read_text())
        assert float(row["map"]) == metrics["map"] and row["status"] == "ok"
        assert float(row["seconds"]) > 0 and 0 < float(row["value"]) <= 1
    assert "sweep summary" in stdout
    markdown = (tmp_path / "summary.md").read_text()
    assert "trainer.max_epochs=2" in markdown.splitlines()[0]  # shared overrides, said once


def sweep_jobs(name):
    """Each job's overrides of ``conf/sweep/<name>.yaml`` (its grid, expanded)."""
    params = OmegaConf.load(CONF / "sweep" / f"{name}.yaml").hydra.sweeper.params
    grid = [[]]
    for key, values in params.items():
        parsed = OverridesParser.create().parse_overrides([f"{key}={values}"])[0]
        values = list(parsed.sweep_string_iterator())
        grid = [job + [f"{key}={value}"] for job in grid for value in values]
    return grid


@pytest.mark.parametrize("name", sorted(path.stem for path in (CONF / "sweep").glob("*.yaml")))
def test_every_sweep_job_composes_and_builds_its_model_and_loss(train_config, name):
    jobs = sweep_jobs(name)
    assert len(jobs) >= 3
    for job in jobs:
        cfg = train_config([f"+sweep={name}", *job])
        module = instantiate(cfg.model, loss=instantiate(cfg.loss), n_features=46)
        assert module is not None  # an unpaired model/loss raises here, naming the fix


def test_objectives_sweep_runs_each_objective_at_its_validated_experiment(train_config):
    """+sweep=objectives sweeps the validated experiments (the selection protocol's; each
    names its model, loss and optimizer): the cone job pairs the cone loss with ConeRank, no
    lookup by model and loss."""
    jobs = sweep_jobs("objectives")
    assert {job[0] for job in jobs} == {
        f"experiment=protocol/{name}"
        for name in ("cone_conerank", "domination_linear", "convex_linear", "hinge_linear")
    }
    cfg = train_config(["+sweep=objectives", "experiment=protocol/cone_conerank"])
    assert cfg.model.ranker._target_ == "differank.rankers.scorers.conerank.ConeRank"
    assert cfg.loss._target_ == "differank.losses.cone.ConeLoss"


@needs_optuna
@pytest.mark.parametrize("name", sorted(p.stem for p in (CONF / "hparams_search").glob("*.yaml")))
def test_every_search_space_composes_and_names_real_keys(name, tmp_path):
    cfg = compose_with_hydra([f"+hparams_search={name}"], run_dir=tmp_path)  # the sweeper
    sweeper = cfg.hydra.sweeper
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.direction == "maximize"
    for key in sweeper.params:
        assert OmegaConf.select(cfg, key, default="absent") != "absent", key
    instantiate(cfg.model, loss=instantiate(cfg.loss), n_features=46)


@pytest.mark.slow  # 13 s: keeps the default suite near 3 minutes
@needs_optuna
def test_optuna_sweep_maximises_the_returned_validation_metric(tmp_path):
    rows, _ = multirun(tmp_path, "+hparams_search=ranknet", "hydra.sweeper.n_trials=2")
    assert len(rows) == 2 and all("model.optimizer.lr=" in row["overrides"] for row in rows)
    results = OmegaConf.load(tmp_path / "optimization_results.yaml")
    assert results.best_value == pytest.approx(max(float(row["value"]) for row in rows))


@pytest.mark.slow  # 21 s: keeps the default suite near 3 minutes
@needs_submitit
def test_submitit_local_launcher_runs_the_jobs(tmp_path):
    rows, _ = multirun(tmp_path, "hydra/launcher=submitit_local", "seed=3")
    assert len(rows) == 1 and rows[0]["status"] == "ok"
    assert (tmp_path / "0" / "test_metrics.json").is_file()
    assert list((tmp_path / ".submitit").rglob("*_log.out"))  # ran as a submitit job


@needs_submitit
def test_slurm_launcher_is_set_for_gpu_nodes_and_overridable(tmp_path):
    cfg = compose_with_hydra(
        [
            "hydra/launcher=slurm_gpu",
            "hydra.launcher.gpus_per_node=4",
            "hydra.launcher.partition=gpu",
            "hydra.launcher.timeout_min=30",
        ],
        run_dir=tmp_path,
    )
    launcher = cfg.hydra.launcher
    assert launcher._target_.endswith("SlurmLauncher")
    assert (launcher.gpus_per_node, launcher.tasks_per_node) == (4, 4)  # one task per GPU
    assert (launcher.partition, launcher.timeout_min) == ("gpu", 30)


def test_summary_keeps_what_differs_and_merges_metrics(tmp_path):
    for job, seed in enumerate([0, 1]):
        (tmp_path / str(job)).mkdir()
        record = {
            "job": job,
            "overrides": [f"seed={seed}", "loss=x"],
            "status": "ok",
            "value": 0.5,
            "seconds": 1.0,
        }
        (tmp_path / str(job) / "job.json").write_text(json.dumps(record))
    (tmp_path / "1" / "test_metrics.json").write_text(json.dumps({"map": 0.25}))
    rows, common = summarize(tmp_path)
    assert common == ["loss=x"]
    assert [(row["overrides"], row.get("map")) for row in rows] == [
        ("seed=0", None),
        ("seed=1", 0.25),
    ]
    assert list(rows[1])[-1] == "seconds"
