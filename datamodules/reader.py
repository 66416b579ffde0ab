"""Read LETOR / SVMlight ranking text: the one reader of training, evaluation and prediction.

Public API::

    read_letor_file(path, *, cache_dir=None, verify_hash=False) -> LetorFile
    check_read_options(nan_policy, null_value, label_range) -> (null_value, label_range)
    group_queries(qids) -> (query_ids [Q], rows [N], lengths [Q])   # the query grouping rule
    write_letor(path, features, labels, qids, docids=None, *, float_format="%.9g")
    default_cache_dir() -> Path          # $DIFFERANK_CACHE or ~/.cache/differank
    check_fold_budget(files, *, cache_dir=None)   # memory and disk, before a fold is parsed
    NUMBER                               # the value syntax as a regex (one-number-per-line files)

The data rules (the text format, the value rules, float32's range, the memory and disk budgets,
the cache) are stated once, in ``docs/data.md``; :mod:`differank.datamodules.letor_text`
implements the text rules, this module the value rules, the budgets and the cache.

How it reads: one compiled scan of each 32 MiB chunk of whole lines (two threads) into
chunk-sized arrays, appended in order to the cache entry as float32; the width is the largest
feature index of the first chunk, and a file with a wider row later is counted in full first and
scanned again (the one case that reads the text twice). Cache entries
(``cache_dir/letor/<key>/``, keyed by the absolute path) are memory-mapped on load and reused
while size and mtime match, or while the content hash does.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import math
import mmap
import os
import re
import shutil
import zlib
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from differank.datamodules import cache
from differank.datamodules import letor_text as lt
from differank.datamodules.regular_files import require_regular_file

log = logging.getLogger(__name__)

NAN_POLICIES = ("error", "allow", "zero")
# The value syntax of letor_text._parse_value, for files of one number per line (the evaluator's
# scores): [+-] then digits with an optional fraction (or a fraction alone) and an optional
# exponent, or nan / inf / infinity in any case. No underscores, no hex, no blanks inside.
NUMBER = re.compile(
    r"[+-]?(?:(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?|(?i:inf(?:inity)?|nan))"
)
FLOAT32_MAX = float(np.finfo(np.float32).max)
# Bump when the cached arrays' meaning changes, so old cache entries are never reused.
_CACHE_VERSION = 3  # 3: values beyond float32's range count as non-finite
_CHUNK = 32 * 2**20
_PROBE = 2**18  # the prefix of each file a fold's budget reads before anything is parsed
# What the memory budget counts besides the dense features (docs/data.md#memory-and-disk-budgets;
# benchmarks/reader_budget.py measures it against the peak RSS). Per row of the fold: the label
# (1 byte parsed, 4 as float32), the qid, line number, document-id length and offset (8 bytes
# each), the document id's bytes (about 8) and the grouping's row order (8).
_ROW_BYTES = 1 + 4 + 4 * 8 + 8 + 8
# While a file is parsed: the chunks of text in flight (two scanning, one waiting, one being
# read) and the scan outputs of all but the one being read (per row: features, label, qid, line
# number, document-id span).
_CHUNKS_IN_FLIGHT = 4
_SCAN_ROW_BYTES = 1 + 4 * 8
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
        """The value rules of ``docs/data.md``; errors name file:line."""
        if self.meta["nulls"] and null_value is None:
            line = self.line_numbers[self.null_rows[0]]
            raise ValueError(
                f"{self.path}:{line}: feature {self.null_cols[0] + 1} is NULL; set "
                "null_value=<number> to replace NULL values"
            )
        if self.meta["nonfinite"] and nan_policy == "error":
            value = self.meta["nonfinite_value"]
            what = (
                f"value {value:.9g} is beyond float32's range (|x| <= {FLOAT32_MAX:.8g}) and "
                "would be stored as inf"
                if math.isfinite(value)
                else f"value {value}"
            )
            raise ValueError(
                f"{self.path}:{self.meta['nonfinite_line']}: feature "
                f"{self.meta['nonfinite_feature']} is not finite ({what}; "
                f"{self.meta['nonfinite']} such value(s) in the file); fix the file, or set "
                "nan_policy='zero' (replace them by 0) or 'allow' (keep NaN / inf)"
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
    """Parse (or load from the cache) one LETOR file under the rules of ``docs/data.md``.

    ``cache_dir`` None -> :func:`default_cache_dir`; ``verify_hash`` re-hashes the file even
    when its size and mtime match the cache entry.
    """
    path = require_regular_file(path, "a LETOR file")
    root, entry = _entry_of(path, cache_dir)
    stat = path.stat()
    cached = _load_entry(entry, path)
    if cached is not None:
        same_stat = _same_stat(cached, stat)
        if same_stat and not verify_hash:
            return cached
        if file_sha256(path) == cached.meta["sha256"]:
            if not same_stat:
                cached.meta.update(size=stat.st_size, mtime_ns=stat.st_mtime_ns)
                cache.write_meta(entry, cached.meta)
            return cached
        log.info("%s changed since it was cached; parsing it again", path)
    return _parse_into_cache(path, root, entry)


def _entry_of(path: Path, cache_dir) -> tuple[Path, Path]:
    """The cache root of parsed files and ``path``'s entry in it (keyed by the absolute path)."""
    root = Path(cache_dir or default_cache_dir()).expanduser() / "letor"
    key = hashlib.sha256(f"{_CACHE_VERSION}\0{path.resolve()}".encode()).hexdigest()[:32]
    return root, root / key


