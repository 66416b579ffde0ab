"""LETOR files as NumPy arrays ``X, y, qid``: the data of a fold for code of your own (or for
:class:`differank.Ranker`), read by the one reader and under its rules (docs/data.md).

Public API::

    read_letor(path_or_paths, *, nan_policy="error", null_value=None, n_features=None,
               cache_dir=None) -> (X float32 [N, F], y float32 [N], qid int64 [N])
    read_query_files(root, *, nan_policy="error", null_value=None, cache_dir=None)
        -> {data file name: (X, y, qid)}    # LightGBM-style rows + <file>.query group sizes

The rows come in file order (files in the order given); ``qid`` is each row's ``qid:`` as
written, so rows of one query need not be contiguous (the grouping rule of
:func:`differank.datamodules.reader.group_queries`). F is the largest feature index written,
or ``n_features``; a feature not written on a line is 0. Every value rule of the reader holds:
a malformed line is refused with ``file:line``; NaN, inf and values beyond float32's range are
refused unless ``nan_policy="zero"`` (replaced by 0) or ``"allow"`` (kept); NULL cells need
``null_value``. Parsed files are cached as the reader caches them (``cache_dir``, default
``$DIFFERANK_CACHE`` or ``~/.cache/differank``).
"""

from __future__ import annotations

from collections.abc import Sequence
from os import PathLike
from pathlib import Path

import numpy as np

from differank.datamodules import query_files
from differank.datamodules.reader import check_read_options, read_letor_file


def read_letor(
    paths: str | PathLike | Sequence[str | PathLike],
    *,
    nan_policy: str = "error",
    null_value: float | None = None,
    n_features: int | None = None,
    cache_dir: str | PathLike | None = None,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``X, y, qid`` of one LETOR file (``.txt`` or ``.txt.gz``), or of several concatenated.

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> folder = Path(tempfile.mkdtemp())
        >>> _ = (folder / "train.txt").write_text(
        ...     "2 qid:10 1:0.5 3:1.0 #docid = a\\n0 qid:10 1:0.25\\n1 qid:11 2:-1\\n")
        >>> X, y, qid = read_letor(folder / "train.txt", cache_dir=folder / "cache")
        >>> X.tolist(), y.tolist(), qid.tolist()
        ([[0.5, 0.0, 1.0], [0.25, 0.0, 0.0], [0.0, -1.0, 0.0]], [2.0, 0.0, 1.0], [10, 10, 11])
    """
    null_value, _ = check_read_options(nan_policy, null_value, None)
    if isinstance(paths, (str, PathLike)):
        paths = [paths]
    if not paths:
        raise ValueError("read_letor needs at least one LETOR file")
    parts = []
    for path in paths:
        part = read_letor_file(Path(path).expanduser(), cache_dir=cache_dir)
        part.check_values(nan_policy=nan_policy, null_value=null_value, label_range=None)
        parts.append(part)
    widest = max(part.max_feature_index for part in parts)
    if n_features is None:
        n_features = widest
    elif isinstance(n_features, bool) or not isinstance(n_features, int) or n_features < 1:
        raise ValueError(f"n_features must be an int >= 1 or None, got {n_features!r}")
    elif n_features < widest:
        part = next(p for p in parts if p.max_feature_index > n_features)
        raise ValueError(
            f"{part.path}: writes feature {part.max_feature_index}, beyond n_features="
            f"{n_features}; pass n_features >= {part.max_feature_index} or None"
        )
    features = np.zeros((sum(part.num_rows for part in parts), n_features), np.float32)
    row = 0
    for part in parts:
        block = features[row : row + part.num_rows, : part.max_feature_index]
        part.copy_rows(block, 0, part.num_rows, nan_policy=nan_policy, null_value=null_value)
        row += part.num_rows
    labels = np.concatenate([part.labels for part in parts]).astype(np.float32)
    return features, labels, np.concatenate([part.qids for part in parts])


def read_query_files(
    root: str | PathLike,
    *,
    nan_policy: str = "error",
    null_value: float | None = None,
    cache_dir: str | PathLike | None = None,
) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Every data file of a query-file folder (rows without ``qid:``, LightGBM's
    ``<file>.query`` group sizes beside each; docs/data.md#query-file-data) as ``X, y, qid``,
    keyed by the data file's name: rows in file order, ``qid`` the 1-based query number (line
    of the ``.query`` file), one feature count F for all files. The folder is read as
    ``data.format=query_files`` reads it (the same parts, rules and cache), so an error names
    the source file and line. A folder holds at least 5 queries (it is cut into 5 parts).

    Example:
        >>> import tempfile
        >>> from pathlib import Path
        >>> folder = Path(tempfile.mkdtemp())
        >>> rows = "1 1:0.5\\n0 2:1\\n2 1:3\\n0 1:1\\n1 2:2\\n1 1:4\\n"  # 5 queries at least
        >>> _ = (folder / "rank.train").write_text(rows)
        >>> _ = (folder / "rank.train.query").write_text("2\\n1\\n1\\n1\\n1\\n")
        >>> X, y, qid = read_query_files(folder, cache_dir=folder / "cache")["rank.train"]
        >>> X.tolist()
        [[0.5, 0.0], [0.0, 1.0], [3.0, 0.0], [1.0, 0.0], [0.0, 2.0], [4.0, 0.0]]
        >>> y.tolist(), qid.tolist()
        ([1.0, 0.0, 2.0, 0.0, 1.0, 1.0], [1, 1, 2, 3, 4, 5])
    """
    parts = query_files.letor_parts(root, cache_dir=cache_dir)
    paths = sorted(parts.glob("S*.txt"))
    try:
        X, y, qid = read_letor(
            paths, nan_policy=nan_policy, null_value=null_value, cache_dir=cache_dir
        )
    except ValueError as error:
        located = query_files.in_source_terms(error, parts)
        if located is error:
            raise
        raise located from error
    # qid = f * QID_STRIDE + i (file f, query i, both 1-based); a query lies whole in one part
    # with its rows in file order, so a stable sort by qid restores every file's row order
    order = np.argsort(qid, kind="stable")
    X, y, qid = X[order], y[order], qid[order]
    arrays = {}
    for number, (data, _) in enumerate(query_files.find_sources(root), start=1):
        rows = qid // query_files.QID_STRIDE == number
        arrays[data.name] = (X[rows], y[rows], qid[rows] - number * query_files.QID_STRIDE)
    return arrays
