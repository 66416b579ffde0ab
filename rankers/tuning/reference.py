"""The reference rows: LightGBM ``lambdarank`` and XGBoost ``rank:ndcg`` on one LETOR fold,
scored exactly like differank's own runs.

Each reads the fold through the same data module as a training run (z-scored features), fits
with the number of trees chosen by early stopping on validation MAP, writes
``predictions/test.txt`` aligned line by line with the test file(s) and ``test_metrics.json``
from :func:`differank.rankers.metrics.evaluate.evaluate_files`
(docs/metrics.md#the-letor-script-rules), so a reference row is measured exactly as a
differank row. Validation MAP (same evaluator) is the only selection signal; the test split is
touched once, by the selected model. ``benchmarks/peers.py`` adds a linear RankSVM and a
command line.
"""

from __future__ import annotations

import json
import logging
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from differank.datamodules.atomic_files import write_file
from differank.rankers.metrics.evaluate import evaluate_files
from differank.rankers.metrics.letor import letor_metrics

log = logging.getLogger(__name__)

MODULES = {"lightgbm": "lightgbm", "xgboost": "xgboost"}  # the package each reference needs
# Early stopping: at most ROUNDS trees, stopped after PATIENCE without a better validation MAP
# (tiny: the tests' few rounds).
ROUNDS, PATIENCE = (1000, 50)
TINY_ROUNDS, TINY_PATIENCE = (20, 5)


def grouped(split) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows reordered so each query is contiguous: (features, labels, group sizes)."""
    order = np.concatenate([split.query_rows[q] for q in split.queries])
    sizes = np.asarray([len(split.query_rows[q]) for q in split.queries], dtype=np.int64)
    return split.features[order], split.labels[order], sizes


def score_file(datamodule, split: str, scores: np.ndarray, path: Path) -> dict[str, float]:
    """Write one score per source row (``%.17g``) and score it with the
    docs/metrics.md#the-letor-script-rules evaluator."""
    path.parent.mkdir(parents=True, exist_ok=True)
    write_file(path, "".join(f"{s:.17g}\n" for s in np.asarray(scores, dtype=np.float64)))
    return evaluate_files(datamodule.split_files(split), path)


class GroupedMap:
    """Mean LETOR MAP (docs/metrics.md#the-letor-script-rules,
    :func:`differank.rankers.metrics.letor.letor_metrics`) of scores given in
    :func:`grouped` order: the early-stopping metric of the trees."""

    def __init__(self, labels: np.ndarray, sizes: np.ndarray):
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        columns = np.arange(int(sizes.max()))
        self.mask = torch.from_numpy(columns[None, :] < sizes[:, None])
        self.index = torch.from_numpy(np.where(self.mask.numpy(), starts[:, None] + columns, 0))
        self.labels = torch.from_numpy(np.asarray(labels, dtype=np.float64))[self.index]

    def __call__(self, scores: np.ndarray) -> float:
        values = torch.from_numpy(np.asarray(scores, dtype=np.float64))[self.index]
        return float(letor_metrics(values, self.labels, self.mask, ks=(1,))["map"].mean())


def val_map(datamodule, scores: np.ndarray) -> float:
    """Validation MAP of ``scores`` by the evaluator every row is measured with."""
    with tempfile.TemporaryDirectory() as tmp:
        return score_file(datamodule, "val", scores, Path(tmp) / "val.txt")["map"]


Fitted = tuple[Callable, dict, float]  # (predict, settings, validation MAP)


def best_of(chosen: Fitted | None, candidate: Fitted) -> Fitted:
    """The better ``(predict, settings, val_map)`` of two (the first on a tie)."""
    return candidate if chosen is None or candidate[2] > chosen[2] else chosen


def _chosen(chosen: Fitted | None, peer: str) -> Fitted:
    if chosen is None:
        raise ValueError(f"{peer}: no candidate setting to fit (give at least one)")
    return chosen


class BoosterScores:
    """A LightGBM booster's scores at its early-stopped iteration; ``booster`` is kept, so a
    caller can save the chosen model (benchmarks/distill_results.py's teacher file)."""

    def __init__(self, booster) -> None:
        self.booster = booster

    def __call__(self, features: np.ndarray) -> np.ndarray:
        return self.booster.predict(features, num_iteration=self.booster.best_iteration)


