"""Columnar LETOR data: Parquet files read into the reader's arrays without a text parse
(``data.format=parquet``; ``docs/data.md#parquet-data``).

Public API::

    read_parquet(path, *, columns=ParquetColumns(), nan_policy="error", null_value=None,
                 label_range=None, memory_map=False)
        -> (X float32 [N, F], y float32 [N], qid int64 [N])
    write_parquet(path, X, y, qid, *, columns=ParquetColumns(), list_column=False,
                  row_group_rows=16_384, compression="none") -> Path
    ParquetColumns(label="label", qid="qid", features=None, docid="docid")  # which is what
    read_parquet_file(path, columns) -> ParquetFile   # one file as the DataModule reads it
    parquet_files(path) -> [Path]        # a file, or a folder's *.parquet in name order
    fold_files(root, fold) -> {"train": [Path], "val": [Path], "test": [Path]}
    check_fold_budget(files, columns, *, cache_dir=None)  # memory and cache disk, from footers
    check_same_features([(path, names, F), ...])          # every file holds the same features

A file holds one row per document: a label column, a qid column and the features, either one
numeric column per feature (``features=None``: every other column, in the file's order) or one
list column of F numbers per row. The rules are the text reader's (``docs/data.md``): labels are
integers 0..31, qids integers 0..10^18 - 1, a null feature cell is a ``NULL`` (an error unless
``null_value`` replaces it), NaN / inf / values beyond float32's range fall under ``nan_policy``,
``label_range`` bounds the labels, a file without rows is refused. Errors name the file, the row
group, the row (within the group and within the file, both 0-based) and the column.

How it reads: no text is parsed and nothing is cached; each row group is decoded (in one
thread) straight into a float32 matrix allocated once, so the peak holds the matrix and one row
group's columns (1.2x the float32 features at 1/8 of MSLR-WEB30K; ``benchmarks/parquet_read.py``
measures it against the text parse). Files are read into buffers by default; memory-mapping them
(``memory_map=True``) was measured no faster, and its mapped pages count in the process's memory
while the file is open. pyarrow is the optional extra ``parquet``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
from collections import Counter
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from numpy.typing import ArrayLike

from differank.datamodules import cache
from differank.datamodules.folds import MissingLetorFileError
from differank.datamodules.reader import (
    FLOAT32_MAX,
    LetorFile,
    available_memory_bytes,
    check_read_options,
    default_cache_dir,
)
from differank.datamodules.regular_files import require_regular_file

MAX_LABEL = 31  # the text rule: 2^label - 1 stays finite and exact enough in float32 sums
QID_LIMIT = 10**18  # the text rule: at most 18 decimal digits
_VERSION = 1  # part of the split cache's key: bump when the arrays read from a file change
# Row groups are decoded in one thread: decoding in several keeps more decoded columns alive in
# the threads' allocator heaps (peak memory 1.36x the features instead of 1.18x at 1/8 of
# MSLR-WEB30K, benchmarks/results/parquet_read.md), for a decode that is mostly a memory copy.
_DECODE_THREADS = False
_FOLD_STEMS = {"train": "train", "val": "vali", "test": "test"}
# Memory per row besides the features: the label (uint8 decoded, float32 returned) and the qid
# (int64 decoded, and its concatenated copy).
_ROW_BYTES = 1 + 4 + 8 + 8
INSTALL_HINT = "pip install 'differank[parquet]' (or pip install pyarrow)"
# Footer keys of a converted file (datamodules/to_parquet.py): the sha256 of the text file it was
# converted from, and one sha256 over every source of its conversion (the same in every file
# written together), so that files of two conversions in one fold are told apart.
SOURCE_SHA256 = "differank.source_sha256"
CONVERSION_SHA256 = "differank.conversion_sha256"


def _pyarrow():
    """pyarrow and pyarrow.parquet, or an error that says how to install them."""
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError as error:
        raise ImportError(f"reading or writing Parquet needs pyarrow: {INSTALL_HINT}") from error
    return pyarrow, pyarrow.parquet


@dataclass(frozen=True)
class ParquetColumns:
    """Which columns hold the label, the qid, the features and the doc ids.

    ``features`` None: every column but the label, the qid and the doc id, in the file's order
    (a single list column among them is the list layout); a list of names: those columns, in
    that order; one name of a list column: the list layout. ``docid``: the column of document
    ids (strings or integers; a null is an empty id), read when the file has it.

    Example:
        >>> ParquetColumns(label="relevance", qid="query_id").features is None
        True
    """

    label: str = "label"
    qid: str = "qid"
    features: tuple[str, ...] | None = None
    docid: str = "docid"

    def __post_init__(self) -> None:
        if self.features is not None:
            names = (self.features,) if isinstance(self.features, str) else self.features
            object.__setattr__(self, "features", tuple(str(n) for n in names))
        if self.label == self.qid:
            raise ValueError(f"the label and qid columns must differ, both are {self.label!r}")


class ParquetFile(LetorFile):
    """One Parquet file as the reader's :class:`LetorFile` (rows in file order; ``line_numbers``
    are 1-based row numbers; doc ids from the doc id column, else empty) whose value errors name
    the row group, row and column.
    ``meta["feature_names"]`` are the feature columns (the list column's name for the list
    layout), ``meta["row_groups"]`` the first row of each row group."""

    def location(self, row: int, column: str) -> str:
        """``file: row group g, row r (file row n), column 'c'`` of the file's 0-based row."""
        starts = self.meta["row_groups"]
        group = int(np.searchsorted(starts, row, side="right")) - 1
        return (
            f"{self.path}: row group {group}, row {row - starts[group]} (file row {row}), "
            f"column {column!r}"
        )

    def _feature_column(self, index: int) -> str:
        names = self.meta["feature_names"]
        return names[index] if len(names) > 1 else f"{names[0]}[{index}]"

    def check_values(self, *, nan_policy: str, null_value, label_range) -> None:
        """The value rules (``docs/data.md``) with Parquet locations."""
        if self.meta["nulls"] and null_value is None:
            where = self.location(int(self.null_rows[0]), self._feature_column(self.null_cols[0]))
            raise ValueError(
                f"{where}: null feature value; set null_value=<number> to replace null values"
            )
        if self.meta["nonfinite"] and nan_policy == "error":
            value = self.meta["nonfinite_value"]
            what = (
                f"value {value:.9g} is beyond float32's range (|x| <= {FLOAT32_MAX:.8g})"
                if math.isfinite(value)
                else f"value {value}"
            )
            where = self.location(
                self.meta["nonfinite_row"], self._feature_column(self.meta["nonfinite_feature"])
            )
            raise ValueError(
                f"{where}: not finite ({what}; {self.meta['nonfinite']} such value(s) in the "
                "file); fix the file, or set nan_policy='zero' (replace them by 0) or 'allow' "
                "(keep NaN / inf)"
            )
        if label_range is not None:
            bad = (self.labels < label_range[0]) | (self.labels > label_range[1])
            if bad.any():
                row = int(np.argmax(bad))
                where = self.location(row, self.meta["label_column"])
                raise ValueError(
                    f"{where}: label {self.labels[row]} outside label_range {label_range}"
                )

    def release_pages(self) -> None:
        """Drop the feature matrix (held in memory, not mapped): once a split's features are
        in the cache, the file's copy is not needed. The width stays known."""
        self.features = np.zeros((0, self.max_feature_index), np.float32)


