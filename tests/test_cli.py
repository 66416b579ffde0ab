"""The ``differank`` command: a wheel built from the repository ships the configs, and its
console script fits, predicts and exports from a folder outside the clone; ``python -m
differank`` is the same command; a first word naming a task is short for ``task=TASK``."""

import importlib.util
import os
import shutil
import subprocess
import sys
import zipfile

import pytest

from differank.cli import hydra_arguments, main
from differank.rankers.run.runs import TASKS
from tests.conftest import ROOT, TINY_DATA

ONE_EPOCH = [*TINY_DATA, "trainer.max_epochs=1", "logger=csv", "quiet=true"]
# What a wheel is built from (pyproject.toml, setup.py); src/differank links to the folders
PACKAGED_FILES = ("pyproject.toml", "setup.py", "README.md", "LICENSE")
PACKAGED_FOLDERS = ("src", "conf", "losses", "rankers", "datamodules")
BUILT = shutil.ignore_patterns("__pycache__", "*.so", "*.egg-info")  # the wheel compiles its own


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """``(wheel, folder, environment)``: a wheel built from the repository, installed (not
    editable) with its console script into a folder of its own, which the environment puts
    first on the path; the dependencies are this environment's."""
    if importlib.util.find_spec("setuptools") is None:
        pytest.skip("building the wheel offline needs setuptools in this environment")
    source = tmp_path_factory.mktemp("source")  # pip builds in the tree: a copy, not the clone
    for name in PACKAGED_FILES:
        shutil.copy2(ROOT / name, source / name)
    for name in PACKAGED_FOLDERS:
        shutil.copytree(ROOT / name, source / name, symlinks=True, ignore=BUILT)
    wheels = tmp_path_factory.mktemp("wheels")
    build = [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation"]
    subprocess.run([*build, "-w", wheels, source], check=True, capture_output=True, timeout=600)
    wheel = next(wheels.glob("differank-*.whl"))
    folder = tmp_path_factory.mktemp("site")
    install = [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target"]
    subprocess.run([*install, folder, wheel], check=True, capture_output=True, timeout=600)
    return wheel, folder, {**os.environ, "PYTHONPATH": str(folder)}


def command(arguments, cwd, env=None):
    result = subprocess.run(
        arguments, cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


def test_the_wheel_holds_every_config(installed):
    wheel, _, _ = installed
    shipped = set(zipfile.ZipFile(wheel).namelist())
    configs = {
        f"differank/conf/{p.relative_to(ROOT / 'conf')}" for p in ROOT.glob("conf/**/*.yaml")
    }
    assert "differank/conf/train.yaml" in configs and configs <= shipped


@pytest.mark.slow  # 25 s; CI's wheel step (.ci/wheel_user.sh) runs the same from a real install
def test_the_installed_command_fits_predicts_and_exports_outside_the_clone(installed, tmp_path):
    _, folder, env = installed
    differank = str(folder / "bin" / "differank")
    imported = command(
        [sys.executable, "-c", "import differank; print(differank.__file__)"], tmp_path, env
    )
    assert imported.strip() == str(folder / "differank" / "__init__.py")  # not the clone's
    command([differank, *ONE_EPOCH, "hydra.run.dir=fit"], tmp_path, env)
    fit = tmp_path / "fit"
    assert (fit / "test_metrics.json").is_file() and (fit / "train.log").is_file()
    assert str(folder / "differank" / "conf") in (fit / ".hydra" / "hydra.yaml").read_text()
    best = fit / "checkpoints" / "best.ckpt"
    test_file = (fit / "predictions" / "test.sources").read_text().splitlines()[0]
    predict = ["predict", f"ckpt_path={best}", f"files=[{test_file}]", "hydra.run.dir=predict"]
    command([differank, *predict], tmp_path, env)
    scores = (tmp_path / "predict" / "predictions" / "test.txt").read_text().splitlines()
    assert len(scores) == len(open(test_file).read().splitlines())
    export = ["export", "export.format=solr", f"ckpt_path={best}", "hydra.run.dir=export"]
    command([differank, *export], tmp_path, env)
    assert (tmp_path / "export" / "export" / "solr" / "model.json").is_file()


def test_the_installed_command_helps(installed, tmp_path):
    _, folder, env = installed
    shown = command([str(folder / "bin" / "differank"), "--help"], tmp_path, env)
    assert "differank [TASK] [KEY=VALUE" in shown and "model: " in shown and "loss: " in shown


def test_python_dash_m_differank_fits_one_epoch_from_another_folder(tmp_path):
    command([sys.executable, "-m", "differank", *ONE_EPOCH, "hydra.run.dir=run"], tmp_path)
    assert (tmp_path / "run" / "test_metrics.json").is_file()
    assert (tmp_path / "run" / "train.log").is_file()  # named as by python train.py


def test_python_dash_m_differank_helps_with_the_task_a_first_word_names(tmp_path):
    shown = command([sys.executable, "-m", "differank", "predict", "--help"], tmp_path)
    assert "Tasks (differank TASK ..., or task=TASK)" in shown
    assert "\ntask: predict\n" in shown  # the composed config below the help


def test_a_first_word_naming_a_task_is_short_for_task_equals():
    assert hydra_arguments(["predict", "ckpt_path=x"]) == ["task=predict", "ckpt_path=x"]
    for arguments in ([], ["loss=listnet"], ["-m", "seed=0,1"], ["~callbacks.progress_bar"]):
        assert hydra_arguments(arguments) == arguments
    assert hydra_arguments(["--cfg", "job"]) == ["--cfg", "job"]  # a flag's value is its own


def test_an_unknown_first_word_is_refused_with_the_tasks(capsys):
    with pytest.raises(SystemExit) as exit:
        main(["fitt", "loss=listnet"])
    assert exit.value.code == 2
    error = capsys.readouterr().err
    assert "'fitt' is neither a task (fit, test, predict, export, simulate, tune)" in error


def test_the_command_line_knows_the_run_layers_tasks():
    from differank.rankers.run.tasks import TASKS as RUN_TASKS

    assert TASKS == RUN_TASKS
