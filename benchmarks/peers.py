"""Peer rankers on one LETOR fold, scored exactly like differank's own runs.

    python benchmarks/peers.py --peers lightgbm xgboost ranksvm --folds 1 2 3 4 5
    python benchmarks/peers.py --peers lightgbm --overrides data=lightgbm_rank   # any data config

Peers (the ``bench`` extra: ``lightgbm``, ``xgboost-cpu``, ``scikit-learn``):

- ``lightgbm``: LightGBM ``lambdarank`` (gradient-boosted trees, learning rate 0.05), the
  number of trees by early stopping on validation MAP (patience 50), ``num_leaves`` chosen on
  validation MAP;
- ``xgboost``: XGBoost ``rank:ndcg`` (hist trees, eta 0.05), the number of trees by early
  stopping on validation MAP (patience 50), ``max_depth`` chosen on validation MAP;
- ``ranksvm``: a linear RankSVM: scikit-learn ``LinearSVC`` (squared hinge, L2, no intercept,
  primal solver; the RankSVM primal of Chapelle & Keerthi 2010) fitted
  on within-query feature differences x_i - x_j of training pairs with label_i > label_j
  (at most ``MAX_PAIRS_PER_QUERY`` sampled per query, signs flipped at random for balance);
  ``C`` chosen on validation MAP. It is sklearn's solver, not a differank loss.

Every peer reads the fold through the same :class:`~differank.datamodules.letor.LetorDataModule` as
``train.py`` (z-scored features), writes ``predictions/test.txt`` aligned line by line with the
test file(s) and ``test_metrics.json`` from
:func:`differank.rankers.metrics.evaluate.evaluate_files` (docs/metrics.md#the-letor-script-rules),
so a peer row is measured exactly as a differank row. Validation MAP (same evaluator) is the
only selection signal; the test split is touched once, by the selected model.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np

from differank.rankers.tuning import reference
from differank.rankers.tuning.reference import (  # noqa: F401 (importable from here, as before)
    BoosterScores,
    GroupedMap,
    best_of,
    fit_lightgbm,
    fit_xgboost,
    grouped,
    score_file,
    val_map,
)

ROOT = Path(__file__).resolve().parents[1]

MAX_PAIRS_PER_QUERY = 2000  # RankSVM pair budget per training query (memory stays bounded)
PEERS = ("lightgbm", "xgboost", "ranksvm")
LABELS = {
    "lightgbm": "LightGBM lambdarank",
    "xgboost": "XGBoost rank:ndcg",
    "ranksvm": "RankSVM (linear, sklearn)",
}


# The settings each peer chooses from on validation MAP when no others are given (reproduce.py);
# benchmarks/protocol.py passes its own, one Optuna trial at a time (rankers/tuning/space.py).
DEFAULT_CANDIDATES = {
    "lightgbm": [{"learning_rate": 0.05, "num_leaves": leaves} for leaves in (7, 15, 31)],
    "xgboost": [{"eta": 0.05, "max_depth": depth} for depth in (3, 6)],
    "ranksvm": [{"C": c} for c in (1e-3, 1e-2, 1e-1, 1.0)],
}
TINY_CANDIDATES = {
    "lightgbm": [{"learning_rate": 0.05, "num_leaves": 7}],
    "xgboost": [{"eta": 0.05, "max_depth": 3}],
    "ranksvm": [{"C": 0.01}],
}


def pair_differences(split, max_pairs: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """x_i - x_j for pairs with label_i > label_j in one query (a sample of at most
    ``max_pairs`` per query), each multiplied by a random sign that becomes its class."""
    rng = np.random.default_rng(seed)
    parts = []
    for q in split.queries:
        rows = split.query_rows[q]
        labels = split.labels[rows]
        high, low = np.nonzero(labels[:, None] > labels[None, :])
        if len(high) > max_pairs:
            keep = rng.choice(len(high), max_pairs, replace=False)
            high, low = high[keep], low[keep]
        parts.append(split.features[rows[high]] - split.features[rows[low]])
    diffs = np.concatenate(parts).astype(np.float64)
    signs = rng.choice([-1.0, 1.0], size=len(diffs))
    return diffs * signs[:, None], signs


def fit_ranksvm(
    datamodule, tiny: bool, candidates: list[dict], seed: int = 0
) -> tuple[Callable, dict, float]:
    from sklearn.svm import LinearSVC

    train, val = datamodule.split_data("train"), datamodule.split_data("val")
    diffs, signs = pair_differences(train, MAX_PAIRS_PER_QUERY, seed)
    chosen = None
    for candidate in candidates:
        svm = LinearSVC(
            loss="squared_hinge",
            fit_intercept=False,
            dual=False,
            max_iter=5000,
            random_state=seed,
            **candidate,
        )
        svm.fit(diffs, signs)
        weights = svm.coef_.ravel()
        predict = lambda f, w=weights: np.asarray(f, dtype=np.float64) @ w  # noqa: E731
        score = val_map(datamodule, predict(val.features))
        settings = {**candidate, "pairs": len(diffs)}
        chosen = best_of(chosen, (predict, settings, score))
    return chosen


FITTERS = {**reference.FITTERS, "ranksvm": fit_ranksvm}
MODULES = {**reference.MODULES, "ranksvm": "sklearn"}


def available(peer: str) -> bool:
    """Whether the peer's package imports; prints why not (the ``bench`` extra) otherwise."""
    try:
        __import__(MODULES[peer])
    except ImportError as error:
        print(f"skipping peer {peer}: {error} (pip install -e '.[bench]')", flush=True)
        return False
    return True