def _same_stat(cached: LetorFile, stat: os.stat_result) -> bool:
    return cached.meta["size"] == stat.st_size and cached.meta["mtime_ns"] == stat.st_mtime_ns


# ---- budgets: memory and disk, stated before anything is allocated ------------------------------


def available_memory_bytes() -> int | None:
    """Memory this machine can still give without swapping (``MemAvailable``: free memory plus
    reclaimable page cache); ``None`` where it cannot be known."""
    try:
        with open("/proc/meminfo") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # pragma: no cover - non-POSIX
        return None


def _gib(size: int) -> str:
    return f"{size / 2**30:.2f} GiB"


def _check_budget(subject: str, memory: int, disk: int, cache_root: Path) -> None:
    """Refuse, with the numbers and the ways out, a dense float32 load of ``memory`` bytes (and
    ``disk`` bytes written to the cache) that this machine's free memory or the cache disk's
    free space cannot hold."""
    available = available_memory_bytes()
    if available is not None and memory > available:
        raise ValueError(
            f"{subject} need {_gib(memory)} of memory, but {_gib(available)} is available. "
            "Features are held dense up to the largest feature index: renumber the features "
            "densely (indices 1..K for the K features used), or free memory"
        )
    free = cache.free_disk_bytes(cache_root)
    if disk > free:
        raise ValueError(
            f"{subject} need {_gib(disk)} in the cache {cache_root}, but its disk has "
            f"{_gib(free)} free. Set data.cache_dir (or $DIFFERANK_CACHE) to a disk with room, "
            "free space, or renumber the features densely (indices 1..K for the K features used)"
        )


def _planned_shape(path: Path, cache_dir) -> tuple[int, int, bool]:
    """``(rows, width, cached)`` of ``path`` without parsing it: from its cache entry when that
    is current, else estimated from the counting scan of its first chunk."""
    cached = _load_entry(_entry_of(path, cache_dir)[1], path)
    if cached is not None and _same_stat(cached, path.stat()):
        return cached.num_rows, cached.max_feature_index, True
    first, covered = _scan_prefix(path, _PROBE)
    return _estimated_rows(path, first, covered), int(first[lt.R_MAX_INDEX]), False


