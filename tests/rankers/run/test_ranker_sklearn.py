"""``differank.Ranker`` in scikit-learn: the estimator checks that apply to a ranker, ``clone``,
and model selection with ``GroupKFold`` over queries (``GridSearchCV``, ``cross_val_score``).

scikit-learn's checks that are skipped, and why: every check that calls ``fit(X, y)`` with no
query ids (``check_estimators_fit_returns_self``, ``check_fit2d_*``, ``check_n_features_in*``,
``check_estimators_pickle``, ``check_estimators_nan_inf``, ``check_estimators_dtypes``,
``check_dataframe_column_names_consistency``, ``check_fit_idempotent``, ...): a ranker learns
from queries, so ``fit`` refuses rows without ``qid`` / ``group`` (XGBRanker and LGBMRanker do
too). What those checks look at is tested with queries in tests/rankers/run/test_estimator.py
(``fit`` returns ``self``, ``n_features_in_``, pickling, a feature-count mismatch naming both
counts, DataFrame column names) and test_ranker_inputs.py (NaN / inf, dtypes, sparse input).
The classifier, regressor, transformer, clusterer, outlier, sample-weight, ``partial_fit``,
``set_output`` and array-API checks are for other kinds of estimator. ``check_estimators_unfitted``
wants scikit-learn's own ``NotFittedError`` class, which the Ranker cannot raise without
importing scikit-learn: its ``NotFittedError`` is, like scikit-learn's, both a ValueError and an
AttributeError (tested in test_estimator.py).
"""

import numpy as np
import pytest

sklearn = pytest.importorskip("sklearn")
from sklearn.base import clone  # noqa: E402
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_val_score  # noqa: E402
from sklearn.utils import estimator_checks  # noqa: E402

from differank.rankers.run.estimator import Ranker  # noqa: E402

APPLICABLE = (
    "check_estimator_cloneable",
    "check_estimator_repr",
    "check_no_attributes_set_in_init",
    "check_parameters_default_constructible",
    "check_get_params_invariance",
    "check_set_params",
    "check_do_not_raise_errors_in_init_or_set_params",
    "check_valid_tag_types",
    "check_estimator_tags_renamed",
    "check_mixin_order",
)


@pytest.mark.parametrize("check", APPLICABLE)
def test_the_applicable_scikit_learn_checks_pass(check):
    getattr(estimator_checks, check)("Ranker", Ranker(max_epochs=2, loss_options={"sigma": 2.0}))


def test_clone_copies_the_parameters_and_no_fitted_state():
    ranker = Ranker(loss="listnet", model_options={"hidden": [8]})
    copy = clone(ranker)
    assert copy is not ranker and copy.get_params() == ranker.get_params()


def query_frame(queries=18, size=12, seed=0):
    """A DataFrame of features and a qid column, and graded labels from the first feature
    (lists of 12: under the letor convention NDCG@10 of a shorter list is 0)."""
    pandas = pytest.importorskip("pandas")
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(queries * size, 4))
    y = np.digitize(X[:, 0] + rng.normal(scale=0.3, size=len(X)), [0.0, 1.0])
    frame = pandas.DataFrame(X, columns=["f0", "f1", "f2", "f3"])
    frame["qid"] = np.repeat(np.arange(queries), size)
    return frame, y


@pytest.mark.slow  # 7 fits and 3 more: about 40 s
def test_grid_search_and_cross_val_score_over_query_folds():
    frame, y = query_frame()
    base = Ranker(model="linear", max_epochs=2, verbose=False)
    search = GridSearchCV(base, {"lr": [0.001, 0.05]}, cv=GroupKFold(3))
    search.fit(frame, y, groups=frame["qid"])
    assert search.best_params_["lr"] in (0.001, 0.05)
    assert len(search.cv_results_["mean_test_score"]) == 2
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    assert search.predict(frame).shape == (len(frame),)
    scores = cross_val_score(base, frame, y, groups=frame["qid"], cv=GroupKFold(3))
    assert scores.shape == (3,) and ((0 <= scores) & (scores <= 1)).all()
    assert scores.mean() > 0.6  # the labels follow f0: a linear ranker learns it in 2 epochs
