"""A linear or MLP scorer as Apache Solr's Learning-to-Rank JSON: a model for Solr's model store
(``LinearModel``, or ``NeuralNetworkModel`` with layers of matrix, bias and activation) and the
feature store it reads.

Solr computes each feature and hands the model the raw values, so the serving record's z-score
is folded into the first layer's weights, and a non-affine feature transform is refused
(:mod:`~differank.rankers.run.engine_layers`, which every engine format shares). Solr's
``LinearModel`` has no intercept, so a linear scorer's bias is the weight of one extra feature,
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
    >>> import torch
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

from differank.rankers.checkpoints.serving import MISSING_FEATURE_VALUE
from differank.rankers.run.engine_layers import BIAS_FEATURE, check_feature_names, folded_layers
from differank.rankers.scorers.linear import LinearRanker

LINEAR_MODEL = "org.apache.solr.ltr.model.LinearModel"
NEURAL_NETWORK_MODEL = "org.apache.solr.ltr.model.NeuralNetworkModel"
FIELD_VALUE_FEATURE = "org.apache.solr.ltr.feature.FieldValueFeature"
VALUE_FEATURE = "org.apache.solr.ltr.feature.ValueFeature"


def solr_model(scorer, name: str, feature_names: Sequence[str], store: str) -> dict[str, Any]:
    """The model-store JSON (as a dict) of a linear or MLP ``scorer`` (a
    :class:`~differank.rankers.checkpoints.Scorer`): a ``LinearModel`` whose weights include
    ``BIAS_FEATURE``'s, or a ``NeuralNetworkModel`` whose last layer has one output."""
    layers = folded_layers(scorer, "Solr")
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
