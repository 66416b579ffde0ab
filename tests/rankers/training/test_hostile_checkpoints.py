"""Checkpoints are data, never code: a tampered checkpoint's config is refused before anything
is imported or called, by every way in (``task=test|predict|export``, ``files=[...]``, the
ensemble, :func:`differank.load_ranker`, ``RankingModule.load_from_checkpoint``), with an
error naming the config node and the value. Each attack would write or truncate a file; the
tests prove it did not happen."""

import copy

import pytest
import torch
from hydra.utils import instantiate

import differank
from differank.rankers.checkpoints import (
    ALLOWED_TARGETS,
    UnsafeCheckpointError,
    check_restorable,
    resolved,
)
from differank.rankers.run.ensemble import main as ensemble_main
from differank.rankers.run.runs import compose_config
from differank.rankers.training.module import RankingModule
from tests.conftest import ROOT, TINY_RUN, run_config

SENTINEL = "SENTINEL"  # replaced by a path in the test's folder
VICTIM = "VICTIM"  # a file the attack would truncate


def _command(path):
    return f"touch {path}"


# (where in the config, the node planted there, the node path and the value the error names)
ATTACKS = {
    "os.system": ("model", {"_target_": "os.system", "command": "CMD"}, "model._target_"),
    "builtins.exec": ("loss", {"_target_": "builtins.exec", "source": "PY"}, "loss._target_"),
    "builtins.eval": ("loss", {"_target_": "builtins.eval", "source": "PY"}, "loss._target_"),
    "subprocess.Popen in model.ranker": (
        "model.ranker",
        {"_target_": "subprocess.Popen", "args": ["touch", SENTINEL]},
        "model.ranker._target_",
    ),
    "builtins.open truncates": (
        "data",
        {"_target_": "builtins.open", "file": VICTIM, "mode": "w"},
        "data._target_",
    ),
    "shutil.copyfile writes": (
        "data.cache_dir",
        {"_target_": "shutil.copyfile", "src": VICTIM, "dst": SENTINEL},
        "data.cache_dir._target_",
    ),
    "torch.save in the optimizer": (
        "model.optimizer",
        {"_target_": "torch.save", "obj": 1, "f": SENTINEL},
        "model.optimizer._target_",
    ),
    "chain through hydra.utils.call": (
        "model.optimizer",
        {"_target_": "hydra.utils.call", "config": {"_target_": "os.system", "command": "CMD"}},
        "model.optimizer._target_",
    ),
    "chain through an allowed-looking torch function": (
        "loss",
        {"_target_": "torch.serialization.save", "obj": 1, "f": SENTINEL},
        "loss._target_",
    ),
    "nested inside a list": (
        "model.ranker.hidden",
        [8, {"_target_": "os.system", "command": "CMD"}],
        "model.ranker.hidden[1]._target_",
    ),
    "allowed prefix trick": (
        "loss",
        {"_target_": "differank.losses.ranknet.RankNetLoss.__init__.__globals__.os.system"},
        "loss._target_",
    ),
    "trailing whitespace": (
        "model",
        {"_target_": "os.system ", "command": "CMD"},
        "model._target_",
    ),
    "fullwidth unicode": ("model", {"_target_": "ｏｓ.system", "command": "CMD"}, "model._target_"),
    "allowed name plus whitespace": (
        "loss",
        {"_target_": "differank.losses.ranknet.RankNetLoss\t"},
        "loss._target_",
    ),
    "non-string target": ("loss", {"_target_": ["os", "system"]}, "loss._target_"),
    "_args_ on an allowed class": (
        "loss",
        {"_target_": "differank.losses.ranknet.RankNetLoss", "_args_": ["CMD"]},
        "loss._args_",
    ),
    "_partial_ that is not a bool": (
        "model.ranker._partial_",
        "yes",
        "model.ranker._partial_",
    ),
    "_recursive_": ("model._recursive_", False, "model._recursive_"),
    "_convert_": ("data._convert_", "all", "data._convert_"),
    "an interpolation that decodes a target": (
        "model.ranker",
        '${oc.decode:"{_target_: os.system, command: CMD}"}',
        "model.ranker",
    ),
    "an environment interpolation": ("data.root", "${oc.env:HOME}", "data.root"),
    "a look-alike special key": (
        "loss",
        {"_target_\u200b": "os.system", "command": "CMD"},
        "loss",
    ),
}


