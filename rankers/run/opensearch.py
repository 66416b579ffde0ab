"""A scorer as the OpenSearch Learning-to-Rank plugin's request bodies (the Elasticsearch LTR
plugin reads the same): a feature set, and the model created from it.

* ``featureset.json``, the body of ``POST _ltr/_featureset/NAME``:
  ``{"featureset": {"name", "features": [{"name", "params": ["keywords"],
  "template_language": "mustache", "template": {...}}]}}``. The plugin computes a feature as
  the score of its query template, and hands a model the features in this order: feature
  ``i`` of the set is differank's (and LETOR's) feature ``i``. Each feature is named from
  ``export.feature_names`` (default ``feature_1 .. feature_F``) and reads the document field
  of its name (``function_score`` with ``field_value_factor``, ``missing: 0``: an absent field
  counts 0, LETOR's rule); replace a template with your own query (``{{keywords}}`` is the
  ``sltr`` query's ``keywords`` parameter), keeping its name and place. A query's score cannot
  be negative in OpenSearch: a feature with negative values needs a definition of its own.
* ``model.json``, the body of ``POST _ltr/_featureset/NAME/_createmodel``:
  ``{"model": {"name", "model": {"type", "definition"}}}``, made by :func:`create_model_body`
  from a model type and its definition string:

  - ``model/linear`` (a linear scorer): the JSON object ``{feature name: weight}``; the plugin's
    ``LinearRanker`` scores ``Σ_i w_i f_i`` (float32) with no intercept, so the bias is the
    weight of ``differank_bias``, a last feature of constant 1 (``constant_score`` over
    ``match_all``, boost 1): scores equal the PyTorch scorer's;
  - ``model/ranklib`` (an MLP with sigmoid hidden layers): RankLib's ``RankNet`` text
    (:mod:`~differank.rankers.run.ranklib`), whose score is ``sigmoid`` of differank's;
  - ``model/xgboost+json`` (a tree student) is one more entry of :data:`MODEL_TYPES`.

A feature the plugin cannot compute (its query does not match the document) is 0 for every
model type. The z-score is folded into the weights and a non-affine ``data.transform`` is
refused (:mod:`~differank.rankers.run.engine_layers`); so is an MLP RankLib cannot express
(relu, tanh: ``model.ranker.activation=sigmoid``) and any other ranker.
``docs/serving.md#opensearch`` has the ``curl`` commands.

Public API::

    opensearch_files(scorer, folder, name="differank", feature_names=None) -> {path: json text}
    opensearch_feature_set(name, feature_names, bias) -> dict
    opensearch_model(scorer, feature_names) -> (model type, definition string)
    create_model_body(name, model_type, definition) -> dict

Example:
    >>> create_model_body("m", "model/linear", '{"feature_1": 0.5}')
    {'model': {'name': 'm', 'model': {'type': 'model/linear', 'definition': '{"feature_1": 0.5}'}}}
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from differank.rankers.run.engine_layers import BIAS_FEATURE, check_feature_names, folded_layers
from differank.rankers.run.ranklib import ranklib_model

LINEAR = "model/linear"
RANKLIB = "model/ranklib"
ENGINE = "OpenSearch's LTR plugin"
KEYWORDS = "keywords"  # the sltr query's parameter a replaced template may use


def _linear_definition(scorer, names: Sequence[str]) -> str:
    """``model/linear``'s ``{feature: weight}``, the bias as :data:`BIAS_FEATURE`'s weight."""
    (layer,) = folded_layers(scorer, ENGINE)
    weights = dict(zip(names, layer.matrix[0].tolist(), strict=True))
    weights[BIAS_FEATURE] = float(layer.bias[0])
    return json.dumps(weights)


# each model type the plugin reads: whether its feature set needs BIAS_FEATURE, and its
# definition string of a scorer whose features have these names. Another model type (a tree
# student's model/xgboost+json) is one more entry.
MODEL_TYPES: dict[str, tuple[bool, Callable[[Any, Sequence[str]], str]]] = {
    LINEAR: (True, _linear_definition),
    RANKLIB: (False, lambda scorer, _: ranklib_model(scorer)),
}


def opensearch_model(scorer, feature_names: Sequence[str]) -> tuple[str, str]:
    """``(model type, definition)`` of a scorer: ``model/linear`` for one affine layer (a
    linear scorer), ``model/ranklib`` for a sigmoid MLP; what neither holds is refused."""
    layers = folded_layers(scorer, ENGINE)
    model_type = LINEAR if len(layers) == 1 else RANKLIB
    return model_type, MODEL_TYPES[model_type][1](scorer, feature_names)


def create_model_body(name: str, model_type: str, definition: str) -> dict[str, Any]:
    """The body of ``POST _ltr/_featureset/SET/_createmodel``: model ``name`` of ``model_type``
    (``model/linear``, ``model/ranklib``, ``model/xgboost+json``) from its ``definition``
    string (the plugin parses a string definition as the model type's own text)."""
    return {"model": {"name": name, "model": {"type": model_type, "definition": definition}}}


def _field_feature(name: str) -> dict[str, Any]:
    """A feature reading the document field ``name`` (0 where the document has none)."""
    template = {
        "function_score": {
            "query": {"match_all": {}},
            "field_value_factor": {"field": name, "missing": 0},
            "boost_mode": "replace",
        }
    }
    return {
        "name": name,
        "params": [KEYWORDS],
        "template_language": "mustache",
        "template": template,
    }


def opensearch_feature_set(name: str, feature_names: Sequence[str], bias: bool) -> dict[str, Any]:
    """The body of ``POST _ltr/_featureset/NAME``: one field feature per name, in order, and
    with ``bias`` the constant-1 :data:`BIAS_FEATURE` last."""
    features = [_field_feature(feature) for feature in feature_names]
    if bias:
        constant = {"constant_score": {"filter": {"match_all": {}}, "boost": 1.0}}
        features.append(
            {
                "name": BIAS_FEATURE,
                "params": [KEYWORDS],
                "template_language": "mustache",
                "template": constant,
            }
        )
    return {"featureset": {"name": name, "features": features}}


def opensearch_files(
    scorer, folder: str | Path, name: str = "differank", feature_names: Sequence[str] | None = None
) -> dict[Path, str]:
    """``{folder/featureset.json: ..., folder/model.json: ...}``: the feature set ``name`` and
    the model ``name`` created from it, for
    :func:`~differank.datamodules.atomic_files.write_files`."""
    folder = Path(folder)
    names = check_feature_names(feature_names, scorer.n_features)
    model_type, definition = opensearch_model(scorer, names)
    feature_set = opensearch_feature_set(name, names, bias=MODEL_TYPES[model_type][0])
    model = create_model_body(name, model_type, definition)
    return {
        folder / "featureset.json": json.dumps(feature_set, indent=2) + "\n",
        folder / "model.json": json.dumps(model, indent=2) + "\n",
    }
