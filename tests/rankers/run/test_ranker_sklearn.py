"""``differank.Ranker`` in scikit-learn: every estimator check that applies, with query ids
supplied, and model selection over query folds on NumPy arrays and DataFrames.

scikit-learn's checks call ``fit(X, y)`` and ``score(X, y)`` without query ids, which a ranker
needs (XGBRanker and LGBMRanker refuse them too); :class:`QueriedRanker` supplies them (queries
of five consecutive rows) and is otherwise the Ranker. The checks that do not apply, and why:
"""

import numpy as np
import pytest
from sklearn import config_context
from sklearn.base import clone
from sklearn.model_selection import GridSearchCV, GroupKFold, cross_val_score
from sklearn.utils.estimator_checks import parametrize_with_checks

from differank.rankers.run.estimator import Ranker

NOT_APPLICABLE = {
    "check_sample_weight_equivalence_on_dense_data": (
        "a ranker's sample_weight weighs queries: repeating a row adds a document to its query "
        "(another list, another loss), so it is not the row's weight doubled"
    ),
    "check_sample_weight_equivalence_on_sparse_data": "as the dense variant",
    "check_do_not_raise_errors_in_init_or_set_params": (
        "passes every signature name to set_params, including the **deprecated catch-all that "
        "keeps the renamed `transform` keyword working for one release (0.3.0); it applies "
        "again once that keyword is removed"
    ),
}


def rows(X) -> int:
    return X.shape[0] if hasattr(X, "shape") else len(np.asarray(X))  # sparse, arrays, _NotAnArray


class QueriedRanker(Ranker):
    """The Ranker with queries of five consecutive rows when none are given."""

    def fit(self, X, y=None, *, qid=None, group=None, sample_weight=None, **options):
        if qid is None and group is None:
            qid = np.arange(rows(X)) // 5
        return super().fit(X, y, qid=qid, group=group, sample_weight=sample_weight, **options)

    def score(self, X, y=None, qid=None, group=None):
        if qid is None and group is None:
            qid = np.arange(rows(X)) // 5
        return super().score(X, y, qid=qid, group=group)


@parametrize_with_checks(
    [QueriedRanker(model="linear", max_epochs=1, verbose=False)],
    expected_failed_checks=lambda estimator: NOT_APPLICABLE,
)
def test_scikit_learn_check(estimator, check):
    check(estimator)


def test_not_fitted_is_scikit_learns_error():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError, match="not fitted"):
        Ranker().predict(np.zeros((2, 3)))


def test_clone_copies_the_parameters_and_no_fitted_state():
    ranker = Ranker(loss="listnet", model_options={"hidden": [8]})
    copy = clone(ranker)
    assert copy is not ranker and copy.get_params() == ranker.get_params()


def test_the_renamed_transform_keyword_warns_and_sets_feature_transform():
    with pytest.warns(FutureWarning, match="feature_transform"):
        ranker = Ranker(transform="log1p")
    assert ranker.feature_transform == "log1p" and "transform" not in ranker.get_params()
    with pytest.raises(TypeError, match="unexpected keyword"):
        Ranker(tranform="log1p")


def query_arrays(queries=18, size=12, seed=0):
    """Features, graded labels from the first feature, and query ids (lists of 12: under the
    letor convention NDCG@10 of a shorter list is 0)."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(queries * size, 4))
    y = np.digitize(X[:, 0] + rng.normal(scale=0.3, size=len(X)), [0.0, 1.0])
    return X, y, np.repeat(np.arange(queries), size)


def test_grid_search_on_arrays_routes_qid_to_fit_and_score():
    X, y, qid = query_arrays()
    with config_context(enable_metadata_routing=True):
        base = Ranker(model="linear", max_epochs=2, verbose=False)
        base.set_fit_request(qid=True).set_score_request(qid=True)
        search = GridSearchCV(base, {"lr": [0.001, 0.05]}, cv=GroupKFold(3), error_score="raise")
        search.fit(X, y, groups=qid, qid=qid)
    scores = search.cv_results_["mean_test_score"]
    assert len(scores) == 2 and np.isfinite(scores).all()
    assert search.best_params_["lr"] in (0.001, 0.05)
    assert search.predict(X).shape == (len(X),)


def test_score_without_queries_names_the_routing_fix():
    X, y, qid = query_arrays(queries=6)
    ranker = Ranker(model="linear", max_epochs=1, verbose=False).fit(X, y, qid=qid)
    with pytest.raises(ValueError, match="enable_metadata_routing=True"):
        ranker.score(X, y)


@pytest.mark.slow  # 7 fits and 3 more
def test_grid_search_and_cross_val_score_over_query_folds_of_a_dataframe():
    pandas = pytest.importorskip("pandas")
    X, y, qid = query_arrays()
    frame = pandas.DataFrame(X, columns=["f0", "f1", "f2", "f3"])
    frame["qid"] = qid
    base = Ranker(model="linear", max_epochs=2, verbose=False)
    search = GridSearchCV(base, {"lr": [0.001, 0.05]}, cv=GroupKFold(3), error_score="raise")
    search.fit(frame, y, groups=frame["qid"])
    assert np.isfinite(search.cv_results_["mean_test_score"]).all()
    scores = cross_val_score(base, frame, y, groups=frame["qid"], cv=GroupKFold(3))
    assert scores.shape == (3,) and ((0 <= scores) & (scores <= 1)).all()
    assert scores.mean() > 0.6  # the labels follow f0: a linear ranker learns it in 2 epochs
