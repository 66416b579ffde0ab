"""Read LETOR / SVMlight ranking text: the one reader of training, evaluation and prediction.

Public API::

    read_letor_file(path, *, cache_dir=None, verify_hash=False) -> LetorFile
    check_read_options(nan_policy, null_value, label_range) -> (null_value, label_range)
    group_queries(qids) -> (query_ids [Q], rows [N], lengths [Q])   # the query grouping rule
    write_letor(path, features, labels, qids, docids=None, *, float_format="%.9g")
    default_cache_dir() -> Path          # $DIFFERANK_CACHE or ~/.cache/differank

Format rules (the only statement of them; :mod:`datamodules.letor_text` implements them):

* **Compression**: a file whose first bytes are the gzip magic ``1f 8b`` is gunzipped (also
  concatenated gzip members), whatever its name; any other file is read as text. Corrupt or
  truncated gzip data is an error naming the file.
* **Lines** end with ``\\n``, ``\\r\\n`` or a lone ``\\r`` (all three count as one line end, so
  line numbers match what an editor shows). The last line needs no line end.
* **Blank lines** (only spaces/tabs) and **comment lines** (first non-blank character ``#``)
  hold no row; they are skipped and counted in line numbers. Any other line is a data line;
  every data line is one row, in file order (nothing is dropped).
* **Data line**: ``<label> qid:<qid> [<index>:<value> ...] [# comment]``, tokens separated by
  spaces or tabs. ``#`` ends the data part anywhere on the line.
* **Label**: an integer 0..31 written in digits only (``0``, ``2``, ``07``): ``1.5``, ``+1``,
  ``1e0``, ``-1`` are errors. The bound keeps the NDCG gain ``2^label - 1`` finite and exact
  enough in float32 sums; ``label_range`` (DataModule option) can narrow it.
* **qid**: ``qid:`` and a decimal integer of at most 18 digits without leading zeros (``0`` is
  fine, ``0201`` is an error), so every qid has one spelling and the same id means the same
  query to the reader, the evaluator and ``Eval-Score-4.0.pl``.
* **Queries** (:func:`group_queries`, used by the DataModule and the evaluator): rows with one
  qid form one query even when they are not contiguous, rows in file order; queries are
  ordered by first appearance.
* **Features**: ``index:value`` with 1-based integer indices, strictly increasing on a line;
  absent features are 0. A value is a decimal number (``3``, ``-0.5``, ``.5``, ``1e-3``), or
  ``nan`` / ``inf`` / ``infinity`` (any case, optional sign), or ``NULL`` (LETOR 3.0 missing
  values). Values are read as float64 and stored as float32.
* **Comments**: the doc id of a row is the token after ``docid =`` in its comment, else the
  whole comment without surrounding blanks, else "".
* **Value rules** (applied by the DataModule, per its options, with ``file:line`` in every
  message): ``NULL`` is an error unless ``null_value`` gives its replacement; NaN / inf are an
  error unless ``nan_policy`` is ``allow`` or ``zero``; ``label_range=(lo, hi)`` rejects
  labels outside it.
* A file without any data line is an error. Every syntax error names ``file:line`` and the
  offending token; the scan stops at the first one.

Features are held dense, float32 [rows, largest index of the file]; sparse sets of modest width
(LETOR 3.0, Istella) are fine, and a file whose dense matrix would not fit in this machine's
memory is refused with the size it needs. Parsing is a compiled two-pass scan (count, then
fill) over 32 MiB chunks in parallel threads, writing float32 straight into the cache entry.

**Cache**: ``cache_dir/letor/<key>/`` holds the arrays as ``.npy`` files, memory-mapped on load
(processes on one machine share the pages), and ``meta.json`` (size, mtime, sha256 of the
file's bytes, shapes and counts). The key is the file's absolute path. An entry is reused while
size and mtime match; when they differ the file is hashed and the entry reused if the content
is unchanged (``verify_hash=True`` always hashes). An entry whose arrays disagree with its
metadata is re-parsed with a warning.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import math
import mmap
import os
import zlib
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from datamodules import cache
from datamodules import letor_text as lt

log = logging.getLogger(__name__)

NAN_POLICIES = ("error", "allow", "zero")
# Bump when the cached arrays' meaning changes, so old cache entries are never reused.
_CACHE_VERSION = 2
_CHUNK = 32 * 2**20
_GZIP_MAGIC = b"\x1f\x8b"
_MESSAGES = {
    lt.BAD_LABEL: "label {token!r} is not an integer 0..31 written in digits",
    lt.LABEL_TOO_LARGE: "label {token} is larger than 31 (the largest grade with finite gains)",
    lt.NO_QID: "expected 'qid:<integer>' after the label, got {token!r}",
    lt.BAD_QID: "{token!r}: a qid is a decimal integer of at most 18 digits without leading zeros",
    lt.BAD_FEATURE: "feature {token!r} is not of the form index:value",
    lt.BAD_INDEX: "feature index in {token!r} is not an integer >= 1",
    lt.INDEX_ORDER: "feature index in {token!r} does not increase (indices must be increasing "
    "and unique on a line)",
    lt.BAD_VALUE: "feature value in {token!r} is not a number",
    lt.INDEX_TOO_LARGE: "feature index in {token!r} is larger than 2^31 - 1",
    lt.CHANGED: "the file changed while it was read ({token!r}); read it again",
}


@dataclass
class LetorFile:
    """The rows of one LETOR file in file order (arrays memory-mapped from the cache).

    ``features`` float32 [N, F] (F = the largest index in this file; NULL cells are NaN);
    ``labels`` uint8 [N]; ``qids`` int64 [N]; ``line_numbers`` int64 [N] (1-based line of each
    row); ``present`` bool [F] (feature written on some line); ``null_rows`` / ``null_cols``
    int64 (cells written as NULL); doc ids as ``docid_bytes`` split at ``docid_offsets``
    [N + 1] (see :attr:`docids`). ``meta`` holds the counts (``nonfinite`` values and the line
    and feature of the first one).
    """

    path: Path
    features: np.ndarray
    labels: np.ndarray
    qids: np.ndarray
    line_numbers: np.ndarray
    present: np.ndarray
    null_rows: np.ndarray
    null_cols: np.ndarray
    docid_offsets: np.ndarray
    docid_bytes: np.ndarray
    meta: dict

    @property
    def num_rows(self) -> int:
        return len(self.labels)

    @property
    def max_feature_index(self) -> int:
        return int(self.features.shape[1])

    @property
    def docids(self) -> np.ndarray:
        """Doc id of every row (str [N]), decoded on demand."""
        blob = bytes(self.docid_bytes)
        offsets = self.docid_offsets.tolist()
        spans = zip(offsets[:-1], offsets[1:], strict=True)
        return np.asarray([blob[a:b].decode("utf-8", "replace") for a, b in spans], dtype=str)

    def check_values(self, *, nan_policy: str, null_value, label_range) -> None:
        """The value rules of the module docstring; errors name file:line."""
        if self.meta["nulls"] and null_value is None:
            line = self.line_numbers[self.null_rows[0]]
            raise ValueError(
                f"{self.path}:{line}: feature {self.null_cols[0] + 1} is NULL; set "
                "null_value=<number> to replace NULL values"
            )
        if self.meta["nonfinite"] and nan_policy == "error":
            raise ValueError(
                f"{self.path}:{self.meta['nonfinite_line']}: feature "
                f"{self.meta['nonfinite_feature']} is not finite (set nan_policy='allow' or "
                "'zero' to accept NaN and inf values)"
            )
        if label_range is not None:
            bad = (self.labels < label_range[0]) | (self.labels > label_range[1])
            if bad.any():
                row = int(np.argmax(bad))
                raise ValueError(
                    f"{self.path}:{self.line_numbers[row]}: label {self.labels[row]} outside "
                    f"label_range {label_range}"
                )

    def copy_rows(
        self, out: np.ndarray, start: int, stop: int, *, nan_policy: str, null_value
    ) -> int:
        """Write rows ``start:stop`` into ``out`` (float32 [stop - start, F_out], zeros beyond
        this file's F) with NULL replaced and, under ``nan_policy='zero'``, non-finite values
        zeroed; returns how many values were zeroed."""
        width = min(self.max_feature_index, out.shape[1])
        out[:, :width] = self.features[start:stop, :width]
        if self.meta["nulls"] and null_value is not None:
            inside = (self.null_rows >= start) & (self.null_rows < stop)
            inside &= self.null_cols < width
            out[self.null_rows[inside] - start, self.null_cols[inside]] = null_value
        if nan_policy == "zero":
            bad = ~np.isfinite(out)
            if bad.any():
                out[bad] = 0.0
                return int(bad.sum())
        return 0

    def release_pages(self) -> None:
        """Unmap the feature pages this process has read (they stay in the page cache and map
        again on access), so a copied file no longer counts in this process's memory."""
        if isinstance(self.features.base, mmap.mmap):
            self.features.base.madvise(mmap.MADV_DONTNEED)


def default_cache_dir() -> Path:
    """``$DIFFERANK_CACHE`` if set, else ``~/.cache/differank``."""
    env = os.environ.get("DIFFERANK_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "differank"


def check_read_options(nan_policy: str, null_value, label_range) -> tuple:
    """Validate the value-rule options; returns ``(null_value, label_range)`` normalised."""
    if nan_policy not in NAN_POLICIES:
        raise ValueError(f"nan_policy must be one of {NAN_POLICIES}, got {nan_policy!r}")
    if null_value is not None:
        if isinstance(null_value, bool) or not isinstance(null_value, (int, float)):
            raise ValueError(f"null_value must be a number or None, got {null_value!r}")
        null_value = float(null_value)
        if math.isnan(null_value) and nan_policy == "error":
            raise ValueError("null_value=nan needs nan_policy='allow' or 'zero'")
    if label_range is not None:
        if isinstance(label_range, (str, bytes)):
            raise ValueError(f"label_range must be a pair (lo, hi), got {label_range!r}")
        try:
            lo, hi = (float(v) for v in label_range)
        except (TypeError, ValueError):
            raise ValueError(f"label_range must be a pair (lo, hi), got {label_range!r}") from None
        if not (math.isfinite(lo) and math.isfinite(hi) and lo <= hi):
            raise ValueError(f"label_range must be finite with lo <= hi, got {label_range!r}")
        label_range = (lo, hi)
    return null_value, label_range


def group_queries(qids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The grouping rule: ``query_ids`` [Q] in order of first appearance, ``rows`` [N] int64
    (the row indices query after query, file order within a query) and ``lengths`` [Q].

    Example:
        >>> ids, rows, lengths = group_queries(np.array([7, 7, 3, 7, 5]))
        >>> ids.tolist(), rows.tolist(), lengths.tolist()
        ([7, 3, 5], [0, 1, 3, 2, 4], [3, 1, 1])
    """
    qids = np.asarray(qids, dtype=np.int64).reshape(-1)
    unique, first, inverse = np.unique(qids, return_index=True, return_inverse=True)
    by_appearance = np.argsort(first, kind="stable")
    rank = np.empty(len(unique), dtype=np.int64)
    rank[by_appearance] = np.arange(len(unique))
    query_of_row = rank[inverse.reshape(-1)]
    rows = np.argsort(query_of_row, kind="stable").astype(np.int64)
    return unique[by_appearance], rows, np.bincount(query_of_row, minlength=len(unique))


def read_letor_file(path, *, cache_dir=None, verify_hash: bool = False) -> LetorFile:
    """Parse (or load from the cache) one LETOR file under the format rules above.

    ``cache_dir`` None -> :func:`default_cache_dir`; ``verify_hash`` re-hashes the file even
    when its size and mtime match the cache entry.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"LETOR file not found: {path}")
    root = Path(cache_dir or default_cache_dir()).expanduser() / "letor"
    key = hashlib.sha256(f"{_CACHE_VERSION}\0{path.resolve()}".encode()).hexdigest()[:32]
    entry = root / key
    stat = path.stat()
    cached = _load_entry(entry, path)
    if cached is not None:
        same_stat = cached.meta["size"] == stat.st_size and cached.meta["mtime_ns"] == (
            stat.st_mtime_ns
        )
        if same_stat and not verify_hash:
            return cached
        if _file_sha256(path) == cached.meta["sha256"]:
            if not same_stat:
                cached.meta.update(size=stat.st_size, mtime_ns=stat.st_mtime_ns)
                cache.write_meta(entry, cached.meta)
            return cached
        log.info("%s changed since it was cached; parsing it again", path)
    return _parse_into_cache(path, root, entry)


# ---- parsing -----------------------------------------------------------------------------------


def _chunks(path: Path, hasher=None) -> Iterator[np.ndarray]:
    """The decompressed bytes of ``path`` in pieces of whole lines (uint8 arrays)."""
    with open(path, "rb") as handle:
        gzipped = handle.read(2) == _GZIP_MAGIC
        handle.seek(0)
        pieces = _gunzip(handle, path, hasher) if gzipped else _raw(handle, hasher)
        carry = b""
        for piece in pieces:
            data = carry + piece if carry else piece
            cut = data.rfind(b"\n") + 1
            if cut == 0:  # no LF: cut after a lone CR that is not the last byte
                cut = data.rfind(b"\r", 0, len(data) - 1) + 1
            if cut == 0:
                if len(data) > 4 * _CHUNK:
                    raise ValueError(f"{path}: a line longer than {4 * _CHUNK >> 20} MiB")
                carry = data
                continue
            yield np.frombuffer(data, dtype=np.uint8, count=cut)
            carry = data[cut:]
        if carry:
            yield np.frombuffer(carry, dtype=np.uint8)


def _raw(handle, hasher) -> Iterator[bytes]:
    while piece := handle.read(_CHUNK):
        if hasher is not None:
            hasher.update(piece)
        yield piece


def _gunzip(handle, path: Path, hasher) -> Iterator[bytes]:
    """Decompress gzip members one after another; corrupt or truncated data is an error."""
    decompressor, started = zlib.decompressobj(16 + zlib.MAX_WBITS), False
    try:
        while raw := handle.read(_CHUNK // 4):
            if hasher is not None:
                hasher.update(raw)
            while raw:
                started = True
                yield decompressor.decompress(raw)
                raw = b""
                if decompressor.eof:  # another member may follow
                    raw = decompressor.unused_data
                    decompressor, started = zlib.decompressobj(16 + zlib.MAX_WBITS), False
    except zlib.error as error:
        raise ValueError(f"{path}: corrupt gzip data ({error})") from None
    if started and not decompressor.eof:
        raise ValueError(f"{path}: truncated gzip file (the compressed data ends early)")


def _scan_all(path: Path, fill_with=None, on_done=None, hasher=None) -> list[np.ndarray]:
    """Run the scan over every chunk (two threads); with ``fill_with`` (a function of the chunk
    number giving the output arrays) the rows are written, and ``on_done(number, chunk,
    result)`` sees each chunk, in order, once its scan is done (then the chunk is dropped, so at
    most a few chunks of text are held). Returns the per-chunk results."""
    workers = max(1, min(2, os.cpu_count() or 1))
    results, pending = [], []

    def finish():
        number, chunk, future = pending.pop(0)
        results.append(future.result())
        _raise_scan_error(path, results)
        if on_done is not None:
            on_done(number, chunk, results[-1])

    with ThreadPoolExecutor(workers) as pool:
        for number, chunk in enumerate(_chunks(path, hasher)):
            arrays = fill_with(number, chunk) if fill_with else _EMPTY
            future = pool.submit(lt.scan, chunk, fill_with is not None, *arrays, lt.POW10)
            pending.append((number, chunk, future))
            if len(pending) > workers:
                finish()
        while pending:
            finish()
    return results


_EMPTY = (
    np.zeros((0, 0), np.float32),
    np.zeros(0, np.uint8),
    *(np.zeros(0, np.int64),) * 6,
    np.zeros(0, bool),
)


def _raise_scan_error(path: Path, results: list[np.ndarray]) -> None:
    last = results[-1]
    if last[lt.R_ERROR] == lt.OK:
        return
    line = sum(int(r[lt.R_LINES]) for r in results[:-1]) + int(last[lt.R_ERROR_LINE])
    code, position = int(last[lt.R_ERROR]), int(last[lt.R_ERROR_POS])
    chunk = _nth_chunk(path, len(results) - 1)
    end = position
    while end < len(chunk) and end - position < 60 and chunk[end] not in b" \t\r\n#":
        end += 1
    token = bytes(chunk[position:end]).decode("utf-8", "replace")
    raise ValueError(f"{path}:{line}: " + _MESSAGES[code].format(token=token))


def _nth_chunk(path: Path, number: int) -> np.ndarray:
    for index, chunk in enumerate(_chunks(path)):
        if index == number:
            return chunk
    raise AssertionError("chunk vanished")  # pragma: no cover


def _parse_into_cache(path: Path, root: Path, entry: Path) -> LetorFile:
    hasher = hashlib.sha256()
    counts = _scan_all(path, hasher=hasher)
    rows = np.cumsum([0] + [int(r[lt.R_ROWS]) for r in counts])
    lines = np.cumsum([0] + [int(r[lt.R_LINES]) for r in counts])
    nulls = np.cumsum([0] + [int(r[lt.R_NULLS]) for r in counts])
    n_rows, n_nulls = int(rows[-1]), int(nulls[-1])
    n_features = max((int(r[lt.R_MAX_INDEX]) for r in counts), default=0)
    if n_rows == 0:
        raise ValueError(f"{path}: empty file (no data lines)")
    _check_dense_fits(path, n_rows, n_features)
    tmp = cache.new_entry(root)
    arrays = {
        "features": cache.new_array(tmp, "features", np.float32, (n_rows, n_features)),
        "labels": np.zeros(n_rows, np.uint8),
        "qids": np.zeros(n_rows, np.int64),
        "line_numbers": np.zeros(n_rows, np.int64),
        "present": np.zeros(n_features, bool),
        "null_rows": np.zeros(n_nulls, np.int64),
        "null_cols": np.zeros(n_nulls, np.int64),
    }
    doc_start, doc_end = np.zeros(n_rows, np.int64), np.zeros(n_rows, np.int64)
    pieces = []

    def outputs(number: int, chunk: np.ndarray):
        r = slice(rows[number], rows[number + 1])
        n = slice(nulls[number], nulls[number + 1])
        a = arrays
        return (
            a["features"][r],
            a["labels"][r],
            a["qids"][r],
            a["line_numbers"][r],
            doc_start[r],
            doc_end[r],
            a["null_rows"][n],
            a["null_cols"][n],
            a["present"],
        )

    def done(number: int, chunk: np.ndarray, result: np.ndarray):
        r = slice(rows[number], rows[number + 1])
        arrays["line_numbers"][r] += lines[number]
        arrays["null_rows"][nulls[number] : nulls[number + 1]] += rows[number]
        pieces.append(_gather_spans(chunk, doc_start[r], doc_end[r]))

    _scan_all(path, fill_with=outputs, on_done=done)
    lengths = doc_end - doc_start
    arrays["docid_offsets"] = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
    arrays["docid_bytes"] = np.concatenate(pieces) if pieces else np.zeros(0, np.uint8)
    first = next((r for r in counts if r[lt.R_NONFINITE]), None)
    nonfinite_line = 0
    if first is not None:
        index = next(i for i, r in enumerate(counts) if r[lt.R_NONFINITE])
        nonfinite_line = int(lines[index] + first[lt.R_NONFINITE_LINE])
    stat = path.stat()
    meta = {
        "version": _CACHE_VERSION,
        "source": str(path.resolve()),
        "size": stat.st_size,
        "mtime_ns": stat.st_mtime_ns,
        "sha256": hasher.hexdigest(),
        "rows": n_rows,
        "features": n_features,
        "nulls": n_nulls,
        "docid_bytes": int(lengths.sum()),
        "nonfinite": int(sum(int(r[lt.R_NONFINITE]) for r in counts)),
        "nonfinite_line": nonfinite_line,
        "nonfinite_feature": int(first[lt.R_NONFINITE_COL]) if first is not None else 0,
    }
    loaded = cache.commit(
        tmp, entry, arrays, meta, _shapes, same=lambda old: old.get("sha256") == meta["sha256"]
    )
    if loaded is None:
        return LetorFile(path=path, meta=meta, **arrays)
    return LetorFile(path=path, meta=loaded[1], **loaded[0])


def _gather_spans(chunk: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``chunk[start[i]:end[i]]`` for every i, concatenated (vectorised)."""
    lengths = end - start
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.uint8)
    shift = np.repeat(start - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return chunk[np.arange(total) + shift]


def _check_dense_fits(path: Path, n_rows: int, n_features: int) -> None:
    """Features are held dense: refuse (with the size) a file whose matrix cannot fit."""
    need = n_rows * n_features * 4
    try:
        memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return
    if need > memory:
        raise ValueError(
            f"{path}: {n_rows} rows x {n_features} features need {need / 2**30:.1f} GiB as a "
            f"dense float32 matrix, more than this machine's {memory / 2**30:.1f} GiB; "
            "feature indices this large are not supported"
        )


# ---- the cache ----------------------------------------------------------------------------------


def _shapes(meta: dict) -> dict:
    """The array shapes a parsed-file entry's metadata promises."""
    if meta.get("version") != _CACHE_VERSION:
        raise ValueError(f"cache version {meta.get('version')} is not {_CACHE_VERSION}")
    n, f, nulls = meta["rows"], meta["features"], meta["nulls"]
    return {
        "features": (n, f),
        "labels": (n,),
        "qids": (n,),
        "line_numbers": (n,),
        "present": (f,),
        "null_rows": (nulls,),
        "null_cols": (nulls,),
        "docid_offsets": (n + 1,),
        "docid_bytes": (meta["docid_bytes"],),
    }


def _load_entry(entry: Path, path: Path) -> LetorFile | None:
    loaded = cache.load(entry, _shapes)
    return None if loaded is None else LetorFile(path=path, meta=loaded[1], **loaded[0])


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        while piece := handle.read(_CHUNK):
            digest.update(piece)
    return digest.hexdigest()


# ---- writing ------------------------------------------------------------------------------------


def write_letor(path, features, labels, qids, docids=None, *, float_format: str = "%.9g") -> Path:
    """Write rows as LETOR text: ``<label> qid:<q> 1:<v> ... F:<v> #docid = <id>``.

    ``features`` [N, F] (dense, all F written, 1-based indices), ``labels`` [N] (integers),
    ``qids`` [N] int, ``docids`` [N] str or None. A path ending in ``.gz`` is gzip-compressed
    (mtime 0, so the bytes are reproducible). ``"%.9g"`` round-trips float32 exactly.
    """
    features = np.asarray(features, dtype=np.float64)
    labels = np.asarray(labels, dtype=np.float64).reshape(-1)
    qids = np.asarray(qids).reshape(-1)
    if features.ndim != 2 or not (len(features) == len(labels) == len(qids)):
        raise ValueError(
            f"features [N, F], labels [N], qids [N] must agree; got {features.shape}, "
            f"{labels.shape}, {qids.shape}"
        )
    if docids is not None and len(docids) != len(labels):
        raise ValueError(f"docids has {len(docids)} entries for {len(labels)} rows")
    row_format = " ".join(f"{j + 1}:{float_format}" for j in range(features.shape[1]))
    lines = []
    for i in range(len(labels)):
        line = f"{labels[i]:g} qid:{int(qids[i])} " + row_format % tuple(features[i])
        if docids is not None:
            line += f" #docid = {docids[i]}"
        lines.append(line)
    text = ("\n".join(lines) + "\n").encode()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.name.endswith(".gz"):
        with open(path, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as gz:
            gz.write(text)
    else:
        path.write_bytes(text)
    return path
