"""A checkpoint can only describe a model, never the machine: where files go, how many processes
run and how large batches are come from the command line or the defaults; the sizes it gives are
checked against the weights it holds before anything is allocated, and its numbers (weights,
serving statistics, transform tables) must be finite and well-formed. Every refusal names the
file, the entry and the value."""

import copy
import inspect
import re

import numpy as np
import pytest
import torch
from hydra.utils import instantiate
from omegaconf import open_dict

import differank
from differank.datamodules import synthetic
from differank.datamodules.download import data_home
from differank.rankers.checkpoints import (
    ALLOWED_TARGETS,
    MACHINE_ARGUMENTS,
    CheckpointReadError,
    UnsafeCheckpointError,
    load_checkpoint,
    resolved,
    restore_run,
    restored_config,
    run_record,
)
from differank.rankers.run.runs import compose_config
from differank.rankers.training.module import RankingModule
from tests.conftest import ROOT, TINY_RUN, run_config

LETOR_DATA = "differank.datamodules.letor.LetorDataModule"
MLP = "differank.rankers.scorers.mlp.MLPRanker"
# Parameter names that speak of the machine: places, processes, batches, memory.
MACHINE_WORDS = re.compile(
    r"root|dir|path|file|cache|worker|thread|process|job|batch|memory|bytes|budget|device"
)


@pytest.fixture(scope="module")
def clean(tmp_path_factory):
    """A well-formed checkpoint of a linear model on the synthetic data, z-scored and
    GaussRank-transformed (no training needed)."""
    folder = tmp_path_factory.mktemp("clean")
    cfg = compose_config(TINY_RUN, run_dir=folder)
    module = instantiate(cfg.model, loss=instantiate(cfg.loss), n_features=46)
    knots = torch.linspace(0.0, 1.0, 4).repeat(46, 1)
    serving = {
        "n_features": 46,
        "normalization": "zscore",
        "mean": torch.zeros(46, dtype=torch.float64),
        "std": torch.ones(46, dtype=torch.float64),
        "transform": {"name": "gaussrank", "knots": knots, "values": knots * 2.0 - 1.0},
    }
    return {
        "state_dict": module.state_dict(),
        "epoch": 0,
        "differank": {"config": resolved(cfg), "monitor": "val/map", "serving": serving},
    }


def saved(checkpoint, tmp_path, name="tampered.ckpt"):
    path = tmp_path / name
    torch.save(checkpoint, path)
    return path


def changed(clean, **entries):
    """A copy of ``clean`` with ``entries`` ("differank.serving.std": value, ...) set."""
    checkpoint = copy.deepcopy(clean)
    for where, value in entries.items():
        *parents, leaf = where.split(".")
        node = checkpoint
        for key in parents:
            node = node[key]
        node[leaf] = value
    return checkpoint


# -- the machine is the user's ------------------------------------------------------------------


def signature_names(target: str) -> set[str]:
    """The keyword arguments ``target`` takes, following ``**options`` up its base classes."""
    module, _, name = target.rpartition(".")
    cls = getattr(__import__(module, fromlist=[name]), name)
    names: set[str] = set()
    for owner in cls.__mro__ if inspect.isclass(cls) else (cls,):
        init = owner.__init__ if inspect.isclass(owner) else owner
        if init is object.__init__:
            continue
        parameters = inspect.signature(init).parameters.values()
        names |= {p.name for p in parameters if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}
        if not any(p.kind == p.VAR_KEYWORD for p in parameters):
            break
    return names - {"self"}


def test_every_machine_argument_of_an_allowed_class_is_classified():
    """A new allowed class with a place, process count, batch or memory size fails here until
    MACHINE_ARGUMENTS lists it (and a restore then never takes it from a checkpoint)."""
    unclassified = {}
    for target in sorted(ALLOWED_TARGETS):
        machine = {name for name in signature_names(target) if MACHINE_WORDS.search(name)}
        missing = machine - set(MACHINE_ARGUMENTS.get(target, ()))
        if missing:
            unclassified[target] = sorted(missing)
    assert not unclassified, unclassified
    assert set(MACHINE_ARGUMENTS) <= ALLOWED_TARGETS
    for target, names in MACHINE_ARGUMENTS.items():
        assert set(names) <= signature_names(target), target


