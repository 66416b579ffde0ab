"""A linear or MLP scorer as Apache Solr's Learning-to-Rank JSON: a model for Solr's model store
(``LinearModel``, or ``NeuralNetworkModel`` with layers of matrix, bias and activation) and the
feature store it reads.

Solr computes each feature and hands the model the raw values, so the serving record's z-score
is folded into the first layer's weights (``W (x - m) / s + b = (W / s) x + (b - W m / s)``,
in float64). A non-affine feature transform (``data.transform=log1p`` or ``gaussrank``) has no
place in these models: it is refused, naming ``data.transform=none``. Solr's ``LinearModel``
has no intercept, so a linear scorer's bias is the weight of one extra feature,
``BIAS_FEATURE``, a ``ValueFeature`` of constant 1 in the store.

The feature store defines each LETOR feature as a ``FieldValueFeature`` reading the document
field of the same name (``feature_1 .. feature_F``, LETOR's feature ids, unless names are given):
index the features under those field names, or replace a feature's class and params with your
own definition, keeping its name. A document without the field gets the feature's
``defaultValue`` (Solr's ``Feature.getDefaultValue``), written as ``MISSING_FEATURE_VALUE``, the
LETOR reader's value of an absent feature (docs/serving.md#missing-values).
``docs/serving.md#solr`` has the upload commands.

Public API::

    solr_files(scorer, folder, name="differank", feature_names=None) -> {path: json text}
    solr_model(scorer, name, feature_names, store) -> dict     # the model-store JSON
    solr_feature_store(feature_names, store, bias) -> list      # the feature-store JSON

Example:
    >>> from differank.rankers.checkpoints import Scorer
    >>> from differank.rankers.scorers.linear import LinearRanker
    >>> mean, std = torch.tensor([1.0, 0.0]), torch.tensor([2.0, 1.0])
    >>> scorer = Scorer(LinearRanker(2), mean=mean, std=std)
    >>> with torch.no_grad():
    ...     _ = scorer.ranker.linear.weight.copy_(torch.tensor([[4.0, 3.0]]))
    >>> solr_model(scorer, "m", ["a", "b"], "s")["params"]
    {'weights': {'a': 2.0, 'b': 3.0, 'differank_bias': -2.0}}
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from differank.rankers.checkpoints.serving import MISSING_FEATURE_VALUE
from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.scorers.mlp import MLPRanker

LINEAR_MODEL = "org.apache.solr.ltr.model.LinearModel"
NEURAL_NETWORK_MODEL = "org.apache.solr.ltr.model.NeuralNetworkModel"
FIELD_VALUE_FEATURE = "org.apache.solr.ltr.feature.FieldValueFeature"
VALUE_FEATURE = "org.apache.solr.ltr.feature.ValueFeature"
BIAS_FEATURE = "differank_bias"  # LinearModel's intercept: a constant-1 feature
# torch's activation modules and the names Solr's NeuralNetworkModel gives the same functions
ACTIVATIONS: dict[type[nn.Module], str] = {
    nn.ReLU: "relu",
    nn.Sigmoid: "sigmoid",
    nn.Tanh: "tanh",
    nn.Identity: "identity",
}


def default_feature_names(n_features: int) -> list[str]:
    """``feature_1 .. feature_F``: LETOR's feature ids as Solr feature names."""
    return [f"feature_{number}" for number in range(1, n_features + 1)]


def check_feature_names(feature_names: Sequence[str] | None, n_features: int) -> list[str]:
    """``feature_names`` as a list of ``n_features`` distinct non-empty strings (None: the
    defaults); the error names what is wrong."""
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


