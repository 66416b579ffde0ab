"""Every option of every config group composes and instantiates; every model/loss pair either
builds or fails with the compatibility message; every experiment composes and runs with
fast_dev_run; configs compose rather than copy (the cutting-plane solver and ConeRank follow their
loss's values, the Optuna searches share one sweeper header); a loss's validated setting comes
only from the experiment the user names (no lookup by model and loss); the deprecated experiment
names compose their replacement and warn; one file per callback; ``--help`` lists the groups
from the configs; data resolves against $LETOR_DIR, else the project."""

import importlib.util
import re
import warnings
from pathlib import Path

import pytest
import torch
from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import OmegaConf

from differank.rankers.checkpoints import resolved
from differank.rankers.run.runs import compose_with_hydra
from tests.conftest import MQ2008, ROOT, run_config

CONF = ROOT / "conf"


def options(group: str, nested: bool = False) -> list[str]:
    """The group's option names; ``nested`` adds subfolders' (``protocol/convex_linear``)."""
    folder = CONF / group
    paths = folder.rglob("*.yaml") if nested else folder.glob("*.yaml")
    return sorted(path.relative_to(folder).with_suffix("").as_posix() for path in paths)


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
    if data == "lightgbm_rank" and not Path(cfg.data.root).is_dir():
        pytest.skip(f"lightgbm_rank not found at {cfg.data.root}")
    assert instantiate(cfg.data).n_features == (300 if data == "lightgbm_rank" else 46)


def missing_data_root(cfg) -> str | None:
    """The composed data's root when it names a folder that does not exist (e.g. MQ2008 not
    downloaded), else None. Decided from the composed config, so an experiment that inherits
    its data (experiment=hinge from hinge_paper) counts as well as one that names it."""
    root = cfg.data.get("root")
    return None if root is None or Path(root).is_dir() else root


@pytest.mark.parametrize("experiment", options("experiment", nested=True))
def test_every_experiment_composes_and_builds_its_model_and_loss(experiment, tmp_path):
    cfg = compose_with_hydra([f"experiment={experiment}"], run_dir=tmp_path)  # choices: Hydra's
    assert cfg.hydra.runtime.choices.experiment == experiment
    module = instantiate(cfg.model, loss=instantiate(cfg.loss), n_features=46)
    assert module(torch.randn(2, 5, 46)).shape == (2, 5)


# experiment=OLD (kept one release, warns) -> its replacement, the same composed setting
DEPRECATED_EXPERIMENTS = {
    "hinge": "hinge_paper",
    "hinge_k10": "hinge_paper",
    "convex_best": "convex_auc_pairs",
    "transformer_best": "transformer_domination_gaussrank",
    "conerank_tuned": "protocol/cone_conerank",
}


@pytest.mark.parametrize(
    "experiment", [name for name in options("experiment") if name not in DEPRECATED_EXPERIMENTS]
)
def test_every_experiment_runs_fast_dev_run(train_config, experiment, tmp_path):
    overrides = [
        f"experiment={experiment}",
        "trainer.fast_dev_run=true",
        "logger=csv",
        "callbacks=none",
    ]
    if root := missing_data_root(train_config(overrides)):
        pytest.skip(f"experiment={experiment} reads {root}, which does not exist")
    value = run_config(overrides, tmp_path / "run")
    assert 0.0 <= value <= 1.0


def test_the_data_an_experiment_needs_is_read_from_the_composed_config(train_config):
    for name in ("hinge", "hinge_k10_cutting_plane", "protocol/hinge_linear"):  # hinge inherits
        data = train_config([f"experiment={name}"]).data
        assert data._target_ == "differank.datamodules.letor.LetorDataModule", name
        assert Path(data.root).name == "MQ2008", name
    assert missing_data_root(train_config(["experiment=hinge", "data.root=/nonexistent"]))
    assert missing_data_root(train_config([])) is None  # synthetic data: no root


