"""Coming from LightGBM: one MQ2008 fold trained with ``lightgbm.LGBMRanker`` and with
``differank.Ranker``, each as its documentation shows, scored by the same evaluator.

    python benchmarks/from_lightgbm.py --out benchmarks/results/from_lightgbm.md

Both read the fold's arrays with ``differank.datamodules.read_letor`` (raw features, file
order; MQ2008's queries are contiguous, so LightGBM's group sizes are the qid runs). LightGBM:
``LGBMRanker(objective="lambdarank", learning_rate=0.05, n_estimators=1000)``, the number of
trees by early stopping on validation NDCG@10 (patience 50). differank:
``Ranker(loss="lambdaloss", model="mlp")``, the epoch by validation NDCG@10 with early
stopping (patience 10). Nothing is tuned; the test split is scored once. Metrics:
:func:`differank.rankers.metrics.evaluate.evaluate_arrays` under LETOR 4.0's rules
(docs/metrics.md#conventions), what ``Ranker.score`` reports. Needs the ``bench`` extra
(lightgbm) and MQ2008 (``python -m differank.datamodules.download MQ2008``).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from measure import publish

import differank
from differank.datamodules import read_letor
from differank.datamodules.download import data_home
from differank.datamodules.folds import resolve_fold_files
from differank.rankers.metrics.evaluate import evaluate_arrays

LGBM_CALL = (
    "LGBMRanker(objective='lambdarank', learning_rate=0.05, n_estimators=1000)"
    ".fit(X, y, group=sizes, eval_set=[(Xv, yv)], eval_group=[sizes_v], eval_at=[10], "
    "callbacks=[early_stopping(50)])"
)
RANKER_CALL = (
    "differank.Ranker(loss='lambdaloss', model='mlp', early_stopping=10)"
    ".fit(X, y, qid=qid, eval_set=[(Xv, yv)], eval_qid=[qid_v])"
)


def group_sizes(qid: np.ndarray) -> np.ndarray:
    """LightGBM's group sizes: the lengths of the runs of equal qid (each query one run)."""
    starts = np.flatnonzero(np.r_[True, qid[1:] != qid[:-1]])
    if len(starts) != len(np.unique(qid)):
        raise ValueError("a query's rows are not contiguous: LightGBM's groups cannot hold it")
    return np.diff(np.r_[starts, len(qid)])


def metrics(scores, y, qid) -> dict[str, float]:
    return evaluate_arrays(scores, y, qid, ks=(10,), convention="letor")


def fit_lightgbm(train, val, test, seed: int) -> tuple[dict, dict, float, str]:
    import lightgbm

    (X, y, qid), (Xv, yv, qv), (Xt, yt, qt) = train, val, test
    model = lightgbm.LGBMRanker(
        objective="lambdarank",
        learning_rate=0.05,
        n_estimators=1000,
        random_state=seed,
        verbose=-1,
    )
    start = time.perf_counter()
    model.fit(
        X,
        y,
        group=group_sizes(qid),
        eval_set=[(Xv, yv)],
        eval_group=[group_sizes(qv)],
        eval_at=[10],
        callbacks=[lightgbm.early_stopping(50, verbose=False)],
    )
    seconds = time.perf_counter() - start
    chosen = f"{model.best_iteration_} trees"
    return metrics(model.predict(Xv), yv, qv), metrics(model.predict(Xt), yt, qt), seconds, chosen


def fit_differank(train, val, test, seed: int, max_epochs: int) -> tuple[dict, dict, float, str]:
    (X, y, qid), (Xv, yv, qv), (Xt, yt, qt) = train, val, test
    ranker = differank.Ranker(
        loss="lambdaloss", model="mlp", early_stopping=10, max_epochs=max_epochs, seed=seed
    )
    ranker.verbose = False
    start = time.perf_counter()
    ranker.fit(X, y, qid=qid, eval_set=[(Xv, yv)], eval_qid=[qv])
    seconds = time.perf_counter() - start
    import torch

    epoch = torch.load(ranker.checkpoint_path_, weights_only=True)["epoch"]
    chosen = f"epoch {epoch}"
    return metrics(ranker.predict(Xv), yv, qv), metrics(ranker.predict(Xt), yt, qt), seconds, chosen


def table(rows: list[tuple[str, str, dict, dict, float, str]], command: str, fold: int) -> str:
    lines = [
        f"# Coming from LightGBM: MQ2008 fold {fold}, side by side",
        "",
        f"Command: `{command}`",
        "",
        "Raw features from `differank.datamodules.read_letor`; metrics by LETOR 4.0's rules "
        "(`evaluate_arrays`, what `Ranker.score` reports); the model chosen on validation "
        "NDCG@10 only, the test split scored once. Fit time: wall seconds of `fit` alone.",
        "",
        "| library | call | chosen | val NDCG@10 | test NDCG@10 | test MAP | fit s |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, call, val, test, seconds, chosen in rows:
        lines.append(
            f"| {name} | `{call}` | {chosen} | {val['ndcg@10']:.4f} | {test['ndcg@10']:.4f} "
            f"| {test['map']:.4f} | {seconds:.1f} |"
        )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=data_home() / "MQ2008")
    parser.add_argument("--fold", type=int, default=1)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-epochs", type=int, default=30)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    files = resolve_fold_files(args.root, args.fold)
    train, val, test = (read_letor(files[split]) for split in ("train", "val", "test"))
    rows = [
        ("LightGBM", LGBM_CALL, *fit_lightgbm(train, val, test, args.seed)),
        ("differank", RANKER_CALL, *fit_differank(train, val, test, args.seed, args.max_epochs)),
    ]
    command = "python benchmarks/from_lightgbm.py" + (
        f" --out {args.out}" if args.out is not None else ""
    )
    if args.fold != 1 or args.max_epochs != 30 or args.seed != 0:
        command += f" --fold {args.fold} --seed {args.seed} --max-epochs {args.max_epochs}"
    return publish(table(rows, command, args.fold), args.out)


if __name__ == "__main__":
    main()
