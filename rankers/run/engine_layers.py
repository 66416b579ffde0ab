"""A linear or MLP scorer as a search engine computes it: float64 layers over the raw feature
values the engine hands the model, and the names the engine gives those features. The engine
formats (Solr's JSON, RankLib's text, OpenSearch's bodies) are each written from these.

An engine computes each feature and passes its raw value, so the serving record's z-score is
folded into the first layer's weights (``W (x - m) / s + b = (W / s) x + (b - W m / s)``, in
float64). A non-affine feature transform (``data.transform=log1p`` or ``gaussrank``) has no
place in these models: it is refused, naming ``data.transform=none``. What is not a linear
scorer or a plain MLP (a transformer, ...) is refused, naming ``export.format=onnx``.

Public API::

    folded_layers(scorer, engine) -> [EngineLayer(matrix [out, in], bias [out], activation)]
    LAYER_ACTIVATIONS          # torch activation module -> its name ("relu", "sigmoid", ...)
    BIAS_FEATURE               # the constant-1 feature of engines whose linear model has no bias
    check_feature_names(feature_names, n_features) -> list[str]    # None: feature_1..feature_F

Example:
    >>> from differank.rankers.checkpoints import Scorer
    >>> from differank.rankers.scorers.linear import LinearRanker
    >>> mean, std = torch.tensor([1.0, 0.0]), torch.tensor([2.0, 1.0])
    >>> scorer = Scorer(LinearRanker(2), mean=mean, std=std)
    >>> with torch.no_grad():
    ...     _ = scorer.ranker.linear.weight.copy_(torch.tensor([[4.0, 3.0]]))
    >>> (layer,) = folded_layers(scorer, "Solr")
    >>> layer.matrix.tolist(), layer.bias.tolist(), layer.activation
    ([[2.0, 3.0]], [-2.0], 'identity')
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import nn

from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.scorers.mlp import MLPRanker

BIAS_FEATURE = "differank_bias"  # an intercept-less linear model's bias: a constant-1 feature
# torch's activation modules by the names the engines (and model.ranker.activation) give them
LAYER_ACTIVATIONS: dict[type[nn.Module], str] = {
    nn.ReLU: "relu",
    nn.Sigmoid: "sigmoid",
    nn.Tanh: "tanh",
    nn.Identity: "identity",
}


class EngineLayer(NamedTuple):
    """``activation(matrix @ input + bias)``: float64 ``matrix`` [out, in] and ``bias`` [out]."""

    matrix: torch.Tensor
    bias: torch.Tensor
    activation: str


def folded_layers(scorer, engine: str) -> list[EngineLayer]:
    """The layers of a :class:`~differank.rankers.checkpoints.Scorer` of a linear or MLP ranker,
    float64, its z-score folded into the first, so that they score raw feature values; the
    last has one output and ``identity``. ``engine`` names the format in the errors that refuse
    what it cannot compute (a non-affine transform, another ranker)."""
    if not isinstance(scorer.transform, nn.Identity):
        name = getattr(scorer.transform, "name", type(scorer.transform).__name__)
        raise ValueError(
            f"{engine} reads the feature values as the engine computes them; the scorer applies "
            f"data.transform={name} first, which is not affine and cannot be folded into the "
            f"weights: train with data.transform=none to export to {engine} (or serve the ONNX "
            "export, which keeps the transform)"
        )
    ranker = scorer.ranker
    if isinstance(ranker, LinearRanker):
        modules: list[nn.Module] = [ranker.linear]
    elif isinstance(ranker, MLPRanker):
        modules = [m for m in ranker.network if not isinstance(m, nn.Dropout)]  # eval: identity
    else:
        raise ValueError(
            f"{engine} holds linear models and plain MLPs; this scorer is a "
            f"{type(ranker).__name__}: export it with export.format=onnx (Vespa, Triton) instead"
        )
    layers: list[EngineLayer] = []
    for module in modules:
        if isinstance(module, nn.Linear):
            bias = torch.zeros(module.out_features) if module.bias is None else module.bias.detach()
            layers.append(EngineLayer(module.weight.detach().double(), bias.double(), "identity"))
        elif type(module) in LAYER_ACTIVATIONS and layers and layers[-1].activation == "identity":
            layers[-1] = layers[-1]._replace(activation=LAYER_ACTIVATIONS[type(module)])
        else:
            raise ValueError(
                f"{engine} has no layer for {type(module).__name__}; its activations are "
                f"{sorted(set(LAYER_ACTIVATIONS.values()))}"
            )
    first = layers[0]
    scale = 1.0 / scorer.std.double()
    layers[0] = first._replace(
        matrix=first.matrix * scale, bias=first.bias - first.matrix @ (scorer.mean.double() * scale)
    )
    return layers


def default_feature_names(n_features: int) -> list[str]:
    """``feature_1 .. feature_F``: LETOR's feature ids as engine feature names."""
    return [f"feature_{number}" for number in range(1, n_features + 1)]


def check_feature_names(feature_names: Sequence[str] | None, n_features: int) -> list[str]:
    """``feature_names`` (``export.feature_names``) as a list of ``n_features`` distinct
    non-empty strings (None: the defaults); the error names what is wrong."""
    if feature_names is None:
        return default_feature_names(n_features)
    names = [str(name) for name in feature_names]
    if len(names) != n_features:
        raise ValueError(
            f"export.feature_names has {len(names)} names, the scorer reads {n_features} "
            "features: give one name per feature, in LETOR order (null: feature_1..feature_F)"
        )
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated or not all(names) or BIAS_FEATURE in names:
        raise ValueError(
            f"export.feature_names must be distinct, non-empty and not {BIAS_FEATURE!r}; "
            f"repeated: {repeated}"
        )
    return names
