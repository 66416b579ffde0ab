"""``differank.Ranker``: it trains the model ``python train.py`` trains on the same rows, and its
checkpoint is the one ``load_ranker`` and ``task=predict files=[...]`` read."""

import json
import pickle

import numpy as np
import pytest
import torch

import differank
from differank.datamodules import read_letor
from differank.datamodules.reader import write_letor
from differank.rankers.run.estimator import NotFittedError, Ranker
from differank.rankers.run.runs import compose_config
from tests.conftest import run_config


def synthetic_fold(root, seed=0, n_features=5):
    """A small LETOR fold (train, vali, test), labels from a noisy linear signal."""
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=n_features)
    for name, queries in (("train", 24), ("vali", 10), ("test", 10)):
        sizes = rng.integers(4, 12, size=queries)
        features = rng.normal(size=(sizes.sum(), n_features)).astype(np.float32)
        signal = features @ weights + rng.normal(scale=0.5, size=len(features))
        labels = np.digitize(signal, [0.5, 1.5])
        qids = np.repeat(np.arange(queries) + {"train": 100, "vali": 500, "test": 900}[name], sizes)
        write_letor(root / "Fold1" / f"{name}.txt", features, labels, qids)
    return root


@pytest.fixture(scope="module")
def fitted(tmp_path_factory):
    """A Ranker fitted on a fold's arrays, and the fold."""
    root = synthetic_fold(tmp_path_factory.mktemp("fold"))
    X, y, qid = read_letor(root / "Fold1" / "train.txt")
    Xv, yv, qv = read_letor(root / "Fold1" / "vali.txt")
    ranker = Ranker(max_epochs=3, verbose=False, output_dir=str(tmp_path_factory.mktemp("runs")))
    ranker.fit(X, y, qid=qid, eval_set=[(Xv, yv)], eval_qid=[qv])
    return ranker, root


def test_it_predicts_what_train_py_predicts_with_its_overrides(fitted, tmp_path):
    ranker, root = fitted
    run = tmp_path / "run"
    result = differank.run(
        [*ranker.overrides_, "data=letor", f"data.root={root}", "quiet=true"], output_dir=run
    )
    expected = np.loadtxt(run / "predictions" / "test.txt")
    X, y, qid = read_letor(root / "Fold1" / "test.txt")
    np.testing.assert_allclose(ranker.predict(X), expected, rtol=0, atol=1e-6)
    assert ranker.score(X, y, qid=qid) == pytest.approx(result.test_metrics["ndcg@10"], abs=1e-6)
    assert result.monitor == "val/ndcg@10"
    assert ranker.best_score_ == pytest.approx(result.best_validation, abs=1e-6)


def test_save_load_ranker_and_task_predict_give_the_same_scores(fitted, tmp_path):
    ranker, root = fitted
    path = ranker.save(tmp_path / "model.ckpt")
    X, _, qid = read_letor(root / "Fold1" / "test.txt")
    ours = ranker.predict(X, qid=qid)
    out = tmp_path / "predict"
    overrides = ["task=predict", f"ckpt_path={path}", f"files=[{root / 'Fold1' / 'test.txt'}]"]
    run_config([*overrides, "logger=csv", "quiet=true"], out)
    np.testing.assert_allclose(
        np.loadtxt(out / "predictions" / "test.txt"), ours, rtol=0, atol=1e-6
    )
    scorer = differank.load_ranker(path)
    with torch.no_grad():
        raw = scorer(torch.from_numpy(X)[None], torch.ones(1, len(X), dtype=torch.bool))
    np.testing.assert_allclose(raw[0].double().numpy(), ours, rtol=0, atol=1e-6)
    loaded = Ranker.load(path)
    assert loaded.get_params() == ranker.get_params()
    np.testing.assert_allclose(loaded.predict(X), ours, rtol=0, atol=1e-6)
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(ranker)).predict(X, qid=qid), ours)


def test_fitted_attributes_describe_the_run(fitted):
    ranker, _ = fitted
    assert ranker.n_features_in_ == 5 and not hasattr(ranker, "feature_names_in_")
    assert (ranker.run_dir_ / "csv").is_dir() and ranker.checkpoint_path_.is_file()
    assert not (ranker.run_dir_ / "data").exists()  # the written fold was only the run's input
    assert set(ranker.eval_metrics_) >= {"ndcg@10", "map"}
    importances = ranker.feature_importances_
    assert importances.shape == (5,) and np.isfinite(importances).all()
    assert importances.max() > 0.01  # the labels follow the features: shuffling one hurts
    with pytest.raises(AttributeError, match="MLPRanker, not linear"):
        _ = ranker.coef_


def test_an_unfitted_ranker_says_so():
    with pytest.raises(NotFittedError, match="not fitted"):
        Ranker().predict(np.zeros((2, 3)))
    assert not hasattr(Ranker(), "feature_importances_")


def test_predict_refuses_another_feature_count_naming_both(fitted):
    ranker, _ = fitted
    with pytest.raises(ValueError, match="X has 4 features, but the Ranker was fitted with 5"):
        ranker.predict(np.zeros((3, 4)))


