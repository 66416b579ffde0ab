"""Scoring LETOR rows with a trained scorer and writing what a run writes about them.

Public API::

    read_letor_files(paths, n_features, nan_policy="error", null_value=None) -> LetorSplit
    score_split(scorer, split, batch_size=128) -> float64 [rows]   # in source-file row order
    row_source(split, row) -> "file:line"                           # where a row was read
    prediction_files(out, scores, split, evaluate, ks, convention) -> ({path: text}, metrics)
    write_predictions(out, scores, split, evaluate, ks, convention) -> metrics | None
    metrics_table(values, convention) -> str
    report(run_dir, metrics, weights, convention)                   # the run's log lines
    describe_checkpoint(checkpoint, monitor) -> str                 # which weights scored

:func:`read_letor_files` reads any LETOR files as they are (raw features, no fold layout, no
training split): what ``task=test|predict files=[...]`` scores with the checkpoint's own
feature transform and statistics (a :class:`~differank.rankers.checkpoints.Scorer`).
:func:`write_predictions` writes, under ``out``: ``predictions/test.txt`` (one ``%.17g`` score per
row, what ``Eval-Score-4.0.pl`` reads), ``predictions/test.sources`` (the files, in order),
``predictions/test.run`` (a TREC run) and, when ``evaluate`` (the labels are judgements),
``predictions/test.qrels`` (TREC qrels of the same doc ids) and ``test_metrics.json`` (LETOR 4.0
metrics of the rows in memory: what ``python -m differank.rankers.metrics.evaluate`` gives).
The files are whole or absent: everything is computed first (a NaN score is refused, naming its
row's file and line), then the files are written together
(:func:`~differank.datamodules.atomic_files.write_files`).
"""

from __future__ import annotations

import io
import json
import logging
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
from rich.console import Console
from rich.table import Table
from torch import nn

from differank.datamodules.atomic_files import write_files
from differank.datamodules.letor_split import LetorSplit
from differank.datamodules.reader import group_queries, read_letor_file
from differank.datamodules.split_tensors import SplitTensors
from differank.rankers.run.export import trec_qrels_text, trec_run_text
from differank.rankers.training.row_order import scores_in_row_order

log = logging.getLogger(__name__)


def read_letor_files(
    paths: Sequence[str | Path],
    n_features: int,
    nan_policy: str = "error",
    null_value: float | None = None,
) -> LetorSplit:
    """The rows of ``paths`` in order as one split of raw float32 features [rows,
    ``n_features``] (features a file does not write are 0). A file writing a feature beyond
    ``n_features`` is refused: the model has no weight for it."""
    if isinstance(paths, (str, Path)):
        paths = [paths]
    if not paths:
        raise ValueError("files=[...] must name at least one LETOR file")
    parts = []
    for path in paths:
        part = read_letor_file(Path(path).expanduser())
        part.check_values(nan_policy=nan_policy, null_value=null_value, label_range=None)
        beyond = np.flatnonzero(part.present[n_features:])
        if len(beyond):
            raise ValueError(
                f"{path}: feature {int(beyond[0]) + n_features + 1} is beyond the {n_features} "
                "features the model reads"
            )
        parts.append(part)
    features = np.zeros((sum(p.num_rows for p in parts), n_features), np.float32)
    row = 0
    for part in parts:
        width = min(part.max_feature_index, n_features)
        block = features[row : row + part.num_rows, :width]
        part.copy_rows(block, 0, part.num_rows, nan_policy=nan_policy, null_value=null_value)
        row += part.num_rows
    qids = np.concatenate([p.qids for p in parts])
    query_ids, rows, lengths = group_queries(qids)
    return LetorSplit(
        name="test",
        files=[p.path for p in parts],
        features=features,
        labels=np.concatenate([p.labels for p in parts]).astype(np.float32),
        qids=qids,
        query_ids=query_ids,
        query_rows=np.split(rows, np.cumsum(lengths)[:-1]),
        queries=np.arange(len(query_ids)),
        sources=parts,
    )


