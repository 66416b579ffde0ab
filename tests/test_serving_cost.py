"""benchmarks/serving_cost.py and its engine formulas (benchmarks/engine_formulas.py): every
format of a sigmoid MLP and of a linear scorer timed beside boosters, the reference row, the
parity check that guards each row, and the numpy RankLib formula against the RankLib oracle
written from RankLib's Java (tests/oracles_engines.py)."""

from __future__ import annotations

import re

import engine_formulas  # benchmarks/ is on the path (tests/conftest.py)
import numpy as np
import pytest
import serving_cost
import torch

from differank.rankers.checkpoints import Scorer
from differank.rankers.run.ranklib import ranklib_model
from differank.rankers.scorers.mlp import MLPRanker
from tests.conftest import TINY_RUN, run_config
from tests.oracles_engines import ranklib_scores

N_FEATURES = serving_cost.N_RANDOM_FEATURES


def boosters(folder):
    """A LightGBM lambdarank text model and an XGBoost JSON model on random rows."""
    lightgbm = pytest.importorskip("lightgbm")
    xgboost = pytest.importorskip("xgboost")
    rng = np.random.default_rng(0)
    features, labels = rng.random((200, N_FEATURES)), rng.integers(0, 3, 200)
    groups = [20] * 10
    params = {"objective": "lambdarank", "verbosity": -1, "num_leaves": 4, "min_data_in_leaf": 5}
    training = lightgbm.Dataset(features, labels, group=groups)
    lightgbm.train(params, training, num_boost_round=3).save_model(folder / "lgb.txt")
    matrix = xgboost.DMatrix(features, labels)
    matrix.set_group(groups)
    xgboost.train({"objective": "rank:pairwise"}, matrix, 3).save_model(folder / "xgb.json")
    return folder / "lgb.txt", folder / "xgb.json"


def test_every_format_is_timed_against_the_reference(tmp_path):
    mlp, linear = tmp_path / "mlp", tmp_path / "linear"
    run_config([*TINY_RUN, "model=mlp", "model.ranker.activation=sigmoid"], mlp)
    run_config([*TINY_RUN, "model=linear"], linear)
    lgb, xgb = boosters(tmp_path)
    out = tmp_path / "cost.md"
    serving_cost.main(
        [
            "--checkpoint",
            f"mlp={mlp / 'checkpoints' / 'best.ckpt'}",
            "--checkpoint",
            f"linear={linear / 'checkpoints' / 'best.ckpt'}",
            "--lightgbm",
            f"lambdarank={lgb}",
            "--xgboost",
            f"student={xgb}",
            "--reference",
            "lambdarank",
            "--documents",
            "7",
            "--min-repeats",
            "2",
            "--cell-seconds",
            "0",
            "--out",
            str(out),
        ]  # fmt: skip
    )
    text = out.read_text()
    assert "Command: `python benchmarks/serving_cost.py --checkpoint mlp=" in text
    assert re.search(r"Load average \(1, 5, 15 min\) [\d.]+, [\d.]+, [\d.]+ before", text)
    rows = {
        tuple(cell.strip() for cell in line.split("|")[1:3]): line
        for line in text.splitlines()
        if line.startswith("| ") and not line.startswith("| model")
    }
    assert sorted(rows) == sorted(
        [
            *(
                (model, runtime)
                for model in ("mlp", "linear")
                for runtime in ("eager", "torchscript", "onnxruntime", "solr (numpy)")
            ),
            ("mlp", "ranklib RankNet (numpy)"),
            ("linear", "ranklib Linear Regression (numpy)"),
            ("lambdarank", "lightgbm predict"),
            ("student", "xgboost predict"),
        ]  # fmt: skip
    )
    assert rows[("lambdarank", "lightgbm predict")].endswith("| 1.00 |")


def test_a_scorer_that_disagrees_with_eager_is_refused_before_timing():
    scores = np.array([0.5, -1.0, 2.0])
    cells = {("m", "eager"): lambda: torch.tensor(scores), ("m", "solr (numpy)"): lambda: scores}
    serving_cost.check_parity("m", cells)  # agreeing formats pass
    cells[("m", "solr (numpy)")] = lambda: scores + 0.01
    with pytest.raises(AssertionError, match="m in solr \\(numpy\\) scores differ"):
        serving_cost.check_parity("m", cells)


@pytest.mark.parametrize("hidden", [[], [5], [4, 3]])
def test_the_numpy_ranklib_formula_matches_the_ranklib_oracle(hidden):
    torch.manual_seed(0)
    ranker = MLPRanker(N_FEATURES, hidden=hidden, activation="sigmoid")
    text = ranklib_model(Scorer(ranker, torch.rand(N_FEATURES), 0.5 + torch.rand(N_FEATURES)))
    values = np.random.default_rng(1).random((50, N_FEATURES)).astype(np.float32)
    got = engine_formulas.ranklib_scorer(text)(values)
    np.testing.assert_allclose(got, ranklib_scores(text, values), rtol=1e-10, atol=1e-12)