def parquet_files(path) -> list[Path]:
    """``path`` itself when it is a file, else the ``*.parquet`` files of the folder ``path``
    in name order (none is an error). Every one must be a regular file: a FIFO, a directory, a
    dangling link or a link loop named ``*.parquet`` is refused by name, never skipped (the
    split would silently train on the rest)."""
    path = Path(path).expanduser()
    if not os.path.lexists(path):
        raise MissingLetorFileError(f"no Parquet file or folder at {path}")
    if not path.is_dir():
        return [require_regular_file(path, "a Parquet file")]
    parts = sorted(p for p in path.iterdir() if p.suffix == ".parquet")
    for part in parts:
        require_regular_file(part, f"each *.parquet part of the split folder {path}")
    if not parts:
        raise MissingLetorFileError(f"{path} holds no *.parquet file")
    return parts


def fold_files(root, fold: int) -> dict[str, list[Path]]:
    """The files of each split of ``fold``: ``root/FoldN/{train,vali,test}.parquet``, or
    ``root/FoldN/{train,vali,test}/`` folders whose ``*.parquet`` files are concatenated in name
    order (both for one split is ambiguous, an error)."""
    fold_dir = Path(root).expanduser() / f"Fold{fold}"
    if not fold_dir.is_dir():
        raise MissingLetorFileError(
            f"{fold_dir}/ does not exist: data.format=parquet reads "
            "FoldN/{train,vali,test}.parquet (or FoldN/{train,vali,test}/*.parquet)"
        )
    files = {}
    for split, stem in _FOLD_STEMS.items():
        single, folder = fold_dir / f"{stem}.parquet", fold_dir / stem
        # lexists: a dangling link or a link loop is there, and refused by name below
        has_single, has_folder = os.path.lexists(single), os.path.lexists(folder)
        if has_single and has_folder:
            raise ValueError(
                f"ambiguous Parquet split: both {single} and {folder}/ exist; remove one of them"
            )
        if not (has_single or has_folder):
            raise MissingLetorFileError(f"missing Parquet split: {single} or {folder}/")
        files[split] = parquet_files(single if has_single else folder)
    _check_one_conversion([path for paths in files.values() for path in paths])
    return files


