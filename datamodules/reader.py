"""Read one LETOR / SVMlight text file into arrays, with validation and an on-disk cache.

Public API::

    read_letor_file(path, *, nan_policy="error", null_value=None, label_range=None,
                    cache_dir=None) -> LetorFile
    write_letor(path, features, labels, qids, docids=None, *, float_format="%.9g")
    default_cache_dir() -> Path          # $DIFFERANK_CACHE or ~/.cache/differank

A line is ``<label> qid:<int> <index>:<value> ... [# comment]`` with 1-based feature indices.
Values are parsed by scikit-learn's C parser (``load_svmlight_file(..., query_id=True)``);
comments (which sklearn drops) are read by a light pass over the lines to keep doc ids.
Every error names the file and the 1-based line number. ``.gz`` files (detected by their
magic bytes) are read transparently. Parsed arrays are cached in ``cache_dir`` as ``.npz``,
keyed by the sha256 of the file's bytes and the parse options, so a second read skips parsing.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import logging
import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import scipy.sparse as sp
from sklearn.datasets import load_svmlight_file

log = logging.getLogger(__name__)

NAN_POLICIES = ("error", "allow", "zero")
# Bump when the cached arrays' meaning changes, so old cache entries are never reused.
_CACHE_VERSION = 1
_DOCID = re.compile(rb"docid\s*=\s*(\S+)")
_NULL_TOKEN = re.compile(rb":NULL(?=\s|#|$)")


@dataclass
class LetorFile:
    """The rows of one LETOR file in file order.

    ``features`` is CSR float64 [N, max feature index in this file]; ``labels`` float64 [N];
    ``qids`` int64 [N]; ``docids`` str [N] (the ``docid = X`` value, else the whole comment,
    else ""); ``line_numbers`` int64 [N] (1-based line of each row, for error messages).
    """

    path: Path
    features: sp.csr_matrix
    labels: np.ndarray
    qids: np.ndarray
    docids: np.ndarray
    line_numbers: np.ndarray

    @property
    def num_rows(self) -> int:
        return len(self.labels)

    @property
    def max_feature_index(self) -> int:
        return int(self.features.shape[1])


def default_cache_dir() -> Path:
    """``$DIFFERANK_CACHE`` if set, else ``~/.cache/differank``."""
    env = os.environ.get("DIFFERANK_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "differank"


def check_read_options(nan_policy: str, null_value, label_range) -> tuple:
    """Validate the reader options; returns ``(null_value, label_range)`` normalised."""
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


def read_letor_file(
    path,
    *,
    nan_policy: str = "error",
    null_value: float | None = None,
    label_range=None,
    cache_dir=None,
) -> LetorFile:
    """Parse (or load from cache) and validate one LETOR file.

    Args:
        nan_policy: non-finite feature values: ``"error"`` (default) raises naming file:line,
            ``"allow"`` keeps them, ``"zero"`` replaces them by 0 (and logs how many).
        null_value: LETOR 3.0 ``NULL`` feature values are an error unless this gives the number
            that replaces them before parsing.
        label_range: ``(lo, hi)`` inclusive; default: labels must be finite and >= 0.
        cache_dir: where parsed arrays are cached; ``None`` -> :func:`default_cache_dir`.
    """
    null_value, label_range = check_read_options(nan_policy, null_value, label_range)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"LETOR file not found: {path}")
    raw = path.read_bytes()
    options = {"version": _CACHE_VERSION, "null_value": repr(null_value)}
    key = hashlib.sha256(raw).hexdigest()
    opt_key = hashlib.sha256(json.dumps(options, sort_keys=True).encode()).hexdigest()[:16]
    cache_path = Path(cache_dir or default_cache_dir()) / "letor" / f"{key}-{opt_key}.npz"
    parsed = _load_cached(cache_path, path)
    if parsed is None:
        parsed = parse_letor_bytes(_decompress(raw), path, null_value=null_value)
        _store_cached(cache_path, parsed)
    _validate(parsed, nan_policy=nan_policy, label_range=label_range)
    return parsed


def parse_letor_bytes(text: bytes, path, *, null_value: float | None = None) -> LetorFile:
    """Parse LETOR text (already decompressed); ``path`` only names the source in errors."""
    path = Path(path)
    line_numbers, docids = _scan_rows(text, path, null_value)
    if not line_numbers:
        raise ValueError(f"{path}: empty file (no data lines)")
    to_parse = text
    if null_value is not None:
        to_parse = _NULL_TOKEN.sub(b":" + repr(null_value).encode(), text)
    try:
        features, labels, qids = load_svmlight_file(
            io.BytesIO(to_parse), zero_based=False, query_id=True, dtype=np.float64
        )
    except ValueError as err:
        _raise_first_bad_line(to_parse, path, err)
    if features.shape[0] != len(line_numbers) or len(qids) != len(line_numbers):
        _raise_first_bad_line(to_parse, path, None)
    features = sp.csr_matrix(features, dtype=np.float64)
    return LetorFile(
        path=path,
        features=features,
        labels=np.asarray(labels, dtype=np.float64),
        qids=np.asarray(qids, dtype=np.int64),
        docids=np.asarray(docids, dtype=str),
        line_numbers=np.asarray(line_numbers, dtype=np.int64),
    )


def _decompress(raw: bytes) -> bytes:
    return gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw


def _scan_rows(text: bytes, path: Path, null_value) -> tuple[list[int], list[str]]:
    """Light pass: line number and doc id of every data line; checks ``qid:`` and ``NULL``."""
    line_numbers: list[int] = []
    docids: list[str] = []
    check_null = null_value is None and b"NULL" in text
    for number, line in enumerate(text.split(b"\n"), start=1):
        head, _, comment = line.partition(b"#")
        parts = head.split(None, 2)
        if not parts:
            continue
        if len(parts) < 2 or not parts[1].startswith(b"qid:"):
            raise ValueError(f"{path}:{number}: line has no 'qid:' after the label")
        if check_null and _NULL_TOKEN.search(head):
            raise ValueError(
                f"{path}:{number} has NULL; set null_value=<number> to replace NULL values"
            )
        line_numbers.append(number)
        match = _DOCID.search(comment)
        docids.append((match.group(1) if match else comment.strip()).decode("utf-8", "replace"))
    return line_numbers, docids


def _raise_first_bad_line(text: bytes, path: Path, err: Exception | None):
    """sklearn failed (it does not say where): scan the lines and name the first bad one."""
    for number, line in enumerate(text.split(b"\n"), start=1):
        problem = _line_problem(line.partition(b"#")[0])
        if problem:
            raise ValueError(f"{path}:{number}: {problem}") from err
    raise ValueError(f"{path}: scikit-learn could not parse the file: {err}") from err


def _line_problem(head: bytes) -> str | None:
    """Why one data line is malformed, or None. Mirrors what sklearn's parser accepts."""
    tokens = head.split()
    if not tokens:
        return None
    try:
        float(tokens[0])
    except ValueError:
        return f"label {tokens[0].decode(errors='replace')!r} is not a number"
    if len(tokens) < 2 or not tokens[1].startswith(b"qid:"):
        return "line has no 'qid:' after the label"
    try:
        int(tokens[1][4:])
    except ValueError:
        return f"qid {tokens[1][4:].decode(errors='replace')!r} is not an integer"
    previous = 0
    for token in tokens[2:]:
        index, sep, value = token.partition(b":")
        shown = token.decode(errors="replace")
        if not sep:
            return f"feature {shown!r} is not of the form index:value"
        try:
            idx = int(index)
        except ValueError:
            return f"feature index in {shown!r} is not an integer"
        if idx < 1:
            return f"feature index {idx} in {shown!r}: LETOR indices start at 1"
        if idx <= previous:
            return f"feature indices must be increasing and unique ({idx} after {previous})"
        previous = idx
        try:
            float(value)
        except ValueError:
            return f"feature value in {shown!r} is not a number"
    return None