def test_overrides_name_the_configs_options():
    ranker = Ranker(
        loss="lambdaloss",
        loss_options={"sigma": 0.5, "weighting": "ndcgLoss2"},
        model="mlp",
        model_options={"hidden": [16, 8], "l2": 0.001, "optimizer.lr": 0.5},
        lr=0.01,
        early_stopping=3,
    )
    overrides = ranker.train_overrides()
    expected = {"loss.sigma=0.5", "loss.weighting='ndcgLoss2'", "model.ranker.hidden=[16,8]"}
    assert expected <= set(overrides)
    assert {"model.l2=0.001", "model.optimizer.lr=0.5", "model.optimizer.lr=0.01"} <= set(overrides)
    assert "callbacks.early_stopping.patience=3" in overrides
    config = compose_config([*overrides, "data=letor", "data.root=x"], run_dir=".")
    assert config.model.ranker.hidden == [16, 8] and config.loss.sigma == 0.5
    assert config.model.optimizer.lr == 0.01  # lr= comes after model_options: it wins


@pytest.mark.parametrize(
    ("params", "match"),
    [
        ({"device": "tpu"}, "device must be one of"),
        ({"max_epochs": 0}, "max_epochs must be an int >= 1"),
        ({"loss_options": {"a b": 1}}, "not a config key"),
    ],
)
def test_bad_parameters_are_refused_before_any_run(params, match):
    with pytest.raises(ValueError, match=match):
        Ranker(**params).fit(np.zeros((4, 2)), np.zeros(4), qid=[0, 0, 1, 1])


def test_early_stopping_needs_an_eval_set():
    with pytest.raises(ValueError, match="early_stopping needs an eval_set"):
        Ranker(early_stopping=2).fit(np.zeros((4, 2)), [0, 1, 0, 1], qid=[0, 0, 1, 1])


def test_the_parameters_follow_scikit_learns_protocol():
    ranker = Ranker(loss="listnet", max_epochs=3)
    assert ranker.get_params()["loss"] == "listnet"
    assert ranker.set_params(max_epochs=5) is ranker and ranker.max_epochs == 5
    assert repr(ranker) == "Ranker(loss='listnet', max_epochs=5)"
    with pytest.raises(ValueError, match="no parameter 'epochs'"):
        ranker.set_params(epochs=1)
    json.dumps(Ranker().get_params())  # plain values: save() stores them


def test_a_letor_files_path_stands_for_its_arrays(fitted):
    ranker, root = fitted
    fold = root / "Fold1"
    again = Ranker(**ranker.get_params()).fit(str(fold / "train.txt"), eval_set=fold / "vali.txt")
    X, y, qid = read_letor(fold / "test.txt")
    np.testing.assert_allclose(again.predict(fold / "test.txt"), ranker.predict(X), atol=1e-6)
    assert again.score(fold / "test.txt") == pytest.approx(ranker.score(X, y, qid=qid), abs=1e-6)
    with pytest.raises(
        ValueError, match="is a data file .LETOR text or Parquet., which holds its labels"
    ):
        ranker.predict(fold / "test.txt", qid=qid)
    with pytest.raises(ValueError, match="labels are needed: pass y"):
        ranker.fit(X, qid=qid)


def test_a_parquet_path_stands_for_its_arrays(fitted, tmp_path):
    pytest.importorskip("pyarrow")
    from differank.datamodules import write_parquet

    ranker, root = fitted
    X, y, qid = read_letor(root / "Fold1" / "test.txt")
    folder = tmp_path / "test_parquet"
    folder.mkdir()
    write_parquet(folder / "part-0.parquet", X, y, qid)
    np.testing.assert_allclose(ranker.predict(folder), ranker.predict(X), atol=1e-6)
    assert ranker.score(folder / "part-0.parquet") == pytest.approx(
        ranker.score(X, y, qid=qid), abs=1e-6
    )


def test_plot_curves_redraws_the_fits_curves_with_the_chosen_epoch(fitted, tmp_path):
    from differank.rankers.run.curves import run_curves

    ranker, _ = fitted
    figure = ranker.plot_curves(tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curves = run_curves(ranker.run_dir_, monitor="val/ndcg@10", mode="max")
    values = curves.series["val/ndcg@10"]
    assert values[curves.best_epoch] == max(values.values())
    assert len(figure.axes) >= len(curves.names)
    with pytest.raises(ValueError, match="loaded from a checkpoint"):
        Ranker.load(ranker.save(tmp_path / "model.ckpt")).plot_curves()


def test_a_failed_fit_leaves_no_run_folder(tmp_path):
    ranker = Ranker(loss="no_such_loss", verbose=False, output_dir=str(tmp_path))
    with pytest.raises(Exception, match="no_such_loss"):
        ranker.fit(np.zeros((4, 2)), [0, 1, 0, 1], qid=[0, 0, 1, 1])
    assert list(tmp_path.iterdir()) == []


def test_a_quiet_fit_prints_nothing(capfd, tmp_path):
    X = np.random.default_rng(0).normal(size=(40, 3))
    y = (X[:, 0] > 0).astype(int)
    Ranker(model="linear", max_epochs=1, verbose=False, output_dir=str(tmp_path)).fit(
        X, y, qid=np.arange(40) // 10
    )
    out, err = capfd.readouterr()
    assert out == "" and "logging interval" not in err and "GPU available" not in err


def test_import_differank_loads_neither_the_run_layer_nor_scikit_learn():
    import subprocess
    import sys

    code = (
        "import sys, differank, differank.datamodules; "
        "heavy = {'sklearn', 'pandas', 'pytorch_lightning', 'hydra', 'torch'} & set(sys.modules); "
        "assert not heavy, heavy; differank.Ranker; assert 'pytorch_lightning' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