@torch.no_grad()
def score_split(scorer: nn.Module, split: LetorSplit, batch_size: int = 128) -> torch.Tensor:
    """``scorer(features, mask)`` of every row of ``split``, float64 [rows] in row order."""
    tensors = SplitTensors.from_queries(
        split.features,
        split.labels,
        [split.query_rows[q] for q in split.queries],
        split.query_ids[split.queries],
    )
    rows, values = [], []
    for start in range(0, len(tensors.lengths), batch_size):
        batch = tensors.batch(np.arange(start, min(start + batch_size, len(tensors.lengths))))
        scores = scorer(batch["features"], batch["mask"])
        rows.append(batch["doc_index"][batch["mask"]])
        values.append(scores[batch["mask"]])
    return scores_in_row_order(rows, values, split.num_rows)


def row_source(split: LetorSplit, row: int) -> str:
    """``file:line`` of row ``row`` (0-based) of ``split``, whose rows are its sources' rows in
    order."""
    for source in split.sources:
        if row < source.num_rows:
            return f"{source.path}:{int(source.line_numbers[row])}"
        row -= source.num_rows
    raise IndexError(f"row {row} is beyond the rows of {split.files}")


def prediction_files(
    out: Path,
    scores: torch.Tensor,
    split: LetorSplit,
    evaluate: bool,
    ks: Sequence[int],
    convention: str = "letor",
) -> tuple[dict[Path, str], dict[str, float] | None]:
    """The run's files about ``split`` (module docstring) by path, and its metrics when
    ``evaluate``; nothing is written. NaN scores (e.g. of NaN weights) are refused."""
    scores = torch.as_tensor(scores, dtype=torch.float64)
    nan = torch.isnan(scores)
    if bool(nan.any()):
        row = int(nan.nonzero()[0])
        raise ValueError(
            f"the score of row {row + 1} ({row_source(split, row)}) is nan ({int(nan.sum())} of "
            f"{len(scores)} scores are NaN): no prediction can rank it, so nothing is written. "
            "Check the model's weights (are they finite?) and the features (data.nan_policy)"
        )
    predictions = Path(out) / "predictions"
    qids, docids = split.qids.tolist(), split.docids.tolist()
    files = {
        predictions / "test.txt": "".join(f"{s:.17g}\n" for s in scores.tolist()),
        predictions / "test.sources": "".join(f"{path}\n" for path in split.files),
        predictions / "test.run": trec_run_text(qids, docids, scores),
    }
    if not evaluate:
        return files, None
    # the metrics (torchmetrics) load only when the labels are judged: predict needs none
    from differank.rankers.metrics.evaluate import convention_means, evaluate_arrays

    files[predictions / "test.qrels"] = trec_qrels_text(qids, docids, split.labels)
    values = evaluate_arrays(scores, split.labels, split.qids, ks=ks, convention=convention)
    # every convention side by side (docs/metrics.md#conventions); the top level is `convention`
    conventions = convention_means(scores, split.labels, split.qids, ks=ks)
    record = {**values, "conventions": conventions}
    files[Path(out) / "test_metrics.json"] = json.dumps(record, indent=2) + "\n"
    return files, values


def write_predictions(
    out: Path,
    scores: torch.Tensor,
    split: LetorSplit,
    evaluate: bool,
    ks: Sequence[int],
    convention: str = "letor",
) -> dict[str, float] | None:
    """Write the :func:`prediction_files` together; return the metrics when ``evaluate``."""
    files, metrics = prediction_files(out, scores, split, evaluate, ks, convention)
    write_files(files)
    return metrics


def metrics_table(values: dict[str, float], convention: str = "letor") -> str:
    """``values`` as the console's two-column table."""
    table = Table("metric", f"test ({convention})")
    for key, value in values.items():
        table.add_row(key, f"{value:.4f}")
    text = io.StringIO()
    Console(file=text, width=100).print(table)
    return text.getvalue().rstrip()


def report(run_dir: Path, metrics: dict[str, float] | None, weights: str, convention: str) -> None:
    """Log what a run scored: the test table of ``metrics`` (None: the predictions' folder) and
    which ``weights`` scored it."""
    if metrics is None:
        log.info("predictions of %s: %s", weights, run_dir / "predictions")
    else:
        table = metrics_table(metrics, convention)
        log.info("test metrics of %s:\n%s\noutputs: %s", weights, table, run_dir)


def describe_checkpoint(checkpoint: dict, monitor: str) -> str:
    """Which weights were scored: the checkpoint's epoch and validation value."""
    value = checkpoint.get("differank", {}).get("validation", {}).get(monitor)
    shown = "" if value is None else f", {monitor} {value:.4f}"
    return f"epoch {checkpoint.get('epoch', '?')}{shown}"
