"""Every option of every config group composes and instantiates; every model/loss pair either
builds or fails with the compatibility message; every experiment composes and runs with
fast_dev_run; configs compose rather than copy (hinge_k10 is hinge, the cutting-plane solver and
ConeRank follow their loss's values, the Optuna searches share one sweeper header); a loss
brings its validated setting; data resolves against $LETOR_DIR, else the project."""

import importlib.util
from pathlib import Path

import pytest
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from tests.conftest import MQ2008, ROOT
from train import resolved

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


def missing_data_root(cfg) -> str | None:
    """The composed data's root when it names a folder that does not exist (e.g. MQ2008 not
    downloaded), else None. Decided from the composed config, so an experiment that inherits
    its data (experiment=hinge_k10 from hinge) counts as well as one that names it."""
    root = cfg.data.get("root")
    return None if root is None or Path(root).is_dir() else root


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_composes_and_builds_its_model_and_loss(train_config, experiment):
    cfg = train_config([f"experiment={experiment}"])
    assert cfg.hydra.runtime.choices.experiment == experiment
    module = instantiate(cfg.model, loss=instantiate(cfg.loss), n_features=46)
    assert module(torch.randn(2, 5, 46)).shape == (2, 5)


@pytest.mark.parametrize("experiment", options("experiment"))
def test_every_experiment_runs_fast_dev_run(train_config, experiment, tmp_path):
    from train import train

    cfg = train_config(
        [f"experiment={experiment}", "trainer.fast_dev_run=true", "logger=csv", "callbacks=none"]
    )
    if root := missing_data_root(cfg):
        pytest.skip(f"experiment={experiment} reads {root}, which does not exist")
    value = train(cfg, Path(cfg.hydra.runtime.output_dir))
    assert 0.0 <= value <= 1.0


def test_the_data_an_experiment_needs_is_read_from_the_composed_config(train_config):
    for name in ("hinge", "hinge_k10", "hinge_k10_cutting_plane"):  # hinge_k10 inherits it
        data = train_config([f"experiment={name}"]).data
        assert data._target_ == "differank.datamodules.letor.LetorDataModule", name
        assert Path(data.root).name == "MQ2008", name
    assert missing_data_root(train_config(["experiment=hinge_k10", "data.root=/nonexistent"]))
    assert missing_data_root(train_config([])) is None  # synthetic data: no root


def test_hinge_k10_is_the_hinge_experiment_composed_not_copied(train_config):
    """experiment=hinge_k10 (the README's name) is experiment=hinge; the per-k curve is
    experiment=hinge loss.k=K, which differs from it in loss.k alone."""
    assert resolved(train_config(["experiment=hinge_k10"])) == resolved(
        train_config(["experiment=hinge"])
    )
    own = OmegaConf.to_container(OmegaConf.load(CONF / "experiment" / "hinge_k10.yaml"))
    assert own == {"defaults": ["hinge"]}  # no value of its own
    hinge = resolved(train_config(["experiment=hinge"]))
    assert hinge["loss"]["k"] == 10 and hinge["data"]["root"].endswith("MQ2008")
    assert hinge["model"]["optimizer"] | {"_partial_": True} == {
        "_target_": "torch.optim.Adam",
        "_partial_": True,
        "lr": 0.001,
        "weight_decay": 0.01,
    }
    del hinge["loss"]["k"]
    for k in (1, 5):
        curve = resolved(train_config(["experiment=hinge", f"loss.k={k}"]))
        assert curve["loss"].pop("k") == k and curve == hinge


def test_the_cutting_plane_solver_follows_the_loss_k_and_ystar(train_config):
    def solver(overrides):
        cfg = train_config(["experiment=hinge_k10_cutting_plane", *overrides])
        built = instantiate(cfg.model, loss=instantiate(cfg.loss), n_features=46).solver
        return cfg.model.solver.k, cfg.model.solver.ystar, built.k, built.ystar

    assert solver([]) == (10, "compatible", 10, "compatible")
    assert solver(["loss.k=5"]) == (5, "compatible", 5, "compatible")
    assert solver(["loss.ystar=index"])[1::2] == ("index", "index")
    # a loss without k / ystar (only the logged train/loss): the solver keeps its defaults
    cfg = train_config(["model=hinge_cutting_plane", "loss=ranknet"])
    assert (cfg.model.solver.k, cfg.model.solver.ystar) == (10, "compatible")


def test_conerank_takes_rho_and_alpha_from_the_cone_loss(train_config):
    def ranker(overrides):
        cfg = train_config(["model=conerank", "loss=cone", *overrides])
        return instantiate(cfg.model, loss=instantiate(cfg.loss), n_features=16).ranker

    default = ranker([])
    assert (default.rho, default.alpha, default.radius) == (4.0, 1.0, 8.0)  # sqrt(F), 1, 2·rho
    tied = ranker(["loss.rho=3", "loss.alpha=2"])
    assert (tied.rho, tied.alpha, tied.radius) == (3.0, 2.0, 6.0)


SEARCHES = options("hparams_search")
HEADER = ("direction", "n_trials", "n_jobs", "sampler")  # conf/hydra/sweeper/optuna_search.yaml


@pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None,
    reason="hydra-optuna-sweeper (the optional 'cluster' extra) is not installed",
)
@pytest.mark.parametrize("name", SEARCHES)
def test_every_hparams_search_composes_with_the_shared_sweeper_header(train_config, name):
    cfg = train_config([f"+hparams_search={name}", "seed=7"])
    sweeper = cfg.hydra.sweeper
    assert cfg.hydra.runtime.choices["hydra/sweeper"] == "optuna_search"
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.study_name == name
    assert (sweeper.direction, sweeper.n_trials, sweeper.n_jobs) == ("maximize", 30, 1)
    assert sweeper.sampler.seed == 7  # the run's seed
    assert sweeper.params  # its own search space
    search = OmegaConf.load(CONF / "hparams_search" / f"{name}.yaml").hydra.sweeper
    assert not set(search) & set(HEADER), "the header belongs in the shared sweeper config"


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
        "data.root=.*differank.datamodules.download MQ2008",
    ):
        train(cfg, tmp_path)
