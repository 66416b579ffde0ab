"""Serving rebuilds a checkpoint's ranker alone (``rebuild_ranker``: no training module, so no
Lightning, loss or metrics): the same ranker, the same weights and the same scores as the
ranker of the trained module (``rebuild_module``), for every kind of training module."""

import importlib
import inspect

import pytest
import pytorch_lightning as pl
import torch

from differank.rankers.checkpoints import (
    ALLOWED_TARGETS,
    build,
    checkpoint_scorer,
    rebuild_module,
    rebuild_ranker,
)
from differank.rankers.checkpoints.reading import RANKER_FACTORIES

N_FEATURES = 6
OPTIMIZER = {"_target_": "torch.optim.Adam", "_partial_": True, "lr": 0.001}
MODELS = {
    "mlp": {
        "_target_": "differank.rankers.training.module.RankingModule",
        "ranker": {
            "_target_": "differank.rankers.scorers.mlp.MLPRanker",
            "_partial_": True,
            "hidden": [5, 3],
        },
        "optimizer": OPTIMIZER,
    },
    "conerank": {
        "_target_": "differank.rankers.training.module.RankingModule",
        "ranker": {
            "_target_": "differank.rankers.scorers.conerank.ConeRank",
            "_partial_": True,
            "n_basis": 3,
        },
        "optimizer": OPTIMIZER,
    },
    "domination_cd": {
        "_target_": "differank.rankers.training.module.FullBatchModule",
        "solver": {
            "_target_": "differank.rankers.solvers.domination_cd.DominationCD",
            "_partial_": True,
        },
    },
}
LOSSES = {
    "mlp": {"_target_": "differank.losses.listnet.ListNetLoss"},
    "conerank": {"_target_": "differank.losses.cone.ConeLoss"},
    "domination_cd": {"_target_": "differank.losses.domination.DominationLoss"},
}


def checkpoint_of(name: str) -> dict:
    """A checkpoint of model ``name`` with random weights, as ``train.py`` writes one."""
    torch.manual_seed(0)
    model, loss = MODELS[name], LOSSES[name]
    module = build(model, "model", loss=build(loss, "loss"), n_features=N_FEATURES)
    weights = {key: torch.randn_like(value) for key, value in module.state_dict().items()}
    serving = {
        "n_features": N_FEATURES,
        "normalization": "none",
        "mean": None,
        "std": None,
        "transform": None,
    }
    record = {"config": {"model": model, "loss": loss}, "serving": serving}
    return {"state_dict": weights, "differank": record}


@pytest.mark.parametrize("name", sorted(MODELS))
def test_the_ranker_alone_is_the_modules_ranker(name):
    checkpoint = checkpoint_of(name)
    ranker = rebuild_ranker(checkpoint, "x.ckpt")
    trained = rebuild_module(checkpoint, "x.ckpt").ranker
    assert type(ranker) is type(trained) and not ranker.training
    mine, theirs = ranker.state_dict(), trained.state_dict()
    assert mine.keys() == theirs.keys()
    for key in mine:
        torch.testing.assert_close(mine[key], theirs[key], rtol=0, atol=0)
    features = torch.randn(3, 4, N_FEATURES)
    scorer = checkpoint_scorer(checkpoint, "x.ckpt")
    with torch.no_grad():
        expected = trained.serving_ranker()(features)
        torch.testing.assert_close(scorer(features), expected, rtol=0, atol=0)


def test_a_ranker_of_the_wrong_size_is_refused_by_name():
    checkpoint = checkpoint_of("mlp")
    checkpoint["differank"]["config"]["model"]["ranker"]["hidden"] = [5, 4]
    with pytest.raises(ValueError, match=r"ranker\.network\.3\.weight: the record's model has"):
        rebuild_ranker(checkpoint, "x.ckpt")


def test_a_ranker_factory_must_be_partial():
    checkpoint = checkpoint_of("mlp")
    checkpoint["differank"]["config"]["model"]["ranker"]["_partial_"] = False
    with pytest.raises(ValueError, match=r"x.ckpt: model\.ranker is .*not a factory"):
        rebuild_ranker(checkpoint, "x.ckpt")


def test_every_allowed_training_module_says_how_it_makes_its_ranker():
    module = importlib.import_module("differank.rankers.training.module")
    modules = {
        target
        for target in ALLOWED_TARGETS
        if target.startswith(module.__name__ + ".")
        and inspect.isclass(cls := getattr(module, target.rpartition(".")[2]))
        and issubclass(cls, pl.LightningModule)
    }
    assert modules == set(RANKER_FACTORIES)