def _folded_layers(scorer) -> list[tuple[torch.Tensor, torch.Tensor, str]]:
    """``(matrix [out, in], bias [out], activation)`` per layer, float64, the scorer's z-score
    folded into the first; refuses what Solr's models cannot compute."""
    if not isinstance(scorer.transform, nn.Identity):
        name = getattr(scorer.transform, "name", type(scorer.transform).__name__)
        raise ValueError(
            f"Solr's models read the feature values as Solr computes them; the scorer applies "
            f"data.transform={name} first, which is not affine and cannot be folded into the "
            "weights: train with data.transform=none to export to Solr (or serve the ONNX "
            "export, which keeps the transform)"
        )
    ranker = scorer.ranker
    if isinstance(ranker, LinearRanker):
        modules: list[nn.Module] = [ranker.linear]
    elif isinstance(ranker, MLPRanker):
        modules = [m for m in ranker.network if not isinstance(m, nn.Dropout)]  # eval: identity
    else:
        raise ValueError(
            f"Solr's LTR JSON holds linear models and plain MLPs; this scorer is a "
            f"{type(ranker).__name__}: export it with export.format=onnx (Vespa, Triton) instead"
        )
    layers: list[tuple[torch.Tensor, torch.Tensor, str]] = []
    for module in modules:
        if isinstance(module, nn.Linear):
            bias = torch.zeros(module.out_features) if module.bias is None else module.bias.detach()
            layers.append((module.weight.detach().double(), bias.double(), "identity"))
        elif type(module) in ACTIVATIONS and layers and layers[-1][2] == "identity":
            layers[-1] = (*layers[-1][:2], ACTIVATIONS[type(module)])
        else:
            raise ValueError(
                f"Solr's NeuralNetworkModel has no layer for {type(module).__name__}; its "
                f"activations are {sorted(set(ACTIVATIONS.values()))}"
            )
    matrix, bias, activation = layers[0]
    scale = 1.0 / scorer.std.double()
    layers[0] = (matrix * scale, bias - matrix @ (scorer.mean.double() * scale), activation)
    return layers


def solr_model(scorer, name: str, feature_names: Sequence[str], store: str) -> dict[str, Any]:
    """The model-store JSON (as a dict) of a linear or MLP ``scorer`` (a
    :class:`~differank.rankers.checkpoints.Scorer`): a ``LinearModel`` whose weights include
    ``BIAS_FEATURE``'s, or a ``NeuralNetworkModel`` whose last layer has one output."""
    layers = _folded_layers(scorer)
    names = check_feature_names(feature_names, scorer.n_features)
    features = [{"name": feature} for feature in names]
    if isinstance(scorer.ranker, LinearRanker):
        ((matrix, bias, _),) = layers
        weights = dict(zip(names, matrix[0].tolist(), strict=True))
        weights[BIAS_FEATURE] = float(bias[0])
        model_class, features = LINEAR_MODEL, [*features, {"name": BIAS_FEATURE}]
        params: dict[str, Any] = {"weights": weights}
    else:
        model_class = NEURAL_NETWORK_MODEL
        params = {
            "layers": [
                {"matrix": matrix.tolist(), "bias": bias.tolist(), "activation": activation}
                for matrix, bias, activation in layers
            ]
        }
    return {
        "store": store,
        "class": model_class,
        "name": name,
        "features": features,
        "params": params,
    }


def solr_feature_store(feature_names: Sequence[str], store: str, bias: bool) -> list[dict]:
    """The feature-store JSON (as a list): one ``FieldValueFeature`` per name reading the field
    of that name (``MISSING_FEATURE_VALUE`` where a document lacks it), and with ``bias`` the
    constant ``BIAS_FEATURE``."""
    features = [
        {
            "store": store,
            "name": name,
            "class": FIELD_VALUE_FEATURE,
            "params": {"field": name, "defaultValue": MISSING_FEATURE_VALUE},
        }
        for name in feature_names
    ]
    if bias:
        constant = {
            "store": store,
            "name": BIAS_FEATURE,
            "class": VALUE_FEATURE,
            "params": {"value": 1.0},
        }
        features.append(constant)
    return features


def solr_files(
    scorer, folder: str | Path, name: str = "differank", feature_names: Sequence[str] | None = None
) -> dict[Path, str]:
    """``{folder/model.json: ..., folder/features.json: ...}`` for :func:`solr_model` and
    :func:`solr_feature_store` (feature store named ``name``), for
    :func:`~differank.datamodules.atomic_files.write_files`."""
    folder = Path(folder)
    names = check_feature_names(feature_names, scorer.n_features)
    model = solr_model(scorer, name, names, store=name)
    store = solr_feature_store(names, name, bias=model["class"] == LINEAR_MODEL)
    return {
        folder / "model.json": json.dumps(model, indent=2) + "\n",
        folder / "features.json": json.dumps(store, indent=2) + "\n",
    }
