"""Both libraries boost on the distillation objective: trained on queries whose labels are all
equal (no label gradient at all), a student still learns its teacher's order; the validation
metric is the project's and its name is checked."""

from __future__ import annotations

import numpy as np
import pytest

from differank.rankers.students.boosters import (
    LightGBMStudent,
    QueryRows,
    ValidationMetric,
    XGBoostStudent,
)
from tests.rankers.students.test_xgboost_dump import letor_split

pytest.importorskip("lightgbm")
pytest.importorskip("xgboost")

STUDENTS = {
    "lightgbm": LightGBMStudent(max_rounds=30, early_stopping_rounds=30, params={"num_leaves": 7}),
    "xgboost": XGBoostStudent(max_rounds=30, early_stopping_rounds=30, params={"max_depth": 3}),
}


@pytest.mark.parametrize("library", sorted(STUDENTS))
def test_all_equal_label_queries_teach_the_teachers_order(library):
    rng = np.random.default_rng(5)
    train, val = letor_split(rng, 80, nan=False), letor_split(rng, 20, nan=False)
    train.labels[:] = 1.0  # every training query: all labels equal
    teacher = train.features[:, 4] - train.features[:, 5]
    fitted = STUDENTS[library].fit(
        QueryRows.of(train, teacher), QueryRows.of(val), ValidationMetric("val/ndcg@10")
    )
    scores = fitted.predict(train.features)
    assert np.ptp(scores) > 0.1  # the trees are not empty
    assert np.corrcoef(scores, teacher)[0, 1] > 0.8


def test_the_validation_metric_is_the_projects():
    from differank.rankers.metrics.evaluate import evaluate_arrays

    rng = np.random.default_rng(1)
    rows = QueryRows.of(letor_split(rng, 10, nan=False))
    scores = rng.normal(size=len(rows.labels))
    expected = evaluate_arrays(scores, rows.labels, rows.qids, ks=(5,), convention="trec")
    assert ValidationMetric("val/ndcg@5", "trec")(scores, rows) == expected["ndcg@5"]
    with pytest.raises(ValueError, match="monitor must be val/ with one of"):
        ValidationMetric("train/loss")
