"""Every option of every config group composes and instantiates; every model/loss pair either
builds or fails with the compatibility message; every experiment runs with fast_dev_run."""

from pathlib import Path

import pytest
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate

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
