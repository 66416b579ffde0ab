"""``differank.Ranker``: it trains from memory the model ``python train.py`` trains on the same
rows written as a fold, its checkpoint is the one ``load_ranker`` and ``task=predict
files=[...]`` read, and it behaves as a library object (nothing written unless asked, nothing
printed unless asked, the caller's process left as found)."""

import json
import pickle
import signal
import tempfile
import threading

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


def test_fitted_attributes_describe_the_fit(fitted):
    ranker, _ = fitted
    assert ranker.n_features_in_ == 5 and not hasattr(ranker, "feature_names_in_")
    assert [p.name for p in ranker.run_dir_.iterdir()] == ["model.ckpt"]  # output_dir given
    assert ranker.checkpoint_path_ == ranker.run_dir_ / "model.ckpt"
    assert [int(row["epoch"]) for row in ranker.history_] == [0, 1, 2]
    assert ranker.best_score_ == max(row["val/ndcg@10"] for row in ranker.history_)
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
    with pytest.raises(
        ValueError,
        match="X has 4 features, but Ranker is expecting 5 features as input",
    ):
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
    with pytest.raises(ValueError, match="Invalid parameter 'epochs'"):
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
    with pytest.raises(ValueError, match="requires y to be passed"):
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


def test_plot_curves_draws_the_fits_history_on_request(fitted, tmp_path):
    from differank.rankers.run.curves import history_curves

    ranker, _ = fitted
    figure = ranker.plot_curves(tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    curves = history_curves(ranker.history_, monitor="val/ndcg@10", mode="max")
    values = curves.series["val/ndcg@10"]
    assert (
        values[curves.best_epoch] == max(values.values())
        and curves.best_epoch == ranker.best_epoch_
    )
    assert len(figure.axes) >= len(curves.names)
    with pytest.raises(ValueError, match="loaded from a checkpoint"):
        Ranker.load(ranker.save(tmp_path / "model.ckpt")).plot_curves()


def small_rows(queries=4, size=10, features=3, seed=0):
    X = np.random.default_rng(seed).normal(size=(queries * size, features))
    return X, (X[:, 0] > 0).astype(int), np.arange(queries * size) // size


@pytest.fixture
def temporary_folder(tmp_path, monkeypatch):
    """The system's temporary folder, as tempfile and torch see it, pointed at an empty one."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.chdir(tmp_path)
    return folder


def test_a_fit_writes_no_file_without_output_dir(temporary_folder, tmp_path):
    X, y, qid = small_rows()
    before = set(tmp_path.rglob("*"))
    Ranker(model="linear", max_epochs=2, verbose=False).fit(
        X, y, qid=qid, eval_set=(X, y), eval_qid=qid
    )
    assert set(tmp_path.rglob("*")) == before


def test_a_failed_fit_leaves_no_run_folder(temporary_folder, tmp_path):
    with pytest.raises(Exception, match="no_such_loss"):
        Ranker(loss="no_such_loss", verbose=False, output_dir=str(tmp_path / "runs")).fit(
            *small_rows()[:2], qid=small_rows()[2]
        )
    X, y, qid = small_rows()
    ranker = Ranker(
        model="linear", loss_options={"weighting": "nonsense"}, output_dir=str(tmp_path / "runs")
    )
    with pytest.raises(ValueError, match="nonsense"):
        ranker.fit(X, y, qid=qid)
    assert list((tmp_path / "runs").rglob("*")) == [] and list(temporary_folder.iterdir()) == []


def test_library_object_an_interrupted_fit_raises_keyboard_interrupt_and_keeps_the_handler(
    monkeypatch, temporary_folder
):
    from differank.rankers.training.module import RankingModule

    def interrupted(self, batch, batch_idx):
        raise KeyboardInterrupt

    monkeypatch.setattr(RankingModule, "training_step", interrupted)
    handler = signal.getsignal(signal.SIGINT)
    with pytest.raises(KeyboardInterrupt):
        Ranker(model="linear", max_epochs=2, verbose=False).fit(
            *small_rows()[:2], qid=small_rows()[2]
        )
    assert signal.getsignal(signal.SIGINT) is handler
    assert list(temporary_folder.iterdir()) == []


def test_a_quiet_fit_prints_nothing(capfd):
    X, y, qid = small_rows()
    Ranker(model="linear", max_epochs=1, verbose=False).fit(
        X, y, qid=qid, eval_set=(X, y), eval_qid=qid
    )
    out, err = capfd.readouterr()
    assert out == "" and err == ""


def test_a_verbose_fit_prints_one_line_per_epoch_and_no_banner(capfd):
    X, y, qid = small_rows()
    Ranker(model="linear", max_epochs=3, verbose=1).fit(
        X, y, qid=qid, eval_set=(X, y), eval_qid=qid
    )
    out, err = capfd.readouterr()
    lines = out.splitlines()
    assert [line.split()[1] for line in lines] == ["0/2", "1/2", "2/2"], out
    assert all("train/loss" in line and "val/ndcg@10" in line and "best" in line for line in lines)
    assert "GPU available" not in out + err and err == ""


def test_the_callers_random_state_and_torch_flags_are_left_as_found():
    np.random.seed(5)
    torch.manual_seed(7)
    expected = (np.random.random(), torch.rand(1).item())
    np.random.seed(5)
    torch.manual_seed(7)
    deterministic = torch.are_deterministic_algorithms_enabled()
    Ranker(model="linear", max_epochs=1, verbose=False).fit(*small_rows()[:2], qid=small_rows()[2])
    assert (np.random.random(), torch.rand(1).item()) == expected
    assert torch.are_deterministic_algorithms_enabled() == deterministic


def test_library_object_fits_in_threads_are_independent():
    X, y, qid = small_rows(queries=6)
    alone = [
        Ranker(model="linear", max_epochs=2, seed=seed, verbose=False).fit(X, y, qid=qid).predict(X)
        for seed in (0, 1)
    ]
    results = {}

    def fit(seed):
        ranker = Ranker(model="linear", max_epochs=2, seed=seed, verbose=False)
        results[seed] = ranker.fit(X, y, qid=qid).predict(X)

    threads = [threading.Thread(target=fit, args=(seed,)) for seed in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    np.testing.assert_array_equal(results[0], alone[0])
    np.testing.assert_array_equal(results[1], alone[1])


def test_library_object_parameters_are_literal_values_never_interpolated(monkeypatch):
    monkeypatch.setenv("DIFFERANK_TEST_PRECISION", "32-true")
    ranker = Ranker(model="linear", max_epochs=1, precision="${oc.env:DIFFERANK_TEST_PRECISION}")
    with pytest.raises(Exception, match=r"\$\{oc\.env:DIFFERANK_TEST_PRECISION\}"):
        ranker.fit(*small_rows()[:2], qid=small_rows()[2])


@pytest.mark.parametrize(
    ("tamper", "match"),
    [
        (lambda record: record.update(params={"evil": 1}), r"estimator\['params'\]\['evil'\]"),
        (lambda record: record.update(params=["loss"]), r"estimator\['params'\] is not a dict"),
        (lambda record: record.update(feature_names=[1, 2]), r"estimator\['feature_names'\]"),
        (lambda record: record.update(feature_names=["a"]), r"1 names for 5 features"),
    ],
)
def test_library_object_a_tampered_estimator_record_is_refused_naming_the_entry(
    fitted, tmp_path, tamper, match
):
    ranker, _ = fitted
    path = ranker.save(tmp_path / "model.ckpt")
    checkpoint = torch.load(path, weights_only=True)
    tamper(checkpoint["differank"]["estimator"])
    torch.save(checkpoint, path)
    with pytest.raises(ValueError, match=match):
        Ranker.load(path)


def test_sample_weight_per_row_or_per_query(fitted):
    X, y, qid = small_rows(queries=6)
    plain = Ranker(model="linear", max_epochs=2, verbose=False).fit(X, y, qid=qid).predict(X)
    ones = Ranker(model="linear", max_epochs=2, verbose=False)
    np.testing.assert_allclose(
        ones.fit(X, y, qid=qid, sample_weight=np.ones(6)).predict(X), plain, atol=1e-6
    )
    per_row = np.repeat([1.0, 3.0, 1.0, 2.0, 1.0, 1.0], 10)
    per_query = (
        Ranker(model="linear", max_epochs=2, verbose=False)
        .fit(X, y, qid=qid, sample_weight=[1.0, 3.0, 1.0, 2.0, 1.0, 1.0])
        .predict(X)
    )
    rows = (
        Ranker(model="linear", max_epochs=2, verbose=False)
        .fit(X, y, qid=qid, sample_weight=per_row)
        .predict(X)
    )
    np.testing.assert_allclose(rows, per_query, atol=1e-6)
    assert np.abs(rows - plain).max() > 1e-4  # the weights change the model
    with pytest.raises(ValueError, match="one per row .60. or one per query .6."):
        ones.fit(X, y, qid=qid, sample_weight=np.ones(7))


def test_several_eval_sets_the_first_picks_the_epoch(fitted):
    X, y, qid = small_rows(queries=6)
    Xv, yv, qv = small_rows(queries=3, seed=1)
    ranker = Ranker(model="linear", max_epochs=3, verbose=False)
    ranker.fit(X, y, qid=qid, eval_set=[(Xv, yv), (X, y)], eval_qid=[qv, qid])
    assert len(ranker.eval_results_) == 2 and ranker.eval_metrics_ is ranker.eval_results_[0]
    assert ranker.eval_results_[1]["ndcg@10"] == pytest.approx(ranker.score(X, y, qid=qid))
    assert ranker.best_score_ == pytest.approx(ranker.score(Xv, yv, qid=qv), abs=1e-6)
    with pytest.raises(ValueError, match="one entry per eval_set pair"):
        ranker.fit(X, y, qid=qid, eval_set=[(Xv, yv), (X, y)], eval_qid=[qv])


HYDRA_APP = """
import json, logging, sys
import hydra, numpy as np
from hydra.core.global_hydra import GlobalHydra
from hydra.core.hydra_config import HydraConfig
import differank

@hydra.main(version_base="1.3", config_path=None, config_name=None)
def app(cfg):
    def state():
        return {
            "output_dir": HydraConfig.get().runtime.output_dir,
            "job": HydraConfig.get().job.name,
            "hydra": id(GlobalHydra.instance().hydra),
            "root": [repr(h) for h in logging.getLogger().handlers],
            "lightning": [repr(h) for h in logging.getLogger("pytorch_lightning").handlers],
        }
    before = state()
    X = np.random.default_rng(0).normal(size=(40, 3))
    differank.Ranker(model="linear", max_epochs=1, verbose=False).fit(
        X, (X[:, 0] > 0).astype(int), qid=np.arange(40) // 10)
    print("STATE", json.dumps([before, state()]))

app()
"""


def test_a_hydra_app_that_fits_a_ranker_keeps_its_own_state(tmp_path):
    import json
    import subprocess
    import sys

    (tmp_path / "app.py").write_text(HYDRA_APP)
    done = subprocess.run(
        [sys.executable, "app.py", "hydra.run.dir=own_run"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    line = next(line for line in done.stdout.splitlines() if line.startswith("STATE"))
    before, after = json.loads(line[len("STATE") :])
    assert before == after and before["output_dir"].endswith("own_run")


def test_import_differank_loads_neither_the_run_layer_nor_scikit_learn():
    import subprocess
    import sys

    code = (
        "import sys, differank, differank.datamodules; "
        "heavy = {'sklearn', 'pandas', 'pytorch_lightning', 'hydra', 'torch'} & set(sys.modules); "
        "assert not heavy, heavy; differank.Ranker; assert 'pytorch_lightning' in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