def _check_one_conversion(paths: list[Path]) -> None:
    """The files of a fold that record a conversion (:data:`CONVERSION_SHA256`) must record
    the same one: a fold mixing two conversions (one split converted again, or copied from
    another fold) is refused naming both files."""
    pa, pq = _pyarrow()
    recorded = []
    for path in paths:
        try:
            metadata = pq.read_metadata(path).metadata or {}
        except (pa.ArrowException, OSError):  # not Parquet: _open names the file and the reason
            continue
        conversion = metadata.get(CONVERSION_SHA256.encode())
        if conversion is not None:
            recorded.append((path, conversion.decode(errors="replace")))
    for path, conversion in recorded[1:]:
        first_path, first = recorded[0]
        if conversion != first:
            raise ValueError(
                f"{path} and {first_path} come from two conversions ({CONVERSION_SHA256} "
                f"{conversion} and {first}): a fold mixes files converted from other text. "
                "Convert the fold again (python -m differank.datamodules.to_parquet SRC DST)"
            )


def _is_numeric(pa, data_type) -> bool:
    return pa.types.is_integer(data_type) or pa.types.is_floating(data_type)


def _is_list(pa, data_type) -> bool:
    return (
        pa.types.is_list(data_type)
        or pa.types.is_large_list(data_type)
        or pa.types.is_fixed_size_list(data_type)
    )


def _feature_layout(pa, schema, path: Path, columns: ParquetColumns) -> tuple[list[str], bool]:
    """The feature column names and whether they are one list column; types checked."""
    names = schema.names
    repeated = sorted(name for name, count in Counter(names).items() if count > 1)
    if repeated:
        raise ValueError(
            f"{path}: column name(s) {repeated} appear more than once; every column needs its "
            "own name (write the file again with distinct column names)"
        )
    for role, name in (("label", columns.label), ("qid", columns.qid)):
        if name not in names:
            raise ValueError(
                f"{path}: no {role} column {name!r} (columns: {', '.join(names)}); name it with "
                f"data.{role}_column=<name>"
            )
    if columns.features is None:
        features = [n for n in names if n not in (columns.label, columns.qid, columns.docid)]
    else:
        features = list(columns.features)
        missing = [n for n in features if n not in names]
        if missing:
            raise ValueError(f"{path}: no feature column {missing[0]!r} (columns: {names})")
    if not features:
        raise ValueError(f"{path}: no feature column besides {columns.label!r} and {columns.qid!r}")
    types = {n: schema.field(n).type for n in features}
    lists = [n for n in features if _is_list(pa, types[n])]
    if lists and len(features) > 1:
        raise ValueError(
            f"{path}: column {lists[0]!r} is a list among {len(features)} feature columns; "
            "write the features as numeric columns or as one list column"
        )
    for name in features:
        element = types[name].value_type if lists else types[name]
        if not _is_numeric(pa, element):
            raise ValueError(
                f"{path}: feature column {name!r} has type {types[name]}; features are integers "
                "or floats (or one list column of them)"
            )
    return features, bool(lists)


