"""Serving: ``task=export`` writes TorchScript and ONNX scorers that score raw features like the
eager model; ``task=predict`` writes the run's prediction file and a TREC run file that
ir-measures (trec_eval's measures) reads and scores like our own LETOR metrics."""

import json
from pathlib import Path

import pytest
import torch

from differank.datamodules.synthetic import SyntheticLetorDataModule
from differank.rankers.checkpoints import Scorer
from differank.rankers.run.export import export_onnx, export_torchscript, write_trec_run
from differank.rankers.scorers.conerank import ConeRank
from differank.rankers.scorers.mlp import MLPRanker
from tests.conftest import TINY_RUN, run_config

# TorchScript is deprecated upstream but is what was asked for; its loader warns on every load.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")

TINY = TINY_RUN
SIZES = dict(n_train_queries=40, n_val_queries=20, n_test_queries=20)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("trained")
    run_config(TINY, run_dir)
    return run_dir


@pytest.fixture(scope="module")
def exported(trained, tmp_path_factory):
    out = tmp_path_factory.mktemp("exported")
    best = trained / "checkpoints" / "best.ckpt"
    run_config([*TINY, "task=export", f"ckpt_path={best}"], out)
    return out / "export"


def raw_test_batch():
    """The test split as the files hold it (no normalisation), with each document's row."""
    batch = SyntheticLetorDataModule(**SIZES, normalization="none").full_batch("test")
    return batch["features"], batch["doc_index"][batch["mask"]], batch["mask"]


def run_scores(run_dir):
    lines = (run_dir / "predictions" / "test.txt").read_text().split()
    return torch.tensor([float(line) for line in lines], dtype=torch.float64)


def test_torchscript_scores_raw_features_like_the_run(trained, exported):
    features, rows, mask = raw_test_batch()
    scripted = torch.jit.load(str(exported / "scorer.pt"))
    scores = scripted(features)[mask].double()
    # The run normalised in float64, the scorer in float32: equal to float32 rounding.
    torch.testing.assert_close(scores, run_scores(trained)[rows], rtol=1e-5, atol=1e-5)


def test_onnx_scores_raw_features_like_torchscript(exported):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the optional export extra")
    features, _, mask = raw_test_batch()
    session = ort.InferenceSession(
        str(exported / "scorer.onnx"), providers=["CPUExecutionProvider"]
    )
    scores = torch.from_numpy(session.run(None, {"features": features.numpy()})[0])
    expected = torch.jit.load(str(exported / "scorer.pt"))(features)
    torch.testing.assert_close(scores[mask], expected[mask], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "ranker", [MLPRanker(46, hidden=(8, 4)), ConeRank(46, n_basis=4, seed=0)], ids=["mlp", "cone"]
)
def test_exported_torchscript_equals_eager_on_any_shape(ranker, tmp_path):
    scorer = Scorer(ranker, mean=torch.rand(46), std=torch.rand(46) + 0.5).eval()
    scripted = torch.jit.load(str(export_torchscript(scorer, tmp_path / "scorer.pt")))
    for shape in [(1, 1, 46), (3, 17, 46)]:
        features = torch.randn(shape)
        torch.testing.assert_close(scripted(features), scorer(features), rtol=1e-6, atol=1e-6)