def test_no_machine_argument_survives_a_restore(clean):
    """Every classified argument planted at every depth is gone from the run record."""
    hostile = {
        target: {"_target_": target, **dict.fromkeys(names, "/evil")}
        for target, names in MACHINE_ARGUMENTS.items()
    }
    checkpoint = copy.deepcopy(clean)
    config = checkpoint["differank"]["config"]
    config["data"] = {
        **config["data"],
        **dict.fromkeys(MACHINE_ARGUMENTS[config["data"]["_target_"]], 24),
    }
    config["model"]["ranker"]["nested"] = list(hostile.values())
    restored = run_record(checkpoint, "x.ckpt")["config"]
    assert not set(MACHINE_ARGUMENTS[config["data"]["_target_"]]) & set(restored["data"])
    for node in restored["model"]["ranker"]["nested"]:
        assert set(node) == {"_target_"}, node


@pytest.mark.parametrize(
    "saved_root, local", [("/elsewhere/MQ2008", "MQ2008"), ("/", None), ("/data/..", None)]
)
def test_a_letor_set_is_read_from_this_machines_data_folder(clean, saved_root, local):
    """A LETOR checkpoint names its set by its folder's name only: the folder of that name
    under this machine's data folder (data_dir), never the checkpoint's path."""
    data = {"_target_": LETOR_DATA, "root": saved_root, "fold": 1}
    restored = restored_config(changed(clean, **{"differank.config.data": data}), "x.ckpt")
    root = restored["data"].get("root")
    assert root == (None if local is None else str(data_home() / local))


@pytest.mark.parametrize("eval_batch_size", [-1, 0, "x"])
def test_restored_workers_and_batch_sizes_are_the_defaults(clean, eval_batch_size):
    checkpoint = changed(
        clean,
        **{
            "differank.config.data.num_workers": 24,
            "differank.config.data.eval_batch_size": eval_batch_size,
            "differank.config.data.batch_size": 10**9,
        },
    )
    overrides = ["task=test", "ckpt_path=x.ckpt"]
    data = restore_run(
        compose_config(overrides, run_dir=ROOT), checkpoint, "x.ckpt", overrides
    ).data
    assert (data.num_workers, data.eval_batch_size, data.batch_size) == (0, 128, 32)
    mine = [*overrides, "data.num_workers=1"]
    restored = restore_run(compose_config(mine, run_dir=ROOT), checkpoint, "x.ckpt", mine)
    assert restored.data.num_workers == 1  # the user's


def test_restore_run_applies_the_overrides_it_is_given(clean):
    """The command line reaches ``restore_run`` as an argument, never from Hydra's global
    state: a key that ``cfg`` was composed with but that is not passed is the checkpoint's."""
    overrides = ["task=test", "ckpt_path=x.ckpt", "data.n_test_queries=7"]
    cfg = compose_config(overrides, run_dir=ROOT)
    assert restore_run(cfg, clean, "x.ckpt", overrides).data.n_test_queries == 7
    saved = clean["differank"]["config"]["data"]["n_test_queries"]
    assert restore_run(cfg, clean, "x.ckpt", overrides[:2]).data.n_test_queries == saved != 7


def test_machine_arguments_of_another_data_class_are_not_taken(clean):
    """This command's data node names another class (an experiment's data=mq2008): its root
    is not where the checkpoint's synthetic module may write its fold."""
    overrides = ["task=test", "ckpt_path=x.ckpt"]
    cfg = compose_config(overrides, run_dir=ROOT)
    with open_dict(cfg):
        cfg.data = {"_target_": LETOR_DATA, "root": "/users/MQ2008", "num_workers": 3}
    data = restore_run(cfg, clean, "x.ckpt", overrides).data
    assert data.get("root") is None and "num_workers" not in data


