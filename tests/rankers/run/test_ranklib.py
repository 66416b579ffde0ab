"""RankLib's text model: the written file, read back and scored by RankLib's own loader and
formulas (tests/oracles_engines.py, from RankLib's Java sources), scores 10,000 random
LETOR-like rows like the PyTorch scorer within 1e-5, rows with features RankLib does not know
(read as 0) included: a linear scorer as ``Linear Regression`` (exactly differank's score), a
sigmoid MLP as ``RankNet`` (``sigmoid`` of differank's score); what RankLib cannot express is
refused with the fix; ``python train.py task=export export.format=ranklib`` writes it. With
``DIFFERANK_RANKLIB_CLASSPATH`` (a RankLib jar) and a JDK, RankLib itself scores the file."""

import json
import os
import shutil
import subprocess

import numpy as np
import pytest
import torch

from differank.datamodules.atomic_files import write_files
from differank.datamodules.transforms import SignedLog1p
from differank.rankers.checkpoints import Scorer, load_ranker
from differank.rankers.run.ranklib import ranklib_files, ranklib_model
from differank.rankers.scorers.mlp import MLPRanker
from differank.rankers.scorers.transformer import TransformerRanker
from tests.conftest import TINY_RUN, run_config
from tests.oracles_engines import ranklib_scores
from tests.rankers.run.test_solr import ROWS, F, letor_like_scorer, linear


def sigmoid_mlp(hidden=(64, 32)) -> MLPRanker:
    """conf/model/mlp.yaml's sizes with model.ranker.activation=sigmoid, weights wide enough
    that the sigmoids are neither flat nor saturated."""
    torch.manual_seed(0)
    ranker = MLPRanker(F, hidden=hidden, activation="sigmoid")
    for module in ranker.network:
        if isinstance(module, torch.nn.Linear):
            torch.nn.init.normal_(module.weight, std=2.0 * module.in_features**-0.5)
            torch.nn.init.normal_(module.bias, std=0.5)
    return ranker


def rows_with_unknown_features() -> tuple[torch.Tensor, np.ndarray]:
    """10,000 rows in [0, 1], a tenth of the values unknown: 0 for differank (LETOR's absent
    feature), NaN for RankLib (its unknown value, which it reads as 0)."""
    generator = torch.Generator().manual_seed(1)
    features = torch.rand(ROWS, F, generator=generator)
    unknown = torch.rand(ROWS, F, generator=generator) < 0.1
    engine = features.numpy().copy()
    engine[unknown.numpy()] = np.nan
    return features.masked_fill(unknown, 0.0), engine


def scorer_scores(scorer: Scorer, features: torch.Tensor) -> np.ndarray:
    with torch.no_grad():
        return scorer(features[None])[0].double().numpy()


def test_a_linear_scorer_is_ranklibs_linear_regression_with_the_same_scores(tmp_path):
    scorer = letor_like_scorer(linear())
    write_files(ranklib_files(scorer, tmp_path))
    text = (tmp_path / "model.txt").read_text()
    assert text.startswith("## Linear Regression\n") and text.isascii()  # RankLib reads ASCII
    features, engine = rows_with_unknown_features()
    expected = scorer_scores(scorer, features)
    ranklib = ranklib_scores(text, engine)
    assert expected.std() > 0.02  # scores that differ: a wrong weight would show
    assert np.abs(ranklib - expected).max() < 1e-5, np.abs(ranklib - expected).max()


@pytest.mark.parametrize("hidden", [(64, 32), (5,)], ids=["64-32", "5"])
def test_a_sigmoid_mlp_is_ranklibs_ranknet_scoring_the_sigmoid_of_its_score(hidden, tmp_path):
    scorer = letor_like_scorer(sigmoid_mlp(hidden))
    write_files(ranklib_files(scorer, tmp_path))
    text = (tmp_path / "model.txt").read_text()
    assert text.startswith("## RankNet\n") and text.isascii()
    features, engine = rows_with_unknown_features()
    expected = scorer_scores(scorer, features)
    assert expected.std() > 0.1 and np.abs(expected).max() < 12  # varied, logit well-conditioned
    ranklib = ranklib_scores(text, engine)  # RankNet's output neuron: sigmoid(differank's score)
    assert np.abs(ranklib - 1 / (1 + np.exp(-expected))).max() < 1e-5
    logit = np.log(ranklib / (1 - ranklib))
    assert np.abs(logit - expected).max() < 1e-5, np.abs(logit - expected).max()
    # the same order: RankLib ranks the documents as differank does
    assert (np.argsort(ranklib, kind="stable") == np.argsort(logit, kind="stable")).mean() > 0.999


def test_an_mlp_without_hidden_layers_is_linear(tmp_path):
    ranker = MLPRanker(F, hidden=(), activation="sigmoid")
    assert ranklib_model(letor_like_scorer(ranker)).startswith("## Linear Regression\n")


