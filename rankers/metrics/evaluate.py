"""Score a prediction file against LETOR feature files, like ``Eval-Score-4.0.pl``.

    python -m differank.rankers.metrics.evaluate FEATURE_FILE [FEATURE_FILE ...] PREDICTION_FILE \\
        [--ks 1 3 5 10] [--convention letor|trec] [--short-list zero|ndcg_at_n] [--json OUT.json]

The prediction file holds one score per line, aligned with the rows (data lines) of the
concatenated feature files. The feature files are read by :mod:`differank.datamodules.reader`, the
same reader (same rules, same cache) as training, so any file training accepts is evaluated with the
same rows, labels and query grouping: rows with the same qid form one query, even when they are
not contiguous, in file order; queries are ordered by first appearance. ``train.py`` scores the
test split with these functions, so its ``test_metrics.json`` and this command agree exactly.
The JSON also holds ``conventions``: MAP and NDCG@k under every convention side by side
(:func:`convention_means`, docs/metrics.md#conventions).
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from differank.datamodules.atomic_files import write_file
from differank.datamodules.reader import NUMBER, group_queries, read_letor_file
from differank.datamodules.regular_files import require_regular_file
from differank.losses.options import keyword_options
from differank.rankers.metrics.letor import (
    CONVENTIONS,
    check_metric_options,
    counted_queries,
    letor_metrics,
    metric_keys,
)

# Queries per letor_metrics call: bounds the padded [chunk, L] float64 work tensors.
_CHUNK = 512


@dataclass(frozen=True)
class MetricOptions:
    """The evaluator's options, written once (the functions below take them as keywords):
    ``ks``, ``convention`` and ``short_list`` as in
    :func:`~differank.rankers.metrics.letor.letor_metrics`; checked where they are used."""

    ks: Sequence[int] = (1, 3, 5, 10)
    convention: str = "letor"
    short_list: str | None = None


def read_labels_and_qids(feature_files: Sequence[str | Path]) -> tuple[torch.Tensor, torch.Tensor]:
    """Label (float64) and qid (int64) of every row of the feature files, in order, as the
    reader reads them (errors name file:line)."""
    parts = [read_letor_file(name) for name in feature_files]
    labels = torch.cat([torch.from_numpy(p.labels.astype("float64")) for p in parts])
    qids = torch.cat([torch.from_numpy(p.qids.astype("int64")) for p in parts])
    return labels, qids


# A scores line: blanks, one number in the reader's syntax, blanks.
_SCORE_LINE = re.compile(rb"[ \t]*(?:" + NUMBER.pattern.encode() + rb")[ \t]*")


def read_scores(prediction_file: str | Path) -> list[float]:
    """One score per line (blanks around it and trailing blank lines are allowed), written in
    the reader's number syntax (:data:`differank.datamodules.reader.NUMBER`: ``3_0``, ``0x1p3``
    or a non-ASCII byte are errors); NaN is an error. Every error names ``file:line``. A FIFO,
    directory or device is refused before it is opened (reading a FIFO would block)."""
    path = require_regular_file(prediction_file, "a scores file")
    data = path.read_bytes()
    lines = data.splitlines()  # \n, \r\n or \r, as the reader counts lines
    while lines and not lines[-1].strip():
        lines.pop()
    if not data.isascii():
        number, raw = next((n, r) for n, r in enumerate(lines, 1) if not r.isascii())
        column = next(k for k, byte in enumerate(raw) if byte > 127)
        raise ValueError(
            f"{path}:{number}: byte 0x{raw[column]:02x} at column {column + 1} is not ASCII; "
            "a scores file holds one number per line"
        )
    match = _SCORE_LINE.fullmatch
    if not all(map(match, lines)):
        number, raw = next((n, r) for n, r in enumerate(lines, 1) if not match(r))
        raise ValueError(
            f"{path}:{number}: score is not a number: {raw.decode()[:80]!r} (a number is "
            "written like 3, -0.5, .5, 1e-3 or inf: digits, one '.', an exponent, no '_')"
        )
    scores = list(map(float, lines))
    if any(map(math.isnan, scores)):
        number = next(n for n, v in enumerate(scores, 1) if math.isnan(v))
        raise ValueError(f"{path}:{number}: score is NaN")
    return scores


@keyword_options(MetricOptions)
def per_query_metrics(
    feature_files: Sequence[str | Path], prediction_file: str | Path, **options: Any
) -> tuple[list[int], dict[str, torch.Tensor]]:
    """The qids of the evaluated queries in order of first appearance and each key's per-query
    float64 values [Q]."""
    return per_query_values(*read_rows(feature_files, prediction_file), **options)


def read_rows(
    feature_files: Sequence[str | Path], prediction_file: str | Path
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Score (float64), label (float64) and qid (int64) of every row, one score per row."""
    if isinstance(feature_files, (str, Path)):
        feature_files = [feature_files]
    labels, qids = read_labels_and_qids(feature_files)
    scores = read_scores(prediction_file)
    if len(scores) != len(labels):
        names = ", ".join(str(f) for f in feature_files)
        raise ValueError(
            f"line count mismatch: feature file(s) {names} have {len(labels)} rows but "
            f"prediction file {prediction_file} has {len(scores)} scores"
        )
    return torch.tensor(scores, dtype=torch.float64), labels, qids


