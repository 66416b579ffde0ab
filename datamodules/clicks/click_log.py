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
==============  ================  =============================================================

A log holds ``doc_row`` or ``features`` (or both: ``doc_row`` is then used). ``task=simulate``
writes ``doc_row`` and ``propensity``; a real log usually has ``features`` (a few lines of
NumPy turn a TSV or Parquet log into this file: docs/clicks.md#the-click-log-format).
Reading checks every rule above and names the file, the row and the fix.

Public API::

    ClickLog(session, qid, position, click, doc_row=None, features=None, propensity=None)
      .write(path) -> Path        # atomic (datamodules/atomic_files.py)
      .offsets                    # int64 [S + 1]: session s is rows offsets[s]:offsets[s+1]
    read_click_log(path) -> ClickLog
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from differank.datamodules.atomic_files import write_file

FORMAT = "differank-click-log-1"
_COLUMNS = ("session", "qid", "position", "click", "doc_row", "features", "propensity")


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
    source: str = "<click log>"  # the file, for error messages

    def __post_init__(self) -> None:
        self.session = self._integers("session", self.session)
        n = len(self.session)
        self.qid = self._integers("qid", self.qid, n)
        self.position = self._integers("position", self.position, n)
        self.click = self._integers("click", self.click, n).astype(np.uint8)
        if self.doc_row is not None:
            self.doc_row = self._integers("doc_row", self.doc_row, n)
        if self.features is not None:
            self.features = np.asarray(self.features, dtype=np.float32)
            if self.features.ndim != 2 or len(self.features) != n:
                self._fail(f"features must be [N, F] with N = {n} rows")
        if self.propensity is not None:
            self.propensity = np.asarray(self.propensity, dtype=np.float32)
            if self.propensity.shape != (n,):
                self._fail(f"propensity must be 1-D with N = {n} rows")
        self._check_rows()

    @property
    def offsets(self) -> np.ndarray:
        """int64 [S + 1]: session ``s`` is rows ``offsets[s]:offsets[s + 1]``."""
        starts = np.flatnonzero(np.r_[True, self.session[1:] != self.session[:-1]])
        return np.r_[starts, len(self.session)].astype(np.int64)

    def write(self, path: str | Path) -> Path:
        """The log as ``path`` (an uncompressed ``.npz``), whole or absent."""
        columns: dict[str, np.ndarray] = {"format": np.array(FORMAT)}
        for name in _COLUMNS:
            value = getattr(self, name)
            if value is not None:
                columns[name] = value
        buffer = io.BytesIO()
        # the keys are column names, never savez's own allow_pickle (which mypy fears)
        np.savez(buffer, **columns)  # type: ignore[arg-type]
        return write_file(path, buffer.getvalue())

    def _integers(self, name: str, values, n: int | None = None) -> np.ndarray:
        array = np.asarray(values)
        if array.ndim != 1 or (n is not None and len(array) != n):
            self._fail(f"{name} must be 1-D with one value per row ({n} rows), got {array.shape}")
        if array.dtype.kind == "f":
            whole = np.isfinite(array) & (array == np.round(array))
            if not whole.all():
                self._fail(f"{name} must hold integers", int(np.flatnonzero(~whole)[0]))
        elif array.dtype.kind not in "iub":
            self._fail(f"{name} must hold integers, got dtype {array.dtype}")
        return array.astype(np.int64)

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
        self._first_bad(self.click > 1, lambda r: f"click {self.click[r]} is not 0 or 1")
        if self.doc_row is not None:
            self._first_bad(self.doc_row < 0, lambda r: f"doc_row {self.doc_row[r]} is negative")
        if self.features is not None:
            finite = np.isfinite(self.features).all(axis=1)
            self._first_bad(~finite, lambda r: "a feature is NaN or infinite")
        if self.propensity is not None:
            p = self.propensity
            self._first_bad(~((p > 0) & (p <= 1)), lambda r: f"propensity {p[r]} is not in (0, 1]")

    def _first_bad(self, bad: np.ndarray, message) -> None:
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            self._fail(message(row), row)

    def _fail(self, message: str, row: int | None = None):
        where = "" if row is None else f" row {row} (session {self.session[row]}):"
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
    path = Path(path)
    try:
        archive = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as error:
        raise ClickLogError(f"{path}: not a click log (.npz archive): {error}") from error
    with archive:
        names = set(archive.files)
        found = str(archive["format"]) if "format" in names else None
        if found != FORMAT:
            raise ClickLogError(
                f"{path}: format is {found!r}, expected {FORMAT!r} "
                "(docs/clicks.md#the-click-log-format)"
            )
        unknown = sorted(names - set(_COLUMNS) - {"format"})
        missing = [name for name in ("session", "qid", "position", "click") if name not in names]
        if unknown or missing:
            raise ClickLogError(
                f"{path}: unknown columns {unknown}, missing columns {missing}; a click log has "
                f"{list(_COLUMNS)}"
            )
        columns = {name: archive[name] for name in names if name != "format"}
    return ClickLog(**columns, source=str(path))
