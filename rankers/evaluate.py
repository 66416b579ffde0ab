"""Score a prediction file against LETOR feature files, like ``Eval-Score-4.0.pl`` (SPEC §6).

    python -m rankers.evaluate FEATURE_FILE [FEATURE_FILE ...] PREDICTION_FILE \\
        [--ks 1 3 5 10] [--convention letor|trec] [--short-list zero|ndcg_at_n] [--json OUT.json]

The prediction file holds one score per line, aligned line by line with the concatenation of
the feature files. Only the label and the qid of each feature line are read (``.gz`` files are
read through gzip). Lines with the same qid form one query, even when its lines are not
contiguous, in file order; queries are ordered by first appearance. ``train.py`` calls
:func:`evaluate_files`, so its ``test_metrics.json`` and this command agree exactly.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from rankers.metrics import check_metric_options, letor_metrics, metric_keys

# Queries per letor_metrics call: bounds the padded [chunk, L] float64 work tensors.
_CHUNK = 512


def _open_text(path: Path):
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8")
    return open(path, encoding="utf-8")


def read_labels_and_qids(feature_files: Sequence[str | Path]) -> tuple[list[float], list[str]]:
    """Label and qid of every line of the feature files, in order (the first two tokens).

    A line must start ``<label> qid:<id>`` with a non-negative integer label, as the script's
    pattern ``^(\\d+) qid:([^\\s]+)`` requires; anything else is an error naming file:line.
    """
    labels: list[float] = []
    qids: list[str] = []
    for name in feature_files:
        path = Path(name)
        with _open_text(path) as handle:
            for number, line in enumerate(handle, start=1):
                tokens = line.split(maxsplit=2)
                if (
                    len(tokens) < 2
                    or not (tokens[0].isascii() and tokens[0].isdigit())
                    or not tokens[1].startswith("qid:")
                    or len(tokens[1]) == 4
                ):
                    raise ValueError(
                        f"{path}:{number}: bad feature line (expected '<label> qid:<id> ...'): "
                        f"{line.rstrip()[:80]!r}"
                    )
                labels.append(float(tokens[0]))
                qids.append(tokens[1][4:])
    return labels, qids


def read_scores(prediction_file: str | Path) -> list[float]:
    """One score per line (trailing blank lines are allowed); NaN or non-numbers are errors."""
    path = Path(prediction_file)
    with open(path, encoding="utf-8") as handle:
        lines = handle.read().splitlines()
    while lines and not lines[-1].strip():
        lines.pop()
    scores = []
    for number, line in enumerate(lines, start=1):
        try:
            value = float(line)
        except ValueError:
            raise ValueError(f"{path}:{number}: score is not a number: {line[:80]!r}") from None
        if math.isnan(value):
            raise ValueError(f"{path}:{number}: score is NaN")
        scores.append(value)
    return scores


def per_query_metrics(
    feature_files: Sequence[str | Path],
    prediction_file: str | Path,
    *,
    ks: Sequence[int] = (1, 3, 5, 10),
    convention: str = "letor",
    short_list: str | None = None,
) -> tuple[list[str], dict[str, torch.Tensor]]:
    """The qids in order of first appearance and each key's per-query float64 values [Q]."""
    ks, short_list = check_metric_options(ks, convention, short_list)
    if isinstance(feature_files, (str, Path)):
        feature_files = [feature_files]
    labels, qids = read_labels_and_qids(feature_files)
    scores = read_scores(prediction_file)
    if len(scores) != len(labels):
        names = ", ".join(str(f) for f in feature_files)
        raise ValueError(
            f"line count mismatch: feature file(s) {names} have {len(labels)} lines but "
            f"prediction file {prediction_file} has {len(scores)} scores"
        )
    rows: dict[str, list[int]] = {}  # qid -> its lines in file order; dicts keep first appearance
    for row, qid in enumerate(qids):
        rows.setdefault(qid, []).append(row)
    order = list(rows)
    all_scores = torch.tensor(scores, dtype=torch.float64)
    all_labels = torch.tensor(labels, dtype=torch.float64)
    parts: dict[str, list[torch.Tensor]] = {key: [] for key in metric_keys(ks)}
    for start in range(0, len(order), _CHUNK):
        chunk = [torch.tensor(rows[qid]) for qid in order[start : start + _CHUNK]]
        length = max(len(r) for r in chunk)
        index = torch.zeros(len(chunk), length, dtype=torch.long)
        mask = torch.zeros(len(chunk), length, dtype=torch.bool)
        for b, r in enumerate(chunk):
            index[b, : len(r)] = r
            mask[b, : len(r)] = True
        values = letor_metrics(
            all_scores[index],
            all_labels[index],
            mask,
            ks=ks,
            convention=convention,
            short_list=short_list,
        )
        for key, value in values.items():
            parts[key].append(value)
    empty = torch.zeros(0, dtype=torch.float64)
    return order, {key: torch.cat(v) if v else empty for key, v in parts.items()}


def dataset_means(values: dict[str, torch.Tensor]) -> dict[str, float]:
    """Plain means over queries (SPEC §6.10) as Python floats: per-query values summed one by
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


def evaluate_files(
    feature_files: Sequence[str | Path],
    prediction_file: str | Path,
    ks: Sequence[int] = (1, 3, 5, 10),
    convention: str = "letor",
    short_list: str | None = None,
) -> dict[str, float]:
    """Dataset means of ``map, mean_ndcg, ndcg@k, p@k`` for a prediction file (Python floats)."""
    _, values = per_query_metrics(
        feature_files, prediction_file, ks=ks, convention=convention, short_list=short_list
    )
    return dataset_means(values)


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
        prog="python -m rankers.evaluate",
        description="LETOR-4.0-exact MAP / MeanNDCG / NDCG@k / P@k of a prediction file.",
    )
    parser.add_argument(
        "files", nargs="+", metavar="FILE", help="FEATURE_FILE [FEATURE_FILE ...] PREDICTION_FILE"
    )
    parser.add_argument("--ks", nargs="+", type=int, default=[1, 3, 5, 10])
    parser.add_argument("--convention", choices=["letor", "trec"], default="letor")
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
        qids, values = per_query_metrics(
            features,
            predictions,
            ks=args.ks,
            convention=args.convention,
            short_list=args.short_list,
        )
        means = dataset_means(values)
    except (ValueError, OSError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    print(format_table(means, len(qids)))
    if args.json is not None:
        args.json.write_text(json.dumps(means, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
