"""The click log file: what users were shown and what they clicked, one row per shown slot.

A click log is one NumPy ``.npz`` archive (uncompressed) of equal-length columns, one row per
(session, position) slot. It is read back as whole binary columns (no parsing, no new
dependency: the data room reads NumPy, and pyarrow is not a dependency of differank):

==============  ================  =============================================================
column          dtype             meaning
==============  ================  =============================================================
``format``      str (scalar)      ``"differank-click-log-1"``
``session``     int64 [N]         session id: the rows of a session are consecutive
``qid``         int64 [N]         query id (the same on every row of a session)
``position``    int64 [N]         0-based position shown: 0, 1, 2, ... within each session
``click``       uint8 [N]         1 clicked, 0 not
``doc_row``     int64 [N]         the document's row in the run's training split (the
                                  concatenation of its files, 0-based): features come from the
                                  data, normalised as the run's. Needs the same data.
``features``    float32 [N, F]    the document's raw features (as in a LETOR file): the run
                                  applies its feature transform and z-score to them
``propensity``  float32 [N]       optional: the logging examination propensity in (0, 1]
``train_qids_`` str (scalar)      optional: sha256 of the per-row query ids (int64) of the
``sha256``                        training split the log was written for
``train_files_`` str (scalar)     optional: sha256 over that split's files' sha256
``sha256``
==============  ================  =============================================================

A log holds ``doc_row`` or ``features`` (or both: ``doc_row`` is then used). ``task=simulate``
writes ``doc_row``, ``propensity`` and the two fingerprints (a log with them is refused on other
data: ``ClickDataModule.logged``); a real log usually has ``features`` (a few lines of NumPy
turn a TSV or Parquet log into this file: docs/clicks.md#the-click-log-format).
Reading checks every rule above and names the file, the row and the fix; before numpy reads a
column, the log must be a regular file and every size its archive claims (member sizes, array
headers, what deflated members inflate to) must fit the file and the memory budget; values are
checked at the width they are stored in, before any narrowing.

Public API::

    ClickLog(session, qid, position, click, doc_row=None, features=None, propensity=None,
             train_qids_sha256=None, train_files_sha256=None)
      .write(path, *, overwrite=True) -> Path   # atomic (datamodules/atomic_files.py)
      .offsets                    # int64 [S + 1]: session s is rows offsets[s]:offsets[s+1]
      .rows(keep) -> ClickLog     # the rows where keep (whole sessions), checked again
    read_click_log(path) -> ClickLog
"""

from __future__ import annotations

import io
import math
import re
import zipfile
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from differank.datamodules.atomic_files import write_file
from differank.datamodules.reader import FLOAT32_MAX, available_memory_bytes
from differank.datamodules.regular_files import require_regular_file

FORMAT = "differank-click-log-1"
_INT64_MIN, _INT64_MAX = int(np.iinfo(np.int64).min), int(np.iinfo(np.int64).max)
_COLUMNS = ("session", "qid", "position", "click", "doc_row", "features", "propensity")
# The data a log was written for (scalars; docs/clicks.md#the-click-log-format)
IDENTITY = ("train_qids_sha256", "train_files_sha256")
_SHA256 = re.compile(r"[0-9a-f]{64}")
# What reading holds per row besides the columns as stored: the int64 copies of the integer
# columns (session, qid, position, click, doc_row), the rule checks' int64 temporaries (expected
# positions, session qids, offsets) and the float32 propensity.
_ROW_BYTES = 5 * 8 + 3 * 8 + 4
# Deflate inflates at most 1032 bytes per byte stored (its longest match per shortest code);
# an archive claiming more is altered. The allowance covers the smallest members.
_DEFLATE_RATIO = 1032
_NPY_HEADER_LIMIT = 2**16
_HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}


class ClickLogError(ValueError):
    """A click log that breaks the format (the message names the file and the row)."""