def _label_values(pa, column, where) -> np.ndarray:
    if not _is_numeric(pa, column.type):
        raise ValueError(f"{where(0)}: the label column has type {column.type}, not a number")
    if column.null_count:
        row = int(np.flatnonzero(np.asarray(column.is_null()))[0])
        raise ValueError(f"{where(row)}: null label; every row needs a label 0..{MAX_LABEL}")
    values = column.to_numpy()
    bad = (values != np.floor(values)) | (values < 0) | (values > MAX_LABEL)
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(
            f"{where(row)}: label {values[row]} is not an integer 0..{MAX_LABEL} (the largest "
            "grade with finite gains)"
        )
    return values.astype(np.uint8)


def _qid_values(pa, column, where) -> np.ndarray:
    if not pa.types.is_integer(column.type):
        raise ValueError(
            f"{where(0)}: the qid column has type {column.type}; qids are integers (map other "
            "query keys to integers, e.g. with pandas' factorize)"
        )
    if column.null_count:
        row = int(np.flatnonzero(np.asarray(column.is_null()))[0])
        raise ValueError(f"{where(row)}: null qid; every row needs a query id")
    values = column.to_numpy()
    bad = (values < 0) | (values >= QID_LIMIT) if values.dtype.kind == "i" else values >= QID_LIMIT
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(f"{where(row)}: qid {values[row]} is not an integer 0..10^18 - 1")
    return values.astype(np.int64)


class _NonFinite:
    """The count of non-finite feature values and the first one (in row-major order)."""

    def __init__(self) -> None:
        self.count = 0
        self.first: tuple[int, int, float] | None = None  # (file row, feature index, value)

    def add(self, values: np.ndarray, nulls: np.ndarray | None, start: int, cell) -> None:
        """Count the bad ``values`` (not null); ``cell(i) -> (row, feature)`` of index i."""
        if values.dtype.kind != "f":
            return  # integers are finite and within float32's range
        bad = ~np.isfinite(values)
        if values.dtype.itemsize > 4:
            bad |= np.abs(values) > FLOAT32_MAX  # stored as inf in float32
        if nulls is not None:
            bad &= ~nulls
        if not bad.any():
            return
        self.count += int(bad.sum())
        index = int(np.argmax(bad))
        row, feature = cell(index)
        found = (start + row, feature, float(values[index]))
        if self.first is None or found[:2] < self.first[:2]:
            self.first = found


class _DocIds:
    """Doc ids as the reader holds them: UTF-8 bytes split at offsets [N + 1]."""

    def __init__(self) -> None:
        self.lengths: list[np.ndarray] = []
        self.blobs: list[np.ndarray] = []

    def add(self, pa, column) -> None:
        """One row group's doc ids (strings or integers as text; a null is empty)."""
        if not (pa.types.is_string(column.type) or pa.types.is_large_string(column.type)):
            column = column.cast(pa.string())  # integers, e.g. 17 -> "17"
        text = column.cast(pa.large_binary()).fill_null(b"")
        _, offsets_buffer, data_buffer = text.buffers()
        offsets = np.frombuffer(offsets_buffer, np.int64)[text.offset : text.offset + len(text) + 1]
        data = np.frombuffer(data_buffer, np.uint8) if data_buffer else np.zeros(0, np.uint8)
        self.lengths.append(np.diff(offsets))
        self.blobs.append(data[offsets[0] : offsets[-1]].copy())

    def arrays(self, rows: int) -> dict[str, np.ndarray]:
        if not self.lengths:  # no doc id column: empty ids
            return {
                "docid_offsets": np.zeros(rows + 1, np.int64),
                "docid_bytes": np.zeros(0, np.uint8),
            }
        lengths = np.concatenate(self.lengths)
        return {
            "docid_offsets": np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
            "docid_bytes": np.concatenate(self.blobs),
        }


def _null_mask(column) -> np.ndarray | None:
    return np.asarray(column.is_null()) if column.null_count else None


