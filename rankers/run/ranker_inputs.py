"""What :class:`differank.Ranker` accepts as ``X``, ``y``, ``qid`` and ``group``, checked once
and turned into the arrays a LETOR fold holds; every refusal names the argument, the row or
column, and the fix.

Public API::

    RankingRows(features, labels, queries, feature_names)   # float32 [N, F], float32 [N] | None,
                                                            # int64 [N] codes, column names | None
    ranking_rows(X, y=None, *, qid=None, group=None, where="X", qid_column="qid",
                 nan_policy="error", require_queries=True) -> RankingRows
    letor_labels(y, n_rows, where="y") -> float32 [N]

Features (``X``): a 2-D NumPy array (any real dtype), a pandas DataFrame (its numeric columns;
a column named ``qid_column`` is the query id when ``qid`` is not given, and is not a feature),
a torch tensor, or a SciPy sparse matrix (densified: the data module holds dense float32). They
become float32, as the LETOR reader stores them: a value beyond float32's range counts as
non-finite. ``nan_policy`` is the reader's: "error" refuses NaN / inf naming the first row and
column, "zero" replaces them by 0, "allow" keeps them.

Queries: ``qid`` (one id per row, XGBoost's convention; any hashable values, ints or strings)
or ``group`` (query sizes of consecutive rows, LightGBM's convention), not both. Rows of one
qid need not be contiguous: they form one query, in row order, and queries are numbered in
order of first appearance (the reader's rule, :func:`~differank.datamodules.reader.group_queries`),
so ``queries`` are the codes 0..Q-1 a LETOR file can hold.

Labels (``y``): graded relevance, integers 0..31 (the LETOR text rule: gains 2^y - 1 stay
finite), given as any real or integer dtype.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from scipy import sparse

from differank.datamodules.reader import (
    FLOAT32_MAX,
    NAN_POLICIES,
    available_memory_bytes,
    group_queries,
)

MAX_LABEL = 31  # the reader's largest grade (2^31 - 1 is the largest finite gain it keeps)


@dataclass
class RankingRows:
    """Rows in input order: ``features`` float32 [N, F], ``labels`` float32 [N] (or None),
    ``queries`` int64 [N] (query codes by first appearance; None when none were given),
    ``feature_names`` (a DataFrame's feature columns, else None)."""

    features: np.ndarray
    labels: np.ndarray | None
    queries: np.ndarray | None
    feature_names: list[str] | None

    @property
    def num_rows(self) -> int:
        return len(self.features)


def is_dataframe(X: Any) -> bool:
    """A pandas DataFrame, recognised without importing pandas."""
    return type(X).__name__ == "DataFrame" and hasattr(X, "columns") and hasattr(X, "iloc")


def ranking_rows(
    X,
    y=None,
    *,
    qid=None,
    group=None,
    where: str = "X",
    qid_column: str | None = "qid",
    nan_policy: str = "error",
    require_queries: bool = True,
) -> RankingRows:
    """``X`` (with ``y``, ``qid`` / ``group``) checked and converted (module docstring)."""
    if nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
    names = None
    if is_dataframe(X):
        columns = [str(c) for c in X.columns]
        if qid is None and group is None and qid_column is not None and qid_column in columns:
            qid = X[qid_column].to_numpy()
        kept = [c for c, name in zip(X.columns, columns, strict=True) if name != qid_column]
        X = X[kept]
        names = [str(c) for c in kept]
        _check_numeric_columns(X, where)
    features = _float32_matrix(X, where)
    n_rows = len(features)
    _check_finite(features, X, nan_policy, where, names)
    labels = None if y is None else letor_labels(y, n_rows, where.replace("X", "y", 1))
    if qid is None and group is None:
        if require_queries:
            column = f", or a DataFrame column {qid_column!r}" if qid_column else ""
            raise ValueError(
                f"{where}: a ranker learns from queries: pass qid=<one query id per row> "
                f"(XGBoost's convention{column}) or group=<query sizes> (LightGBM's)"
            )
        queries = None
    else:
        queries = query_codes(qid, group, n_rows, where)
    return RankingRows(features, labels, queries, names)


def _check_numeric_columns(frame, where: str) -> None:
    for name, dtype in frame.dtypes.items():
        if dtype.kind not in "biuf":
            raise ValueError(
                f"{where}: column {name!r} has dtype {dtype}, not a number; encode it "
                "numerically or drop it (the query id column is named by qid_column)"
            )


def check_dense_budget(shape: tuple[int, ...], where: str) -> None:
    """Refuse, before anything is allocated, rows whose dense float32 features (the data
    module's copy, and the normalised one it trains on: twice ``rows x features x 4`` bytes)
    exceed the memory this machine can give."""
    rows, columns = (int(n) for n in shape)
    need = 2 * rows * columns * np.dtype(np.float32).itemsize
    available = available_memory_bytes()
    if available is not None and need > available:
        raise ValueError(
            f"{where}: {rows} rows x {columns} features need {need / 2**30:.2f} GiB as dense "
            f"float32 features (the data module holds them dense), but {available / 2**30:.2f} "
            "GiB is available: select the features used, or train on fewer rows"
        )


def _float32_matrix(X, where: str) -> np.ndarray:
    if isinstance(X, torch.Tensor):
        X = X.detach().cpu().numpy()
    elif sparse.issparse(X):
        if len(X.shape) == 2:
            check_dense_budget(X.shape, where)  # before densifying
        X = X.toarray()  # the data module holds dense float32 features
    elif is_dataframe(X):
        X = X.to_numpy(dtype=np.float64)
    try:
        array = np.asarray(X)
    except ValueError as error:  # ragged nested lists
        raise ValueError(f"{where}: not a rectangular matrix ({error})") from None
    if array.ndim != 2:
        raise ValueError(
            f"{where}: expected a 2-D matrix [rows, features], got shape {array.shape}"
            + ("; Reshape your data: one row is X.reshape(1, -1)" if array.ndim == 1 else "")
        )
    if array.dtype.kind == "c":
        raise ValueError(f"{where}: Complex data not supported (dtype {array.dtype})")
    if array.dtype.kind == "O":  # numbers held as objects: converted, anything else refused
        array = array.astype(np.float64)  # TypeError naming the value that is not a number
    if array.dtype.kind not in "biuf":
        raise ValueError(f"{where}: expected numbers, got dtype {array.dtype}")
    if array.shape[0] == 0:
        raise ValueError(
            f"{where}: Found array with 0 sample(s) (shape={array.shape}) while a minimum of 1 "
            "is required."
        )
    if array.shape[1] == 0:
        raise ValueError(
            f"{where}: Found array with 0 feature(s) (shape={array.shape}) while a minimum of 1 "
            "is required."
        )
    check_dense_budget(array.shape, where)
    with np.errstate(over="ignore"):  # beyond float32's range -> inf, refused below
        return np.ascontiguousarray(array, dtype=np.float32)


def _check_finite(features: np.ndarray, raw, nan_policy: str, where: str, names) -> None:
    bad = ~np.isfinite(features)
    if not bad.any():
        return
    if nan_policy == "zero":
        features[bad] = 0.0
        return
    if nan_policy == "allow":
        return
    row, column = (int(i) for i in np.argwhere(bad)[0])
    value = features[row, column]
    shown = f"column {column}" + (f" ({names[column]!r})" if names else "")
    what = f"value {value}"
    if np.isinf(value) and not isinstance(raw, torch.Tensor) and not sparse.issparse(raw):
        original = np.asarray(raw[row] if not is_dataframe(raw) else raw.iloc[row])
        if np.isfinite(original.astype(np.float64)[column]):
            what = (
                f"value {float(original[column]):.9g} is beyond float32's range "
                f"(|x| <= {FLOAT32_MAX:.8g}) and would be stored as inf"
            )
    raise ValueError(
        f"{where}: row {row}, {shown} is not finite ({what}; {int(bad.sum())} such value(s)); "
        "fix the data, or set nan_policy='zero' (replace them by 0) or 'allow' (keep NaN / inf)"
    )


def letor_labels(y, n_rows: int, where: str = "y") -> np.ndarray:
    """``y`` as float32 [N] after the label rule: integers 0..31."""
    if isinstance(y, torch.Tensor):
        y = y.detach().cpu().numpy()
    labels = np.asarray(y.to_numpy() if hasattr(y, "to_numpy") else y)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1 or len(labels) != n_rows:
        raise ValueError(
            f"{where}: expected one label per row ({n_rows}), got shape {labels.shape}"
        )
    if labels.dtype.kind == "O":  # numbers held as objects are numbers
        try:
            labels = labels.astype(np.float64)
        except (TypeError, ValueError):
            pass
    if labels.dtype.kind not in "biuf":
        raise ValueError(
            f"{where}: Unknown label type: labels must be non-negative numbers (graded "
            f"relevance 0..{MAX_LABEL}), got dtype {labels.dtype}"
        )
    values = labels.astype(np.float64)
    bad = ~np.isfinite(values) | (values < 0) | (values > MAX_LABEL) | (values != np.round(values))
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(
            f"{where}: row {row} has label {labels[row]}; labels are graded relevance, "
            f"integers 0..{MAX_LABEL} (map other targets to grades first)"
        )
    return values.astype(np.float32)


def query_codes(qid, group, n_rows: int, where: str = "X") -> np.ndarray:
    """int64 [N]: each row's query, numbered 0.. in order of first appearance."""
    if qid is not None and group is not None:
        raise ValueError(f"{where}: pass qid= or group=, not both")
    if group is not None:
        return _codes_from_group(group, n_rows, where)
    if isinstance(qid, torch.Tensor):
        qid = qid.detach().cpu().numpy()
    ids = np.asarray(qid.to_numpy() if hasattr(qid, "to_numpy") else qid)
    if ids.ndim != 1 or len(ids) != n_rows:
        raise ValueError(
            f"{where}: qid must hold one query id per row ({n_rows}), got shape {ids.shape}"
        )
    if ids.dtype.kind == "f":
        bad = ~np.isfinite(ids)
        if bad.any():
            raise ValueError(f"{where}: qid of row {int(np.argmax(bad))} is {ids[bad][0]}")
    elif ids.dtype.kind == "O":
        missing = [i for i, v in enumerate(ids) if v is None or v != v]  # None or NaN
        if missing:
            raise ValueError(f"{where}: qid of row {missing[0]} is missing ({ids[missing[0]]})")
    try:
        _, inverse = np.unique(ids, return_inverse=True)
    except TypeError as error:  # mixed types that do not compare
        raise ValueError(f"{where}: qid values must be of one comparable type ({error})") from None
    query_ids, rows, lengths = group_queries(inverse.reshape(-1))
    codes = np.empty(n_rows, np.int64)
    codes[rows] = np.repeat(np.arange(len(query_ids)), lengths)
    return codes


def _codes_from_group(group, n_rows: int, where: str) -> np.ndarray:
    sizes = np.asarray(group)
    if sizes.ndim != 1 or sizes.dtype.kind not in "iuf" or len(sizes) == 0:
        raise ValueError(
            f"{where}: group must be a 1-D list of query sizes (integers >= 1), got "
            f"{sizes.dtype} of shape {sizes.shape}"
        )
    if (sizes < 1).any() or (sizes != np.round(sizes)).any():
        bad = int(np.argmax((sizes < 1) | (sizes != np.round(sizes))))
        raise ValueError(f"{where}: group[{bad}] = {sizes[bad]} is not a query size (an int >= 1)")
    if int(sizes.sum()) != n_rows:
        raise ValueError(
            f"{where}: group sizes sum to {int(sizes.sum())} rows, but there are {n_rows}; "
            "group lists the sizes of consecutive queries, which must cover every row"
        )
    return np.repeat(np.arange(len(sizes), dtype=np.int64), sizes.astype(np.int64))