def plant(config: dict, where: str, node) -> None:
    *parents, leaf = where.split(".")
    for key in parents:
        config = config[key]
    config[leaf] = node


def substitute(node, paths):
    if isinstance(node, dict):
        return {key: substitute(value, paths) for key, value in node.items()}
    if isinstance(node, list):
        return [substitute(value, paths) for value in node]
    if isinstance(node, str):
        for token, value in paths.items():
            node = node.replace(token, value)
    return node


@pytest.fixture(scope="module")
def clean_checkpoint(tmp_path_factory):
    """A well-formed checkpoint of a linear model on the synthetic data (no training needed)."""
    folder = tmp_path_factory.mktemp("clean")
    cfg = compose_config(TINY_RUN, run_dir=folder)
    module = instantiate(cfg.model, loss=instantiate(cfg.loss), n_features=46)
    serving = {"n_features": 46, "normalization": "none", "mean": None, "std": None}
    return {
        "state_dict": module.state_dict(),
        "epoch": 0,
        "differank": {
            "config": resolved(cfg),
            "monitor": "val/map",
            "serving": {**serving, "transform": None},
        },
    }


def tampered(name, clean_checkpoint, tmp_path):
    """A tampered checkpoint file, the sentinel it would create, the victim it would truncate
    and the node path the error must name."""
    where, node, named = ATTACKS[name]
    sentinel, victim = tmp_path / "sentinel", tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    paths = {
        SENTINEL: str(sentinel),
        VICTIM: str(victim),
        "CMD": _command(sentinel),
        "PY": f"open({str(sentinel)!r}, 'w')",
    }
    checkpoint = copy.deepcopy(clean_checkpoint)
    plant(checkpoint["differank"]["config"], where, substitute(node, paths))
    path = tmp_path / "tampered.ckpt"
    torch.save(checkpoint, path)
    return path, sentinel, victim, named


@pytest.fixture(params=sorted(ATTACKS), ids=lambda name: name.replace(" ", "-"))
def attack(request, clean_checkpoint, tmp_path):
    return tampered(request.param, clean_checkpoint, tmp_path)


def nothing_ran(sentinel, victim) -> None:
    assert not sentinel.exists()
    assert victim.read_text() == "keep me\n"


def refused(error: str, named: str) -> None:
    assert named in error, error


def test_task_test_refuses_a_tampered_checkpoint(attack, tmp_path):
    path, sentinel, victim, named = attack
    with pytest.raises(UnsafeCheckpointError) as error:
        run_config(["task=test", f"ckpt_path={path}"], tmp_path / "run")
    refused(str(error.value), named)
    nothing_ran(sentinel, victim)
    assert not (tmp_path / "run" / "predictions").exists()


# every task reads the checkpoint through the same guard: a few attack shapes suffice there
SOME = ["builtins.open truncates", "torch.save in the optimizer", "nested inside a list"]


@pytest.mark.parametrize("name", SOME)
@pytest.mark.parametrize("task", ["predict", "export", "files"])
def test_every_task_refuses_a_tampered_checkpoint(name, task, clean_checkpoint, tmp_path):
    path, sentinel, victim, named = tampered(name, clean_checkpoint, tmp_path)
    overrides = [f"task={task}", f"ckpt_path={path}", "logger=csv"]
    if task == "files":
        overrides = ["task=test", f"ckpt_path={path}", f"files=[{victim}]", "logger=csv"]
    with pytest.raises(UnsafeCheckpointError) as error:
        run_config(overrides, tmp_path / "run")
    refused(str(error.value), named)
    nothing_ran(sentinel, victim)
    assert not (tmp_path / "run" / "predictions").exists()


