"""OpenSearch LTR bodies: the written feature set and ``_createmodel`` body, scored as the
plugin scores them (each feature the score of its query template, then ``model/linear``'s
float sum or ``model/ranklib``'s RankNet: tests/oracles_engines.py, from the plugin's and
RankLib's sources), match the PyTorch scorer on 10,000 random rows within 1e-5, documents
without some feature fields included; the feature set's shape is the plugin's."""

import json

import numpy as np
import pytest

from differank.datamodules.atomic_files import write_files
from differank.rankers.run.engine_layers import BIAS_FEATURE
from differank.rankers.run.opensearch import MODEL_TYPES, opensearch_bodies, opensearch_files
from differank.rankers.scorers.mlp import MLPRanker
from tests.oracles_engines import (
    opensearch_feature_scores,
    opensearch_linear_scores,
    opensearch_ranklib_scores,
)
from tests.rankers.run.test_ranklib import (
    F,
    letor_like_scorer,
    linear,
    rows_with_unknown_features,
    scorer_scores,
    sigmoid_mlp,
)


def written(scorer, tmp_path, **options) -> tuple[dict, dict]:
    write_files(opensearch_files(scorer, tmp_path, name="mq2008", **options))
    feature_set = json.loads((tmp_path / "featureset.json").read_text())
    body = json.loads((tmp_path / "model.json").read_text())
    return feature_set, body


@pytest.mark.parametrize("make", [linear, sigmoid_mlp], ids=["linear", "sigmoid-mlp"])
def test_the_written_bodies_score_like_the_scorer_by_the_plugins_formulas(make, tmp_path):
    scorer = letor_like_scorer(make())
    feature_set, body = written(scorer, tmp_path)
    assert body["model"]["name"] == feature_set["featureset"]["name"] == "mq2008"
    model = body["model"]["model"]
    features, engine = rows_with_unknown_features()
    fields = {f"feature_{i + 1}": engine[:, i] for i in range(F)}
    values = opensearch_feature_scores(feature_set, fields, len(engine))
    names = [feature["name"] for feature in feature_set["featureset"]["features"]]
    expected = scorer_scores(scorer, features)
    if model["type"] == "model/linear":
        served = opensearch_linear_scores(model["definition"], names, values)
    else:
        assert model["type"] == "model/ranklib"
        logistic = opensearch_ranklib_scores(model["definition"], values)  # float32
        assert np.abs(logistic - 1 / (1 + np.exp(-expected))).max() < 1e-5
        logistic = logistic.astype(np.float64)
        served = np.log(logistic / (1 - logistic))  # RankNet's output neuron is a sigmoid
    assert expected.std() > 0.1
    assert np.abs(served - expected).max() < 1e-5, np.abs(served - expected).max()


def test_linear_models_carry_their_bias_as_a_constant_last_feature(tmp_path):
    scorer = letor_like_scorer(linear())
    feature_set, body = written(scorer, tmp_path)
    features = feature_set["featureset"]["features"]
    assert [f["name"] for f in features] == [
        *(f"feature_{i}" for i in range(1, F + 1)),
        BIAS_FEATURE,
    ]
    weights = json.loads(body["model"]["model"]["definition"])
    weight, bias = scorer.ranker.linear.weight.detach()[0], scorer.ranker.linear.bias.detach()
    folded = bias.double() - (weight.double() * scorer.mean / scorer.std).sum()
    assert weights[BIAS_FEATURE] == pytest.approx(float(folded), abs=1e-12)


def test_feature_names_name_the_features_and_the_fields_they_read(tmp_path):
    names = [f"bm25_{i}" for i in range(F)]
    feature_set, body = written(letor_like_scorer(sigmoid_mlp()), tmp_path, feature_names=names)
    features = feature_set["featureset"]["features"]
    assert [f["name"] for f in features] == names  # no bias feature: RankNet has its own
    fields = [f["template"]["function_score"]["field_value_factor"]["field"] for f in features]
    assert fields == names
    assert body["model"]["model"]["definition"].startswith("## RankNet\n")


def test_a_relu_mlp_is_refused_naming_the_fix(tmp_path):
    scorer = letor_like_scorer(MLPRanker(F, hidden=(4,)))
    with pytest.raises(ValueError, match="model.ranker.activation=sigmoid"):
        opensearch_files(scorer, tmp_path)


def test_another_model_type_is_one_more_entry(monkeypatch, tmp_path):
    """A tree student's model/xgboost+json: one MODEL_TYPES entry, and its bodies are
    opensearch_bodies of its definition string (a feature set without the bias feature)."""
    monkeypatch.setitem(MODEL_TYPES, "model/xgboost+json", False)
    files = opensearch_bodies(tmp_path, "trees", ["a", "b"], "model/xgboost+json", "[]")
    feature_set = json.loads(files[tmp_path / "featureset.json"])
    assert [feature["name"] for feature in feature_set["featureset"]["features"]] == ["a", "b"]
    assert json.loads(files[tmp_path / "model.json"]) == {
        "model": {"name": "trees", "model": {"type": "model/xgboost+json", "definition": "[]"}}
    }
