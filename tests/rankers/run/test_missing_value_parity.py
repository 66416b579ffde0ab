"""Missing values, one rule everywhere (docs/serving.md#missing-values): a feature an engine
cannot compute for a document scores as the LETOR reader's absent feature, raw 0, in every
export format; a NaN follows ``data.nan_policy`` (``zero``: missing; ``allow``: a NaN score).

Rows with missing features are written as LETOR lines (absent ``index:value`` pairs, ``nan``
values) and scored twice: on the training side by the checkpoint's scorer on the features the
LETOR reader gives (``read_letor``), and on the engine side by each format's documented scoring
of the written files, the engine seeing only the values it could compute. The scores must agree.

One entry of :data:`ENGINES` per export format: the scorer kinds it serves and its scoring of a
document list whose missing features are absent. A new format adds its entry (a test below
fails until it has one).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import torch

from differank.datamodules.arrays import read_letor
from differank.datamodules.atomic_files import write_files
from differank.rankers.checkpoints import Scorer, load_ranker
from differank.rankers.run.export_formats import EXPORT_FORMATS, ExportOptions, export_files
from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.scorers.mlp import MLPRanker
from differank.rankers.scorers.transformer import TransformerRanker
from tests.conftest import TINY_RUN, run_config
from tests.oracles_engines import (
    opensearch_feature_scores,
    opensearch_linear_scores,
    opensearch_ranklib_scores,
    ranklib_scores,
)

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")

F = 6
ROWS = 300
NAME = "parity"
# The rule as docs/serving.md states it, written here rather than imported: what a client of
# the ONNX, TorchScript and Triton scorers sends for a feature it could not compute.
DOCUMENTED_FILL = 0.0

# A document as an engine sees it: {0-based feature index: value}, a missing feature absent.
Row = dict[int, float]


def dense(rows: list[Row], n_features: int) -> np.ndarray:
    """``[1, N, F]`` float32 features of one list, a missing feature sent as the documented
    fill (the client's side of the rule for a tensor scorer)."""
    features = np.full((1, len(rows), n_features), DOCUMENTED_FILL, dtype=np.float32)
    for i, row in enumerate(rows):
        for index, value in row.items():
            features[0, i, index] = value
    return features


def onnx_runtime(model: Path, rows: list[Row], n_features: int) -> np.ndarray:
    onnxruntime = pytest.importorskip("onnxruntime")
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    inputs = {"features": dense(rows, n_features)}
    if "mask" in {node.name for node in session.get_inputs()}:
        inputs["mask"] = np.ones((1, len(rows)), dtype=bool)
    return session.run(["scores"], inputs)[0][0]


def torchscript(folder: Path, rows: list[Row], n_features: int) -> np.ndarray:
    module = torch.jit.load(str(folder / "scorer.pt"))
    inputs = [torch.from_numpy(dense(rows, n_features))]
    if len(module.forward.schema.arguments) == 3:  # self, features, mask: a list-attending scorer
        inputs.append(torch.ones(1, len(rows), dtype=torch.bool))
    with torch.no_grad():
        return module(*inputs)[0].numpy()


def solr(folder: Path, rows: list[Row], n_features: int) -> np.ndarray:
    """Solr's LTR scoring, from the written JSON: each feature from its store definition
    (``FieldValueFeature``: the document's field, or the feature's ``defaultValue`` where the
    document has none, Solr's ``Feature`` default being 0; ``ValueFeature``: its constant), then
    ``LinearModel`` ``Σ w_i f_i`` or ``NeuralNetworkModel`` ``activation(matrix · x + bias)``
    layer by layer, in float32."""
    model = json.loads((folder / "solr" / "model.json").read_text())
    store = {f["name"]: f for f in json.loads((folder / "solr" / "features.json").read_text())}
    fields = [{f"feature_{index + 1}": value for index, value in row.items()} for row in rows]
    columns = []
    for feature in model["features"]:
        definition = store[feature["name"]]
        params = definition["params"]
        if definition["class"].endswith(".FieldValueFeature"):
            default = params.get("defaultValue", 0.0)
            columns.append([document.get(params["field"], default) for document in fields])
        else:
            assert definition["class"].endswith(".ValueFeature")
            columns.append([params["value"]] * len(rows))
    values = np.array(columns, dtype=np.float32).T  # [N, model features]
    if model["class"].endswith(".LinearModel"):
        weights = model["params"]["weights"]
        w = np.array([weights[f["name"]] for f in model["features"]], dtype=np.float32)
        return values @ w
    activations: dict[str, Callable[[np.ndarray], np.ndarray]] = {
        "identity": lambda x: x,
        "relu": lambda x: np.maximum(x, np.float32(0)),
        "sigmoid": lambda x: 1 / (1 + np.exp(-x)),
        "tanh": np.tanh,
    }
    hidden = values
    for layer in model["params"]["layers"]:
        matrix = np.array(layer["matrix"], dtype=np.float32)
        bias = np.array(layer["bias"], dtype=np.float32)
        hidden = activations[layer["activation"]](hidden @ matrix.T + bias).astype(np.float32)
    return hidden[:, 0]


def unknown_as_nan(rows: list[Row], n_features: int) -> np.ndarray:
    """[N, F] float64 values, NaN where the engine has no value (RankLib's unknown value, a
    document without the OpenSearch field)."""
    values = np.full((len(rows), n_features), np.nan)
    for i, row in enumerate(rows):
        for index, value in row.items():
            values[i, index] = value
    return values


def logit_of_ranknet(text: str, scores: np.ndarray) -> np.ndarray:
    """RankNet's output neuron is a sigmoid (docs/serving.md#ranklib): its score is
    sigmoid(s) of differank's s, compared here as s."""
    if not text.startswith("## RankNet"):
        return scores
    logistic = scores.astype(np.float64)
    return np.log(logistic / (1 - logistic))


def ranklib(folder: Path, rows: list[Row], n_features: int) -> np.ndarray:
    """RankLib scoring the written model text (tests/oracles_engines.py), a missing feature
    being RankLib's unknown value."""
    text = (folder / "ranklib" / "model.txt").read_text()
    return logit_of_ranknet(text, ranklib_scores(text, unknown_as_nan(rows, n_features)))


def opensearch(folder: Path, rows: list[Row], n_features: int) -> np.ndarray:
    """The OpenSearch LTR plugin: each feature the score of its template over the document's
    fields (a document without the field gets the template's ``missing``), then the uploaded
    ``model/linear`` or ``model/ranklib``."""
    feature_set = json.loads((folder / "opensearch" / "featureset.json").read_text())
    model = json.loads((folder / "opensearch" / "model.json").read_text())["model"]["model"]
    values = unknown_as_nan(rows, n_features)
    fields = {f"feature_{i + 1}": values[:, i] for i in range(n_features)}
    features = opensearch_feature_scores(feature_set, fields, len(rows))
    if model["type"] == "model/linear":
        names = [feature["name"] for feature in feature_set["featureset"]["features"]]
        return opensearch_linear_scores(model["definition"], names, features)
    assert model["type"] == "model/ranklib", model["type"]
    definition = model["definition"]
    return logit_of_ranknet(definition, opensearch_ranklib_scores(definition, features))


@dataclass(frozen=True)
class Engine:
    """How one export format is served: the scorer kinds it takes (a key of :data:`SCORERS`),
    its documented scoring ``score(folder, rows, n_features)`` of one list of documents from
    the files ``task=export`` wrote into ``folder``, and whether a NaN value can reach it (a
    RankLib data point or a document field holds none)."""

    kinds: tuple[str, ...]
    score: Callable[[Path, list[Row], int], np.ndarray]
    carries_nan: bool = True


EVERY_KIND = ("linear", "mlp", "transformer")
ENGINES: dict[str, Engine] = {
    "torchscript": Engine(EVERY_KIND, torchscript),
    "onnx": Engine(EVERY_KIND, lambda folder, *rows: onnx_runtime(folder / "scorer.onnx", *rows)),
    "solr": Engine(("linear", "mlp"), solr),
    "triton": Engine(
        EVERY_KIND,
        lambda folder, *rows: onnx_runtime(folder / "triton" / NAME / "1" / "model.onnx", *rows),
    ),
    "ranklib": Engine(("linear", "sigmoid_mlp"), ranklib, carries_nan=False),
    "opensearch": Engine(("linear", "sigmoid_mlp"), opensearch, carries_nan=False),
}


def _scorer(ranker) -> Scorer:
    """A z-scored scorer (mean and std away from 0 and 1, so a fill of 0 after normalisation
    or of the mean would score otherwise than raw 0), weights away from 0."""
    torch.manual_seed(0)
    for parameter in ranker.parameters():
        torch.nn.init.normal_(parameter, std=0.5)
    mean = torch.linspace(0.5, 2.0, F, dtype=torch.float64)
    std = torch.linspace(0.7, 1.6, F, dtype=torch.float64)
    return Scorer(ranker, mean=mean, std=std).eval()


SCORERS: dict[str, Callable[[], Scorer]] = {
    "linear": lambda: _scorer(LinearRanker(F)),
    "mlp": lambda: _scorer(MLPRanker(F, hidden=(8, 4))),
    "sigmoid_mlp": lambda: _scorer(MLPRanker(F, hidden=(8, 4), activation="sigmoid")),
    "transformer": lambda: _scorer(TransformerRanker(F, d_model=8, num_layers=1, num_heads=2)),
}


def letor_rows(nan_share: float, n_features: int = F) -> tuple[list[str], list[Row]]:
    """LETOR lines of one query and the values each writes ({index: value}, NaN included):
    each feature absent with probability 0.3 (the first line writes all F, the second none),
    and a written value NaN with probability ``nan_share``."""
    rng = np.random.default_rng(4)
    lines, written = [], []
    for i in range(ROWS):
        present = rng.random(n_features) >= 0.3 if i > 1 else np.full(n_features, i == 0)
        values = {int(j): float(rng.uniform(-1.0, 4.0)) for j in np.flatnonzero(present)}
        for j in values:
            if i > 0 and rng.random() < nan_share:
                values[j] = float("nan")
        pairs = " ".join(f"{j + 1}:{values[j]!r}" for j in sorted(values))
        lines.append(f"{i % 3} qid:1 {pairs}".rstrip())
        written.append(values)
    return lines, written


def training_scores(scorer: Scorer, lines: list[str], nan_policy: str, folder: Path):
    """The checkpoint's scorer on the features the LETOR reader gives these lines."""
    path = folder / "rows.txt"
    path.write_text("\n".join(lines) + "\n")
    features, _, _ = read_letor(path, nan_policy=nan_policy, cache_dir=folder / "cache")
    assert features.shape == (ROWS, scorer.n_features)
    with torch.no_grad():
        x = torch.from_numpy(features).unsqueeze(0)
        scores = scorer(x, torch.ones(1, ROWS, dtype=torch.bool)) if scorer.uses_mask else scorer(x)
    return scores[0].numpy()


def engine_rows(written: list[Row], nan_policy: str) -> list[Row]:
    """What an engine hands the model: the values it computed. Under ``nan_policy=zero`` a NaN
    is a value that could not be computed, so missing; under ``allow`` it is passed on."""
    if nan_policy == "zero":
        return [{j: v for j, v in row.items() if not np.isnan(v)} for row in written]
    return written


CASES = [
    pytest.param(fmt, kind, id=f"{fmt}-{kind}")
    for fmt, engine in ENGINES.items()
    for kind in engine.kinds
]


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Each (format, kind)'s files, written once into their own folder."""
    folders: dict[tuple[str, str], Path] = {}

    def folder_of(fmt: str, kind: str) -> Path:
        if (fmt, kind) not in folders:
            folder = tmp_path_factory.mktemp(f"{fmt}-{kind}")
            options = ExportOptions(name=NAME)
            write_files(export_files(SCORERS[kind](), folder, [fmt], options))
            folders[fmt, kind] = folder
        return folders[fmt, kind]

    return folder_of


@pytest.mark.parametrize(("fmt", "kind"), CASES)
@pytest.mark.parametrize(("nan_policy", "nan_share"), [("zero", 0.0), ("zero", 0.2)])
def test_missing_features_score_alike_in_every_format(
    exported, fmt, kind, nan_policy, nan_share, tmp_path
):
    lines, written = letor_rows(nan_share)
    want = training_scores(SCORERS[kind](), lines, nan_policy, tmp_path)
    got = ENGINES[fmt].score(exported(fmt, kind), engine_rows(written, nan_policy), F)
    assert np.isfinite(want).all()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    # the rule matters here: filling the normalised 0 (the mean) instead would score otherwise
    assert sum(len(row) < F for row in written) > ROWS // 2


NAN_CASES = [c for c in CASES if c.values[1] != "transformer" and ENGINES[c.values[0]].carries_nan]


@pytest.mark.parametrize(("fmt", "kind"), NAN_CASES)
def test_a_nan_under_nan_policy_allow_is_a_nan_score_everywhere(exported, fmt, kind, tmp_path):
    """``nan_policy=allow`` keeps a NaN, and it reaches the score in training and in every
    engine alike: the documents without one score as before (a per-document scorer)."""
    lines, written = letor_rows(0.2)
    want = training_scores(SCORERS[kind](), lines, "allow", tmp_path)
    got = ENGINES[fmt].score(exported(fmt, kind), engine_rows(written, "allow"), F)
    has_nan = np.array([any(np.isnan(v) for v in row.values()) for row in written])
    assert has_nan.any() and not has_nan.all()
    assert np.isnan(want[has_nan]).all() and np.isnan(got[has_nan]).all()
    np.testing.assert_allclose(got[~has_nan], want[~has_nan], rtol=1e-5, atol=1e-5)


def test_a_trained_checkpoint_and_its_export_agree_on_missing_features(tmp_path):
    """The whole path: a run trained by ``train.py``, ``task=export`` of every format, and
    ``load_ranker``'s scorer on what the LETOR reader gives (46 features, z-scored)."""
    run_config(TINY_RUN, tmp_path / "run")
    checkpoint = tmp_path / "run" / "checkpoints" / "best.ckpt"
    overrides = [f"ckpt_path={checkpoint}", f"export.format=[{','.join(ENGINES)}]"]
    run_config([*TINY_RUN, "task=export", *overrides, f"export.name={NAME}"], tmp_path / "out")
    scorer = load_ranker(checkpoint)
    assert scorer.std.ne(1).any()  # the z-score that a fill of 0 must precede
    lines, written = letor_rows(0.1, scorer.n_features)
    want = training_scores(scorer, lines, "zero", tmp_path)
    for fmt, engine in ENGINES.items():
        got = engine.score(
            tmp_path / "out" / "export", engine_rows(written, "zero"), scorer.n_features
        )
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=fmt)


def test_every_export_format_has_a_missing_value_entry():
    assert sorted(ENGINES) == sorted(EXPORT_FORMATS), (
        "add the new format's entry to ENGINES: its scorer kinds and documented scoring"
    )


def test_solr_writes_the_missing_value_into_its_feature_store(exported):
    """Solr's rule is in the file, not only in Solr's default: each feature's defaultValue."""
    store = json.loads((exported("solr", "linear") / "solr" / "features.json").read_text())
    fields = [f for f in store if f["class"].endswith(".FieldValueFeature")]
    assert len(fields) == F and all(f["params"]["defaultValue"] == 0.0 for f in fields)


def test_serving_md_states_the_rule_of_every_format():
    """docs/serving.md's supported-formats table has a row per format, with its missing-value
    rule."""
    text = (Path(__file__).parents[3] / "docs" / "serving.md").read_text()
    table = text.split("## Supported formats", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ")]
    for fmt in ENGINES:
        row = next((line for line in rows if f"`{fmt}`" in line), None)
        assert row is not None, f"docs/serving.md's formats table has no row for {fmt}"
        assert "missing" in row.lower() or "0" in row, row