def run_peer(
    peer: str,
    datamodule,
    run_dir: Path,
    tiny: bool = False,
    candidates: list[dict] | None = None,
    seed: int = 0,
) -> dict:
    """Fit ``peer`` on the datamodule's fold, choose among ``candidates`` (settings; default
    :data:`DEFAULT_CANDIDATES`) on validation, write and score test
    (:func:`differank.rankers.tuning.reference.run_reference`).

    Returns the row ``{fold, <metrics>, val_map, seconds, settings}`` like ``reproduce.py``'s.
    """
    if candidates is None:
        candidates = (TINY_CANDIDATES if tiny else DEFAULT_CANDIDATES)[peer]
    return reference.run_reference(peer, datamodule, run_dir, candidates, tiny, seed, FITTERS)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--peers", nargs="*", default=list(PEERS), choices=PEERS)
    parser.add_argument("--folds", nargs="*", type=int, default=[1, 2, 3, 4, 5])
    parser.add_argument("--root", default=str(ROOT.parent / "shared" / "data" / "MQ2008"))
    parser.add_argument(
        "--overrides",
        nargs="*",
        default=[],
        help="the data as train.py's Hydra overrides instead of --root, e.g. data=lightgbm_rank "
        "or data=letor data.root=DIR data.format=query_files",
    )
    parser.add_argument("--runs", type=Path, default=ROOT / "outputs" / "reproduce")
    parser.add_argument("--tiny", action="store_true", help="one small setting, few rounds")
    args = parser.parse_args()

    from differank.datamodules.letor import LetorDataModule

    def fold_data(fold: int, run_dir: Path):
        if not args.overrides:
            return LetorDataModule(args.root, fold=fold)
        from hydra.utils import instantiate

        from differank.rankers.run.runs import compose_config

        overrides = [*args.overrides, f"++data.fold={fold}"]
        return instantiate(compose_config(overrides, run_dir=run_dir).data)

    for peer in args.peers:
        if not available(peer):
            continue
        for fold in args.folds:
            run_dir = args.runs / f"peer_{peer}" / f"fold{fold}"
            row = run_peer(peer, fold_data(fold, run_dir), run_dir, args.tiny)
            print(json.dumps({"peer": peer, **row}), flush=True)


if __name__ == "__main__":
    main()
