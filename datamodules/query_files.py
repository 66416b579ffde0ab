"""Query-file data (LightGBM's convention) as LETOR parts: ``data.format=query_files``.

Public API::

    letor_parts(root, *, cache_dir=None) -> Path      # S1..S5.txt + folds.tsv, built once
    find_sources(root) -> [(data file, .query file)]  # the files read, in name order
    in_source_terms(error, parts_dir) -> ValueError   # a part's file:line as the source's
    N_PARTS, SPLIT_SEED, QID_STRIDE

The source rows are ``<label> <index>:<value> ... [# comment]`` **without** ``qid:``; line i of
``<data file>.query`` is the number of consecutive rows of query i (LightGBM's "query data").
Such a set has no folds, so the queries of all its files are pooled, shuffled by query with
``SPLIT_SEED``, cut into ``N_PARTS`` parts and rotated like LETOR's folds (fold k: test part k,
validation part k+1, training the other three; ``docs/data.md#query-file-data``). Each row is
copied as text, with ``qid:<f·QID_STRIDE + i>`` (query i of the f-th data file in name order,
both 1-based) inserted after the label and ``# <data file>:<line>`` appended when the row has no
comment, so values are not reformatted and every row names its source line. The parts live in
``<cache>/query_files/<key>/``, keyed by the sha256 of every source file, so a changed source
builds new parts; the source folder is only read. ``source.json`` beside them records each
part's row count and sha256: parts that no longer match it (cut, edited, missing) are never
served but built again, with a warning.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import re
import shutil
import tempfile
from pathlib import Path

import numpy as np

from differank.datamodules.reader import default_cache_dir

log = logging.getLogger(__name__)

N_PARTS = 5
SPLIT_SEED = 0
QID_STRIDE = 10**9  # qid = f * QID_STRIDE + i: fold-independent, and f is readable from it
# Bump when the parts' content or layout changes for the same sources.
_VERSION = 2  # 2: source.json records each part's rows and sha256
# Names of data files (a ".gz" may follow): LightGBM's rank.train / rank.test, or x.txt.
_DATA_SUFFIXES = (".train", ".test", ".vali", ".valid", ".txt")
_DOCUMENTATION = re.compile(r"(readme|license|licence|copying)", re.IGNORECASE)
_QID = re.compile(rb"qid:", re.IGNORECASE)
_BLANKS = re.compile(rb"[ \t]+")
_GROUP_SIZE = re.compile(rb"[0-9]+")  # ASCII digits only: str.isdigit() also takes '²' and '٣'


def _is_data_name(name: str) -> bool:
    stem = name[:-3] if name.endswith(".gz") else name
    return stem.endswith(_DATA_SUFFIXES) and not _DOCUMENTATION.match(stem)


def find_sources(root) -> list[tuple[Path, Path]]:
    """Each data file of ``root`` with its ``.query`` file, in name order: every
    ``<name>.query`` names the data file ``<name>`` or ``<name>.gz``; a file named like data
    (``*.train``, ``*.test``, ``*.vali``, ``*.valid``, ``*.txt``, optionally ``.gz``; not a
    README or licence) without a ``.query`` file is an error."""
    root = Path(root).expanduser()
    if not root.is_dir():
        raise FileNotFoundError(f"query-file data directory does not exist: {root}")
    files = {p.name: p for p in root.iterdir() if p.is_file() and not p.name.startswith(".")}
    sources = []
    for name in sorted(files):
        if not name.endswith(".query"):
            continue
        stem = name[: -len(".query")]
        found = [files[n] for n in (stem, stem + ".gz") if n in files]
        if len(found) == 2:
            raise ValueError(
                f"ambiguous data file for {files[name]}: both {found[0]} and {found[1]} exist; "
                "remove one of them"
            )
        if not found:
            raise FileNotFoundError(
                f"{files[name]} has no data file: expected {root / stem} or {root / stem}.gz"
            )
        sources.append((found[0], files[name]))
    paired = {data.name for data, _ in sources}
    for name in sorted(files):
        if _is_data_name(name) and name not in paired:
            stem = name[:-3] if name.endswith(".gz") else name
            raise FileNotFoundError(
                f"{files[name]} has no query file {root / stem}.query: with data.format="
                "query_files every data file needs one (line i = the number of consecutive "
                "rows of query i); use data.format=letor for files whose rows carry qid:"
            )
    if not sources:
        raise FileNotFoundError(
            f"{root} holds no query-file data: data.format=query_files reads <name> (or "
            "<name>.gz) with <name>.query beside it; use data.format=letor for a LETOR folder"
        )
    return sources


def _group_sizes(path: Path) -> list[int]:
    sizes = []
    for number, line in enumerate(path.read_bytes().splitlines(), start=1):
        text = line.strip()
        if not text:
            continue
        if not _GROUP_SIZE.fullmatch(text) or int(text) < 1:
            raise ValueError(
                f"{path}:{number}: {_shown(text)} is not a group size (one integer >= 1 per "
                "line, in ASCII digits 0-9)"
            )
        sizes.append(int(text))
    if not sizes:
        raise ValueError(f"{path}: no group size; write one integer >= 1 per line")
    return sizes


def _shown(text: bytes) -> str:
    """A line's bytes as an error shows them: the text, or the first byte that is not UTF-8."""
    try:
        return repr(text.decode("utf-8"))
    except UnicodeDecodeError as error:
        return f"byte 0x{text[error.start]:02x} (not UTF-8 text) in {text[:40]!r}"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _rows_and_sha256(path: Path) -> tuple[int, str]:
    """A part's row count (its lines: every row ends with a newline) and sha256."""
    digest, rows = hashlib.sha256(), 0
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
            rows += block.count(b"\n")
    return rows, digest.hexdigest()


