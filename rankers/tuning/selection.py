"""What the runs say: each fold's split in the ensemble's layout, per-query test metrics and
the paired intervals against the reference, and the greedy ensemble.

**Paired intervals.** Each row's per-query test AP (mean over its seeds), pooled over the folds
(each query is tested once in LETOR's rotation), minus the reference's: the mean difference and
its 95% paired bootstrap interval (:mod:`differank.rankers.metrics.significance`). A row is
better or worse only when its interval excludes 0.

**Ensemble.** Greedy forward selection with replacement (Caruana et al. 2004) over every
(row, seed) run of differank, on mean validation MAP over the folds, of the runs' scores
standardised per query (:func:`differank.rankers.run.ensemble.standardize_per_query`), at most
:data:`ENSEMBLE_STEPS` steps; its test row is scored like the others. With no candidate (every
differank row failed) it is :class:`NoCandidatesError`, naming why.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from differank.rankers.metrics.significance import paired_bootstrap

ENSEMBLE_STEPS = 10


class NoCandidatesError(ValueError):
    """The greedy ensemble was given no run to choose from."""


def per_query(runs: list[dict], test: dict[int, Split], key: str) -> dict[tuple[int, int], float]:
    """``key`` of each test (fold, qid) from the runs' prediction files, the mean over seeds."""
    from differank.rankers.metrics.evaluate import per_query_values

    values: dict[tuple[int, int], list[float]] = {}
    for run in runs:
        split = test[run["fold"]]
        scores, labels, qids_ = (
            torch.as_tensor(values) for values in (_scores(run, "test"), split.labels, split.qids)
        )
        qids, metrics = per_query_values(scores, labels, qids_)
        for qid, value in zip(qids, metrics[key].tolist(), strict=True):
            values.setdefault((run["fold"], qid), []).append(value)
    return {pair: statistics.fmean(seeds) for pair, seeds in values.items()}


def paired_against(runs: list[dict], reference: list[dict], test: dict[int, Split], key: str):
    """The row's paired bootstrap interval of per-query ``key`` against the reference row's."""
    ours, theirs = per_query(runs, test, key), per_query(reference, test, key)
    if set(ours) != set(theirs):
        raise ValueError("the two rows were tested on different queries")
    pairs = sorted(ours)
    return paired_bootstrap(
        torch.tensor([ours[p] for p in pairs]), torch.tensor([theirs[p] for p in pairs])
    )


@dataclass
class Split:
    """One fold's split in the padded layout the ensemble scores: rows grouped by query."""

    labels: np.ndarray
    qids: np.ndarray
    rows: np.ndarray
    index: torch.Tensor
    mask: torch.Tensor

    @classmethod
    def of(cls, split) -> Split:
        from differank.datamodules.reader import group_queries
        from differank.rankers.tuning.reference import GroupedMap

        _, rows, lengths = group_queries(split.qids)
        grouped = GroupedMap(split.labels[rows], lengths)
        return cls(split.labels, split.qids, rows, grouped.index, grouped.mask)

    def padded(self, scores: np.ndarray) -> torch.Tensor:
        from differank.rankers.run.ensemble import standardize_per_query

        values = torch.from_numpy(np.asarray(scores, dtype=np.float64)[self.rows])[self.index]
        return standardize_per_query(torch.where(self.mask, values, 0.0), self.mask)

    def flat(self, padded: torch.Tensor) -> np.ndarray:
        scores = np.empty(len(self.rows))
        scores[self.rows] = padded[self.mask].numpy()
        return scores


def _scores(run: dict, split: str) -> np.ndarray:
    """A run's scores of ``split``, one per source row (the ensemble's are held in memory)."""
    if f"{split}_scores" in run:
        return run[f"{split}_scores"]
    return np.loadtxt(Path(run["run_dir"]) / "predictions" / f"{split}.txt", ndmin=1)


def select_ensemble(members: dict[str, list[dict]], val: dict[int, Split], test: dict[int, Split]):
    """Greedy forward selection with replacement on mean validation MAP over the folds.

    ``members``: name -> its runs (one per fold). Returns ``(counts, val_map, test_runs)``:
    how often each member was picked, the ensemble's validation MAP and its per-fold test rows
    (metrics and scores, like a run's)."""
    from differank.rankers.metrics.evaluate import evaluate_arrays
    from differank.rankers.metrics.letor import letor_metrics

    if not members:
        raise NoCandidatesError(
            "the ensemble has no candidate: no differank row finished its seeds (the report "
            "names each row's error); choose other rows (tune.rows=[...]) or fix their errors"
        )
    folds = sorted(val)
    by_fold = {name: {run["fold"]: run for run in runs} for name, runs in members.items()}
    val_scores = {
        name: {f: val[f].padded(_scores(runs[f], "val")) for f in folds}
        for name, runs in by_fold.items()
    }
    labels = {f: torch.from_numpy(val[f].labels[val[f].rows])[val[f].index] for f in folds}

    def val_map(totals: dict[int, torch.Tensor]) -> float:
        return statistics.fmean(
            float(letor_metrics(totals[f], labels[f], val[f].mask, ks=(1,))["map"].mean())
            for f in folds
        )

    counts: dict[str, int] = {}
    totals = {f: torch.zeros_like(val[f].index, dtype=torch.float64) for f in folds}
    best = float("-inf")
    for _ in range(ENSEMBLE_STEPS):
        scored = [
            (val_map({f: totals[f] + val_scores[name][f] for f in folds}), name)
            for name in sorted(val_scores)
        ]
        value, name = max(scored)
        if value <= best:
            break
        best, counts[name] = value, counts.get(name, 0) + 1
        totals = {f: totals[f] + val_scores[name][f] for f in folds}
    test_runs = []
    for f in folds:
        total = torch.zeros_like(test[f].index, dtype=torch.float64)
        for n, count in counts.items():
            total = total + count * test[f].padded(_scores(by_fold[n][f], "test"))
        scores = test[f].flat(total)
        metrics = evaluate_arrays(scores, test[f].labels, test[f].qids)
        # its validation value is the signal's: the ensemble exists only when that is val/map
        test_runs.append(
            {**metrics, "fold": f, "test_scores": scores, "val_map": best, "validation": best}
        )
    return counts, best, test_runs


def mean_std(runs: list[dict], key: str) -> tuple[float, float]:
    values = [run[key] for run in runs]
    return statistics.fmean(values), statistics.stdev(values) if len(values) > 1 else 0.0