@dataclass
class ClickLog:
    """The columns of a click log (the module docstring), checked on construction.

    Example:
        >>> log = ClickLog(
        ...     session=np.array([0, 0, 1]), qid=np.array([7, 7, 9]),
        ...     position=np.array([0, 1, 0]), click=np.array([1, 0, 0]),
        ...     doc_row=np.array([4, 2, 8]))
        >>> log.offsets.tolist()
        [0, 2, 3]
    """

    session: np.ndarray
    qid: np.ndarray
    position: np.ndarray
    click: np.ndarray
    doc_row: np.ndarray | None = None
    features: np.ndarray | None = None
    propensity: np.ndarray | None = None
    train_qids_sha256: str | None = None  # the data it was written for (IDENTITY)
    train_files_sha256: str | None = None
    source: str = "<click log>"  # the file, for error messages

    def __post_init__(self) -> None:
        # Every value is checked at the width it is given in, before it is narrowed: a click
        # of 256 cast to uint8 first would read as 0, a doc_row of 2^63 cast to int64 as
        # negative, a float64 propensity of 1 + 1e-9 cast to float32 as 1.
        self.session = self._integers("session", self.session)
        n = len(self.session)
        self.qid = self._integers("qid", self.qid, n)
        self.position = self._integers("position", self.position, n, lowest=0)
        self.click = self._integers("click", self.click, n, 0, 1, "is not 0 or 1").astype(np.uint8)
        if self.doc_row is not None:
            self.doc_row = self._integers("doc_row", self.doc_row, n, lowest=0)
        if self.features is not None:
            features = self._numbers("features", self.features)
            if features.ndim != 2 or len(features) != n:
                self._fail(f"features must be [N, F] with N = {n} rows")
            finite = (np.isfinite(features) & (np.abs(features) <= FLOAT32_MAX)).all(axis=1)
            self._first_bad(~finite, lambda r: "a feature is NaN, infinite or beyond float32")
            self.features = features.astype(np.float32)
        if self.propensity is not None:
            p = self._numbers("propensity", self.propensity)
            if p.shape != (n,):
                self._fail(f"propensity must be 1-D with N = {n} rows")
            # (0, 1] as stored, and still > 0 in float32 (a float64 1e-50 would become 0)
            inside = (p > 0) & (p <= 1) & (p.astype(np.float32) > 0)
            self._first_bad(~inside, lambda r: f"propensity {p[r]} is not in (0, 1]")
            self.propensity = p.astype(np.float32)
        for name in IDENTITY:
            value = getattr(self, name)
            if value is not None and not (isinstance(value, str) and _SHA256.fullmatch(value)):
                self._fail(f"{name} must be a sha256 (64 lowercase hex digits), got {value!r}")
        self._check_rows()

    @property
    def offsets(self) -> np.ndarray:
        """int64 [S + 1]: session ``s`` is rows ``offsets[s]:offsets[s + 1]``."""
        starts = np.flatnonzero(np.r_[True, self.session[1:] != self.session[:-1]])
        return np.r_[starts, len(self.session)].astype(np.int64)

    def rows(self, keep: np.ndarray) -> ClickLog:
        """The log of the rows where ``keep`` (bool [N]) is true, with this log's fingerprints
        and source, checked again. ``keep`` must take or leave whole sessions (a session's tail
        cut off would still read as a shorter session): keep by query, or by session."""
        columns = {name: getattr(self, name) for name in _COLUMNS}
        kept = {name: value[keep] for name, value in columns.items() if value is not None}
        return replace(self, **kept)

    def write(self, path: str | Path, *, overwrite: bool = True) -> Path:
        """The log as ``path`` (an uncompressed ``.npz``), whole or absent; ``overwrite=False``:
        an existing ``path`` is a ``FileExistsError`` (checked as the file is put in place)."""
        columns: dict[str, np.ndarray] = {"format": np.array(FORMAT)}
        for name in (*_COLUMNS, *IDENTITY):
            value = getattr(self, name)
            if value is not None:
                columns[name] = np.asarray(value)
        buffer = io.BytesIO()
        # the keys are column names, never savez's own allow_pickle (which mypy fears)
        np.savez(buffer, **columns)  # type: ignore[arg-type]
        return write_file(path, buffer.getvalue(), overwrite=overwrite)

    def _integers(
        self,
        name: str,
        values,
        n: int | None = None,
        lowest: int = _INT64_MIN,
        highest: int = _INT64_MAX,
        outside: str = "",
    ) -> np.ndarray:
        """``values`` as int64 once every one is an integer in ``[lowest, highest]`` at the
        width it is given in (``outside``: what the error says of one that is not)."""
        array = np.asarray(values)
        if array.ndim != 1 or (n is not None and len(array) != n):
            self._fail(f"{name} must be 1-D with one value per row ({n} rows), got {array.shape}")
        if array.dtype.kind == "f":
            whole = np.isfinite(array) & (array == np.round(array))
            self._first_bad(~whole, lambda r: f"{name} {array[r]} is not an integer")
            # highest + 1: a float64 2^63 - 1 rounds to 2^63, beyond int64
            inside = (array >= lowest) & (array < highest + 1)
        elif array.dtype.kind in "iub":
            inside = (array >= lowest) & (array <= highest)  # compared at the stored width
        else:
            self._fail(f"{name} must hold integers, got dtype {array.dtype}")

        def why(row: int) -> str:
            value = array[row]
            if outside:
                return f"{name} {value} {outside}"
            if value < lowest:
                return (
                    f"{name} {value} is negative" if lowest == 0 else f"{name} {value} < {lowest}"
                )
            return f"{name} {value} is beyond int64 (at most {highest})"

        self._first_bad(~inside, why)
        return array.astype(np.int64)

    def _numbers(self, name: str, values) -> np.ndarray:
        """``values`` as an array of numbers (integers or floats), not yet narrowed: text,
        objects or complex numbers are refused."""
        array = np.asarray(values)
        if array.dtype.kind not in "iubf":
            self._fail(f"{name} must hold numbers, got dtype {array.dtype}")
        return array

    def _check_rows(self) -> None:
        n = len(self.session)
        if n == 0:
            self._fail("the log has no rows")
        if self.doc_row is None and self.features is None:
            self._fail("a log needs a doc_row column or a features column (both absent)")
        offsets = self.offsets
        starts = offsets[:-1]
        seen, first = np.unique(self.session[starts], return_index=True)
        if len(seen) != len(starts):
            again = np.setdiff1d(np.arange(len(starts)), first)[0]
            self._fail(
                f"session {self.session[starts[again]]} appears in two separate blocks: the rows "
                "of a session must be consecutive (sort the log by session, then position)",
                int(starts[again]),
            )
        expected = np.arange(n) - np.repeat(starts, np.diff(offsets))
        self._first_bad(
            self.position != expected,
            lambda r: (
                f"position {self.position[r]}, expected {expected[r]} (a session's rows "
                "hold positions 0, 1, 2, ... in the order shown)"
            ),
        )
        session_qid = np.repeat(self.qid[starts], np.diff(offsets))
        self._first_bad(
            self.qid != session_qid,
            lambda r: f"qid {self.qid[r]} differs from its session's qid {session_qid[r]}",
        )

    def _first_bad(self, bad: np.ndarray, message) -> None:
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            self._fail(message(row), row)

    def _fail(self, message: str, row: int | None = None):
        # the session is named once it is known to be int64 (it is checked first)
        session = isinstance(self.session, np.ndarray) and self.session.dtype == np.int64
        where = (
            ""
            if row is None
            else f" row {row}" + (f" (session {self.session[row]}):" if session else ":")
        )
        raise ClickLogError(f"{self.source}:{where} {message}")


