"""The MLP scorer's hidden activation (``model.ranker.activation``): each choice builds its
layers, an unknown one is refused naming the option and the choices, and a checkpoint saved
before the option existed restores as relu, what it was trained with."""

from typing import get_args

import pytest
import torch
from torch import nn

from differank.rankers.checkpoints import build, rebuild_ranker
from differank.rankers.scorers.mlp import HIDDEN_ACTIVATIONS, Activation, MLPRanker
from tests.conftest import TINY_DATA


def test_the_choices_are_the_typed_ones():
    assert list(HIDDEN_ACTIVATIONS) == list(get_args(Activation))


@pytest.mark.parametrize("activation", list(HIDDEN_ACTIVATIONS))
def test_each_hidden_layer_uses_the_activation(activation):
    ranker = MLPRanker(4, hidden=(5, 3), dropout=0.0, activation=activation).eval()
    kinds = [type(module) for module in ranker.network]
    expected = HIDDEN_ACTIVATIONS[activation]
    assert kinds == [nn.Linear, expected, nn.Dropout, nn.Linear, expected, nn.Dropout, nn.Linear]
    features = torch.randn(2, 3, 4)
    first, second, last = (m for m in ranker.network if isinstance(m, nn.Linear))
    by_hand = last(expected()(second(expected()(first(features))))).squeeze(-1)
    torch.testing.assert_close(ranker(features), by_hand)


def test_relu_is_the_default():
    assert MLPRanker(4).activation == "relu"
    assert isinstance(MLPRanker(4).network[1], nn.ReLU)


@pytest.mark.parametrize("activation", ["gelu", "Sigmoid", None])
def test_an_unknown_activation_is_refused_naming_the_option(activation):
    with pytest.raises(ValueError, match=r"model.ranker.activation must be one of \['relu', "):
        MLPRanker(4, activation=activation)


def record(ranker: dict) -> dict:
    """A checkpoint of a RankingModule whose ranker node is ``ranker``, random weights."""
    model = {
        "_target_": "differank.rankers.training.module.RankingModule",
        "ranker": ranker,
        "optimizer": {"_target_": "torch.optim.Adam", "_partial_": True, "lr": 0.001},
    }
    loss = {"_target_": "differank.losses.listnet.ListNetLoss"}
    module = build(model, "model", loss=build(loss, "loss"), n_features=4)
    weights = {key: torch.randn_like(value) for key, value in module.state_dict().items()}
    serving = {"n_features": 4, "normalization": "none", "mean": None, "std": None}
    record = {"config": {"model": model, "loss": loss}, "serving": {**serving, "transform": None}}
    return {"state_dict": weights, "differank": record}


@pytest.mark.parametrize(
    "activation, expected", [(None, nn.ReLU), ("sigmoid", nn.Sigmoid), ("tanh", nn.Tanh)]
)
def test_a_checkpoint_restores_its_activation_and_an_old_one_relu(activation, expected):
    node = {"_target_": "differank.rankers.scorers.mlp.MLPRanker", "_partial_": True}
    node["hidden"] = [3]
    if activation is not None:  # None: a checkpoint from before the option, without the key
        node["activation"] = activation
    ranker = rebuild_ranker(record(node), "x.ckpt")
    assert isinstance(ranker.network[1], expected)


def test_the_config_trains_sigmoid_from_the_command_line(train_config):
    assert train_config(["model=mlp"]).model.ranker.activation == "relu"
    cfg = train_config(["model=mlp", "model.ranker.activation=sigmoid", *TINY_DATA])
    assert cfg.model.ranker.activation == "sigmoid"