def test_task_test_never_writes_where_the_checkpoint_says(clean, tmp_path):
    evil = tmp_path / "evil"
    checkpoint = changed(clean, **{"differank.config.data.cache_dir": str(evil)})
    path = saved(checkpoint, tmp_path)
    run_config(["task=test", f"ckpt_path={path}", "logger=csv"], tmp_path / "run")
    assert not evil.exists()
    assert (tmp_path / "run" / "predictions" / "test.txt").is_file()


# -- sizes are checked against the weights before anything is allocated -------------------------


@pytest.mark.parametrize("n_features", [3_000_000_000, 46.7, True, "46"])
def test_a_serving_feature_count_is_checked_before_allocation(clean, tmp_path, n_features):
    raw = {"normalization": "none", "mean": None, "std": None, "transform": None}
    serving = {**clean["differank"]["serving"], **raw, "n_features": n_features}
    path = saved(changed(clean, **{"differank.serving": serving}), tmp_path)
    with pytest.raises(ValueError, match=r"serving\['n_features'\]") as error:
        differank.load_ranker(path)
    assert str(path) in str(error.value) and repr(n_features) in str(error.value)


def test_model_widths_are_checked_against_the_weights_before_allocation(clean, tmp_path):
    checkpoint = changed(
        clean,
        **{
            "differank.config.model.ranker": {
                "_target_": MLP,
                "_partial_": True,
                "hidden": [40000, 40000],
            }
        },
    )
    path = saved(checkpoint, tmp_path)
    with pytest.raises(ValueError, match=r"model\.ranker\.hidden.*40000") as error:
        differank.load_ranker(path)
    assert str(path) in str(error.value)
    with pytest.raises(ValueError, match=r"model\.ranker\.hidden"):
        RankingModule.load_from_checkpoint(path)


def test_a_model_whose_shapes_differ_from_its_weights_is_refused(clean, tmp_path):
    small = {"_target_": MLP, "_partial_": True, "hidden": [3]}
    path = saved(changed(clean, **{"differank.config.model.ranker": small}), tmp_path)
    with pytest.raises(
        ValueError,
        match=r"ranker\.linear\.weight: the record's model has none, the weights \[1, 46\]",
    ) as error:
        differank.load_ranker(path)
    assert str(path) in str(error.value)