def _open(path: Path):
    with open(path, "rb") as handle:
        gzipped = handle.read(2) == b"\x1f\x8b"
    return gzip.open(path, "rb") if gzipped else open(path, "rb")


def query_parts(n_queries: int) -> np.ndarray:
    """int64 [n_queries]: the part (0-based) of each pooled query: a permutation by
    ``SPLIT_SEED`` cut into ``N_PARTS`` parts whose sizes differ by at most one."""
    if n_queries < N_PARTS:
        raise ValueError(f"{n_queries} queries cannot fill {N_PARTS} parts; at least {N_PARTS}")
    order = np.random.default_rng(SPLIT_SEED).permutation(n_queries)
    part = np.empty(n_queries, dtype=np.int64)
    for index, members in enumerate(np.array_split(order, N_PARTS)):
        part[members] = index
    return part


def folds_table() -> str:
    """``folds.tsv`` of the rotation: fold k tests part k, validates on part k+1 and trains on
    the other three (cyclic order)."""
    rows = ["fold\ttrain\tvali\ttest"]
    for k in range(N_PARTS):
        name = [f"S{(k + shift) % N_PARTS + 1}" for shift in range(N_PARTS)]
        rows.append(f"Fold{k + 1}\t{','.join(name[2:])}\t{name[1]}\t{name[0]}")
    return "\n".join(rows) + "\n"


def _write_parts(sources: list[tuple[Path, Path]], folder: Path) -> dict:
    """Copy every row into its part file; returns the counts for the manifest."""
    sizes = [_group_sizes(query) for _, query in sources]
    part_of = query_parts(sum(len(s) for s in sizes))
    outputs = [open(folder / f"S{k + 1}.txt", "wb") for k in range(N_PARTS)]
    first_query = 0
    try:
        for number, ((data, query), groups) in enumerate(zip(sources, sizes, strict=True), 1):
            if len(groups) >= QID_STRIDE:
                raise ValueError(f"{query}: more than {QID_STRIDE - 1} queries in one file")
            ends = np.cumsum(groups)
            group, row = 0, 0
            with _open(data) as handle:
                for line_number, raw in enumerate(handle, start=1):
                    line = raw.rstrip(b"\r\n")
                    text = line.strip()
                    if not text or text.startswith(b"#"):  # no row (the reader's rule)
                        continue
                    label, rest = (_BLANKS.split(text, maxsplit=1) + [b""])[:2]
                    if _QID.match(rest):
                        raise ValueError(
                            f"{data}:{line_number}: the row has a qid, but data.format="
                            f"query_files takes rows without qid (groups from {query.name}); "
                            "for files with qid: use data.format=letor"
                        )
                    if row == ends[-1]:
                        raise ValueError(
                            f"{data}:{line_number}: row {row + 1}, but {query} lists "
                            f"{len(groups)} queries of {row} rows in all; the group sizes "
                            "must sum to the number of rows (fix the .query file or the data)"
                        )
                    while row == ends[group]:
                        group += 1
                    qid = number * QID_STRIDE + group + 1
                    where = b"" if b"#" in rest else f" # {data.name}:{line_number}".encode()
                    out = outputs[part_of[first_query + group]]
                    out.write(label + b" qid:%d " % qid + rest + where + b"\n")
                    row += 1
            if row != ends[-1]:
                raise ValueError(
                    f"{data}: {row} rows, but {query} lists {len(groups)} queries of "
                    f"{int(ends[-1])} rows in all; the group sizes must sum to the number of "
                    "rows (fix the .query file or the data)"
                )
            first_query += len(groups)
    finally:
        for out in outputs:
            out.close()
    return {
        "queries": [len(g) for g in sizes],
        "rows": [int(sum(g)) for g in sizes],
        "part_queries": np.bincount(part_of, minlength=N_PARTS).tolist(),
    }


