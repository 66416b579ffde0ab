"""Every option of every config group composes and instantiates; every model/loss pair either
builds or fails with the compatibility message; every experiment runs with fast_dev_run; a loss
brings its validated setting; data resolves against $LETOR_DIR, else the project."""

from pathlib import Path

import pytest
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from tests.conftest import MQ2008, ROOT

CONF = ROOT / "conf"


def options(group: str) -> list[str]:
    return sorted(path.stem for path in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize("loss", options("loss"))
def test_every_loss_instantiates(train_config, loss):
    cfg = train_config([f"loss={loss}"])
    assert isinstance(instantiate(cfg.loss), torch.nn.Module)


@pytest.mark.parametrize("model", options("model"))
def test_every_model_pairs_with_some_loss(train_config, model):
    built = []
    for loss in options("loss"):
        cfg = train_config([f"model={model}", f"loss={loss}"])
        try:
            module = instantiate(cfg.model, loss=instantiate(cfg.loss), n_features=46)
        except (ValueError, InstantiationException) as error:  # only an incompatible pair, named
            assert "pair with" in str(error), error
            continue
        scores = module(torch.randn(2, 5, 46))
        assert scores.shape == (2, 5)
        built.append(loss)
    assert built, f"model={model} pairs with no loss"


@pytest.mark.parametrize("group", ["trainer", "callbacks", "logger"])
def test_every_runtime_option_instantiates(train_config, group):
    for option in options(group):
        node = train_config([f"{group}={option}"])[group]
        if "_target_" in node:
            instantiate(node, **({"logger": False} if group == "trainer" else {}))
        else:
            for child in node.values():
                instantiate(child)


@pytest.mark.parametrize("data", options("data"))
def test_every_data_option_composes(train_config, data):
    overrides = [f"data={data}"] + (["data.root=/nonexistent"] if data == "letor" else [])
    cfg = train_config(overrides)
    if data == "mq2008" and not MQ2008.is_dir():
        pytest.skip(f"MQ2008 not found at {MQ2008}")
    if data == "letor":
        with pytest.raises((FileNotFoundError, ValueError), match="nonexistent"):
            _ = instantiate(cfg.data).n_features
        return
    assert instantiate(cfg.data).n_features == 46


def experiment_needs_mq2008(name: str) -> bool:
    return "mq2008" in (CONF / "experiment" / f"{name}.yaml").read_text()


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_runs_fast_dev_run(train_config, experiment, tmp_path):
    if experiment_needs_mq2008(experiment) and not MQ2008.is_dir():
        pytest.skip(f"MQ2008 not found at {MQ2008}")
    from train import train

    cfg = train_config(
        [f"experiment={experiment}", "trainer.fast_dev_run=true", "logger=csv", "callbacks=none"]
    )
    value = train(cfg, Path(cfg.hydra.runtime.output_dir))
    assert 0.0 <= value <= 1.0


def test_a_loss_brings_its_validated_setting_to_the_linear_model(train_config):
    def model(overrides):
        return OmegaConf.to_container(train_config(overrides).model)

    # loss=X alone runs what experiment=<X's validated row> runs (README's commands)
    assert model(["loss=hinge"]) == model(["experiment=hinge_k10"])
    assert model(["loss=hinge"])["optimizer"] | {"_partial_": True} == {
        "_target_": "torch.optim.Adam",
        "_partial_": True,
        "lr": 0.001,
        "weight_decay": 0.01,
    }
    # the domination default keeps the README's measured setting (lr 0.01, no ℓ2)
    assert model(["loss=domination"])["optimizer"]["lr"] == 0.01
    assert model(["loss=ranknet"])["optimizer"]["lr"] == 0.01  # no tuned file: model defaults
    assert model(["loss=hinge", "model.optimizer.lr=0.5"])["optimizer"]["lr"] == 0.5  # CLI wins
    assert model(["model=mlp", "loss=hinge"])["optimizer"]["weight_decay"] == 0.0
    assert "optimizer" not in model(["experiment=hinge_k10_cutting_plane"])


def test_every_tuned_file_names_a_model_and_a_loss():
    for name in options("tuned"):
        model, loss = name.split("_", 1)
        assert model in options("model") and loss in options("loss"), name


def test_mq2008_resolves_against_letor_dir_else_the_project_never_the_cwd(
    train_config, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LETOR_DIR", raising=False)
    assert train_config(["data=mq2008"]).data.root == str(ROOT.parent / "shared/data/MQ2008")
    monkeypatch.setenv("LETOR_DIR", str(tmp_path / "sets"))
    assert train_config(["data=mq2008"]).data.root == str(tmp_path / "sets" / "MQ2008")


def test_a_missing_data_root_names_the_absolute_path_and_how_to_set_it(
    train_config, tmp_path, monkeypatch
):
    from train import train

    monkeypatch.setenv("LETOR_DIR", "nowhere")
    cfg = train_config(["data=mq2008"])
    with pytest.raises(
        FileNotFoundError,
        match=f"{Path.cwd() / 'nowhere' / 'MQ2008'} does not "
        "exist \\(LETOR_DIR=nowhere\\).*LETOR_DIR.*"
        "data.root=.*datamodules.download MQ2008",
    ):
        train(cfg, tmp_path)