@keyword_options(MetricOptions)
def per_query_values(
    scores: torch.Tensor, labels: torch.Tensor, qids: torch.Tensor, **options: Any
) -> tuple[list[int], dict[str, torch.Tensor]]:
    """Per-query metrics of rows held in memory: ``scores``, ``labels`` [N], ``qids`` [N] int,
    grouped into queries by the reader's rule
    (:func:`differank.datamodules.reader.group_queries`). Under ``no_relevant_dropped`` the
    queries without a relevant document are left out (of the qids and of the values)."""
    resolved = MetricOptions(**options)
    convention = resolved.convention
    ks, short_list = check_metric_options(resolved.ks, convention, resolved.short_list)
    scores = torch.as_tensor(scores, dtype=torch.float64).reshape(-1)
    labels = torch.as_tensor(labels, dtype=torch.float64).reshape(-1)
    qids = torch.as_tensor(qids, dtype=torch.int64).reshape(-1)
    n = len(qids)
    if not (len(scores) == len(labels) == n):
        raise ValueError(
            f"scores, labels, qids must have one entry per row, got "
            f"{len(scores)}, {len(labels)}, {n}"
        )
    query_ids, grouped, lengths = group_queries(qids.numpy())
    rows, counts = torch.from_numpy(grouped), torch.from_numpy(lengths)
    query = torch.repeat_interleave(torch.arange(len(counts)), counts)  # query of rows[i]
    starts = torch.cumsum(counts, 0) - counts
    parts: dict[str, list[torch.Tensor]] = {key: [] for key in metric_keys(ks)}
    kept = []
    for q0 in range(0, len(counts), _CHUNK):
        q1 = min(q0 + _CHUNK, len(counts))
        lo, hi = int(starts[q0]), int(starts[q1 - 1] + counts[q1 - 1])
        member = query[lo:hi] - q0
        position = torch.arange(lo, hi) - starts[q0:q1][member]
        length = int(counts[q0:q1].max())
        index = torch.zeros(q1 - q0, length, dtype=torch.long)
        mask = torch.zeros(q1 - q0, length, dtype=torch.bool)
        index[member, position] = rows[lo:hi]
        mask[member, position] = True
        values = letor_metrics(
            scores[index],
            labels[index],
            mask,
            ks=ks,
            convention=convention,
            short_list=short_list,
        )
        counted = counted_queries(labels[index], mask, convention)
        kept.append(counted)
        for key, value in values.items():
            parts[key].append(value[counted])
    empty = torch.zeros(0, dtype=torch.float64)
    counted = torch.cat(kept) if kept else torch.zeros(0, dtype=torch.bool)
    evaluated = [
        qid for qid, keep in zip(query_ids.tolist(), counted.tolist(), strict=True) if keep
    ]
    return evaluated, {key: torch.cat(v) if v else empty for key, v in parts.items()}


def dataset_means(values: dict[str, torch.Tensor]) -> dict[str, float]:
    """Plain means over queries (LETOR convention) as Python floats: per-query values summed one by
    one in query order, then divided by the number of queries, so every caller agrees exactly."""
    means = {}
    for key, per_query in values.items():
        if per_query.numel() == 0:
            raise ValueError("no queries to average")
        total = 0.0
        for value in per_query.tolist():
            total += value
        means[key] = total / per_query.numel()
    return means