def fit_lightgbm(
    datamodule, tiny: bool, candidates: list[dict], seed: int = 0
) -> tuple[Callable, dict, float]:
    """The candidate setting (LightGBM parameters over :data:`LIGHTGBM_FIXED`) with the best
    validation MAP: ``(predict, settings with its number of trees, val_map)``."""
    import lightgbm as lgb

    train, val = datamodule.split_data("train"), datamodule.split_data("val")
    x, y, groups = grouped(train)
    vx, vy, vgroups = grouped(val)
    early = GroupedMap(vy, vgroups)
    rounds, patience = (TINY_ROUNDS, TINY_PATIENCE) if tiny else (ROUNDS, PATIENCE)
    chosen: Fitted | None = None
    for candidate in candidates:
        params = {**LIGHTGBM_FIXED, "seed": seed, **candidate}
        data = lgb.Dataset(x, y, group=groups)
        valid = lgb.Dataset(vx, vy, group=vgroups, reference=data)
        booster = lgb.train(
            params,
            data,
            num_boost_round=rounds,
            valid_sets=[valid],
            feval=lambda scores, _: ("map", early(scores), True),
            callbacks=[lgb.early_stopping(patience, verbose=False)],
        )
        predict = BoosterScores(booster)
        score = val_map(datamodule, predict(val.features))
        settings = {**candidate, "rounds": booster.best_iteration}
        chosen = best_of(chosen, (predict, settings, score))
    return _chosen(chosen, "lightgbm")


# LightGBM's parameters besides a candidate's (which win).
LIGHTGBM_FIXED = {
    "objective": "lambdarank",
    "metric": "None",
    "min_child_samples": 20,
    "feature_fraction": 0.9,
    "bagging_fraction": 0.9,
    "bagging_freq": 1,
    "num_threads": 1,
    "verbose": -1,
    "deterministic": True,
}
# XGBoost's parameters besides a candidate's (which win).
XGBOOST_FIXED = {
    "objective": "rank:ndcg",
    "disable_default_eval_metric": 1,
    "min_child_weight": 1,
    "subsample": 0.9,
    "colsample_bytree": 0.9,
    "tree_method": "hist",
    "nthread": 1,
}


def fit_xgboost(
    datamodule, tiny: bool, candidates: list[dict], seed: int = 0
) -> tuple[Callable, dict, float]:
    """As :func:`fit_lightgbm`, for XGBoost over :data:`XGBOOST_FIXED`."""
    import xgboost as xgb

    train, val = datamodule.split_data("train"), datamodule.split_data("val")
    x, y, groups = grouped(train)
    vx, vy, vgroups = grouped(val)
    dtrain = xgb.DMatrix(x, label=y, group=groups)
    dval = xgb.DMatrix(vx, label=vy, group=vgroups)
    early = GroupedMap(vy, vgroups)
    rounds, patience = (TINY_ROUNDS, TINY_PATIENCE) if tiny else (ROUNDS, PATIENCE)
    chosen: Fitted | None = None
    for candidate in candidates:
        params = {**XGBOOST_FIXED, "seed": seed, **candidate}
        booster = xgb.train(
            params,
            dtrain,
            num_boost_round=rounds,
            evals=[(dval, "val")],
            custom_metric=lambda scores, _: ("map", early(scores)),
            maximize=True,
            early_stopping_rounds=patience,
            verbose_eval=False,
        )
        limit = (0, booster.best_iteration + 1)
        predict = lambda f, b=booster, r=limit: b.predict(xgb.DMatrix(f), iteration_range=r)  # noqa: E731
        score = val_map(datamodule, predict(val.features))
        settings = {**candidate, "rounds": booster.best_iteration + 1}
        chosen = best_of(chosen, (predict, settings, score))
    return _chosen(chosen, "xgboost")


FITTERS = {"lightgbm": fit_lightgbm, "xgboost": fit_xgboost}


def available(peer: str) -> bool:
    """Whether the reference's package imports; logs why not otherwise."""
    try:
        __import__(MODULES[peer])
    except ImportError as error:
        log.warning("skipping %s: %s (pip install %s)", peer, error, MODULES[peer])
        return False
    return True


def run_reference(
    peer: str,
    datamodule,
    run_dir: Path,
    candidates: list[dict],
    tiny: bool = False,
    seed: int = 0,
    fitters: dict[str, Callable] = FITTERS,
) -> dict:
    """Fit ``peer`` (a key of ``fitters``) on the datamodule's fold, choose among
    ``candidates`` on validation, write and score test. Returns the row ``{fold, <metrics>,
    val_map, seconds, settings}``."""
    start = time.perf_counter()
    predict, settings, chosen_map = fitters[peer](datamodule, tiny, candidates, seed)
    test = datamodule.split_data("test")
    predictions = run_dir / "predictions" / "test.txt"
    metrics = score_file(datamodule, "test", predict(test.features), predictions)
    seconds = time.perf_counter() - start
    write_file(run_dir / "test_metrics.json", json.dumps(metrics, indent=2) + "\n")
    write_file(run_dir / "settings.json", json.dumps({**settings, "val_map": chosen_map}) + "\n")
    return {
        "fold": datamodule.fold,
        **metrics,
        "val_map": chosen_map,
        "seconds": seconds,
        "settings": settings,
    }
