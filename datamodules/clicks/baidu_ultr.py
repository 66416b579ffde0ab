"""The public Baidu-ULTR click subsets as a Parquet click log (docs/clicks.md#baidu-ultr).

The layout read is that of the ``clicks`` configuration of the Hugging Face datasets
``philipphager/baidu-ultr_baidu-mlm-ctr`` and ``philipphager/baidu-ultr_uva-mlm-ctr`` (their
loading script's version 0.1.0; the subsets of Hager et al., SIGIR 2024, "Unbiased Learning to
Rank Meets Reality: Lessons from Baidu's Large-Scale Search Dataset"): Feather (Arrow IPC) or
Parquet files of ONE ROW PER SESSION, whose per-document fields are lists in shown order:

=========================================  =======================  =============================
column                                     type                     read as
=========================================  =======================  =============================
``query_id``                               string (an integer)      ``qid``
``position``                               list of int32, 1-based   ``position`` (1..L in order)
``click``                                  list of int32            ``click``
``bm25``, ``title_bm25``, ...  (below)     list of float32 each     ``features``, in that order
a dwell column, when asked                 list of numbers          ``dwell``
=========================================  =======================  =============================

The default features are the subsets' twelve precomputed lexical ones (:data:`LTR_FEATURES`):
bm25, title_bm25, abstract_bm25, tf_idf, tf, idf, ql_jelinek_mercer_short,
ql_jelinek_mercer_long, ql_dirichlet, document_length, title_length, abstract_length. The other
columns (``query_md5``, ``url_md5``, ``text_md5``, ``query_document_embedding``,
``media_type``, ``displayed_time``, ``serp_height``, ``slipoff_count_after_click``) are not
read; the subsets' click files carry no dwell time (``displayed_time`` is how long a document
was on screen, not a dwell), so ``dwell`` is written only from a column named with
``dwell_column``. Sessions are numbered 0, 1, 2, ... in the order of the files and their rows.

Each source file is read one record batch at a time (only the columns used), and each batch
becomes one row group of the output: memory stays that of one batch, whatever the subset's
size. Every rule is checked as the rows are converted, naming the source file and its row (a
query id that is not an integer, lists of different lengths in one session, positions that
are not 1..L, a click that is not 0/1, a null).

Public API::

    convert_baidu_ultr(sources, output, *, features=LTR_FEATURES, dwell_column=None,
                       overwrite=False) -> Path
    python -m differank.datamodules.clicks.baidu_ultr OUTPUT SOURCE [SOURCE ...]
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np

from differank.datamodules.clicks.click_log import ClickLogError
from differank.datamodules.clicks.parquet_log import ClickLogWriter
from differank.datamodules.parquet import _pyarrow
from differank.datamodules.regular_files import require_regular_file

LTR_FEATURES = (
    "bm25",
    "title_bm25",
    "abstract_bm25",
    "tf_idf",
    "tf",
    "idf",
    "ql_jelinek_mercer_short",
    "ql_jelinek_mercer_long",
    "ql_dirichlet",
    "document_length",
    "title_length",
    "abstract_length",
)
_ARROW_MAGIC, _PARQUET_MAGIC = b"ARROW1", b"PAR1"
_PARQUET_BATCH_ROWS = 4096  # sessions per record batch read from a Parquet source


def _batches(path: Path, columns: list[str]) -> Iterator:
    """The record batches of ``path`` (Feather v2 / Arrow IPC or Parquet, told by its first
    bytes), with only ``columns``; a missing column is refused naming the file."""
    pa, pq = _pyarrow()
    with open(path, "rb") as handle:
        magic = handle.read(6)
    if magic.startswith(_PARQUET_MAGIC):
        source = pq.ParquetFile(path)
        names = source.schema_arrow.names
        _require_columns(path, names, columns)
        yield from source.iter_batches(batch_size=_PARQUET_BATCH_ROWS, columns=columns)
    elif magic == _ARROW_MAGIC:
        import pyarrow.ipc

        with pa.memory_map(str(path)) as mapped:
            names = pyarrow.ipc.open_file(mapped).schema.names
            _require_columns(path, names, columns)
            fields = [names.index(name) for name in columns]
            options = pyarrow.ipc.IpcReadOptions(included_fields=fields)
            reader = pyarrow.ipc.open_file(mapped, options=options)
            for index in range(reader.num_record_batches):
                yield reader.get_batch(index)
    else:
        raise ClickLogError(
            f"{path}: neither a Feather (Arrow IPC) nor a Parquet file (it starts with "
            f"{magic!r}); the Baidu-ULTR subsets are .feather or .parquet files"
        )


def _require_columns(path: Path, names: list[str], columns: list[str]) -> None:
    missing = [name for name in columns if name not in names]
    if missing:
        raise ClickLogError(
            f"{path}: no column(s) {missing} (columns: {names}); the Baidu-ULTR click layout "
            "has query_id, position, click and the feature lists (docs/clicks.md#baidu-ultr)"
        )


class _Source:
    """Names a session row of one source file in an error."""

    def __init__(self, path: Path) -> None:
        self.path, self.first_row = path, 0

    def fail(self, row: int, message: str):
        raise ClickLogError(f"{self.path}: row {self.first_row + row} (a session): {message}")


def _lists(pa, batch, name: str, lengths: np.ndarray | None, source: _Source):
    """A list column of ``batch`` as (flat values at their stored width, lengths); a null list
    or a length other than ``lengths`` is refused naming the session row."""
    column = batch.column(batch.schema.get_field_index(name))
    if not (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
        raise ClickLogError(f"{source.path}: column {name!r} has type {column.type}, not a list")
    if column.null_count:
        source.fail(int(np.flatnonzero(np.asarray(column.is_null()))[0]), f"{name} is null")
    own = np.asarray(column.value_lengths(), dtype=np.int64)
    if lengths is not None and (own != lengths).any():
        row = int(np.argmax(own != lengths))
        source.fail(row, f"{name} holds {own[row]} values, position {lengths[row]}")
    values = column.flatten()
    if values.null_count:
        cell = int(np.flatnonzero(np.asarray(values.is_null()))[0])
        source.fail(int(np.searchsorted(np.cumsum(own), cell, side="right")), f"null in {name}")
    return values.to_numpy(zero_copy_only=False), own


def _query_ids(batch, source: _Source) -> np.ndarray:
    """``query_id`` (the subsets' integers as text, or integers) as int64."""
    column = batch.column(batch.schema.get_field_index("query_id"))
    texts = column.to_pylist()
    ids = np.zeros(len(texts), np.int64)
    for row, text in enumerate(texts):
        value = str(text).strip() if text is not None else ""
        if not value.isdigit() or int(value) > np.iinfo(np.int64).max:
            source.fail(row, f"query_id {text!r} is not an integer 0..2^63 - 1")
        ids[row] = int(value)
    return ids


def convert_baidu_ultr(
    sources: Sequence[str | Path],
    output: str | Path,
    *,
    features: Sequence[str] = LTR_FEATURES,
    dwell_column: str | None = None,
    overwrite: bool = False,
) -> Path:
    """The sessions of the Baidu-ULTR click files ``sources`` (module docstring) as one Parquet
    click log at ``output`` (whole or absent; an existing file is refused unless
    ``overwrite``)."""
    pa, _ = _pyarrow()
    features = list(features)
    if not features:
        raise ValueError("features: name at least one feature list column (e.g. LTR_FEATURES)")
    columns = ["query_id", "position", "click", *features]
    if dwell_column is not None:
        columns.append(dwell_column)
    with ClickLogWriter(
        output,
        "features",
        n_features=len(features),
        with_dwell=dwell_column is not None,
        overwrite=overwrite,
    ) as writer:
        session = 0
        for path in sources:
            path = require_regular_file(Path(path).expanduser(), "a Baidu-ULTR click file")
            source = _Source(path)
            for batch in _batches(path, columns):
                if batch.num_rows == 0:
                    continue
                position, lengths = _lists(pa, batch, "position", None, source)
                if (lengths == 0).any():
                    source.fail(int(np.argmax(lengths == 0)), "no document shown")
                starts = np.repeat(np.cumsum(lengths) - lengths, lengths)
                expected = np.arange(len(position)) - starts + 1
                if (position != expected).any():
                    cell = int(np.argmax(position != expected))
                    source.fail(
                        int(np.searchsorted(np.cumsum(lengths), cell, side="right")),
                        f"positions {position[starts[cell] : starts[cell] + 12].tolist()}: a "
                        "session's positions must be 1, 2, ..., L in the order shown",
                    )
                click, _ = _lists(pa, batch, "click", lengths, source)
                values = [_lists(pa, batch, name, lengths, source)[0] for name in features]
                row_session = np.repeat(np.arange(session, session + batch.num_rows), lengths)
                dwell = None
                if dwell_column is not None:
                    dwell = _lists(pa, batch, dwell_column, lengths, source)[0]
                try:
                    writer.write(
                        session=row_session,
                        qid=np.repeat(_query_ids(batch, source), lengths),
                        position=position,
                        click=click,
                        dwell=dwell,
                        features=np.stack(values, axis=1).astype(np.float32),
                    )
                except ClickLogError as error:  # the writer's rules: name the source's rows too
                    raise ClickLogError(
                        f"{path}, the {batch.num_rows} sessions from row {source.first_row} "
                        f"(sessions {session}.. of the log): {error}"
                    ) from error
                session += batch.num_rows
                source.first_row += batch.num_rows
    return Path(output)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description="Convert Baidu-ULTR click files (one row per session, list columns) to a "
        "differank Parquet click log (docs/clicks.md#baidu-ultr)."
    )
    parser.add_argument("output", help="the Parquet click log to write")
    parser.add_argument("sources", nargs="+", help="the subset's .feather or .parquet files")
    parser.add_argument("--dwell-column", default=None, help="a list column of dwell times")
    parser.add_argument("--overwrite", action="store_true", help="replace an existing output")
    args = parser.parse_args(argv)
    path = convert_baidu_ultr(
        args.sources, args.output, dwell_column=args.dwell_column, overwrite=args.overwrite
    )
    print(path)


if __name__ == "__main__":
    main()
