"""Solr LTR JSON: the written model and feature store, evaluated by Solr's documented formulas in
NumPy (float32, as Solr computes), score 10,000 random LETOR-like feature vectors like the
PyTorch scorer (serving z-score folded into the weights) within 1e-5; what Solr cannot compute
is refused by name."""

import json

import numpy as np
import pytest
import torch

from differank.datamodules.atomic_files import write_files
from differank.datamodules.transforms import SignedLog1p
from differank.rankers.checkpoints import Scorer
from differank.rankers.run.solr import BIAS_FEATURE, solr_files
from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.scorers.mlp import MLPRanker
from differank.rankers.scorers.transformer import TransformerRanker

F = 46
ROWS = 10_000


def solr_scores(model: dict, store: list[dict], fields: dict[str, np.ndarray]) -> np.ndarray:
    """Solr's scores of documents whose indexed fields are ``fields`` (name -> [N] values): each
    model feature from its store definition (FieldValueFeature: the field's value;
    ValueFeature: its constant), then LinearModel ``Σ_i w_i f_i`` or NeuralNetworkModel
    layer by layer ``activation(matrix · input + bias)``, in float32."""
    definitions = {feature["name"]: feature for feature in store}
    columns = []
    rows = len(next(iter(fields.values())))
    for feature in model["features"]:
        definition = definitions[feature["name"]]
        assert definition["store"] == model["store"]
        if definition["class"] == "org.apache.solr.ltr.feature.FieldValueFeature":
            columns.append(fields[definition["params"]["field"]].astype(np.float32))
        else:
            assert definition["class"] == "org.apache.solr.ltr.feature.ValueFeature"
            columns.append(np.full(rows, definition["params"]["value"], dtype=np.float32))
    values = np.stack(columns, axis=1)  # [N, model features]
    if model["class"] == "org.apache.solr.ltr.model.LinearModel":
        weights = model["params"]["weights"]
        w = np.array([weights[f["name"]] for f in model["features"]], dtype=np.float32)
        score = np.zeros(rows, dtype=np.float32)
        for i in range(len(w)):  # Solr adds the weighted features one by one
            score += w[i] * values[:, i]
        return score
    assert model["class"] == "org.apache.solr.ltr.model.NeuralNetworkModel"
    activations = {
        "identity": lambda x: x,
        "relu": lambda x: np.maximum(x, np.float32(0)),
        "sigmoid": lambda x: np.float32(1) / (np.float32(1) + np.exp(-x)),
        "tanh": np.tanh,
    }
    hidden = values
    for layer in model["params"]["layers"]:
        matrix = np.array(layer["matrix"], dtype=np.float32)  # [out, in]
        bias = np.array(layer["bias"], dtype=np.float32)
        hidden = activations[layer["activation"]](hidden @ matrix.T + bias).astype(np.float32)
    assert hidden.shape == (rows, 1), "the last layer must have one output"
    return hidden[:, 0]


def letor_like_scorer(ranker) -> Scorer:
    """A scorer behind z-score statistics like MQ2008's (features in [0, 1])."""
    generator = torch.Generator().manual_seed(7)
    mean = torch.rand(F, generator=generator, dtype=torch.float64) * 0.5
    std = 0.05 + torch.rand(F, generator=generator, dtype=torch.float64) * 0.3
    return Scorer(ranker, mean, std).eval()


def linear() -> LinearRanker:
    torch.manual_seed(0)
    ranker = LinearRanker(F)
    torch.nn.init.normal_(ranker.linear.weight, std=F**-0.5)
    torch.nn.init.normal_(ranker.linear.bias)
    return ranker


def mlp() -> MLPRanker:
    torch.manual_seed(0)
    return MLPRanker(F, hidden=(64, 32))  # conf/model/mlp.yaml's sizes


@pytest.mark.parametrize("make", [linear, mlp], ids=["linear", "mlp"])
def test_the_written_json_scores_like_the_scorer_by_solrs_formula(make, tmp_path):
    scorer = letor_like_scorer(make())
    write_files(solr_files(scorer, tmp_path, name="mq2008"))
    model = json.loads((tmp_path / "model.json").read_text())
    store = json.loads((tmp_path / "features.json").read_text())
    assert model["name"] == model["store"] == "mq2008"
    features = torch.rand(ROWS, F, generator=torch.Generator().manual_seed(1))
    fields = {f"feature_{i + 1}": features[:, i].numpy() for i in range(F)}
    solr = solr_scores(model, store, fields)
    with torch.no_grad():
        expected = scorer(features[None])[0].double().numpy()
    assert expected.std() > 0.02  # scores that differ: a wrong weight would show
    assert np.abs(solr - expected).max() < 1e-5, np.abs(solr - expected).max()


def test_linear_models_carry_their_bias_as_a_constant_feature(tmp_path):
    scorer = letor_like_scorer(linear())
    files = solr_files(scorer, tmp_path)
    model = json.loads(files[tmp_path / "model.json"])
    store = json.loads(files[tmp_path / "features.json"])
    assert [f["name"] for f in store] == [*(f"feature_{i}" for i in range(1, F + 1)), BIAS_FEATURE]
    assert store[-1]["params"] == {"value": 1.0}
    weight, bias = scorer.ranker.linear.weight.detach()[0], scorer.ranker.linear.bias.detach()
    folded = bias.double() - (weight.double() * scorer.mean / scorer.std).sum()
    assert model["params"]["weights"][BIAS_FEATURE] == pytest.approx(float(folded), abs=1e-12)


def test_feature_names_name_the_fields(tmp_path):
    names = [f"bm25_{i}" for i in range(F)]
    files = solr_files(letor_like_scorer(mlp()), tmp_path, feature_names=names)
    model = json.loads(files[tmp_path / "model.json"])
    store = json.loads(files[tmp_path / "features.json"])
    assert [f["name"] for f in model["features"]] == names
    assert [f["params"]["field"] for f in store] == names  # no bias feature for an MLP


@pytest.mark.parametrize(
    "names, message",
    [(["a"] * 3, "has 3 names, the scorer reads 46"), (["a"] * F, "must be distinct")],
)
def test_wrong_feature_names_are_refused(names, message, tmp_path):
    with pytest.raises(ValueError, match=message):
        solr_files(letor_like_scorer(linear()), tmp_path, feature_names=names)


def test_a_non_affine_transform_is_refused_naming_the_option(tmp_path):
    scorer = Scorer(linear(), transform=SignedLog1p())
    with pytest.raises(ValueError, match=r"data.transform=log1p.*train with data.transform=none"):
        solr_files(scorer, tmp_path)


def test_a_scorer_solr_cannot_hold_is_refused_naming_onnx(tmp_path):
    scorer = Scorer(TransformerRanker(F, d_model=8, num_heads=2))
    with pytest.raises(ValueError, match="TransformerRanker: export it with export.format=onnx"):
        solr_files(scorer, tmp_path)
