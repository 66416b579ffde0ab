"""``experiment=distill/tree_student`` end to end: a LightGBM (or XGBoost) student of a
checkpoint teacher trains without a Lightning loop, writes its model file, test metrics and
predictions like any run, and ``task=export ckpt_path=<its model file>`` writes its XGBoost JSON
dump (scoring the test rows as the run did) and its library's model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import differank
from tests.conftest import TINY_DATA
from tests.rankers.students.test_xgboost_dump import traverse

pytest.importorskip("lightgbm")
pytest.importorskip("xgboost")

ROUNDS = ["student.max_rounds=30", "student.early_stopping_rounds=10"]
# library -> (the run's model file, its exported copy)
STUDENTS = {
    "lightgbm": ("model.txt", "lightgbm.txt"),
    "xgboost": ("model.json", "xgboost_model.json"),
}


@pytest.fixture(scope="module")
def teacher(tmp_path_factory) -> Path:
    run_dir = tmp_path_factory.mktemp("teacher")
    overrides = ["model=mlp", "loss=listnet", *TINY_DATA, "trainer.max_epochs=1", "logger=csv"]
    differank.run(overrides, output_dir=run_dir)
    return run_dir / "checkpoints" / "best.ckpt"


def raw_test_split():
    """The test split read raw, as the student scores it."""
    from hydra.utils import instantiate

    from differank.rankers.run.runs import compose_config

    cfg = compose_config(TINY_DATA, run_dir=Path("unused"))
    return instantiate(cfg.data, normalization="none", transform="none").split_data("test")


@pytest.mark.parametrize("library", sorted(STUDENTS))
def test_a_tree_student_trains_and_exports(teacher, tmp_path, library):
    model_name, native = STUDENTS[library]
    overrides = ["experiment=distill/tree_student", f"student={library}", f"teacher.path={teacher}"]
    run = differank.run([*overrides, *TINY_DATA, *ROUNDS], output_dir=tmp_path / "student")
    assert 0.0 <= run.test_metrics["map"] <= 1.0
    assert run.best_validation == pytest.approx(
        json.loads((run.run_dir / "student" / "student.json").read_text())["best_value"]
    )
    model = run.run_dir / "student" / model_name
    predicted = np.loadtxt(run.run_dir / "predictions" / "test.txt")

    differank.run(["task=export", f"ckpt_path={model}"], output_dir=tmp_path / "export")
    folder = tmp_path / "export" / "export"
    assert sorted(path.name for path in folder.iterdir()) == sorted(["xgboost.json", native])
    assert (folder / native).read_bytes() == model.read_bytes()
    split = raw_test_split()
    names = [f"feature_{i + 1}" for i in range(split.features.shape[1])]
    dump = (folder / "xgboost.json").read_text()
    np.testing.assert_allclose(traverse(dump, names, split.features), predicted, atol=1e-5)
    if library == "lightgbm":  # trained without NaN: a missing feature scores as an absent one
        missing = split.features.copy()
        missing[np.random.default_rng(0).random(missing.shape) < 0.3] = np.nan
        absent = np.nan_to_num(missing, nan=0.0)
        np.testing.assert_array_equal(traverse(dump, names, missing), traverse(dump, names, absent))


@pytest.mark.parametrize("library", sorted(STUDENTS))
def test_a_tree_student_exports_opensearch_bodies_scoring_a_missing_feature_as_0(
    teacher, tmp_path, library
):
    """``export.format=opensearch``: the feature set (no bias feature) and a
    ``model/xgboost+json`` body in the plugin's object form, ``missing_as_zero`` on: a feature
    the plugin cannot compute scores as the LETOR reader's absent feature, 0, for XGBoost
    students too (whose trees send NaN down a learned default branch)."""
    model_name, _ = STUDENTS[library]
    overrides = ["experiment=distill/tree_student", f"student={library}", f"teacher.path={teacher}"]
    run = differank.run([*overrides, *TINY_DATA, *ROUNDS], output_dir=tmp_path / "student")
    model = run.run_dir / "student" / model_name
    predicted = np.loadtxt(run.run_dir / "predictions" / "test.txt")
    exported = ["task=export", f"ckpt_path={model}", "export.format=opensearch", "export.name=s"]
    differank.run(exported, output_dir=tmp_path / "export")
    folder = tmp_path / "export" / "export" / "opensearch"
    feature_set = json.loads((folder / "featureset.json").read_text())["featureset"]
    body = json.loads((folder / "model.json").read_text())["model"]
    split = raw_test_split()
    names = [feature["name"] for feature in feature_set["features"]]
    assert names == [f"feature_{i + 1}" for i in range(split.features.shape[1])]
    assert body["name"] == feature_set["name"] == "s"
    assert body["model"]["type"] == "model/xgboost+json"
    definition = json.loads(body["model"]["definition"])
    assert definition["objective"] == "reg:linear" and definition["missing_as_zero"] is True
    trees = json.dumps(definition["splits"])
    # the reader's features (an absent one 0) score as the student predicted them
    np.testing.assert_allclose(traverse(trees, names, split.features), predicted, atol=1e-5)


def test_a_student_needs_a_teacher_and_resumes_nothing(teacher, tmp_path):
    with pytest.raises(ValueError, match="student=... learns from a teacher"):
        differank.run(["student=lightgbm", *TINY_DATA], output_dir=tmp_path / "run")
    overrides = ["experiment=distill/tree_student", f"teacher.path={teacher}", "ckpt_path=x.ckpt"]
    with pytest.raises(ValueError, match="resumes from nothing"):
        differank.run([*overrides, *TINY_DATA], output_dir=tmp_path / "again")


def test_a_monitor_that_is_not_a_validation_metric_is_refused(teacher, tmp_path):
    overrides = ["experiment=distill/tree_student", f"teacher.path={teacher}", "monitor=val/loss"]
    with pytest.raises(ValueError, match="monitor must be val/ with one of"):
        differank.run([*overrides, *TINY_DATA], output_dir=tmp_path / "run")


def test_a_student_model_file_is_only_exported(teacher, tmp_path):
    overrides = ["experiment=distill/tree_student", f"teacher.path={teacher}"]
    run = differank.run([*overrides, *TINY_DATA, *ROUNDS], output_dir=tmp_path / "student")
    model = run.run_dir / "student" / "model.txt"
    with pytest.raises(ValueError, match="tree student's model file: task=export"):
        differank.run(["task=test", f"ckpt_path={model}"], output_dir=tmp_path / "test")
    with pytest.raises(ValueError, match="export.format=opensearch"):
        differank.run(
            ["task=export", f"ckpt_path={model}", "export.format=onnx"],
            output_dir=tmp_path / "export",
        )


def test_an_ensemble_teaches_a_tree_student(teacher, tmp_path):
    """teacher=ensemble: the ensemble.json of the ensemble CLI (here written by hand: the one
    checkpoint twice) scores the training split the student learns from."""
    record = tmp_path / "ensemble.json"
    members = {"checkpoints": [str(teacher)] * 2, "weights": [0.5, 0.5], "scores": "standardized"}
    record.write_text(json.dumps(members))
    overrides = ["experiment=distill/tree_student", "teacher=ensemble", f"teacher.path={record}"]
    run = differank.run([*overrides, *TINY_DATA, *ROUNDS], output_dir=tmp_path / "student")
    assert 0.0 <= run.test_metrics["map"] <= 1.0
    written = json.loads((run.run_dir / "student" / "student.json").read_text())
    assert written["teacher"] == str(record) and written["rounds"] >= 1