def _validate(parsed: LetorFile, *, nan_policy: str, label_range) -> None:
    """Post-parse checks on labels and feature values; errors name file:line."""
    labels, lines, path = parsed.labels, parsed.line_numbers, parsed.path
    finite = np.isfinite(labels)
    if not finite.all():
        row = int(np.argmin(finite))
        raise ValueError(f"{path}:{lines[row]}: label {labels[row]} is not finite")
    if label_range is None:
        bad = labels < 0
        what = "labels must be >= 0 (set label_range=(lo, hi) to declare the range)"
    else:
        bad = (labels < label_range[0]) | (labels > label_range[1])
        what = f"outside label_range {label_range}"
    if bad.any():
        row = int(np.argmax(bad))
        raise ValueError(f"{path}:{lines[row]}: label {labels[row]:g} {what}")
    data = parsed.features.data
    nonfinite = ~np.isfinite(data)
    if nonfinite.any() and nan_policy != "allow":
        if nan_policy == "zero":
            log.warning("%s: replaced %d non-finite feature values by 0", path, nonfinite.sum())
            data[nonfinite] = 0.0
            return
        position = int(np.argmax(nonfinite))
        row = int(np.searchsorted(parsed.features.indptr, position, side="right")) - 1
        column = int(parsed.features.indices[position]) + 1
        raise ValueError(
            f"{path}:{lines[row]}: feature {column} is {data[position]} "
            "(set nan_policy='allow' or 'zero' to accept non-finite values)"
        )


def _load_cached(cache_path: Path, path: Path) -> LetorFile | None:
    if not cache_path.is_file():
        return None
    try:
        with np.load(cache_path, allow_pickle=False) as z:
            features = sp.csr_matrix(
                (z["data"], z["indices"], z["indptr"]), shape=tuple(z["shape"])
            )
            return LetorFile(
                path=path,
                features=features,
                labels=z["labels"],
                qids=z["qids"],
                docids=z["docids"],
                line_numbers=z["line_numbers"],
            )
    except Exception as err:  # a corrupt or foreign cache entry: parse again
        log.warning("ignoring unreadable cache entry %s (%s)", cache_path, err)
        return None


def _store_cached(cache_path: Path, parsed: LetorFile) -> None:
    """Write atomically (tmp file + rename) so concurrent runs never read a partial entry."""
    try:
        cache_path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=cache_path.parent, suffix=".tmp.npz")
        with os.fdopen(fd, "wb") as handle:
            np.savez(
                handle,
                data=parsed.features.data,
                indices=parsed.features.indices,
                indptr=parsed.features.indptr,
                shape=np.asarray(parsed.features.shape, dtype=np.int64),
                labels=parsed.labels,
                qids=parsed.qids,
                docids=parsed.docids,
                line_numbers=parsed.line_numbers,
            )
        os.replace(tmp, cache_path)
    except OSError as err:  # an unwritable cache only costs speed
        log.warning("could not write LETOR cache %s (%s)", cache_path, err)


def write_letor(path, features, labels, qids, docids=None, *, float_format: str = "%.9g") -> Path:
    """Write rows as LETOR text: ``<label> qid:<q> 1:<v> ... F:<v> #docid = <id>``.

    ``features`` [N, F] (dense, all F written, 1-based indices), ``labels`` [N], ``qids`` [N] int,
    ``docids`` [N] str or None. A path ending in ``.gz`` is gzip-compressed (mtime 0, so the
    bytes are reproducible). ``"%.9g"`` round-trips float32 exactly. Returns the path.
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