def _estimated_rows(path: Path, first: np.ndarray, covered: int) -> int:
    """The rows of a scanned prefix of ``covered`` bytes, scaled to the file's text size."""
    rows = int(first[lt.R_ROWS])
    return max(rows, -(-rows * _text_size(path) // max(covered, 1)))


def _text_size(path: Path) -> int:
    """Bytes of text in ``path``: its size, or for gzip the size its last member records
    (ISIZE, modulo 4 GiB) when that is larger."""
    size = path.stat().st_size
    with open(path, "rb") as handle:
        if handle.read(2) != _GZIP_MAGIC or size < 20:
            return size
        handle.seek(-4, os.SEEK_END)
        return max(size, int.from_bytes(handle.read(4), "little"))


def fold_memory_bytes(files: dict[str, list[Path]], *, cache_dir=None) -> int:
    """The memory budget of a fold (bytes): what :func:`check_fold_budget` asks for."""
    return sum(_fold_memory(_fold_shapes(files, cache_dir)).values())


def _fold_shapes(files: dict[str, list[Path]], cache_dir) -> dict[str, list[tuple]]:
    """Per split, ``(path, rows, width, cached)`` of each file (see :func:`_planned_shape`)."""
    return {
        split: [(path, *_planned_shape(path, cache_dir)) for path in paths]
        for split, paths in files.items()
    }


def _fold_memory(shapes: dict[str, list[tuple]]) -> dict[str, int]:
    """The bytes a fold's load holds at its peak, by kind: the parsed copy of every file (its
    rows x its largest index, float32), the normalised copy of every split (its rows x the
    training width), the rows' bookkeeping (labels, qids, line numbers, document ids, grouping;
    ``_ROW_BYTES``) and the buffers of the largest file parsed (chunks of text and their scan
    outputs)."""
    every = [shape for split in shapes.values() for shape in split]
    width = max(shape[2] for shape in shapes.get("train", every))
    rows = sum(shape[1] for shape in every)
    parsing = [_parse_buffer_bytes(path, n, f) for path, n, f, cached in every if not cached]
    return {
        "parsed": sum(4 * n * f for _, n, f, _ in every),
        "normalised": 4 * rows * width,
        "rows": rows * _ROW_BYTES,
        "parsing": max(parsing, default=0),
    }


def _parse_buffer_bytes(path: Path, rows: int, width: int) -> int:
    """The chunks of ``path``'s text in flight while it is parsed, with their scan outputs."""
    text = max(_text_size(path), 1)
    scanned = min(text, (_CHUNKS_IN_FLIGHT - 1) * _CHUNK)
    scanned_rows = -(-rows * scanned // text)
    return min(text, _CHUNKS_IN_FLIGHT * _CHUNK) + scanned_rows * (4 * width + _SCAN_ROW_BYTES)


def check_fold_budget(files: dict[str, list[Path]], *, cache_dir=None) -> None:
    """Before any file of a fold is parsed: the fold's memory (:func:`_fold_memory`: the dense
    float32 parsed and normalised copies, the rows' bookkeeping and the parse buffers) must fit
    in the available memory, and what a cold start writes to the cache (the files not parsed
    yet, then the normalised copy) in the cache disk's free space; otherwise a ``ValueError``
    gives the numbers and the ways out. Shapes come from the cache entries, or are estimated
    from each file's first 256 KiB of text."""
    shapes = _fold_shapes(files, cache_dir)
    every = [shape for split in shapes.values() for shape in split]
    widest = max(every, key=lambda shape: shape[2])
    width = max(shape[2] for shape in shapes.get("train", every))
    rows = sum(shape[1] for shape in every)
    memory = _fold_memory(shapes)
    cold = not all(cached for *_, cached in every)
    written = sum(4 * n * f for _, n, f, cached in every if not cached)
    subject = (
        f"{len(every)} files of {rows} rows (widest: {widest[0]}, feature index "
        f"{widest[2]}) held as dense float32 parsed ({_gib(memory['parsed'])}) and normalised "
        f"to {width} features ({_gib(memory['normalised'])}), with the rows' labels, qids, "
        f"line numbers and document ids ({_gib(memory['rows'])}) and the parse buffers "
        f"({_gib(memory['parsing'])}),"
    )
    disk = written + (memory["normalised"] if cold else 0)
    _check_budget(subject, sum(memory.values()), disk, _entry_of(widest[0], cache_dir)[0])


# ---- parsing -----------------------------------------------------------------------------------


def _chunks(path: Path, hasher=None, size: int | None = None) -> Iterator[np.ndarray]:
    """The decompressed bytes of ``path`` in pieces of whole lines (uint8 arrays, about
    ``size`` bytes each). Each piece
    is read straight into its own buffer (after the previous piece's unfinished line), so the
    text is copied once, and a piece stays valid while a thread scans it. The buffers are
    anonymous maps: unlike a ``bytearray`` they are not zero-filled up front, so a small file
    does not pay for writing 32 MiB. ``size`` None: the chunk size, 32 MiB."""
    size = size or _CHUNK
    with open(path, "rb") as handle:
        gzipped = handle.read(2) == _GZIP_MAGIC
        handle.seek(0)
        source = _Pieces(_gunzip(handle, path, hasher)) if gzipped else _Hashed(handle, hasher)
        carry = b""
        while True:
            buffer = mmap.mmap(-1, len(carry) + size)
            buffer[: len(carry)] = carry
            filled = len(carry) + source.readinto(memoryview(buffer)[len(carry) :])
            if filled == len(carry):  # end of the text
                if carry:
                    yield np.frombuffer(carry, dtype=np.uint8)
                return
            cut = buffer.rfind(b"\n", 0, filled) + 1
            if cut == 0:  # no LF: cut after a lone CR that is not the last byte
                cut = buffer.rfind(b"\r", 0, filled - 1) + 1
            if cut == 0:
                if filled > 4 * _CHUNK:
                    raise ValueError(f"{path}: a line longer than {4 * _CHUNK >> 20} MiB")
                carry = bytes(buffer[:filled])
                continue
            yield np.frombuffer(buffer, dtype=np.uint8, count=cut)
            carry = bytes(buffer[cut:filled])


class _Hashed:
    """``readinto`` of a file that also feeds what it reads to ``hasher``."""

    def __init__(self, handle, hasher):
        self.handle, self.hasher = handle, hasher

    def readinto(self, view: memoryview) -> int:
        size = self.handle.readinto(view)
        if self.hasher is not None:
            self.hasher.update(view[:size])
        return size


class _Pieces:
    """``readinto`` over an iterator of byte pieces (the gunzipped text)."""

    def __init__(self, pieces: Iterator[bytes]):
        self.pieces, self.pending = pieces, memoryview(b"")

    def readinto(self, view: memoryview) -> int:
        filled = 0
        while filled < len(view):
            if not self.pending:
                piece = next(self.pieces, None)
                if piece is None:
                    break
                self.pending = memoryview(piece)
            size = min(len(self.pending), len(view) - filled)
            view[filled : filled + size] = self.pending[:size]
            self.pending, filled = self.pending[size:], filled + size
        return filled


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


def _count_chunk(chunk: np.ndarray) -> tuple[np.ndarray, None]:
    return lt.scan(chunk, False, *_EMPTY, lt.POW10), None


_EMPTY = (
    np.zeros((0, 0), np.float32),
    np.zeros(0, np.uint8),
    *(np.zeros(0, np.int64),) * 6,
    np.zeros(0, bool),
)


def _scan_all(
    path: Path, scan_chunk=_count_chunk, on_done=None, hasher=None, width_guessed=False
) -> list[np.ndarray]:
    """Run ``scan_chunk(chunk) -> (result, outputs)`` over every chunk in two threads;
    ``on_done(number, chunk, result, outputs)`` sees each chunk, in order, once its scan is
    done (then the chunk is dropped, so at most a few chunks of text are held). Returns the
    per-chunk result vectors. The first chunk (in order) with an error raises it;
    ``width_guessed``: a row wider than the fill's arrays raises :class:`_WiderThanGuess`."""
    workers = max(1, min(2, os.cpu_count() or 1))
    results: list[np.ndarray] = []
    pending: list[tuple[int, np.ndarray, Future]] = []  # (number, chunk, its scan)

    def finish():
        number, chunk, future = pending.pop(0)
        result, outputs = future.result()
        results.append(result)
        _raise_scan_error(path, results, width_guessed)
        if on_done is not None:
            on_done(number, chunk, result, outputs)

    with ThreadPoolExecutor(workers) as pool:
        for number, chunk in enumerate(_chunks(path, hasher)):
            pending.append((number, chunk, pool.submit(scan_chunk, chunk)))
            if len(pending) > workers:
                finish()
        while pending:
            finish()
    return results


class _WiderThanGuess(Exception):
    """A single-pass fill met a feature index beyond the width it was given."""


def _raise_scan_error(path: Path, results: list[np.ndarray], width_guessed=False) -> None:
    last = results[-1]
    if last[lt.R_ERROR] == lt.OK:
        return
    if width_guessed and last[lt.R_ERROR] == lt.CHANGED:
        raise _WiderThanGuess
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
    """One scan per chunk, each into its own arrays, appended in order to the cache entry. The
    width (largest feature index) is taken from the first chunk; should a later line be wider,
    every chunk is counted first and the scan repeated at the true width."""
    first, covered = _scan_prefix(path)
    _check_dense_fits(path, _estimated_rows(path, first, covered), int(first[lt.R_MAX_INDEX]), root)
    folder = cache.new_entry(root)
    hasher = hashlib.sha256()
    try:
        try:
            arrays, meta = _fill(path, folder, int(first[lt.R_MAX_INDEX]), hasher, guessed=True)
        except _WiderThanGuess:
            counts = _scan_all(path)
            width = max(int(r[lt.R_MAX_INDEX]) for r in counts)
            _check_dense_fits(path, sum(int(r[lt.R_ROWS]) for r in counts), width, root)
            hasher = hashlib.sha256()  # of the bytes the rows come from
            arrays, meta = _fill(path, folder, width, hasher, guessed=False)
    except BaseException:
        if folder is not None:
            shutil.rmtree(folder, ignore_errors=True)
        raise
    stat = path.stat()
    meta.update(
        version=_CACHE_VERSION,
        source=str(path.resolve()),
        size=stat.st_size,
        mtime_ns=stat.st_mtime_ns,
        sha256=hasher.hexdigest(),
    )
    loaded = cache.commit(
        folder, entry, arrays, meta, _shapes, same=lambda old: old.get("sha256") == meta["sha256"]
    )
    if loaded is None:
        return LetorFile(path=path, meta=meta, **arrays)
    return LetorFile(path=path, meta=loaded[1], **loaded[0])


def _scan_prefix(path: Path, size: int | None = None) -> tuple[np.ndarray, int]:
    """The counting scan of the file's first chunk, or of its first ``size`` bytes or so of
    whole lines (its errors raised; they lie in the first chunk too), and how many bytes of
    text it covered."""
    chunk = _text_prefix(path, size) if size else None
    if chunk is None:
        chunk = next(_chunks(path), np.zeros(0, np.uint8))
    result = lt.scan(chunk, False, *_EMPTY, lt.POW10)
    _raise_scan_error(path, [result])
    return result, len(chunk)


def _text_prefix(path: Path, size: int) -> np.ndarray | None:
    """The first ``size`` bytes of text or so, cut after a line end (all of a shorter text),
    decompressing no more than that; ``None`` when they hold no line end or the gzip data is
    damaged (the first chunk then reports it)."""
    with open(path, "rb") as handle:
        gzipped = handle.read(2) == _GZIP_MAGIC
    try:
        with (gzip.open if gzipped else open)(path, "rb") as handle:
            text = handle.read(size + 1)
    except (OSError, EOFError, zlib.error):
        return None
    if len(text) <= size:
        return np.frombuffer(text, np.uint8)
    cut = max(text.rfind(b"\n"), text.rfind(b"\r", 0, len(text) - 1)) + 1
    return np.frombuffer(text, np.uint8, count=cut) if cut else None


def _fill(path: Path, folder: Path | None, width: int, hasher, guessed: bool) -> tuple[dict, dict]:
    """Scan every chunk once into chunk-sized arrays (rows and NULLs bounded by
    :func:`letor_text.capacity`, ``width`` features) and append them in order: the features
    to the entry's ``features.npy`` (or to memory without a cache folder), the rest to lists
    joined at the end. A row wider than ``width`` raises :class:`_WiderThanGuess` when the
    width was ``guessed``, else it means the file changed since it was counted (an error)."""

    def scan_chunk(chunk):
        rows, nulls = lt.capacity(chunk)
        outputs = (
            np.zeros((rows, width), np.float32),
            np.zeros(rows, np.uint8),
            *(np.zeros(rows, np.int64) for _ in range(4)),  # qids, lines, doc start, doc end
            *(np.zeros(nulls, np.int64) for _ in range(2)),  # null rows, null columns
            np.zeros(width, bool),
        )
        return lt.scan(chunk, True, *outputs, lt.POW10), outputs

    features = _FeatureAppender(folder, width)
    names = ("labels", "qids", "line_numbers", "null_rows", "null_cols")
    parts: dict[str, list[np.ndarray]] = {name: [] for name in names}
    present = np.zeros(width, bool)
    docids: list[np.ndarray] = []
    doc_lengths: list[np.ndarray] = []
    state = {"rows": 0, "lines": 0, "nonfinite": 0, "nonfinite_line": 0, "nonfinite_col": 0}
    nonfinite_value = {"first": 0.0}  # the first non-finite feature value, as the file holds it

    def done(number, chunk, result, outputs):
        rows, nulls = int(result[lt.R_ROWS]), int(result[lt.R_NULLS])
        block, labels, qids, lines, doc_start, doc_end, null_rows, null_cols, seen = outputs
        features.append(block[:rows])
        parts["labels"].append(labels[:rows])
        parts["qids"].append(qids[:rows])
        parts["line_numbers"].append(lines[:rows] + state["lines"])
        parts["null_rows"].append(null_rows[:nulls] + state["rows"])
        parts["null_cols"].append(null_cols[:nulls])
        present[:] |= seen
        docids.append(_gather_spans(chunk, doc_start[:rows], doc_end[:rows]))
        doc_lengths.append(doc_end[:rows] - doc_start[:rows])
        if result[lt.R_NONFINITE] and not state["nonfinite"]:
            state["nonfinite_line"] = state["lines"] + int(result[lt.R_NONFINITE_LINE])
            state["nonfinite_col"] = int(result[lt.R_NONFINITE_COL])
            bits = result[lt.R_NONFINITE_BITS : lt.R_NONFINITE_BITS + 1]
            nonfinite_value["first"] = float(bits.view(np.float64)[0])
        state["nonfinite"] += int(result[lt.R_NONFINITE])
        state["rows"] += rows
        state["lines"] += int(result[lt.R_LINES])

    try:
        _scan_all(path, scan_chunk, done, hasher, width_guessed=guessed)
        if state["rows"] == 0:
            raise ValueError(f"{path}: empty file (no data lines)")
        _check_dense_fits(path, state["rows"], width, None)
    except BaseException:
        features.discard()
        raise
    arrays = {name: np.concatenate(values) for name, values in parts.items()}
    lengths = np.concatenate(doc_lengths)
    arrays.update(
        features=features.finish(),
        present=present,
        docid_offsets=np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64),
        docid_bytes=np.concatenate(docids),
    )
    meta = {
        "rows": state["rows"],
        "features": width,
        "nulls": len(arrays["null_rows"]),
        "docid_bytes": int(lengths.sum()),
        "nonfinite": state["nonfinite"],
        "nonfinite_line": state["nonfinite_line"],
        "nonfinite_feature": state["nonfinite_col"],
        "nonfinite_value": nonfinite_value["first"],
    }
    return arrays, meta


class _FeatureAppender:
    """float32 [rows, width] written block by block: into ``folder/features.npy`` (the header,
    which holds the row count, is written last over a reserved first block of bytes), or
    joined in memory when there is no cache folder."""

    HEADER_BYTES = 128  # a multiple of 64, as numpy aligns it; fits any (rows, width) header

    def __init__(self, folder: Path | None, width: int):
        self.width, self.rows = width, 0
        self.blocks: list[np.ndarray] = []  # joined in memory (no cache folder)
        self.handle = None if folder is None else open(folder / "features.npy", "wb")
        if self.handle is not None:
            self.handle.write(bytes(self.HEADER_BYTES))

    def append(self, block: np.ndarray) -> None:
        self.rows += len(block)
        if self.handle is None:
            self.blocks.append(block)
        else:
            self.handle.write(np.ascontiguousarray(block).data)

    def discard(self) -> None:
        if self.handle is not None:
            self.handle.close()
            Path(self.handle.name).unlink()

    def finish(self) -> np.ndarray:
        if self.handle is None:
            if not self.blocks:
                return np.zeros((0, self.width), np.float32)
            return np.concatenate(self.blocks)
        header = repr({"descr": "<f4", "fortran_order": False, "shape": (self.rows, self.width)})
        body = header.ljust(self.HEADER_BYTES - 11) + "\n"  # magic 6, version 2, length 2
        self.handle.seek(0)
        self.handle.write(b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body.encode())
        self.handle.flush()
        os.fsync(self.handle.fileno())  # on disk before the entry is renamed into place
        self.handle.close()
        return np.load(self.handle.name, mmap_mode="r")


def _gather_spans(chunk: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """``chunk[start[i]:end[i]]`` for every i, concatenated (vectorised)."""
    lengths = end - start
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.uint8)
    shift = np.repeat(start - np.concatenate([[0], np.cumsum(lengths)[:-1]]), lengths)
    return chunk[np.arange(total) + shift]


def _check_dense_fits(path: Path, n_rows: int, n_features: int, cache_root: Path | None) -> None:
    """One file's dense matrix, its rows' bookkeeping and its parse buffers against the budget
    (its disk part, the matrix, only while ``cache_root`` is given: once counted, the bytes are
    already written)."""
    matrix = 4 * n_rows * n_features
    need = matrix + n_rows * _ROW_BYTES + _parse_buffer_bytes(path, n_rows, n_features)
    subject = (
        f"{path}: {n_rows} rows x {n_features} features as a dense float32 matrix, with the "
        "rows' bookkeeping and the parse buffers,"
    )
    _check_budget(subject, need, matrix if cache_root else 0, cache_root or path.parent)


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


def file_sha256(path: Path) -> str:
    """The sha256 of a file's bytes, read in chunks (never the whole file at once)."""
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