@pytest.mark.parametrize("activation", ["relu", "tanh"])
def test_an_mlp_ranknet_cannot_express_is_refused_naming_the_fix(activation):
    scorer = letor_like_scorer(MLPRanker(F, hidden=(4,), activation=activation))
    with pytest.raises(ValueError, match=f"use {activation}: train it with model.ranker.activ"):
        ranklib_model(scorer)


def test_a_non_affine_transform_is_refused_naming_the_option():
    scorer = Scorer(linear(), transform=SignedLog1p())
    with pytest.raises(ValueError, match=r"data.transform=log1p.*train with data.transform=none"):
        ranklib_model(scorer)


def test_a_scorer_ranklib_cannot_hold_is_refused_naming_onnx():
    scorer = Scorer(TransformerRanker(F, d_model=8, num_heads=2))
    with pytest.raises(ValueError, match="TransformerRanker: export it with export.format=onnx"):
        ranklib_model(scorer)


def test_train_and_export_to_ranklib_and_opensearch_from_the_command_line(tmp_path):
    """``model.ranker.activation=sigmoid`` trains an MLP that ``task=export
    export.format=[ranklib,opensearch]`` writes; RankLib's formulas on the written text score as
    the checkpoint's scorer does."""
    run_config([*TINY_RUN, "model=mlp", "model.ranker.activation=sigmoid"], tmp_path / "fit")
    checkpoint = tmp_path / "fit" / "checkpoints" / "best.ckpt"
    overrides = ["task=export", f"ckpt_path={checkpoint}", "export.format=[ranklib,opensearch]"]
    run_config([*TINY_RUN, *overrides, "export.name=tiny"], tmp_path / "export")
    folder = tmp_path / "export" / "export"
    written = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
    assert written == ["opensearch/featureset.json", "opensearch/model.json", "ranklib/model.txt"]
    text = (folder / "ranklib" / "model.txt").read_text()
    body = json.loads((folder / "opensearch" / "model.json").read_text())
    assert body["model"] == {"name": "tiny", "model": {"type": "model/ranklib", "definition": text}}
    scorer = load_ranker(checkpoint)
    features = torch.rand(ROWS, scorer.n_features, generator=torch.Generator().manual_seed(3))
    expected = scorer_scores(scorer, features)
    ranklib = ranklib_scores(text, features.numpy())
    assert np.abs(np.log(ranklib / (1 - ranklib)) - expected).max() < 1e-5


# RankLib itself, where a RankLib jar (or classes folder) and a JDK are at hand: a class that
# loads the model as RankerFactory does and writes RankLib's score of each LETOR line
RANKLIB = os.environ.get("DIFFERANK_RANKLIB_CLASSPATH")
SCORE_JAVA = """
import ciir.umass.edu.learning.*;
import java.io.*;
import java.nio.file.*;

public class Score {
    public static void main(String[] args) throws Exception {
        String text = new String(Files.readAllBytes(Paths.get(args[0])), "US-ASCII");
        Ranker ranker = new RankerFactory().loadRankerFromString(text);
        try (BufferedReader in = new BufferedReader(new FileReader(args[1]));
             PrintWriter out = new PrintWriter(new FileWriter(args[2]))) {
            for (String line; (line = in.readLine()) != null; )
                out.println(ranker.eval(new DenseDataPoint(line)));
        }
    }
}
"""


@pytest.mark.skipif(
    not (RANKLIB and shutil.which("javac")),
    reason="set DIFFERANK_RANKLIB_CLASSPATH to a RankLib jar (and have a JDK) to run RankLib",
)
@pytest.mark.parametrize("make", [linear, sigmoid_mlp], ids=["linear", "ranknet"])
def test_ranklib_itself_scores_the_written_file(make, tmp_path):
    scorer = letor_like_scorer(make())
    write_files(ranklib_files(scorer, tmp_path))
    features, engine = rows_with_unknown_features()
    lines = [  # LETOR lines; an unknown value is RankLib's NaN
        "0 qid:1 "
        + " ".join(f"{i + 1}:{'NaN' if np.isnan(v) else repr(float(v))}" for i, v in enumerate(row))
        for row in engine
    ]
    (tmp_path / "rows.txt").write_text("\n".join(lines) + "\n")
    (tmp_path / "Score.java").write_text(SCORE_JAVA)
    classpath = f"{RANKLIB}{os.pathsep}{tmp_path}"
    subprocess.run(
        ["javac", "-cp", classpath, "-d", str(tmp_path), str(tmp_path / "Score.java")], check=True
    )
    model, rows, scores = (str(tmp_path / name) for name in ("model.txt", "rows.txt", "out"))
    subprocess.run(["java", "-cp", classpath, "Score", model, rows, scores], check=True)
    ranklib = np.loadtxt(scores)
    expected = scorer_scores(scorer, features)
    if isinstance(scorer.ranker, MLPRanker):
        expected = 1 / (1 + np.exp(-expected))  # RankNet's output neuron
    assert np.abs(ranklib - expected).max() < 1e-5, np.abs(ranklib - expected).max()
