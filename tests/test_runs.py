"""``differank.compose`` and ``differank.run`` (rankers/run/runs.py): the config the command line
runs, resolved, and the run itself from Python; both leave the caller's Hydra, logging and
warnings as they found them, inside a ``@hydra.main`` app too."""

import io
import json
import logging
import os
import subprocess
import sys
import textwrap
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobRuntime
from omegaconf import OmegaConf, open_dict

import differank
from differank.rankers.checkpoints import load_checkpoint
from differank.rankers.run.runs import RunResult
from tests.conftest import ROOT, TINY_DATA, TINY_RUN

HYDRA_STATE = (GlobalHydra, HydraConfig, JobRuntime)
ONE_EPOCH = [*TINY_DATA, "trainer.max_epochs=1", "logger=csv", "quiet=true"]


def hydra_state():
    return {kind: Singleton._instances.get(kind) for kind in HYDRA_STATE}


def test_compose_resolves_every_interpolation_into_the_run_dir_without_the_hydra_node(tmp_path):
    cfg = differank.compose(["loss=listnet", "seed=3"], run_dir=tmp_path / "run")
    assert "hydra" not in cfg and cfg.seed == 3 and cfg.loss._target_.endswith("ListNetLoss")
    assert "${" not in OmegaConf.to_yaml(cfg)
    assert cfg.trainer.default_root_dir == str(tmp_path / "run")
    assert cfg.callbacks.model_checkpoint.dirpath == str(tmp_path / "run" / "checkpoints")
    assert OmegaConf.is_struct(cfg)  # as Hydra hands a config to its task: a typo raises
    assert not (tmp_path / "run").exists()  # composing writes nothing


def test_compose_leaves_a_callers_hydra_as_found_also_when_composing_fails(tmp_path):
    """The caller's own Hydra (initialized, its job's config current) keeps the very objects it
    had, its output folder and its config search path."""
    conf = tmp_path / "conf"
    conf.mkdir()
    (conf / "mine.yaml").write_text("name: mine\n")
    try:
        with initialize_config_dir(config_dir=str(conf), version_base="1.3", job_name="mine"):
            mine = compose("mine", return_hydra_config=True)
            with open_dict(mine):
                mine.hydra.runtime.output_dir = str(tmp_path / "mine")
            HydraConfig.instance().set_config(mine)
            before = hydra_state()
            differank.compose(["seed=1"], run_dir=tmp_path / "run")
            with pytest.raises(Exception, match="no_such_key"):
                differank.compose(["no_such_key=1"], run_dir=tmp_path / "run")
            assert hydra_state() == before  # the same objects, none replaced
            assert HydraConfig.get().runtime.output_dir == str(tmp_path / "mine")
            assert HydraConfig.get().job.name == "mine"
            assert compose("mine").name == "mine"  # its own search path still composes
        assert not GlobalHydra.instance().is_initialized()
    finally:
        Singleton._instances.pop(HydraConfig, None)


def test_compose_outside_any_hydra_leaves_none_behind(tmp_path):
    found = hydra_state()
    differank.compose([], run_dir=tmp_path)
    assert hydra_state() == found


def test_two_threads_compose_at_once(tmp_path):
    def composed(seed):
        return differank.compose([f"seed={seed}"], run_dir=tmp_path / str(seed))

    with ThreadPoolExecutor(2) as pool:
        configs = list(pool.map(composed, range(12)))
    assert [cfg.seed for cfg in configs] == list(range(12))
    roots = [cfg.trainer.default_root_dir for cfg in configs]
    assert roots == [str(tmp_path / str(seed)) for seed in range(12)]


