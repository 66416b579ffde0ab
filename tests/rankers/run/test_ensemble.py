"""Ensembles: the weighted (optionally per-query standardised) mean of member scorers, each
behind its own feature transform, and ``python -m differank.rankers.run.ensemble`` writing a run's
predictions and metrics."""

import json

import pytest
import torch

from differank.rankers.checkpoints import Scorer
from differank.rankers.metrics.evaluate import evaluate_files
from differank.rankers.run.ensemble import EnsembleRanker, load_member, main
from differank.rankers.run.export import export_torchscript
from differank.rankers.scorers.linear import LinearRanker
from differank.rankers.scorers.transformer import TransformerRanker
from tests.conftest import run_config

pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.load` is deprecated:DeprecationWarning")

TINY = [
    "data.n_train_queries=30",
    "data.n_val_queries=10",
    "data.n_test_queries=10",
    "trainer.max_epochs=2",
    "logger=csv",
]


def linear(weight, f=3):
    ranker = LinearRanker(f)
    with torch.no_grad():
        ranker.linear.weight.copy_(torch.tensor([weight] * f).view(1, f))
    return Scorer(ranker)


def test_weighted_mean_padding_and_standardised_scores():
    features = torch.arange(12.0).view(2, 2, 3)
    mask = torch.tensor([[True, True], [True, False]])
    features[1, 1] = float("nan")  # padding may hold anything
    ensemble = EnsembleRanker([linear(1.0), linear(-2.0)], weights=[3, 1], standardize=False)
    plain = features.sum(-1)
    expected = torch.where(mask, 0.75 * plain - 0.25 * 2 * plain, 0.0)
    torch.testing.assert_close(ensemble(features, mask), expected)
    standardised = EnsembleRanker([linear(1.0), linear(-2.0)])  # the default
    # +1 and -1 around the mean for the first query: the two members cancel; a lone doc is 0
    assert standardised(features, mask).abs().max().item() == 0.0
    with pytest.raises(ValueError, match="different feature counts"):
        EnsembleRanker([linear(1.0), linear(1.0, f=4)])
    with pytest.raises(ValueError, match="weights"):
        EnsembleRanker([linear(1.0)], weights=[1, 1])
    for weights in ([1, float("nan")], [float("inf"), 1], [-1, 2]):
        with pytest.raises(ValueError, match="finite non-negative numbers"):
            EnsembleRanker([linear(1.0), linear(2.0)], weights=weights)


def test_members_that_attend_over_the_list_get_the_mask_and_the_ensemble_exports(tmp_path):
    torch.manual_seed(0)
    attending = Scorer(TransformerRanker(3, d_model=8, num_heads=2).eval())
    ensemble = EnsembleRanker([linear(0.5), attending], standardize=False).eval()
    features, mask = torch.randn(2, 4, 3), torch.tensor([[1, 1, 1, 0], [1, 1, 0, 0]]).bool()
    expected = (features.sum(-1) * 0.5 + attending(features, mask)) / 2
    torch.testing.assert_close(ensemble(features, mask), torch.where(mask, expected, 0.0))
    scripted = torch.jit.load(str(export_torchscript(Scorer(ensemble), tmp_path / "e.pt")))
    torch.testing.assert_close(scripted(features, mask), ensemble(features, mask))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    folders = []
    for n, extra in enumerate([["seed=0"], ["seed=1", "data.seed=0", "data.transform=log1p"]]):
        run = tmp_path_factory.mktemp(f"member{n}")
        run_config([*TINY, *extra], run)
        folders.append(run)
    return folders


def predictions(folder):
    lines = (folder / "predictions" / "test.txt").read_text().split()
    return torch.tensor([float(line) for line in lines], dtype=torch.float64)


def test_the_cli_writes_the_mean_of_the_members_predictions_and_its_metrics(runs, tmp_path):
    checkpoints = [str(run / "checkpoints" / "best.ckpt") for run in runs]
    assert main([*checkpoints, "--out", str(tmp_path / "e"), "--scores", "raw"]) == 0
    out = tmp_path / "e"
    mean = (predictions(runs[0]) + predictions(runs[1])) / 2
    torch.testing.assert_close(predictions(out), mean, rtol=1e-5, atol=1e-5)
    sources = (out / "predictions" / "test.sources").read_text().split()
    assert sources == (runs[0] / "predictions" / "test.sources").read_text().split()
    metrics = json.loads((out / "test_metrics.json").read_text())
    assert set(metrics.pop("conventions")) == {
        "letor",
        "trec",
        "no_relevant_as_1",
        "no_relevant_dropped",
    }
    assert metrics == pytest.approx(evaluate_files(sources, out / "predictions" / "test.txt"))
    assert (out / "predictions" / "test.run").is_file()
    assert (out / "predictions" / "test.qrels").is_file()
    assert json.loads((out / "ensemble.json").read_text())["weights"] == [0.5, 0.5]
    # one member alone is that run (its own transform and z-score folded in)
    assert main([checkpoints[1], "--out", str(tmp_path / "one"), "--scores", "raw"]) == 0
    torch.testing.assert_close(
        predictions(tmp_path / "one"), predictions(runs[1]), rtol=1e-5, atol=1e-5
    )


def test_members_on_other_scales_are_standardised_by_default_and_raw_averaging_warns(
    runs, tmp_path
):
    """A member whose scores are 70x another's: raw averaging is that member alone (and says
    so with the scales); the default standardises each member per query first."""
    first = str(runs[0] / "checkpoints" / "best.ckpt")
    checkpoint = torch.load(first, weights_only=True)
    checkpoint["state_dict"] = {  # a linear ranker: weights and bias x70 -> scores x70
        key: value * (70 if key.startswith("ranker.") else 1)
        for key, value in checkpoint["state_dict"].items()
    }
    loud = str(tmp_path / "loud.ckpt")
    torch.save(checkpoint, loud)
    second = str(runs[1] / "checkpoints" / "best.ckpt")
    with pytest.warns(UserWarning, match=r"scales differ \d+x \(.*loud.ckpt: .*the largest-scale"):
        assert main([second, loud, "--out", str(tmp_path / "raw"), "--scores", "raw"]) == 0
    raw = predictions(tmp_path / "raw")
    assert torch.corrcoef(torch.stack([raw, predictions(runs[0])]))[0, 1] > 0.999
    assert main([second, loud, "--out", str(tmp_path / "std")]) == 0
    record = json.loads((tmp_path / "std" / "ensemble.json").read_text())
    assert record["scores"] == "standardized"
    assert record["member_scales"][1] > 10 * record["member_scales"][0]
    standardised = predictions(tmp_path / "std")
    assert torch.corrcoef(torch.stack([standardised, predictions(runs[0])]))[0, 1] < 0.999


@pytest.mark.parametrize("weights", [["1", "nan"], ["inf", "1"]])
def test_the_cli_refuses_non_finite_weights_and_writes_nothing(runs, tmp_path, weights, capsys):
    checkpoints = [str(run / "checkpoints" / "best.ckpt") for run in runs]
    out = tmp_path / "e"
    assert main([*checkpoints, "--out", str(out), "--weights", *weights]) == 2
    assert "finite non-negative numbers" in capsys.readouterr().err
    assert not out.exists()


def test_a_member_with_non_finite_scores_is_named_and_nothing_is_written(runs, tmp_path, capsys):
    good = str(runs[0] / "checkpoints" / "best.ckpt")
    checkpoint = torch.load(good, weights_only=True)
    # Finite weights (a checkpoint with non-finite ones is refused when read) whose scores
    # overflow float32: the member loads and scores, and its scores are not finite.
    checkpoint["state_dict"] = {
        key: torch.full_like(value, 3e38) if key.startswith("ranker.") else value
        for key, value in checkpoint["state_dict"].items()
    }
    broken = tmp_path / "overflow.ckpt"
    torch.save(checkpoint, broken)
    out = tmp_path / "e"
    assert main([good, str(broken), "--out", str(out)]) == 2
    error = capsys.readouterr().err
    assert f"member 2 ({broken}) scores row 1 (" in error and "not finite" in error
    assert not out.exists()


def test_the_cli_exports_the_ensemble_as_one_graph(runs, tmp_path):
    ort = pytest.importorskip("onnxruntime", reason="onnxruntime is the optional export extra")
    checkpoints = [str(run / "checkpoints" / "best.ckpt") for run in runs]
    out = tmp_path / "e"
    assert main([*checkpoints, "--out", str(out), "--export", "triton"]) == 0
    model = out / "export" / "triton" / "differank"
    assert (model / "config.pbtxt").is_file() and (out / "predictions" / "test.txt").is_file()
    session = ort.InferenceSession(str(model / "1" / "model.onnx"))
    ensemble = EnsembleRanker([load_member(path) for path in checkpoints]).eval()
    features, mask = torch.rand(3, 20, 46), torch.arange(20) < torch.tensor([[20], [7], [1]])
    served = session.run(None, {"features": features.numpy(), "mask": mask.numpy()})[0]
    with torch.no_grad():
        expected = ensemble(features, mask)
    torch.testing.assert_close(torch.from_numpy(served)[mask], expected[mask], rtol=0, atol=1e-5)
