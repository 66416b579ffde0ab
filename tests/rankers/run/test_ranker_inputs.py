"""What ``differank.Ranker`` accepts: NumPy, pandas, torch and SciPy inputs give the same rows;
qid (contiguous or not) and group sizes give the same queries; bad input is refused by name."""

import numpy as np
import pytest
import torch
from scipy import sparse

from differank.rankers.run.ranker_inputs import letor_labels, query_codes, ranking_rows

X = np.array([[1.0, 0.0], [0.5, 2.0], [0.0, 0.0], [3.0, -1.0]])
Y = np.array([2, 0, 1, 0])


def test_numpy_torch_sparse_and_dataframe_give_the_same_rows():
    pandas = pytest.importorskip("pandas")
    qid = [7, 7, 3, 3]
    expected = ranking_rows(X, Y, qid=qid)
    frame = pandas.DataFrame({"a": X[:, 0], "qid": qid, "b": X[:, 1]})
    for features, kwargs in (
        (torch.from_numpy(X), {"qid": torch.tensor(qid)}),
        (sparse.csr_matrix(X), {"qid": qid}),
        (frame, {}),  # the qid column by name
    ):
        rows = ranking_rows(features, Y, **kwargs)
        np.testing.assert_array_equal(rows.features, expected.features)
        np.testing.assert_array_equal(rows.queries, expected.queries)
    assert ranking_rows(frame, Y).feature_names == ["a", "b"]
    assert expected.features.dtype == np.float32 and expected.labels.tolist() == [2, 0, 1, 0]


def test_queries_are_numbered_by_first_appearance_contiguous_or_not():
    assert query_codes(["b", "a", "b", "c"], None, 4).tolist() == [0, 1, 0, 2]
    assert query_codes(None, [2, 1, 1], 4).tolist() == [0, 0, 1, 2]
    assert query_codes(np.array([9, 9, 2, 2]), None, 4).tolist() == [0, 0, 1, 1]


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "pass qid=<one query id per row>"),
        ({"qid": [1, 2, 3]}, r"one query id per row \(4\), got shape \(3,\)"),
        ({"qid": [[1, 2], [3, 4]]}, "one query id per row"),
        ({"qid": [1.0, np.nan, 1.0, 1.0]}, "qid of row 1 is nan"),
        ({"group": [2, 1]}, "group sizes sum to 3 rows, but there are 4"),
        ({"group": [2, 0, 2]}, r"group\[1\] = 0 is not a query size"),
        ({"qid": [1, 1, 2, 2], "group": [2, 2]}, "not both"),
    ],
)
def test_bad_queries_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        ranking_rows(X, Y, **kwargs)


@pytest.mark.parametrize(
    ("y", "match"),
    [
        ([1, -1, 0, 0], "row 1 has label -1"),
        ([1, 0.5, 0, 0], "row 1 has label 0.5"),
        ([1, 0, 40, 0], "row 2 has label 40; labels are graded relevance, integers 0..31"),
        (["a", "b", "c", "d"], "non-negative numbers"),
        ([1, 0, 0], r"one label per row \(4\)"),
    ],
)
def test_labels_that_are_not_grades_are_refused(y, match):
    with pytest.raises(ValueError, match=match):
        letor_labels(np.asarray(y), 4)


def test_nan_and_inf_follow_the_readers_nan_policy():
    bad = X.copy()
    bad[2, 1] = np.nan
    with pytest.raises(ValueError, match=r"row 2, column 1 is not finite \(value nan"):
        ranking_rows(bad, Y, qid=[0, 0, 1, 1])
    assert ranking_rows(bad, Y, qid=[0, 0, 1, 1], nan_policy="zero").features[2, 1] == 0
    assert np.isnan(ranking_rows(bad, Y, qid=[0, 0, 1, 1], nan_policy="allow").features[2, 1])
    huge = X.copy()
    huge[1, 0] = 1e39
    with pytest.raises(ValueError, match="1e\\+39 is beyond float32's range"):
        ranking_rows(huge, Y, qid=[0, 0, 1, 1])


def test_a_dataframe_names_its_bad_column():
    pandas = pytest.importorskip("pandas")
    frame = pandas.DataFrame({"a": [1.0, np.inf], "b": ["x", "y"], "qid": [1, 1]})
    with pytest.raises(ValueError, match="column 'b' has dtype .*, not a number"):
        ranking_rows(frame, [0, 1])
    with pytest.raises(ValueError, match=r"row 1, column 0 \('a'\) is not finite"):
        ranking_rows(frame[["a", "qid"]], [0, 1])


def test_features_must_be_a_numeric_matrix():
    with pytest.raises(ValueError, match=r"2-D matrix.*X.reshape\(1, -1\)"):
        ranking_rows(np.zeros(3), None, qid=[0, 0, 0])
    with pytest.raises(ValueError, match="rectangular"):
        ranking_rows([[1.0, 2.0], [3.0]], None, qid=[0, 0])


def test_claimed_size_a_sparse_matrix_is_checked_against_the_budget_before_densifying(monkeypatch):
    """10^5 x 10^6 sparse: 745 GiB dense, refused before toarray allocates anything."""
    from differank.rankers.run import ranker_inputs

    huge = sparse.csr_matrix((10**5, 10**6), dtype=np.float32)
    monkeypatch.setattr(ranker_inputs, "available_memory_bytes", lambda: 8 * 2**30)
    monkeypatch.setattr(
        type(huge), "toarray", lambda self: pytest.fail("densified before the budget check")
    )
    with pytest.raises(ValueError, match=r"100000 rows x 1000000 features need 745\.06 GiB"):
        ranking_rows(huge, np.zeros(10**5), qid=np.zeros(10**5))


def test_claimed_size_a_dense_array_is_checked_against_the_budget(monkeypatch):
    from differank.rankers.run import ranker_inputs

    monkeypatch.setattr(ranker_inputs, "available_memory_bytes", lambda: 100)
    with pytest.raises(ValueError, match="as dense float32 features"):
        ranking_rows(np.zeros((10, 4)), np.zeros(10), qid=np.zeros(10))