def test_run_returns_what_the_run_wrote_and_claims_a_folder_as_the_command_line(
    tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    result = differank.run([*TINY_RUN, "quiet=true"])
    assert isinstance(result, RunResult) and result.monitor == "val/map"
    assert result.run_dir.parent.parent == tmp_path / "outputs"  # outputs/DATE/TIME
    written = json.loads((result.run_dir / "test_metrics.json").read_text())
    del written["conventions"]
    assert result.test_metrics == written
    best = load_checkpoint(result.run_dir / "checkpoints" / "best.ckpt")["differank"]
    assert result.best_validation == pytest.approx(best["validation"]["val/map"])
    assert "epoch 1/1  train/loss" in (result.run_dir / "train.log").read_text()
    config = (result.run_dir / ".hydra" / "config.yaml").read_text()  # unresolved, as Hydra's
    assert "max_epochs: 2" in config and "default_root_dir: ${hydra:runtime.output_dir}" in config
    assert OmegaConf.load(result.run_dir / ".hydra" / "overrides.yaml")[-1] == "quiet=true"


def test_a_failed_run_raises_its_error_and_leaves_no_claimed_folder(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "no-such-letor"
    with pytest.raises(FileNotFoundError, match=f"data.root {missing} does not exist"):
        differank.run(["data=letor", f"data.root={missing}"])
    assert list(tmp_path.iterdir()) == []


def logging_state():
    """Root's and Lightning's loggers: level, propagation, handlers and filters (by identity),
    and their handlers' filters."""
    state = {}
    for name in ("", "pytorch_lightning", "differank"):
        logger = logging.getLogger(name)
        state[name] = (
            logger.level,
            logger.propagate,
            [id(handler) for handler in logger.handlers],
            [id(f) for f in logger.filters],
            [[id(f) for f in handler.filters] for handler in logger.handlers],
        )
    return state


def test_a_run_reaches_the_callers_handlers_and_leaves_logging_and_warnings_as_found(tmp_path):
    import pytorch_lightning  # noqa: F401  (its import-time set-up is part of what was found)

    stream = io.StringIO()
    mine = logging.StreamHandler(stream)
    logging.getLogger().addHandler(mine)
    logging.getLogger("pytorch_lightning").addFilter(lambda record: True)
    try:
        before, filters = logging_state(), warnings.filters[:]
        differank.run(ONE_EPOCH, output_dir=tmp_path)
        assert logging_state() == before and warnings.filters == filters
    finally:
        logging.getLogger().removeHandler(mine)
        logging.getLogger("pytorch_lightning").filters.clear()
    shown = stream.getvalue()
    assert f"outputs: {tmp_path}" in shown  # the run's lines reached the caller's handler
    assert "epoch 0/0" not in shown  # quiet: no progress lines on it ...
    assert "epoch 0/0" in (tmp_path / "train.log").read_text()  # ... train.log keeps them


def test_without_handlers_of_its_own_the_caller_sees_the_run_on_the_terminal(tmp_path, capsys):
    root = logging.getLogger()
    found = root.handlers[:]
    root.handlers.clear()  # a script's logging: nothing set up (pytest's capture set aside)
    try:
        differank.run(ONE_EPOCH, output_dir=tmp_path)
        assert root.handlers == []
    finally:
        root.handlers[:] = found
    assert f"outputs: {tmp_path}" in capsys.readouterr().out


APP = """
import json, logging, sys
from pathlib import Path

import hydra
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

import differank


def state(cfg):
    loggers = {name: logging.getLogger(name) for name in ("", "pytorch_lightning")}
    return {
        "output_dir": HydraConfig.get().runtime.output_dir,
        "job": HydraConfig.get().job.name,
        "config": OmegaConf.to_yaml(cfg),
        "initialized": GlobalHydra.instance().is_initialized(),
        "loggers": {
            name: [logger.level, logger.propagate, [id(h) for h in logger.handlers],
                   [id(f) for f in logger.filters],
                   [[id(f) for f in h.filters] for h in logger.handlers]]
            for name, logger in loggers.items()
        },
    }


@hydra.main(version_base="1.3", config_path="conf", config_name="app")
def app(cfg):
    before = state(cfg)
    differank.compose(["seed=2"], run_dir=cfg.runs + "/composed")
    result = differank.run(list(cfg.overrides), output_dir=cfg.runs + "/fit")
    after = state(cfg)
    Path("states.json").write_text(json.dumps({"before": before, "after": after,
                                              "metrics": result.test_metrics}))


app()
"""


def test_a_hydra_app_keeps_its_output_dir_config_and_logging_after_a_run(tmp_path):
    (tmp_path / "conf").mkdir()
    app_config = {"runs": str(tmp_path / "runs"), "overrides": ONE_EPOCH, "lr": 0.5}
    (tmp_path / "conf" / "app.yaml").write_text(OmegaConf.to_yaml(app_config))
    (tmp_path / "app.py").write_text(textwrap.dedent(APP))
    result = subprocess.run(
        [sys.executable, "app.py", f"hydra.run.dir={tmp_path / 'app_out'}"],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    states = json.loads((tmp_path / "states.json").read_text())
    assert states["after"] == states["before"]
    assert states["before"]["output_dir"] == str(tmp_path / "app_out")
    assert states["before"]["job"] == "app" and "lr: 0.5" in states["before"]["config"]
    assert states["before"]["loggers"][""][2]  # Hydra's handlers of the app: the same ones
    assert (tmp_path / "app_out" / "app.log").is_file()  # the app's own log, still its own
    assert (tmp_path / "runs" / "fit" / "train.log").is_file() and states["metrics"]["map"] > 0