def read_click_log(path: str | Path) -> ClickLog:
    """The click log at ``path``, every rule of the format checked (a :class:`ClickLogError`
    names the file and the row).

    Example:
        >>> import tempfile
        >>> folder = tempfile.mkdtemp()
        >>> path = ClickLog(session=np.array([0, 0]), qid=np.array([1, 1]),
        ...     position=np.array([0, 1]), click=np.array([0, 1]),
        ...     doc_row=np.array([3, 5])).write(f"{folder}/log.npz")
        >>> read_click_log(path).click.tolist()
        [0, 1]
    """
    path = require_regular_file(path, "a click log")  # a FIFO would block the read
    names = _check_claimed_sizes(path)
    unknown = sorted(names - {"format", *_COLUMNS, *IDENTITY})
    missing = [name for name in ("session", "qid", "position", "click") if name not in names]
    if unknown or missing:
        raise ClickLogError(
            f"{path}: unknown columns {unknown}, missing columns {missing}; a click log has "
            f"{['format', *_COLUMNS, *IDENTITY]}"
        )
    try:
        with np.load(path, allow_pickle=False) as archive:
            found = archive["format"] if "format" in names else None
            if found is None or found.shape != () or str(found) != FORMAT:
                shown = None if found is None else str(found)
                raise ClickLogError(
                    f"{path}: format is {shown!r}, expected {FORMAT!r} "
                    "(docs/clicks.md#the-click-log-format)"
                )
            columns = {name: archive[name] for name in names & set(_COLUMNS)}
            for name in names & set(IDENTITY):
                value = archive[name]
                if value.shape != () or value.dtype.kind != "U":
                    raise ClickLogError(f"{path}: {name} must be one string, got {value.dtype}")
                columns[name] = str(value)
    except (OSError, ValueError, zipfile.BadZipFile) as error:
        if isinstance(error, ClickLogError):
            raise
        raise ClickLogError(f"{path}: not a readable click log (.npz archive): {error}") from error
    return ClickLog(**columns, source=str(path))


