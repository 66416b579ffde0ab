"""The Parquet click log: a click log of any size, one row per shown document, read one row group
at a time (docs/clicks.md#the-parquet-click-log).

==============  ======================  =======================================================
column          type (any width)        meaning
==============  ======================  =======================================================
``session``     integer                 session id; the file is sorted by session (ascending)
                                        and a session's rows lie in one row group
``qid``         integer                 query id, the same on every row of a session
``position``    integer                 1-based position shown: 1, 2, ..., L within a session
``click``       integer or bool         1 clicked, 0 not
``dwell``       number, optional        seconds on the document after the click (>= 0, finite)
``propensity``  float, optional         the logging examination propensity, in (0, 1]
``features``    list of numbers         the document's raw features (F per row), or
``doc_key``     integer                 the document's key in a feature table (a second
                                        Parquet file of ``doc_key`` and ``features``), or
``doc_row``     integer                 its row in the run's training split (``task=simulate``)
==============  ======================  =======================================================

Exactly one of ``features``, ``doc_key`` and ``doc_row`` is present. The footer holds
``differank.click_log = differank-click-log-parquet-1`` and, for a ``doc_row`` log, the
fingerprints of the data it was written for (``train_qids_sha256``, ``train_files_sha256``, as
in the ``.npz`` log). Opening checks the layout and every size the footer claims before a value
is decoded: the column types, the row groups' rows, the largest row group against the memory
budget, and, from the footer's statistics of ``session``, that row groups hold increasing,
disjoint session ranges (so no session spans two row groups, whoever reads them). Reading a row
group checks its values at their stored width (a click of 256 is refused, not read as 0) and
that the rows agree with the footer's statistics; every error names the file, the row group,
the row in it and the row in the file.

Public API::

    ParquetClickLog(path, n_features=None)      # opened and checked, nothing decoded
      .row_groups, .rows, .group_rows(g), .document ("features" | "doc_key" | "doc_row")
      .sessions_per_group(held_out=None) -> int64 [G]  # sessions (not held out) per group
      .read_group(g) -> LoggedRows              # one row group, every value checked
      .train_qids_sha256, .train_files_sha256   # the data a doc_row log was written for
    ClickLogWriter(path, document, *, overwrite=False, metadata=None)   # row groups appended
      .write(session=, qid=, position=, click=, features|doc_key|doc_row=, dwell=, propensity=)
    FeatureTable.read(path, n_features=None)    # doc_key -> raw features, held in memory
    write_click_log_parquet(log: ClickLog, path, ...)  # an .npz-format log as Parquet
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from differank.datamodules.clicks.click_log import IDENTITY, ClickLog, ClickLogError
from differank.datamodules.clicks.held_out import QueryHoldout
from differank.datamodules.parquet import _pyarrow
from differank.datamodules.reader import FLOAT32_MAX, available_memory_bytes
from differank.datamodules.regular_files import require_regular_file

FORMAT = "differank-click-log-parquet-1"
FORMAT_KEY = "differank.click_log"
DOCUMENT_COLUMNS = ("features", "doc_key", "doc_row")
_REQUIRED = ("session", "qid", "position", "click")
_OPTIONAL = ("dwell", "propensity")
_INT64_MIN, _INT64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
# What decoding one row group holds per row besides the footer's decoded size: the int64 copies
# of session, qid, position and the document column, the checks' temporaries, and the float32
# dwell and propensity.
_ROW_BYTES = 4 * 8 + 3 * 8 + 2 * 4


@dataclass
class LoggedRows:
    """One row group of a Parquet click log, checked: whole sessions, in file order.
    ``first_row``: the file row of its first row (a row's ``doc_index`` in the click batch)."""

    first_row: int
    session: np.ndarray  # int64 [n]
    qid: np.ndarray  # int64 [n]
    position: np.ndarray  # int64 [n], 1-based
    click: np.ndarray  # uint8 [n]
    dwell: np.ndarray | None  # float32 [n]
    propensity: np.ndarray | None  # float32 [n]
    features: np.ndarray | None  # float32 [n, F], raw
    doc_key: np.ndarray | None  # int64 [n]
    doc_row: np.ndarray | None  # int64 [n]

    @property
    def offsets(self) -> np.ndarray:
        """int64 [S + 1]: session ``s`` of the group is rows ``offsets[s]:offsets[s + 1]``."""
        starts = np.flatnonzero(np.r_[True, self.session[1:] != self.session[:-1]])
        return np.r_[starts, len(self.session)].astype(np.int64)


class _Where:
    """Names a row of one row group in an error: the file, the group, the row (both 0-based)."""

    def __init__(self, path: Path, group: int, first_row: int) -> None:
        self.path, self.group, self.first_row = path, group, first_row

    def fail(self, message: str, row: int | None = None):
        where = "" if row is None else f", row {row} (file row {self.first_row + row})"
        raise ClickLogError(f"{self.path}: row group {self.group}{where}: {message}")

    def first_bad(self, bad: np.ndarray, message) -> None:
        if bad.any():
            row = int(np.argmax(bad))
            self.fail(message(row), row)


def _values(pa, table, name: str, where: _Where) -> np.ndarray:
    """A column as numpy at its stored width; a null is refused naming its row."""
    column = table.column(name).combine_chunks()
    if column.null_count:
        row = int(np.flatnonzero(np.asarray(column.is_null()))[0])
        where.fail(f"{name} is null; every row needs one", row)
    if pa.types.is_boolean(column.type):
        return np.asarray(column.to_numpy(zero_copy_only=False), dtype=np.uint8)
    return column.to_numpy()


def _integers(values: np.ndarray, name: str, where: _Where, lowest: int = _INT64_MIN):
    """``values`` (an integer column at its stored width) as int64, once every one lies in
    ``[lowest, 2^63 - 1]`` compared at that width (a uint64 2^63 is refused, not wrapped)."""
    inside = (values >= lowest) & (values <= _INT64_MAX)
    where.first_bad(~inside, lambda r: f"{name} {values[r]} is outside [{lowest}, 2^63 - 1]")
    return values.astype(np.int64)


def _check_sessions(rows: LoggedRows, where: _Where) -> None:
    """Sorted by session, positions 1..L in order within each, one qid per session."""
    session = rows.session
    where.first_bad(
        np.r_[False, session[1:] < session[:-1]],
        lambda r: (
            f"session {session[r]} follows session {session[r - 1]}: a Parquet click log is "
            "sorted by session (a session's rows adjacent, in position order)"
        ),
    )
    offsets = rows.offsets
    starts = offsets[:-1]
    expected = np.arange(len(session)) - np.repeat(starts, np.diff(offsets)) + 1
    where.first_bad(
        rows.position != expected,
        lambda r: (
            f"session {session[r]}: position {rows.position[r]}, expected {expected[r]} (a "
            "session's rows hold positions 1, 2, ..., L in the order shown)"
        ),
    )
    session_qid = np.repeat(rows.qid[starts], np.diff(offsets))
    where.first_bad(
        rows.qid != session_qid,
        lambda r: (
            f"session {session[r]}: qid {rows.qid[r]} differs from its first row's {session_qid[r]}"
        ),
    )


def _list_values(pa, table, name: str, width: int | None, where: _Where) -> np.ndarray:
    """A list column of numbers as [n, F] at its stored width: F = ``width`` (or the first
    row's); a null list or value, or a list of another length, is refused naming its row."""
    column = table.column(name).combine_chunks()
    if column.null_count:
        row = int(np.flatnonzero(np.asarray(column.is_null()))[0])
        where.fail(f"{name} is null; every row needs its list", row)
    lengths = np.asarray(column.value_lengths()) if len(column) else np.zeros(0, np.int64)
    expected = width if width is not None else (int(lengths[0]) if len(lengths) else 0)
    where.first_bad(
        lengths != expected,
        lambda r: f"{name} holds {lengths[r]} values, expected {expected} (one per feature)",
    )
    flat = column.flatten()
    if flat.null_count:
        cell = int(np.flatnonzero(np.asarray(flat.is_null()))[0])
        where.fail(f"{name}[{cell % expected}] is null", cell // expected)
    return flat.to_numpy(zero_copy_only=False).reshape(len(column), expected)


def _features(values: np.ndarray, where: _Where) -> np.ndarray:
    """Features [n, F] as float32, once every value is finite and within float32's range as
    stored (a float64 1e39 would become inf)."""
    if values.dtype.kind not in "iuf" or values.ndim != 2:
        where.fail(f"features must be numbers [rows, F], got {values.dtype} {values.shape}")
    if values.dtype.kind == "f":
        bad = ~np.isfinite(values) | (np.abs(values) > FLOAT32_MAX)
        where.first_bad(
            bad.any(axis=1),
            lambda r: (
                f"features[{int(np.argmax(bad[r]))}] is {values[r][bad[r]][0]}: a feature "
                "must be finite and within float32's range"
            ),
        )
    return values.astype(np.float32)


def _checked_rows(
    values: dict[str, np.ndarray], where: _Where, session_range: tuple[int, int] | None = None
) -> LoggedRows:
    """The rows of one row group from its columns at their stored width (``dwell``,
    ``propensity`` and two of the document columns may be absent), every rule checked before
    a value is narrowed; ``session_range``: the (min, max) the footer claims."""
    session = _integers(values["session"], "session", where)
    if session_range is not None:
        low, high = session_range
        where.first_bad(
            (session < low) | (session > high),
            lambda r: (
                f"session {session[r]} is outside {low}..{high}, the range the footer's "
                "statistics claim (a damaged or altered file: write it again)"
            ),
        )
    click = values["click"]
    where.first_bad((click != 0) & (click != 1), lambda r: f"click {click[r]} is not 0 or 1")
    dwell, propensity = values.get("dwell"), values.get("propensity")
    if dwell is not None:
        bad = ~np.isfinite(dwell) | (dwell < 0) | (dwell > FLOAT32_MAX)
        where.first_bad(bad, lambda r: f"dwell {dwell[r]} is not a finite number >= 0")
        dwell = dwell.astype(np.float32)
    if propensity is not None:
        p = propensity
        # (0, 1] as stored, and still > 0 in float32 (a float64 1e-50 would become 0)
        inside = (p > 0) & (p <= 1) & (p.astype(np.float32) > 0)
        where.first_bad(~inside, lambda r: f"propensity {p[r]} is not in (0, 1]")
        propensity = p.astype(np.float32)
    features = values.get("features")
    doc_key, doc_row = values.get("doc_key"), values.get("doc_row")
    rows = LoggedRows(
        first_row=where.first_row,
        session=session,
        qid=_integers(values["qid"], "qid", where),
        position=_integers(values["position"], "position", where),
        click=click.astype(np.uint8),
        dwell=dwell,
        propensity=propensity,
        features=None if features is None else _features(features, where),
        doc_key=None if doc_key is None else _integers(doc_key, "doc_key", where),
        doc_row=None if doc_row is None else _integers(doc_row, "doc_row", where, 0),
    )
    _check_sessions(rows, where)
    return rows


class ParquetClickLog:
    """A Parquet click log opened and checked (the module docstring), nothing decoded.
    ``n_features``: the run's F, which every ``features`` list must hold (None: the first
    row's). Picklable: the file is opened again where it is read (a data-loader worker)."""

    def __init__(self, path: str | Path, n_features: int | None = None) -> None:
        self.path = require_regular_file(Path(path).expanduser(), "a Parquet click log")
        self.n_features = n_features
        self._file: Any = None
        parquet = self._parquet()
        schema, metadata = parquet.schema_arrow, parquet.metadata
        self._check_layout(schema)
        footer = {k.decode(): v.decode() for k, v in (schema.metadata or {}).items()}
        if footer.get(FORMAT_KEY) != FORMAT:
            raise ClickLogError(
                f"{self.path}: its footer's {FORMAT_KEY} is {footer.get(FORMAT_KEY)!r}, expected "
                f"{FORMAT!r} (write it with ClickLogWriter, task=simulate or "
                "differank.datamodules.clicks.baidu_ultr; docs/clicks.md#the-parquet-click-log)"
            )
        self.train_qids_sha256 = footer.get("train_qids_sha256")
        self.train_files_sha256 = footer.get("train_files_sha256")
        self.source = str(self.path)
        sizes = [metadata.row_group(g).num_rows for g in range(metadata.num_row_groups)]
        if not sizes or metadata.num_rows != sum(sizes) or min(sizes) <= 0:
            raise ClickLogError(
                f"{self.path}: the footer claims {metadata.num_rows} rows in row groups of "
                f"{sizes} rows: a click log has rows, in non-empty row groups (a damaged or "
                "altered file: write it again)"
            )
        self.starts = np.cumsum([0, *sizes]).astype(np.int64)
        self._session_ranges = self._check_session_ranges(metadata)
        self._check_memory(metadata, sizes)

    # ---- opening -----------------------------------------------------------------------------

    def _parquet(self):
        if self._file is None:
            pa, pq = _pyarrow()
            try:
                self._file = pq.ParquetFile(self.path)
            except (pa.ArrowException, OSError) as error:
                message = f"{self.path}: not a readable Parquet file ({error})"
                raise ClickLogError(message) from error
        return self._file

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_file": None}

    def _check_layout(self, schema) -> None:
        pa, _ = _pyarrow()
        names = schema.names
        documents = [name for name in DOCUMENT_COLUMNS if name in names]
        missing = [name for name in _REQUIRED if name not in names]
        unknown = sorted(set(names) - {*_REQUIRED, *_OPTIONAL, *DOCUMENT_COLUMNS})
        if missing or unknown or len(documents) != 1 or len(set(names)) != len(names):
            raise ClickLogError(
                f"{self.path}: columns {names}: a Parquet click log has {list(_REQUIRED)}, "
                f"optionally {list(_OPTIONAL)}, and exactly one of {list(DOCUMENT_COLUMNS)} "
                f"(missing {missing}, unknown {unknown}, document columns {documents})"
            )
        self.document = documents[0]
        integer = pa.types.is_integer
        wanted = {
            "session": integer,
            "qid": integer,
            "position": integer,
            "click": lambda t: integer(t) or pa.types.is_boolean(t),
            "dwell": lambda t: integer(t) or pa.types.is_floating(t),
            "propensity": pa.types.is_floating,
            "doc_key": integer,
            "doc_row": integer,
            "features": lambda t: (
                (pa.types.is_list(t) or pa.types.is_large_list(t) or pa.types.is_fixed_size_list(t))
                and (integer(t.value_type) or pa.types.is_floating(t.value_type))
            ),
        }
        for name in names:
            data_type = schema.field(name).type
            if not wanted[name](data_type):
                raise ClickLogError(
                    f"{self.path}: column {name!r} has type {data_type}; see the schema in "
                    "docs/clicks.md#the-parquet-click-log (integers for ids and positions, "
                    "0/1 integers or booleans for clicks, floats for propensities, a list of "
                    "numbers for features)"
                )
        if self.document == "features":
            data_type = schema.field("features").type
            if pa.types.is_fixed_size_list(data_type):
                width = int(data_type.list_size)
                if self.n_features is not None and width != self.n_features:
                    raise ClickLogError(
                        f"{self.path}: features holds {width} values per row, the run's data "
                        f"{self.n_features}: a log's features must be the run's features"
                    )
                self.n_features = width

    def _check_session_ranges(self, metadata) -> list[tuple[int, int]]:
        """Each row group's (min, max) session from the footer's statistics: increasing and
        disjoint, so a session lies in one row group and the file is sorted by session."""
        column = metadata.schema.to_arrow_schema().get_field_index("session")
        ranges: list[tuple[int, int]] = []
        for g in range(metadata.num_row_groups):
            stats = metadata.row_group(g).column(column).statistics
            if stats is None or not stats.has_min_max:
                raise ClickLogError(
                    f"{self.path}: row group {g} has no statistics of session; write the log "
                    "with statistics (pyarrow's default) so that its sessions can be checked "
                    "without reading it"
                )
            low, high = int(stats.min), int(stats.max)
            if ranges and low <= ranges[-1][1]:
                raise ClickLogError(
                    f"{self.path}: row group {g} holds sessions {low}..{high}, row group {g - 1} "
                    f"up to {ranges[-1][1]}: a session's rows must be adjacent and in one row "
                    "group, the file sorted by session (start a new row group between sessions)"
                )
            ranges.append((low, high))
        return ranges

    def _check_memory(self, metadata, sizes: list[int]) -> None:
        """The largest row group, as decoded, must fit the memory available (what one
        (rank, worker) holds at once; the log is never held whole)."""
        decoded = [metadata.row_group(g).total_byte_size for g in range(metadata.num_row_groups)]
        width = self.n_features or 0
        need = max(d + n * (_ROW_BYTES + 4 * width) for d, n in zip(decoded, sizes, strict=True))
        available = available_memory_bytes()
        if available is not None and need > available:
            raise ClickLogError(
                f"{self.path}: its largest row group takes {need / 2**30:.2f} GiB to decode, "
                f"{available / 2**30:.2f} GiB is available: write it with smaller row groups"
            )

    # ---- reading -----------------------------------------------------------------------------

    @property
    def row_groups(self) -> int:
        return len(self.starts) - 1

    @property
    def rows(self) -> int:
        return int(self.starts[-1])

    def group_rows(self, group: int) -> int:
        return int(self.starts[group + 1] - self.starts[group])

    def sessions_per_group(self, held_out: QueryHoldout | None = None) -> np.ndarray:
        """int64 [G]: the sessions of each row group, from its ``session`` column alone (one
        row group at a time: memory flat in the log's length); with ``held_out``, those of the
        queries it does not hold out (reading ``qid`` too)."""
        counts = np.zeros(self.row_groups, np.int64)
        columns = ["session"] if held_out is None else ["session", "qid"]
        for group in range(self.row_groups):
            table = self._parquet().read_row_group(group, columns=columns)
            session = table.column(0).to_numpy()
            starts = np.flatnonzero(np.r_[True, session[1:] != session[:-1]])
            if held_out is None:
                counts[group] = len(starts)
            else:
                qids = table.column(1).to_numpy()[starts]
                counts[group] = np.count_nonzero(~held_out(qids))
        return counts

    def read_group(self, group: int) -> LoggedRows:
        """Row group ``group``, every value checked at its stored width (module docstring)."""
        pa, _ = _pyarrow()
        where = _Where(self.path, group, int(self.starts[group]))
        try:
            table = self._parquet().read_row_group(group)
        except (pa.ArrowException, OSError) as error:
            where.fail(f"not readable ({error})")
        if table.num_rows != self.group_rows(group):
            where.fail(f"{table.num_rows} rows, its footer claims {self.group_rows(group)}")
        values = {
            name: _values(pa, table, name, where)
            for name in table.column_names
            if name != "features"
        }
        if self.document == "features":
            values["features"] = _list_values(pa, table, "features", self.n_features, where)
        return _checked_rows(values, where, self._session_ranges[group])


class ClickLogWriter:
    """Writes a Parquet click log row group by row group (never the whole log in memory), to a
    temporary file renamed into place on :meth:`close` (whole or absent). ``document``: which
    of ``features``, ``doc_key``, ``doc_row`` the rows carry. Each :meth:`write` is one row
    group of whole sessions, every session after those written before; its values are
    checked as a reader checks them. ``overwrite=False``: an existing ``path`` is a
    ``FileExistsError`` (checked when opened and as the file is put in place)."""

    def __init__(
        self,
        path: str | Path,
        document: str,
        *,
        n_features: int | None = None,
        with_dwell: bool = False,
        with_propensity: bool = False,
        overwrite: bool = False,
        metadata: dict[str, str] | None = None,
    ) -> None:
        pa, pq = _pyarrow()
        if document not in DOCUMENT_COLUMNS:
            raise ValueError(f"document must be one of {DOCUMENT_COLUMNS}, got {document!r}")
        if document == "features" and n_features is None:
            raise ValueError("a features log needs n_features (the list's width)")
        self.path = Path(path)
        self.overwrite = overwrite
        self.n_features = 0 if n_features is None else int(n_features)
        if os.path.lexists(self.path) and not overwrite:
            raise FileExistsError(f"{self.path} exists; pass overwrite=True to replace it")
        fields = [(name, pa.int64()) for name in ("session", "qid", "position")]
        fields.append(("click", pa.uint8()))
        if with_dwell:
            fields.append(("dwell", pa.float32()))
        if with_propensity:
            fields.append(("propensity", pa.float32()))
        if document == "features":
            fields.append(("features", pa.list_(pa.float32(), self.n_features)))
        else:
            fields.append((document, pa.int64()))
        footer = {FORMAT_KEY: FORMAT, **(metadata or {})}
        self.schema = pa.schema(fields, metadata=footer)
        self.document = document
        self._temporary = self.path.parent / f".{self.path.name}.{uuid.uuid4().hex}.tmp"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._writer = pq.ParquetWriter(self._temporary, self.schema, compression="none")
        self._last_session: int | None = None
        self.rows = self.row_groups = 0

    def write(self, **columns: np.ndarray | None) -> None:
        """One row group: ``session``, ``qid``, ``position`` (1-based), ``click``, the document
        column and, when the writer has them, ``dwell`` and ``propensity``."""
        pa, _ = _pyarrow()
        names = self.schema.names
        given = sorted(name for name, value in columns.items() if value is not None)
        if given != sorted(names):
            raise ValueError(f"a row group of this log has columns {names}, got {given}")
        where = _Where(self.path, self.row_groups, self.rows)
        values = {name: np.asarray(columns[name]) for name in names}
        if values["session"].ndim != 1 or not len(values["session"]):
            raise ValueError(f"{self.path}: a row group needs rows (1-D columns)")
        # the reader's rules, on the values as given (before they are narrowed to the schema)
        rows = _checked_rows(values, where)
        if self._last_session is not None and rows.session[0] <= self._last_session:
            raise ValueError(
                f"{self.path}: a row group starts at session {rows.session[0]}, after session "
                f"{self._last_session}: write whole sessions in increasing order"
            )
        arrays = []
        for field in self.schema:
            if field.name == "features":
                assert rows.features is not None
                if rows.features.shape[1] != self.n_features:
                    where.fail(
                        f"features has {rows.features.shape[1]} columns, not {self.n_features}"
                    )
                flat = pa.array(np.ascontiguousarray(rows.features).reshape(-1))
                arrays.append(pa.FixedSizeListArray.from_arrays(flat, self.n_features))
            else:
                arrays.append(pa.array(getattr(rows, field.name)).cast(field.type))
        table = pa.Table.from_arrays(arrays, schema=self.schema)
        self._writer.write_table(table, row_group_size=len(table))
        self._last_session = int(rows.session[-1])
        self.rows += len(table)
        self.row_groups += 1

    def close(self) -> Path:
        """The log put in place (``os.replace``, after an ``fsync``)."""
        self._writer.close()
        with open(self._temporary, "rb") as handle:
            os.fsync(handle.fileno())
        if os.path.lexists(self.path) and not self.overwrite:
            self._temporary.unlink()
            raise FileExistsError(f"{self.path} appeared while it was written; not replaced")
        os.replace(self._temporary, self.path)
        return self.path

    def abort(self) -> None:
        """Drop the temporary file (nothing is put in place)."""
        self._writer.close()
        self._temporary.unlink(missing_ok=True)

    def __enter__(self) -> ClickLogWriter:
        return self

    def __exit__(self, kind, error, trace) -> None:
        if kind is None:
            self.close()
        else:
            self.abort()


def write_click_log_parquet(
    log: ClickLog,
    path: str | Path,
    *,
    row_group_rows: int = 65_536,
    overwrite: bool = False,
) -> Path:
    """``log`` (the ``.npz`` format's columns, checked) as a Parquet click log at ``path``:
    positions written 1-based, row groups of about ``row_group_rows`` rows cut between
    sessions, session ids renumbered 0, 1, 2, ... in the log's order (a Parquet log is sorted by
    session), its fingerprints kept in the footer."""
    document = "doc_row" if log.doc_row is not None else "features"
    metadata = {name: getattr(log, name) for name in IDENTITY if getattr(log, name)}
    offsets = log.offsets
    width = None if log.features is None else log.features.shape[1]
    with ClickLogWriter(
        path,
        document,
        n_features=width,
        with_propensity=log.propensity is not None,
        overwrite=overwrite,
        metadata=metadata,
    ) as writer:
        sessions = len(offsets) - 1
        renumbered = np.repeat(np.arange(sessions), np.diff(offsets))
        first = 0
        while first < sessions:
            # whole sessions up to row_group_rows rows (at least one session)
            last = max(first + 1, int(np.searchsorted(offsets, offsets[first] + row_group_rows)))
            last = min(last, sessions)
            rows = slice(int(offsets[first]), int(offsets[last]))
            writer.write(
                session=renumbered[rows],
                qid=log.qid[rows],
                position=log.position[rows] + 1,
                click=log.click[rows],
                propensity=None if log.propensity is None else log.propensity[rows],
                **{document: getattr(log, document)[rows]},
            )
            first = last
    return Path(path)


@dataclass
class FeatureTable:
    """The raw features of documents by key (``doc_key`` int64, sorted; ``features`` float32
    [D, F]): a second Parquet file of a ``doc_key`` column and a ``features`` list column. It is
    the corpus, not the log: held in memory (checked against the memory available first)."""

    keys: np.ndarray
    features: np.ndarray
    source: str

    @classmethod
    def read(cls, path: str | Path, n_features: int | None = None) -> FeatureTable:
        pa, pq = _pyarrow()
        path = require_regular_file(Path(path).expanduser(), "a feature table")
        try:
            parquet = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as error:
            raise ClickLogError(f"{path}: not a readable Parquet file ({error})") from error
        names = parquet.schema_arrow.names
        if sorted(names) != ["doc_key", "features"]:
            raise ClickLogError(
                f"{path}: columns {names}: a feature table has doc_key (integers) and features "
                "(a list of numbers per row)"
            )
        metadata = parquet.metadata
        need = sum(metadata.row_group(g).total_byte_size for g in range(metadata.num_row_groups))
        available = available_memory_bytes()
        if available is not None and 3 * need > available:
            raise ClickLogError(
                f"{path}: the feature table decodes to {need / 2**30:.2f} GiB, "
                f"{available / 2**30:.2f} GiB is available"
            )
        keys, blocks, first = [], [], 0
        for g in range(metadata.num_row_groups):
            table = parquet.read_row_group(g)
            where = _Where(path, g, first)
            keys.append(_integers(_values(pa, table, "doc_key", where), "doc_key", where))
            blocks.append(_list_values(pa, table, "features", n_features, where))
            n_features = blocks[-1].shape[1]
            first += table.num_rows
        all_keys = np.concatenate(keys)
        order = np.argsort(all_keys, kind="stable")
        sorted_keys = all_keys[order]
        repeated = np.flatnonzero(sorted_keys[1:] == sorted_keys[:-1])
        if len(repeated):
            raise ClickLogError(
                f"{path}: doc_key {sorted_keys[repeated[0]]} appears more than once (file rows "
                f"{sorted(order[repeated[0] : repeated[0] + 2].tolist())})"
            )
        return cls(sorted_keys, np.concatenate(blocks)[order], str(path))

    def lookup(self, keys: np.ndarray, rows: LoggedRows, log_path: Path) -> np.ndarray:
        """float32 [n, F]: the features of ``keys``; a key the table lacks is refused naming
        the log's row."""
        index = np.searchsorted(self.keys, keys).clip(max=len(self.keys) - 1)
        missing = self.keys[index] != keys
        if missing.any():
            row = int(np.argmax(missing))
            raise ClickLogError(
                f"{log_path}: file row {rows.first_row + row} (session {rows.session[row]}): "
                f"doc_key {keys[row]} is not in the feature table {self.source}"
            )
        return self.features[index]