def test_the_ensemble_refuses_a_tampered_member(attack, tmp_path, capsys):
    path, sentinel, victim, named = attack
    assert ensemble_main([str(path), "--out", str(tmp_path / "e")]) == 2
    refused(capsys.readouterr().err, named)
    nothing_ran(sentinel, victim)


def test_load_ranker_and_load_from_checkpoint_refuse_a_tampered_checkpoint(attack):
    path, sentinel, victim, named = attack
    with pytest.raises(UnsafeCheckpointError) as error:
        differank.load_ranker(path)
    refused(str(error.value), named)
    with pytest.raises(UnsafeCheckpointError) as error:
        RankingModule.load_from_checkpoint(path)
    refused(str(error.value), named)
    nothing_ran(sentinel, victim)


def test_the_error_names_the_refused_target():
    node = {"ranker": {"_target_": "os.system", "command": "x"}}
    with pytest.raises(UnsafeCheckpointError, match=r"model\.ranker\._target_: 'os\.system'"):
        check_restorable(node, "model")


def test_the_threat_is_real_without_the_guard(tmp_path):
    """What the pinned Hydra's ``instantiate`` does with such nodes, its own blocklist
    notwithstanding (why a checkpoint's config never reaches it)."""
    victim, sentinel = tmp_path / "victim.txt", tmp_path / "sentinel"
    victim.write_text("keep me\n")
    instantiate({"_target_": "builtins.open", "file": str(victim), "mode": "w"}).close()
    instantiate({"_target_": "torch.save", "obj": 1, "f": str(sentinel)})
    assert victim.read_text() == "" and sentinel.exists()


def test_every_class_conf_names_for_data_model_and_loss_is_allowed():
    import yaml

    targets = set()

    def collect(node):
        if isinstance(node, dict):
            if isinstance(node.get("_target_"), str):
                targets.add(node["_target_"])
            for value in node.values():
                collect(value)
        elif isinstance(node, list):
            for value in node:
                collect(value)

    for group in ("data", "model", "loss", "objective", "experiment", "tuned"):
        for path in (ROOT / "conf" / group).glob("*.yaml"):
            collect(yaml.safe_load(path.read_text()))
    assert targets and targets <= ALLOWED_TARGETS, sorted(targets - ALLOWED_TARGETS)


def test_a_clean_checkpoint_still_loads(clean_checkpoint, tmp_path):
    path = tmp_path / "clean.ckpt"
    torch.save(clean_checkpoint, path)
    ranker = differank.load_ranker(path)
    assert ranker(torch.zeros(2, 3, 46), torch.ones(2, 3, dtype=torch.bool)).shape == (2, 3)
    assert isinstance(RankingModule.load_from_checkpoint(path), RankingModule)


def test_a_checkpoint_cannot_choose_where_data_is_written(clean_checkpoint, tmp_path):
    """The synthetic data module writes its fold into ``root``: a checkpoint pointing it at a
    user's data folder would overwrite Fold1/*.txt. Restored, it writes into the cache."""
    users = tmp_path / "MQ2008" / "Fold1"
    users.mkdir(parents=True)
    for name in ("train.txt", "vali.txt", "test.txt"):
        (users / name).write_text("keep me\n")
    checkpoint = copy.deepcopy(clean_checkpoint)
    checkpoint["differank"]["config"]["data"]["root"] = str(users.parent)
    torch.save(checkpoint, tmp_path / "aimed.ckpt")
    overrides = ["task=predict", f"ckpt_path={tmp_path / 'aimed.ckpt'}", "logger=csv"]
    run_config(overrides, tmp_path / "run")
    assert all((users / name).read_text() == "keep me\n" for name in ("train.txt", "test.txt"))
    assert sorted(p.name for p in users.parent.iterdir()) == ["Fold1"]
    assert (tmp_path / "run" / "predictions" / "test.txt").is_file()