@keyword_options(MetricOptions)
def evaluate_files(
    feature_files: Sequence[str | Path], prediction_file: str | Path, **options: Any
) -> dict[str, float]:
    """Dataset means of ``map, mean_ndcg, ndcg@k, p@k`` for a prediction file (Python floats)."""
    return dataset_means(per_query_metrics(feature_files, prediction_file, **options)[1])


@keyword_options(MetricOptions)
def evaluate_arrays(scores, labels, qids, **options: Any) -> dict[str, float]:
    """:func:`evaluate_files` for rows already in memory (e.g. a DataModule's test split):
    the same grouping and the same floats, without reading any file."""
    return dataset_means(per_query_values(scores, labels, qids, **options)[1])


def convention_means(
    scores, labels, qids, ks: Sequence[int] = (1, 3, 5, 10)
) -> dict[str, dict[str, float]]:
    """MAP and NDCG@k of the same rows under every convention side by side
    (docs/metrics.md#conventions): ``{convention: {"queries": Q, "map": .., "ndcg@k": ..}}``,
    Q the number of queries the means count. ``test_metrics.json`` and the evaluator's JSON
    hold it as ``"conventions"``."""
    side_by_side: dict[str, dict[str, float]] = {}
    for convention in CONVENTIONS:
        qids_kept, values = per_query_values(scores, labels, qids, ks=ks, convention=convention)
        if not qids_kept:  # e.g. no query has a relevant document: nothing to average
            side_by_side[convention] = {"queries": 0}
            continue
        means = dataset_means(values)
        chosen = ("map", *(f"ndcg@{k}" for k in ks))
        side_by_side[convention] = {"queries": len(qids_kept), **{k: means[k] for k in chosen}}
    return side_by_side


def _label(key: str) -> str:
    """Column names as the script prints them: MAP, MeanNDCG, NDCG@k, P@k."""
    if key in ("map", "mean_ndcg"):
        return {"map": "MAP", "mean_ndcg": "MeanNDCG"}[key]
    name, k = key.split("@")
    return f"{name.upper()}@{k}"


def format_table(means: dict[str, float], num_queries: int) -> str:
    """A one-row markdown table of the means (``%.4f``, as the script prints) and the count."""
    header = "| queries | " + " | ".join(_label(key) for key in means) + " |"
    rule = "|---:|" + "---:|" * len(means)
    row = f"| {num_queries} | " + " | ".join(f"{value:.4f}" for value in means.values()) + " |"
    return "\n".join([header, rule, row])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m differank.rankers.metrics.evaluate",
        description="LETOR-4.0-exact (or --convention) MAP / MeanNDCG / NDCG@k / P@k of a "
        "prediction file.",
    )
    parser.add_argument(
        "files", nargs="+", metavar="FILE", help="FEATURE_FILE [FEATURE_FILE ...] PREDICTION_FILE"
    )
    parser.add_argument("--ks", nargs="+", type=int, default=[1, 3, 5, 10])
    parser.add_argument(
        "--convention",
        choices=CONVENTIONS,
        default="letor",
        help="the rules of the printed table and the JSON's top level (docs/metrics.md); the "
        "JSON's 'conventions' holds MAP and NDCG@k under every convention",
    )
    parser.add_argument(
        "--short-list",
        choices=["zero", "ndcg_at_n"],
        default=None,
        help="NDCG@k for k > n (default: the convention's rule)",
    )
    parser.add_argument("--json", type=Path, default=None, help="write the means as JSON here")
    args = parser.parse_args(argv)
    if len(args.files) < 2:
        parser.error("need at least one FEATURE_FILE and a PREDICTION_FILE")
    *features, predictions = args.files
    try:
        ks, short_list = check_metric_options(args.ks, args.convention, args.short_list)
        rows = read_rows(features, predictions)
        qids, values = per_query_values(
            *rows, ks=ks, convention=args.convention, short_list=short_list
        )
        means = dataset_means(values)
        print(format_table(means, len(qids)))
        if args.json is not None:
            record = {**means, "conventions": convention_means(*rows, ks=ks)}
            write_file(args.json, json.dumps(record, indent=2) + "\n")  # whole or absent
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