def letor_parts(root, *, cache_dir=None) -> Path:
    """The folder of LETOR parts ``S1..S5.txt`` + ``folds.tsv`` built from the query-file data
    in ``root`` (once per content: reused while every source file hashes the same)."""
    root = Path(root).expanduser()
    sources = find_sources(root)
    manifest = {
        "version": _VERSION,
        "parts": N_PARTS,
        "split_seed": SPLIT_SEED,
        "qid_stride": QID_STRIDE,
        "sources": [[d.name, _sha256(d), q.name, _sha256(q)] for d, q in sources],
    }
    key = hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()[:32]
    target = Path(cache_dir or default_cache_dir()).expanduser() / "query_files" / key
    if target.exists():
        damage = _damage(target)
        if damage is None:
            return target
        log.warning("cached parts %s: %s; building the parts again from %s", target, damage, root)
        _discard(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Built in a sibling temporary folder and renamed: no process ever sees half the parts.
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=f".{key}-"))
    try:
        counts = _write_parts(sources, tmp)
        (tmp / "folds.tsv").write_text(folds_table())
        parts = [_rows_and_sha256(tmp / f"S{k + 1}.txt") for k in range(N_PARTS)]
        record = {
            **manifest,
            "root": str(root.absolute()),
            **counts,
            "part_rows": [rows for rows, _ in parts],
            "part_sha256": [digest for _, digest in parts],
        }
        (tmp / "source.json").write_text(json.dumps(record, indent=1) + "\n")
        os.replace(tmp, target)
    except OSError:
        if not (target / "source.json").is_file():
            raise
    finally:
        if tmp.exists():  # a failed build, or another process renamed its equal parts first
            shutil.rmtree(tmp, ignore_errors=True)
    return target


def _damage(folder: Path) -> str | None:
    """Why the cached parts in ``folder`` differ from what ``source.json`` records (None: they
    are as built)."""
    try:
        record = json.loads((folder / "source.json").read_text())
        expected = list(zip(record["part_rows"], record["part_sha256"], strict=True))
    except (OSError, ValueError, KeyError, TypeError) as error:
        return f"source.json is missing or damaged ({type(error).__name__}: {error})"
    if len(expected) != N_PARTS:
        return f"source.json records {len(expected)} parts, not {N_PARTS}"
    for k, (rows, digest) in enumerate(expected, start=1):
        name = f"S{k}.txt"
        try:
            found_rows, found_digest = _rows_and_sha256(folder / name)
        except OSError as error:
            return f"{name} cannot be read ({error})"
        if found_rows != rows:
            return f"{name} holds {found_rows} rows, source.json {rows}"
        if found_digest != digest:
            return f"{name} does not have the sha256 in source.json"
    return None


def _discard(folder: Path) -> None:
    """Remove damaged parts: renamed aside first (atomic), so no reader sees them half gone."""
    aside = Path(tempfile.mkdtemp(dir=folder.parent, prefix=f".{folder.name}-damaged-"))
    try:
        os.replace(folder, aside)  # onto the empty folder just made: allowed on POSIX
    except FileNotFoundError:  # another process discarded them first
        pass
    shutil.rmtree(aside, ignore_errors=True)


_LOCATION = re.compile(r"^(?P<path>.+?):(?P<line>\d+): (?P<rest>.*)$", re.DOTALL)


def in_source_terms(error: ValueError, parts_dir: Path) -> ValueError:
    """``error`` with a part's ``file:line`` replaced by the source file and line that the
    row came from (its ``# <data file>:<line>`` comment); unchanged when it names no part
    line."""
    match = _LOCATION.match(str(error))
    if not match or Path(match["path"]).parent != parts_dir:
        return error
    line = int(match["line"])
    with open(match["path"], "rb") as handle:
        for number, raw in enumerate(handle, start=1):
            if number == line:
                source = raw.rstrip(b"\r\n").rpartition(b"# ")[2].decode("utf-8", "replace")
                break
        else:
            return error
    name, _, source_line = source.rpartition(":")
    record = json.loads((parts_dir / "source.json").read_text())
    if not source_line.isdigit() or name not in {data for data, *_ in record["sources"]}:
        return error  # the row kept a comment of its own: no source line to name
    return ValueError(f"{Path(record['root']) / name}:{source_line}: {match['rest']}")