@pytest.mark.parametrize("old", sorted(DEPRECATED_EXPERIMENTS))
def test_a_deprecated_experiment_composes_its_replacement_and_warns(train_config, old):
    """``experiment=OLD`` (kept one release) composes its replacement, adds no value of its own,
    and resolving the run's config, as train.py does, warns naming the replacement."""
    new = DEPRECATED_EXPERIMENTS[old]
    own = OmegaConf.load(CONF / "experiment" / f"{old}.yaml")
    assert list(own.defaults) == [new, "_self_"]
    assert list(own) == ["defaults", "deprecated_experiment"]  # no value of its own
    with pytest.warns(UserWarning, match=rf"experiment={old} is deprecated.*experiment={new}"):
        composed = resolved(train_config([f"experiment={old}"]))
    del composed["deprecated_experiment"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert composed == resolved(train_config([f"experiment={new}"]))  # which does not warn


def test_only_the_deprecated_experiments_warn():
    warning = [
        path.relative_to(CONF / "experiment").with_suffix("").as_posix()
        for path in (CONF / "experiment").rglob("*.yaml")
        if "oc.deprecated" in path.read_text()
    ]
    assert sorted(warning) == sorted(DEPRECATED_EXPERIMENTS)


def test_the_per_k_curve_of_the_papers_hinge_differs_in_loss_k_alone(train_config):
    """experiment=hinge_paper loss.k=K (the report's per-k curve) differs from k = 10 in loss.k
    alone."""
    hinge = resolved(train_config(["experiment=hinge_paper"]))
    assert hinge["loss"]["k"] == 10 and hinge["data"]["root"].endswith("MQ2008")
    assert hinge["model"]["optimizer"] | {"_partial_": True} == {
        "_target_": "torch.optim.Adam",
        "_partial_": True,
        "lr": 0.001,
        "weight_decay": 0.01,
    }
    del hinge["loss"]["k"]
    for k in (1, 5):
        curve = resolved(train_config(["experiment=hinge_paper", f"loss.k={k}"]))
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
    # sqrt(F), conf/loss/cone.yaml's alpha, 2·rho
    assert (default.rho, default.alpha, default.radius) == (4.0, 0.102, 8.0)
    tied = ranker(["loss.rho=3", "loss.alpha=2"])
    assert (tied.rho, tied.alpha, tied.radius) == (3.0, 2.0, 6.0)


SEARCHES = options("hparams_search")
HEADER = ("direction", "n_trials", "n_jobs", "sampler")  # conf/hydra/sweeper/optuna_search.yaml


@pytest.mark.skipif(
    importlib.util.find_spec("hydra_plugins.hydra_optuna_sweeper") is None,
    reason="hydra-optuna-sweeper (the optional 'cluster' extra) is not installed",
)
@pytest.mark.parametrize("name", SEARCHES)
def test_every_hparams_search_composes_with_the_shared_sweeper_header(name, tmp_path):
    cfg = compose_with_hydra([f"+hparams_search={name}", "seed=7"], run_dir=tmp_path)
    sweeper = cfg.hydra.sweeper
    assert cfg.hydra.runtime.choices["hydra/sweeper"] == "optuna_search"
    assert sweeper._target_.endswith("OptunaSweeper") and sweeper.study_name == name
    assert (sweeper.direction, sweeper.n_trials, sweeper.n_jobs) == ("maximize", 30, 1)
    assert sweeper.sampler.seed == 7  # the run's seed
    assert sweeper.params  # its own search space
    search = OmegaConf.load(CONF / "hparams_search" / f"{name}.yaml").hydra.sweeper
    assert not set(search) & set(HEADER), "the header belongs in the shared sweeper config"


def test_a_validated_setting_comes_only_from_the_experiment_the_user_names(train_config):
    def model(overrides):
        return OmegaConf.to_container(train_config(overrides).model)

    # loss=hinge alone trains with the linear model's optimizer, as every other loss does
    linear = model(["loss=ranknet"])["optimizer"]
    assert model(["loss=hinge"])["optimizer"] == linear
    assert (linear["lr"], linear["weight_decay"]) == (0.01, 0.0)
    # the validated setting is in the file the user names (conf/loss/hinge.yaml points there)
    validated = "protocol/hinge_linear"
    chosen = OmegaConf.load(CONF / "experiment" / f"{validated}.yaml").model.optimizer
    assert model([f"experiment={validated}"])["optimizer"] == linear | dict(chosen)
    assert f"experiment={validated}" in (CONF / "loss" / "hinge.yaml").read_text()
    other_data = compose_with_hydra([f"experiment={validated}", "data=synthetic"], run_dir=".")
    assert other_data.hydra.runtime.choices.data == "synthetic"
    assert other_data.model.optimizer.weight_decay == chosen.weight_decay
    assert model([f"experiment={validated}", "model.optimizer.lr=0.5"])["optimizer"]["lr"] == 0.5
    assert "optimizer" not in model(["experiment=hinge_k10_cutting_plane"])


def test_no_config_is_chosen_by_interpolating_other_choices():
    """conf/train.yaml's defaults name fixed options: no ``optional x: ${model}_${loss}``."""
    defaults = OmegaConf.load(CONF / "train.yaml").defaults
    assert not [entry for entry in defaults if "${" in str(entry)], defaults
    assert not (CONF / "tuned").exists()
    assert not (CONF / "objective").exists()  # +objective=NAME: deprecated in 0.1.0, removed


def test_each_callback_is_its_own_file_and_default_lists_them(tmp_path):
    default = OmegaConf.load(CONF / "callbacks" / "default.yaml")
    assert set(default) == {"defaults"}, "default.yaml only lists the callback files"
    singles = [name for name in options("callbacks") if name not in ("default", "none")]
    assert sorted(default.defaults) == singles
    composed = compose_with_hydra([], run_dir=tmp_path).callbacks  # unresolved, as written
    assert list(composed) == list(default.defaults)
    for name in singles:
        node = OmegaConf.load(CONF / "callbacks" / f"{name}.yaml")
        assert list(node) == [name], f"callbacks/{name}.yaml defines one callback, {name}"
        assert OmegaConf.to_container(composed[name]) == OmegaConf.to_container(node[name])


def test_help_lists_the_groups_from_the_configs_and_names_only_real_options(tmp_path):
    """``--help`` lists every group's options at ``$APP_CONFIG_GROUPS`` (differank.cli fills it
    from ``conf/``; tests/test_cli.py checks the printed output); every
    ``GROUP=OPTION`` it mentions exists and no removed group (``tuned``) is named."""
    template = compose_with_hydra([], run_dir=tmp_path).hydra.help.template
    assert "$APP_CONFIG_GROUPS" in template and "$CONFIG" in template
    assert "tuned" not in template
    groups = {path.name for path in CONF.iterdir() if path.is_dir()}
    mentioned = re.findall(r"\+?\b([a-z_]+)=([a-z_0-9/]+)\b", template)
    checked = [(group, option) for group, option in mentioned if group in groups]
    assert len(checked) >= 5, checked
    for group, option in checked:
        known = options(group, nested=True)
        assert option in known or option in ("NAME", "OPTION"), f"{group}={option}"


def test_mq2008_resolves_against_letor_dir_else_the_project_never_the_cwd(
    train_config, tmp_path, monkeypatch
):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("LETOR_DIR", raising=False)
    assert train_config(["data=mq2008"]).data.root == str(ROOT.parent / "shared/data/MQ2008")
    monkeypatch.setenv("LETOR_DIR", str(tmp_path / "sets"))
    assert train_config(["data=mq2008"]).data.root == str(tmp_path / "sets" / "MQ2008")


def test_a_missing_data_root_names_the_absolute_path_and_how_to_set_it(tmp_path, monkeypatch):
    monkeypatch.setenv("LETOR_DIR", "nowhere")
    with pytest.raises(
        FileNotFoundError,
        match=f"{Path.cwd() / 'nowhere' / 'MQ2008'} does not "
        "exist \\(LETOR_DIR=nowhere\\).*LETOR_DIR.*"
        "data.root=.*differank.datamodules.download MQ2008",
    ):
        run_config(["data=mq2008"], tmp_path)