def test_synthetic_query_counts_have_a_ceiling(clean, tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    monkeypatch.setenv("DIFFERANK_CACHE", str(cache))
    checkpoint = changed(clean, **{"differank.config.data.n_train_queries": 10**8})
    path = saved(checkpoint, tmp_path)
    with pytest.raises(
        ValueError, match=r"tampered.ckpt.*n_train_queries must be .*at most 100000.*got 100000000"
    ):
        run_config(["task=test", f"ckpt_path={path}"], tmp_path / "run")
    assert not (cache / "synthetic").exists() or not list((cache / "synthetic").iterdir())


def test_a_failed_synthetic_fold_leaves_no_temporary_folder(tmp_path, monkeypatch):
    def out_of_memory(*args):
        raise MemoryError("planted")

    monkeypatch.setattr(synthetic, "_write_fold", out_of_memory)
    data = synthetic.SyntheticLetorDataModule(10, 5, 5, cache_dir=tmp_path)
    with pytest.raises(MemoryError):
        data.split_files("train")
    assert list((tmp_path / "synthetic").iterdir()) == []


# -- numbers are checked --------------------------------------------------------------------------


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_non_finite_weights_are_refused(clean, tmp_path, value):
    checkpoint = copy.deepcopy(clean)
    checkpoint["state_dict"]["ranker.linear.weight"][0, 5] = value
    path = saved(checkpoint, tmp_path)
    with pytest.raises(ValueError, match=r"ranker\.linear\.weight.*\[0, 5\].*" + str(value)) as e:
        differank.load_ranker(path)
    assert str(path) in str(e.value)
    with pytest.raises(ValueError, match=r"ranker\.linear\.weight"):
        run_config(["task=test", f"ckpt_path={path}", "logger=csv"], tmp_path / "run")


def _std(value):
    std = torch.ones(46, dtype=torch.float64)
    std[7] = value
    return std


def _mean(value):
    mean = torch.zeros(46, dtype=torch.float64)
    mean[7] = value
    return mean


def _knots(value):
    knots = torch.linspace(0.0, 1.0, 4).repeat(46, 1)
    knots[7, 2] = value
    return knots


@pytest.mark.parametrize(
    "entry, value, named",
    [
        ("std", _std(0.0), r"serving\['std'\]\[7\] is 0\.0"),
        ("std", _std(float("nan")), r"serving\['std'\]\[7\] is nan"),
        ("std", _std(-2.0), r"serving\['std'\]\[7\] is -2\.0"),
        ("mean", _mean(float("inf")), r"serving\['mean'\]\[7\] is inf"),
        ("mean", torch.zeros(45, dtype=torch.float64), r"serving\['mean'\].*\[45\].*\[46\]"),
        ("normalization", "zscore; rm -rf", r"serving\['normalization'\]"),
    ],
)
def test_serving_statistics_are_checked(clean, tmp_path, entry, value, named):
    path = saved(changed(clean, **{f"differank.serving.{entry}": value}), tmp_path)
    with pytest.raises(ValueError, match=named) as error:
        differank.load_ranker(path)
    assert str(path) in str(error.value)


@pytest.mark.parametrize(
    "table, value, named",
    [
        ("knots", _knots(float("nan")), r"knots\[7, 2\] is nan"),
        ("knots", _knots(0.1), r"knots\[7, 2\] is 0\.1.*increas"),
    ],
)
def test_gaussrank_tables_are_checked(clean, tmp_path, table, value, named):
    transform = {**clean["differank"]["serving"]["transform"], table: value}
    path = saved(changed(clean, **{"differank.serving.transform": transform}), tmp_path)
    with pytest.raises(ValueError, match=named) as error:
        differank.load_ranker(path)
    assert str(path) in str(error.value) and "transform" in str(error.value)


def test_a_config_nested_too_deep_is_refused(clean, tmp_path):
    node = leaf = {}
    for _ in range(20_000):
        leaf["a"] = {}
        leaf = leaf["a"]
    checkpoint = changed(clean, **{"differank.config.model.ranker.deep": node})
    with pytest.raises(UnsafeCheckpointError, match=r"model\.ranker\.deep.*nested deeper than"):
        run_record(checkpoint, "x.ckpt")


def test_a_foreign_value_is_named_not_called_corrupt(clean, tmp_path):
    path = saved(changed(clean, **{"differank.config.seed": np.int64(3)}), tmp_path)
    with pytest.raises(CheckpointReadError) as error:
        load_checkpoint(path)
    message = str(error.value)
    assert str(path) in message and "numpy" in message and "scalar" in message
    assert "truncated" not in message and "weights_only=False" not in message


def test_resuming_from_a_truncated_checkpoint_names_the_file(clean, tmp_path):
    good = saved(clean, tmp_path, "good.ckpt").read_bytes()
    bad = tmp_path / "last.ckpt"
    bad.write_bytes(good[: len(good) // 2])
    with pytest.raises(CheckpointReadError) as error:
        run_config([*TINY_RUN, f"ckpt_path={bad}"], tmp_path / "run")
    assert str(bad) in str(error.value) and "Errno" not in str(error.value)


# -- the scorer says what it expects ------------------------------------------------------------


@pytest.mark.parametrize(
    "features, error, message",
    [
        (torch.zeros(2, 3, 45), ValueError, r"46 features.*\[2, 3, 45\]"),
        (torch.zeros(2, 3, 46, dtype=torch.float64), TypeError, r"float32.*float64"),
        (np.zeros((2, 3, 46), np.float32), TypeError, r"torch\.Tensor.*ndarray"),
        (torch.zeros(3, 46), ValueError, r"\[queries, documents, 46\].*\[3, 46\]"),
    ],
)
def test_load_ranker_says_what_it_expects(clean, tmp_path, features, error, message):
    checkpoint = copy.deepcopy(clean)
    checkpoint["differank"]["serving"]["transform"] = None
    ranker = differank.load_ranker(saved(checkpoint, tmp_path))
    with pytest.raises(error, match=message):
        ranker(features)
    assert ranker(torch.zeros(2, 3, 46)).shape == (2, 3)
