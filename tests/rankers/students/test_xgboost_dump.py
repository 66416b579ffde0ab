"""A tree student's XGBoost JSON dump scores as the student does: an independent numpy
traversal of the written dump, written from the OpenSearch plugin's rules (float32 values,
``x < split_condition`` to ``yes``, NaN to ``missing``, leaves summed in float32), reproduces
the student's own predict on 10,000 random rows with NaN and 0 entries to 1e-5; LightGBM's text
model round-trips through ``lightgbm.Booster(model_file=...)``; what the dump cannot say is
refused by name."""

from __future__ import annotations

import json

import numpy as np
import pytest

from differank.datamodules.letor_split import LetorSplit
from differank.rankers.students.boosters import (
    LightGBMStudent,
    QueryRows,
    ValidationMetric,
    XGBoostStudent,
)
from differank.rankers.students.model_files import (
    StudentFileError,
    read_student_model,
    student_library,
)
from differank.rankers.students.xgboost_dump import (
    float32_below,
    xgboost_json_dump,
    xgboost_trees,
)

pytest.importorskip("lightgbm")
pytest.importorskip("xgboost")

FEATURES = 6


def letor_split(rng, queries: int, nan: bool) -> LetorSplit:
    sizes = rng.integers(2, 15, queries)
    rows = int(sizes.sum())
    features = rng.normal(size=(rows, FEATURES)).astype(np.float32)
    features[rng.random(features.shape) < 0.2] = 0.0  # LETOR's absent features
    if nan:  # NaN in two features: LightGBM learns a NaN direction there, not elsewhere
        features[:, :2][rng.random((rows, 2)) < 0.1] = np.nan
    labels = np.clip(np.round(features[:, 2] + rng.normal(size=rows)), 0, 2).astype(np.float32)
    qids = np.repeat(np.arange(queries), sizes)
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    query_rows = [np.arange(start, start + size) for start, size in zip(starts, sizes, strict=True)]
    return LetorSplit(
        "x", [], features, labels, qids, np.arange(queries), query_rows, np.arange(queries), []
    )


STUDENTS = {
    "lightgbm": LightGBMStudent(max_rounds=40, early_stopping_rounds=40, params={"num_leaves": 15}),
    "xgboost": XGBoostStudent(max_rounds=40, early_stopping_rounds=40, params={"max_depth": 4}),
}


@pytest.fixture(scope="module", params=sorted(STUDENTS))
def student(request, tmp_path_factory):
    """(library, the fitted student, its model file)."""
    rng = np.random.default_rng(7)
    train, val = letor_split(rng, 120, nan=True), letor_split(rng, 30, nan=True)
    teacher = np.nan_to_num(train.features[:, 0]) * 2 + np.nan_to_num(train.features[:, 3])
    fitted = STUDENTS[request.param].fit(
        QueryRows.of(train, teacher), QueryRows.of(val), ValidationMetric("val/map")
    )
    path = tmp_path_factory.mktemp("student") / STUDENTS[request.param].model_file
    path.write_text(fitted.text)
    return request.param, fitted, path


def traverse(dump: str, names: list[str], rows: np.ndarray) -> np.ndarray:
    """The plugin's score of each row, from the dump's text alone (float32 throughout)."""
    values = rows.astype(np.float32)
    column = {name: index for index, name in enumerate(names)}
    total = np.zeros(len(rows), np.float32)
    for tree in json.loads(dump):
        nodes = {}
        pending = [tree]
        while pending:
            node = pending.pop()
            nodes[node["nodeid"]] = node
            pending += node.get("children", [])
        at = np.zeros(len(rows), np.int64)
        leaf = np.full(len(rows), np.nan, np.float32)
        while np.isnan(leaf).any():
            for nodeid in np.unique(at[np.isnan(leaf)]):
                here = np.isnan(leaf) & (at == nodeid)
                node = nodes[int(nodeid)]
                if "leaf" in node:
                    leaf[here] = np.float32(node["leaf"])
                    continue
                x = values[here, column[node["split"]]]
                threshold = np.float32(node["split_condition"])
                at[here] = np.where(
                    np.isnan(x), node["missing"], np.where(x < threshold, node["yes"], node["no"])
                )
        total += leaf
    return total


def random_rows(count: int) -> np.ndarray:
    rng = np.random.default_rng(11)
    rows = rng.normal(size=(count, FEATURES)).astype(np.float32)
    rows[rng.random(rows.shape) < 0.15] = 0.0
    rows[rng.random(rows.shape) < 0.15] = np.nan  # every feature, NaN-trained or not
    return rows


def test_the_dump_scores_as_the_student_on_random_rows(student):
    library, fitted, path = student
    names = [f"f_{i}" for i in range(FEATURES)]
    dump = xgboost_json_dump(path, names)
    rows = random_rows(10_000)
    expected = fitted.predict(rows.astype(np.float64))
    assert np.isnan(rows).any() and (rows == 0).any() and np.ptp(expected) > 0.1
    np.testing.assert_allclose(traverse(dump, names, rows), expected, rtol=0, atol=1e-5)
    assert student_library(path) == library
    if library == "lightgbm":  # both of LightGBM's missing rules were converted and held
        kinds = {node.get("missing_type") for node in lightgbm_splits(read_student_model(path))}
        assert {"None", "NaN"} <= kinds


def lightgbm_splits(model) -> list[dict]:
    pending, splits = [tree["tree_structure"] for tree in model.trees], []
    while pending:
        node = pending.pop()
        if "left_child" in node:
            splits.append(node)
            pending += [node["left_child"], node["right_child"]]
    return splits


@pytest.mark.parametrize("student", ["lightgbm"], indirect=True)
def test_lightgbm_text_round_trips(student):
    _, fitted, path = student
    import lightgbm

    rows = random_rows(10_000).astype(np.float64)
    again = lightgbm.Booster(model_file=str(path)).predict(rows)
    np.testing.assert_array_equal(again, fitted.predict(rows))


def test_lightgbm_thresholds_become_float32_strict_ones():
    rng = np.random.default_rng(0)
    for threshold in [0.1, -0.3, 1e-35, 0.0, 2.5, *rng.normal(size=200)]:
        strict = np.float32(float32_below(threshold))
        below = float(np.nextafter(strict, np.float32(-np.inf)))
        # the float32 just below t' is <= t and t' is > t (compared as float64): for a float32
        # x, x <= t exactly when x < t'
        assert below <= threshold < float(strict)


def test_what_the_dump_cannot_say_is_refused(student, tmp_path):
    library, _, path = student
    model = read_student_model(path)
    with pytest.raises(ValueError, match="must be distinct"):
        xgboost_trees(model, ["a", "a", "b", "c", "d", "e"])
    if library == "lightgbm":
        first = model.trees[0]["tree_structure"]
        first["missing_type"] = "Zero"
        with pytest.raises(ValueError, match="zero_as_missing=false"):
            xgboost_trees(model)


def test_a_file_that_is_not_a_student_is_refused_by_name(tmp_path):
    text = tmp_path / "model.txt"
    text.write_text("not a model\n")
    with pytest.raises(StudentFileError, match="neither as LightGBM"):
        read_student_model(text)
    forged = tmp_path / "forged.txt"
    forged.write_text("tree\nversion=v4\nnum_class=1\ntree_sizes=100000000000\n\nTree=0\n")
    with pytest.raises(StudentFileError, match=str(forged)):
        read_student_model(forged)
