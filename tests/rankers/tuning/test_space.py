"""``tune.rows``: a row is named by its search file and scorer, or is a reference; the
references search what LightGBM users tune."""

from __future__ import annotations

import pytest

from differank.rankers.tuning.space import REFERENCE_DEFAULTS, Row, reference_spaces, row_space

pytest.importorskip("optuna")


@pytest.mark.parametrize(
    ("text", "row"),
    [
        ("listmle/linear", Row("listmle", "linear")),
        ("listmle", Row("listmle", "linear")),
        ("cone/conerank", Row("cone", "conerank")),
        ("domination/transformer", Row("domination", "transformer")),
        ("lightgbm", Row("lightgbm", peer="lightgbm")),
        ("peer_xgboost", Row("xgboost", peer="xgboost")),
    ],
)
def test_a_row_is_read_from_its_name(text, row):
    assert Row.parse(text) == row
    assert Row.parse(row.name) == row  # the report's name reads back


def test_a_row_without_a_search_file_is_refused_naming_the_choices():
    with pytest.raises(ValueError, match=r"no search space .*nosuch.yaml; choose from: .*listmle"):
        Row.parse("nosuch/linear")


def test_a_search_file_on_a_scorer_it_is_not_for_is_refused():
    with pytest.raises(ValueError, match="listmle.yaml is not for conerank"):
        row_space(Row("listmle", "conerank"))


def test_lightgbm_searches_the_lightgbm_tuner_set_and_the_learning_rate():
    tuner = {"lambda_l1", "lambda_l2", "num_leaves", "feature_fraction", "bagging_fraction"}
    tuner |= {"bagging_freq", "min_child_samples", "learning_rate"}
    assert set(reference_spaces()["lightgbm"]) == tuner
    for peer, default in REFERENCE_DEFAULTS.items():
        space = reference_spaces()[peer]
        assert set(default) <= set(space)
        for key, value in default.items():
            assert space[key]._contains(space[key].to_internal_repr(value)), (peer, key)
