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
  - ``model/xgboost+json`` (a tree student, ``rankers/students/export_task.py``): the object
    form ``{"objective": "reg:linear", "splits": [trees], "missing_as_zero": true}``
    (:func:`xgboost_definition`): the plain sum of the leaves, and a feature the plugin could
    not compute scored as 0 rather than sent down each node's ``missing`` branch.

A feature the plugin cannot compute (its query does not match the document) is 0 for every
model type. The z-score is folded into the weights and a non-affine ``data.transform`` is
refused (:mod:`~differank.rankers.run.engine_layers`); so is an MLP RankLib cannot express
(relu, tanh: ``model.ranker.activation=sigmoid``) and any other ranker.
``docs/serving.md#opensearch`` has the ``curl`` commands.

Public API::

    opensearch_files(scorer, folder, name="differank", feature_names=None) -> {path: json text}
    opensearch_bodies(folder, name, feature_names, model_type, definition) -> {path: json text}
    opensearch_model(scorer, feature_names) -> (model type, definition string)
    xgboost_definition(trees) -> model/xgboost+json definition string
    opensearch_feature_set(name, feature_names, bias) -> dict
    create_model_body(name, model_type, definition) -> dict
    MODEL_TYPES = {model type: whether its feature set needs BIAS_FEATURE}

Example:
    >>> create_model_body("m", "model/linear", '{"feature_1": 0.5}')
    {'model': {'name': 'm', 'model': {'type': 'model/linear', 'definition': '{"feature_1": 0.5}'}}}
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from differank.rankers.run.engine_layers import BIAS_FEATURE, check_feature_names, folded_layers
from differank.rankers.run.ranklib import ranklib_text

LINEAR = "model/linear"
RANKLIB = "model/ranklib"
XGBOOST = "model/xgboost+json"
ENGINE = "OpenSearch's LTR plugin"
KEYWORDS = "keywords"  # the sltr query's parameter, for a template replaced by a real query


# the plugin's model types differank writes, and whether a type's feature set needs the
# constant BIAS_FEATURE (model/linear has no intercept; trees need none)
MODEL_TYPES: dict[str, bool] = {LINEAR: True, RANKLIB: False, XGBOOST: False}


def opensearch_model(scorer, feature_names: Sequence[str]) -> tuple[str, str]:
    """``(model type, definition)`` of a scorer: ``model/linear``'s JSON ``{feature: weight}``
    (the bias as :data:`BIAS_FEATURE`'s weight) for one affine layer (a linear scorer),
    ``model/ranklib``'s RankNet text for a sigmoid MLP; what neither holds is refused."""
    layers = folded_layers(scorer, ENGINE)
    if len(layers) > 1:
        return RANKLIB, ranklib_text(layers)
    (layer,) = layers
    weights = dict(zip(feature_names, layer.matrix[0].tolist(), strict=True))
    weights[BIAS_FEATURE] = float(layer.bias[0])
    return LINEAR, json.dumps(weights)


def xgboost_definition(trees: Sequence[dict]) -> str:
    """``model/xgboost+json``'s object form of a tree student's dump (``trees``, XGBoost's JSON
    dump layout): objective ``reg:linear`` (the plugin's no-op normalizer: the score is the sum
    of the leaves, as the student's) and ``missing_as_zero`` (the plugin's opt-in: an unset
    feature is 0, LETOR's rule for an absent one, instead of NaN down ``missing``)."""
    return json.dumps({"objective": "reg:linear", "splits": list(trees), "missing_as_zero": True})


def create_model_body(name: str, model_type: str, definition: str) -> dict[str, Any]:
    """The body of ``POST _ltr/_featureset/SET/_createmodel``: model ``name`` of ``model_type``
    (``model/linear``, ``model/ranklib``, ``model/xgboost+json``) from its ``definition``
    string (the plugin parses a string definition as the model type's own text)."""
    return {"model": {"name": name, "model": {"type": model_type, "definition": definition}}}


def _feature(name: str, template: dict[str, Any]) -> dict[str, Any]:
    """A feature of the set: ``name`` scored by the query ``template``."""
    return {
        "name": name,
        "params": [KEYWORDS],
        "template_language": "mustache",
        "template": template,
    }


def _field_template(field: str) -> dict[str, Any]:
    """The query whose score is the document's value of ``field`` (0 where it has none)."""
    return {
        "function_score": {
            "query": {"match_all": {}},
            "field_value_factor": {"field": field, "missing": 0},
            "boost_mode": "replace",
        }
    }


CONSTANT_ONE = {
    "constant_score": {"filter": {"match_all": {}}, "boost": 1.0}
}  # every document scores 1


def opensearch_feature_set(name: str, feature_names: Sequence[str], bias: bool) -> dict[str, Any]:
    """The body of ``POST _ltr/_featureset/NAME``: one feature per name, in order, reading the
    field of its name, and with ``bias`` the constant-1 :data:`BIAS_FEATURE` last."""
    features = [_feature(feature, _field_template(feature)) for feature in feature_names]
    if bias:
        features.append(_feature(BIAS_FEATURE, CONSTANT_ONE))
    return {"featureset": {"name": name, "features": features}}


def opensearch_bodies(
    folder: str | Path, name: str, feature_names: Sequence[str], model_type: str, definition: str
) -> dict[Path, str]:
    """``{folder/featureset.json: ..., folder/model.json: ...}``: the feature set ``name`` of
    ``feature_names`` (with :data:`BIAS_FEATURE` where :data:`MODEL_TYPES` says the type needs
    it) and the model ``name`` of ``model_type`` made from it, for
    :func:`~differank.datamodules.atomic_files.write_files`."""
    folder = Path(folder)
    feature_set = opensearch_feature_set(name, feature_names, bias=MODEL_TYPES[model_type])
    model = create_model_body(name, model_type, definition)
    return {
        folder / "featureset.json": json.dumps(feature_set, indent=2) + "\n",
        folder / "model.json": json.dumps(model, indent=2) + "\n",
    }


def opensearch_files(
    scorer, folder: str | Path, name: str = "differank", feature_names: Sequence[str] | None = None
) -> dict[Path, str]:
    """:func:`opensearch_bodies` of a linear or sigmoid-MLP scorer (:func:`opensearch_model`);
    ``feature_names`` None: ``feature_1 .. feature_F``."""
    names = check_feature_names(feature_names, scorer.n_features)
    return opensearch_bodies(folder, name, names, *opensearch_model(scorer, names))