def _fill_features(pa, table, names, is_list, block, where, start, nonfinite) -> tuple:
    """Decode one row group's features into ``block`` (float32 [rows, F]; null cells NaN),
    counting non-finite values into ``nonfinite``; returns the null cells (rows, columns)."""
    null_rows, null_cols = [], []
    if is_list:
        column = table.column(names[0]).combine_chunks()
        if column.null_count:
            row = int(np.flatnonzero(np.asarray(column.is_null()))[0])
            raise ValueError(f"{where(row, names[0])}: null feature list")
        width = block.shape[1]
        if not pa.types.is_fixed_size_list(column.type):
            lengths = np.asarray(column.value_lengths())
            wrong = np.flatnonzero(lengths != width)
            if len(wrong):
                row = int(wrong[0])
                raise ValueError(
                    f"{where(row, names[0])}: {lengths[row]} features in the list, the file's "
                    f"first row has {width}; every row needs the same number of features"
                )
        values = column.flatten()
        nulls = _null_mask(values)
        if nulls is not None:
            cells = np.flatnonzero(nulls)
            null_rows.append(cells // width)
            null_cols.append(cells % width)
        flat = values.to_numpy(zero_copy_only=False)
        nonfinite.add(flat, nulls, start, lambda i: divmod(i, width))
        with np.errstate(over="ignore"):  # beyond float32: inf, counted above
            block[:] = flat.reshape(len(block), width)
    else:
        for j, name in enumerate(names):
            column = table.column(name)
            nulls = _null_mask(column)
            if nulls is not None:
                rows = np.flatnonzero(nulls)
                null_rows.append(rows)
                null_cols.append(np.full(len(rows), j))
            values = column.to_numpy()  # nulls come out as NaN
            nonfinite.add(values, nulls, start, lambda i, j=j: (i, j))
            with np.errstate(over="ignore"):  # beyond float32: inf, counted above
                block[:, j] = values
    if not null_rows:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    rows, cols = np.concatenate(null_rows), np.concatenate(null_cols)
    order = np.lexsort((cols, rows))  # row-major, as a text file meets them
    rows, cols = rows[order], cols[order]
    block[rows, cols] = np.nan
    return rows.astype(np.int64), cols.astype(np.int64)


def _list_width(pa, parquet, name: str, path: Path) -> int:
    """F of the list layout: the fixed size, else the first row's length."""
    data_type = parquet.schema_arrow.field(name).type
    if pa.types.is_fixed_size_list(data_type):
        return int(data_type.list_size)
    for group in range(parquet.metadata.num_row_groups):
        column = parquet.read_row_group(group, columns=[name]).column(name).combine_chunks()
        if len(column):
            if not column[0].is_valid:
                raise ValueError(
                    f"{path}: row group {group}, row 0 (file row 0), column {name!r}: null "
                    "feature list"
                )
            return int(np.asarray(column.value_lengths())[0])
    return 0


@dataclass
class _Opened:
    """A Parquet file opened with its layout checked; nothing decoded. ``docid``: the doc id
    column's name when the file has one."""

    path: Path
    parquet: Any  # pyarrow.parquet.ParquetFile (pyarrow ships no type information)
    names: list[str]
    is_list: bool
    width: int
    starts: np.ndarray  # first row of each row group, then the row count
    docid: str | None
    largest_group_bytes: int  # the footer's decoded size of its largest row group

    @property
    def rows(self) -> int:
        return int(self.starts[-1])


def _open(path, columns: ParquetColumns, memory_map: bool = False) -> _Opened:
    pa, pq = _pyarrow()
    path = require_regular_file(Path(path).expanduser(), "a Parquet file")  # a FIFO would block
    try:
        parquet = pq.ParquetFile(path, memory_map=memory_map)
    except (pa.ArrowException, OSError) as error:
        raise ValueError(f"{path}: not a readable Parquet file ({error})") from error
    names, is_list = _feature_layout(pa, parquet.schema_arrow, path, columns)
    metadata = parquet.metadata
    if metadata.num_rows == 0:
        raise ValueError(f"{path}: empty file (no rows)")
    width = _list_width(pa, parquet, names[0], path) if is_list else len(names)
    groups = [metadata.row_group(g) for g in range(metadata.num_row_groups)]
    sizes = [group.num_rows for group in groups]
    if metadata.num_rows != sum(sizes) or min(sizes, default=0) < 0:
        raise ValueError(
            f"{path}: the footer claims {metadata.num_rows} rows, its row groups {sizes}; the "
            "file is damaged or was altered: write it again"
        )
    decoded = max((group.total_byte_size for group in groups), default=0)
    docid = columns.docid if columns.docid in parquet.schema_arrow.names else None
    return _Opened(
        path, parquet, names, is_list, width, np.cumsum([0, *sizes]), docid, max(decoded, 0)
    )


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while piece := handle.read(1 << 24):
            digest.update(piece)
    return digest.hexdigest()


def read_parquet_file(
    path, columns: ParquetColumns = ParquetColumns(), *, out: np.ndarray | None = None
) -> ParquetFile:
    """Read one Parquet file under the structural rules (columns, types, labels, qids; the
    value rules are :meth:`ParquetFile.check_values`), with its sha256 (the split cache's
    key); ``out`` (float32 [N, F]) receives the features instead of a new matrix."""
    opened = _open(path, columns)
    return _decode(opened, columns, out, sha256=_sha256(opened.path))


def _decode(
    opened: _Opened, columns: ParquetColumns, out: np.ndarray | None, sha256: str | None
) -> ParquetFile:
    pa, _ = _pyarrow()
    path, rows, width, starts = opened.path, opened.rows, opened.width, opened.starts
    features = np.empty((rows, width), np.float32) if out is None else out
    labels = np.empty(rows, np.uint8)
    qids = np.empty(rows, np.int64)
    null_rows, null_cols = [], []
    docids = _DocIds()
    nonfinite = _NonFinite()
    read = [columns.label, columns.qid, *opened.names, *([opened.docid] if opened.docid else [])]
    for group in range(len(starts) - 1):
        start, stop = int(starts[group]), int(starts[group + 1])
        table = opened.parquet.read_row_group(group, columns=read, use_threads=_DECODE_THREADS)
        if table.num_rows != stop - start:
            raise ValueError(
                f"{path}: row group {group}: the footer claims {stop - start} rows, the row "
                f"group holds {table.num_rows}; the file is damaged or was altered: write it "
                "again"
            )

        def where(row, column, group=group, start=start):
            return (
                f"{path}: row group {group}, row {row} (file row {start + row}), column {column!r}"
            )

        labels[start:stop] = _label_values(
            pa, table.column(columns.label).combine_chunks(), lambda r: where(r, columns.label)
        )
        qids[start:stop] = _qid_values(
            pa, table.column(columns.qid).combine_chunks(), lambda r: where(r, columns.qid)
        )
        if opened.docid:
            docids.add(pa, table.column(opened.docid).combine_chunks())
        block = features[start:stop]
        nulls = _fill_features(
            pa, table, opened.names, opened.is_list, block, where, start, nonfinite
        )
        del table  # one row group's columns at a time
        null_rows.append(nulls[0] + start)
        null_cols.append(nulls[1])
    null_rows_all, null_cols_all = np.concatenate(null_rows), np.concatenate(null_cols)
    first = nonfinite.first or (0, 0, 0.0)
    meta = {
        "rows": rows,
        "features": width,
        "nulls": len(null_rows_all),
        "nonfinite": nonfinite.count,
        "nonfinite_row": first[0],
        "nonfinite_feature": first[1],
        "nonfinite_value": first[2],
        "feature_names": opened.names,
        "label_column": columns.label,
        "row_groups": starts[:-1].tolist(),
        "sha256": sha256,  # the split cache's key (None: not computed)
        # in the split cache's key: another choice of feature columns is other features
        "version": f"parquet-{_VERSION}:" + json.dumps(opened.names),
    }
    return ParquetFile(
        path=path,
        features=features,
        labels=labels,
        qids=qids,
        line_numbers=np.arange(1, rows + 1, dtype=np.int64),
        present=np.ones(width, bool),
        null_rows=null_rows_all,
        null_cols=null_cols_all,
        **docids.arrays(rows),
        meta=meta,
    )


def _gib(size: float) -> str:
    return f"{size / 2**30:.2f} GiB"


def _check_memory(opened: list[_Opened]) -> tuple[str, int]:
    """Before anything is decoded, the sizes the files' footers claim against the available
    memory: the float32 features, each row's label and qid as decoded and as returned
    (``_ROW_BYTES``) and the largest row group's decoded columns (what decompression takes at
    once). Returns the subject of a budget message and the feature cells; a footer that claims
    more than the memory holds is refused naming the files (the budget of ``read_parquet`` and
    of ``data.format=parquet``, docs/data.md#parquet-data)."""
    cells = sum(o.rows * o.width for o in opened)
    rows = sum(o.rows for o in opened)
    memory = 4 * cells + _ROW_BYTES * rows + max(o.largest_group_bytes for o in opened)
    subject = (
        f"the Parquet files ({', '.join(str(o.path) for o in opened)}): {rows} rows, "
        f"{cells} feature values as float32"
    )
    available = available_memory_bytes()
    if available is not None and memory > available:
        raise ValueError(
            f"{subject} need {_gib(memory)} of memory, but {_gib(available)} is available; "
            "read fewer feature columns (data.feature_columns, or ParquetColumns(features=...)) "
            "or free memory"
        )
    return subject, cells


def check_fold_budget(
    files: dict[str, list[Path]], columns: ParquetColumns, *, cache_dir=None
) -> None:
    """Before a fold's Parquet files are decoded (their sizes are in the file footers): their
    float32 features, labels and qids must fit in the available memory, with the normalised
    copy of every split on the cache's disk; otherwise the numbers and the ways out."""
    opened = [_open(path, columns) for paths in files.values() for path in paths]
    subject, cells = _check_memory(opened)
    root = Path(cache_dir or default_cache_dir()).expanduser()
    free = cache.free_disk_bytes(root)
    if 4 * cells > free:
        raise ValueError(
            f"{subject} need {_gib(4 * cells)} in the cache {root} for the normalised splits, "
            f"but its disk has {_gib(free)} free; set data.cache_dir (or $DIFFERANK_CACHE) to a "
            "disk with room"
        )


def check_same_features(files: list[tuple[Path, list[str], int]]) -> None:
    """Every file ``(path, feature names, F)`` of a data set must hold the same features (names
    and order, and F for a list column) as the first: a feature missing from one split would
    otherwise be read as zeros."""
    first_path, first_names, first_width = files[0]
    for path, names, width in files[1:]:
        if names == first_names and width == first_width:
            continue
        differing = next(
            (
                f"{b!r} where it has {a!r}"
                for a, b in zip(first_names, names, strict=False)
                if a != b
            ),
            f"{len(names)} feature columns, it has {len(first_names)}"
            if len(names) != len(first_names)
            else f"lists of {width} features, it has {first_width}",
        )
        raise ValueError(
            f"{path}: its features differ from {first_path}'s ({differing}); every file must "
            "hold the same feature columns in the same order"
        )


def read_parquet(
    path: str | PathLike[str],
    *,
    columns: ParquetColumns | None = None,
    nan_policy: str = "error",
    null_value: float | None = None,
    label_range: tuple[float, float] | None = None,
    memory_map: bool = False,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features, labels and qids of a Parquet file, or of a folder's ``*.parquet`` files
    concatenated in name order, under the rules of the module docstring.

    Returns ``X`` float32 [N, F] (null cells replaced by ``null_value``, non-finite values by
    0 under ``nan_policy="zero"``), ``y`` float32 [N] and ``qid`` int64 [N] in file order; rows
    of one qid need not be contiguous (they form one query, ``group_queries``' rule).
    ``memory_map=True`` maps the files instead of reading them into buffers: no faster, and the
    mapped pages count in the process's memory until the file is closed
    (``benchmarks/results/parquet_read.md``).

    Example:
        >>> import tempfile, numpy as np
        >>> folder = tempfile.mkdtemp()
        >>> X = np.array([[0.5, 1.0], [0.0, 2.0], [1.5, 0.0]], np.float32)
        >>> path = write_parquet(f"{folder}/train.parquet", X, [2, 0, 1], [7, 7, 9])
        >>> X2, y, qid = read_parquet(path)
        >>> X2.tolist(), y.tolist(), qid.tolist()
        ([[0.5, 1.0], [0.0, 2.0], [1.5, 0.0]], [2.0, 0.0, 1.0], [7, 7, 9])
    """
    _pyarrow()  # a missing install is named before anything else
    columns = columns or ParquetColumns()
    null_value, label_range = check_read_options(nan_policy, null_value, label_range)
    opened = [_open(p, columns, memory_map) for p in parquet_files(path)]
    check_same_features([(o.path, o.names, o.width) for o in opened])
    _check_memory(opened)
    features = np.empty((sum(o.rows for o in opened), opened[0].width), np.float32)
    parts, row = [], 0
    for each in opened:
        part = _decode(each, columns, features[row : row + each.rows], sha256=None)
        parts.append(part)
        part.check_values(nan_policy=nan_policy, null_value=null_value, label_range=label_range)
        block = features[row : row + each.rows]
        part.copy_rows(block, 0, each.rows, nan_policy=nan_policy, null_value=null_value)
        row += each.rows
    labels = np.concatenate([p.labels for p in parts]).astype(np.float32)
    return features, labels, np.concatenate([p.qids for p in parts])


def write_parquet(
    path: str | PathLike[str],
    X: ArrayLike,
    y: ArrayLike,
    qid: ArrayLike,
    *,
    columns: ParquetColumns | None = None,
    list_column: bool = False,
    null_mask: ArrayLike | None = None,
    docids: Collection[object] | None = None,
    row_group_rows: int = 16_384,
    compression: str = "none",
    metadata: Mapping[str, str] | None = None,
) -> Path:
    """Write rows as a Parquet file that :func:`read_parquet` reads back exactly.

    ``X`` [N, F] (stored as float32), ``y`` [N] (integers are stored as int32), ``qid`` [N]
    (int64). Feature columns are named ``columns.features`` or ``feature_1..feature_F``;
    ``list_column=True`` stores them as one fixed-size list column (``columns.features[0]`` or
    ``features``). ``null_mask`` (bool [N, F]) writes those cells as nulls (LETOR's ``NULL``);
    ``docids`` [N] (strings) the column ``columns.docid``; ``metadata``: key-value pairs kept
    in the file's footer (the converter records its source there, :data:`SOURCE_SHA256`).
    The file is written whole or not at all (``atomic_files``); ``compression`` is Parquet's
    (``"none"`` reads fastest, ``"snappy"`` / ``"zstd"`` are smaller). Example: see
    :func:`read_parquet`.
    """
    pa, pq = _pyarrow()
    from differank.datamodules.atomic_files import write_file

    columns = columns or ParquetColumns()
    X = np.asarray(X, dtype=np.float32)
    y, qid = np.asarray(y).reshape(-1), np.asarray(qid).reshape(-1)
    if X.ndim != 2 or not (len(X) == len(y) == len(qid)):
        raise ValueError(
            f"X [N, F], y [N], qid [N] must agree; got {X.shape}, {y.shape}, {qid.shape}"
        )
    if null_mask is not None:
        null_mask = np.asarray(null_mask, dtype=bool)
        if null_mask.shape != X.shape:
            raise ValueError(f"null_mask has shape {null_mask.shape}, X {X.shape}")
    integral = y.dtype.kind in "iub" or bool(np.all(np.floor(y) == y))
    arrays = {
        columns.label: pa.array(y.astype(np.int32) if integral else y.astype(np.float64)),
        columns.qid: pa.array(qid.astype(np.int64)),
    }
    if docids is not None:
        if len(docids) != len(y):
            raise ValueError(f"docids has {len(docids)} entries for {len(y)} rows")
        arrays[columns.docid] = pa.array([str(d) for d in docids], pa.string())
    width = X.shape[1]
    if list_column:
        name = columns.features[0] if columns.features else "features"
        mask = None if null_mask is None else pa.array(null_mask.reshape(-1))
        values = pa.array(X.reshape(-1), mask=mask)
        arrays[name] = pa.FixedSizeListArray.from_arrays(values, width)
    else:
        names = columns.features or tuple(f"feature_{j + 1}" for j in range(width))
        if len(names) != width:
            raise ValueError(f"{len(names)} feature column names for {width} features")
        for j, name in enumerate(names):
            mask = None if null_mask is None else null_mask[:, j]
            arrays[name] = pa.array(np.ascontiguousarray(X[:, j]), mask=mask)
    table = pa.table(arrays)
    if metadata:
        table = table.replace_schema_metadata(dict(metadata))
    sink = pa.BufferOutputStream()
    # Dictionary pages only for the label and qid (few distinct values): float features would
    # get a dictionary of every value, a larger file that decodes slower.
    pq.write_table(
        table,
        sink,
        row_group_size=row_group_rows,
        compression=compression,
        use_dictionary=[columns.label, columns.qid],
    )
    return write_file(path, sink.getvalue().to_pybytes())