def _check_claimed_sizes(path: Path) -> set[str]:
    """The column names of the archive at ``path``, once every size it claims is checked
    before numpy allocates or inflates anything: each member's array header (shape and dtype)
    against the member's size, each member's size against the file's length (or, deflated,
    against deflate's largest ratio), and what reading takes (the members as inflated, plus
    the checked copies of the columns) against the available memory."""
    try:
        with zipfile.ZipFile(path) as archive:
            members = [_member_header(path, archive, info) for info in archive.infolist()]
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as error:
        if isinstance(error, ClickLogError):
            raise
        raise ClickLogError(f"{path}: not a click log (.npz archive): {error}") from error
    names = [name for name, _, _, _ in members]
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ClickLogError(f"{path}: column(s) {repeated} appear more than once in the archive")
    shapes = {name: shape for name, shape, _, _ in members}
    rows = shapes["session"][0] if len(shapes.get("session", ())) else 0
    cells = math.prod(shapes["features"]) if "features" in shapes else 0
    need = sum(inflated for *_, inflated in members) + rows * _ROW_BYTES + 4 * cells
    available = available_memory_bytes()
    if available is not None and need > available:
        raise ClickLogError(
            f"{path}: reading it takes {need / 2**30:.2f} GiB ({rows} rows; its columns "
            f"inflate to {sum(m[3] for m in members) / 2**30:.2f} GiB), but "
            f"{available / 2**30:.2f} GiB of memory is available: split the log into smaller "
            "logs, or free memory"
        )
    return set(names)


def _member_header(path: Path, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> tuple:
    """``(column, shape, dtype, inflated bytes)`` of one archive member, read from its first
    bytes only; a claim the member cannot hold is a :class:`ClickLogError` naming it."""
    name = info.filename.removesuffix(".npy")
    where = f"{path}: column {name!r}"
    size = path.stat().st_size
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        raise ClickLogError(
            f"{where} is compressed with zip method {info.compress_type}; a click log is "
            "stored (np.savez) or deflated (np.savez_compressed)"
        )
    if info.header_offset + info.compress_size > size:
        raise ClickLogError(
            f"{where}: the archive claims {info.compress_size} bytes at offset "
            f"{info.header_offset}, beyond the file's {size} bytes (a damaged or altered log)"
        )
    stored = info.compress_type == zipfile.ZIP_STORED
    if (stored and info.file_size != info.compress_size) or (
        info.file_size > _DEFLATE_RATIO * info.compress_size + _NPY_HEADER_LIMIT
    ):
        raise ClickLogError(
            f"{where}: the archive claims {info.file_size} bytes from {info.compress_size} "
            "stored bytes, more than they can hold (a damaged or altered log)"
        )
    with archive.open(info) as member:
        version = np.lib.format.read_magic(member)
        if version not in _HEADER_READERS:
            raise ClickLogError(f"{where}: .npy format version {version} is not 1.0 or 2.0")
        shape, _, dtype = _HEADER_READERS[version](member)
        header = member.tell()
    if dtype.hasobject:
        raise ClickLogError(f"{where} holds Python objects (dtype {dtype}); refused, never read")
    claimed = header + math.prod(shape) * dtype.itemsize
    if claimed != info.file_size:
        raise ClickLogError(
            f"{where}: its header claims shape {shape} of {dtype} ({claimed} bytes), the "
            f"archive member holds {info.file_size} bytes (a damaged or altered log)"
        )
    return name, shape, dtype, info.file_size