def test_conerank_serves_as_its_linear_scorer_in_onnx(tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the optional export extra")
    cone = ConeRank(46, n_basis=4, seed=0)
    scorer = Scorer(cone.serving_ranker(), mean=torch.rand(46), std=torch.rand(46) + 0.5).eval()
    session = ort.InferenceSession(
        str(export_onnx(scorer, tmp_path / "scorer.onnx")), providers=["CPUExecutionProvider"]
    )
    features = torch.randn(3, 17, 46)
    eager = cone(((features - scorer.mean) / scorer.std).float())
    served = torch.from_numpy(session.run(None, {"features": features.numpy()})[0])
    torch.testing.assert_close(served, eager, rtol=1e-4, atol=1e-4)


def test_exported_onnx_equals_eager_on_any_shape(tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the optional export extra")
    pytest.importorskip("onnx", reason="onnx is the optional export extra")
    scorer = Scorer(MLPRanker(46, hidden=(8,)), mean=torch.rand(46), std=torch.rand(46) + 0.5)
    session = ort.InferenceSession(
        str(export_onnx(scorer, tmp_path / "s.onnx")), providers=["CPUExecutionProvider"]
    )
    for shape in [(1, 1, 46), (3, 17, 46)]:
        features = torch.randn(shape)
        scores = torch.from_numpy(session.run(None, {"features": features.numpy()})[0])
        torch.testing.assert_close(scores, scorer.eval()(features), rtol=1e-5, atol=1e-6)


def test_scorer_checks_the_statistics_shape():
    with pytest.raises(ValueError, match=r"shape \[46\]"):
        Scorer(MLPRanker(46), mean=torch.zeros(3))


def test_trec_run_groups_queries_ranks_by_score_and_keeps_six_fields(tmp_path):
    path = write_trec_run(
        tmp_path / "r.run",
        [7, 7, 3, 7, 3],
        ["a", "", "c", "d e", "f"],
        torch.tensor([0.5, 2.0, 1.0, 0.5, 3.0]),
        tag="t",
    )
    assert path.read_text().splitlines() == [
        "7 Q0 row1 1 2 t",
        "7 Q0 a 2 0.5 t",
        "7 Q0 row3 3 0.5 t",  # tie: file order; a doc id with a space becomes its row
        "3 Q0 f 1 3 t",
        "3 Q0 c 2 1 t",
    ]
    with pytest.raises(ValueError, match="NaN"):
        write_trec_run(tmp_path / "x.run", [1], ["a"], torch.tensor([float("nan")]))


@pytest.fixture(scope="module")
def predicted(trained, tmp_path_factory):
    out = tmp_path_factory.mktemp("predicted")
    best = trained / "checkpoints" / "best.ckpt"
    run_config([*TINY, "task=predict", f"ckpt_path={best}"], out)
    return out


def test_predict_writes_the_runs_prediction_file_and_no_metrics(trained, predicted):
    name = "predictions/test.txt"
    assert (predicted / name).read_bytes() == (trained / name).read_bytes()
    assert not (predicted / "test_metrics.json").exists()


def test_trec_run_and_qrels_are_scored_by_ir_measures_like_letor_metrics(trained, predicted):
    ir_measures = pytest.importorskip("ir_measures", reason="ir-measures is a dev extra")
    split = SyntheticLetorDataModule(**SIZES).split_data("test")
    qrels = list(ir_measures.read_trec_qrels(str(trained / "predictions" / "test.qrels")))
    assert len(qrels) == split.num_rows and not (predicted / "predictions/test.qrels").exists()
    run = list(ir_measures.read_trec_run(str(predicted / "predictions" / "test.run")))
    assert len(run) == split.num_rows
    measures = [ir_measures.AP, ir_measures.P @ 5, ir_measures.P @ 10]
    scored = ir_measures.calc_aggregate(measures, qrels, run)
    ours = json.loads((trained / "test_metrics.json").read_text())
    # LETOR MAP and P@k (relevant = label > 0) are trec_eval's AP and P@k when scores don't tie.
    for measure, key in zip(measures, ["map", "p@5", "p@10"], strict=True):
        assert scored[measure] == pytest.approx(ours[key], abs=1e-12), key


def test_onnx_export_leaves_no_empty_weights_file(tmp_path):
    pytest.importorskip("onnxscript", reason="onnxscript is the optional export extra")
    export_onnx(Scorer(MLPRanker(5, hidden=(4,))), tmp_path / "s.onnx")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.onnx"]


def test_a_failing_onnx_export_leaves_no_file(tmp_path, monkeypatch):
    """The exporter writes its files itself: one that fails half-way leaves nothing behind."""

    def half_written(model, args, f, **options):
        Path(f).write_bytes(b"half a graph")
        raise RuntimeError("the exporter failed")

    monkeypatch.setattr(torch.onnx, "export", half_written)
    with pytest.raises(RuntimeError, match="the exporter failed"):
        export_onnx(Scorer(MLPRanker(5, hidden=(4,))), tmp_path / "s.onnx")
    assert list(tmp_path.iterdir()) == []
