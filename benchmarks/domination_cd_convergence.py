"""Coordinate-descent domination ranker on MQ2008: time to convergence and non-zero weights,
with and without feature induction (thesis Alg. 7), hyperparameters chosen on validation.

    python benchmarks/domination_cd_convergence.py [--folds 1 2 3 4 5] [--l1 0 0.001 0.003 0.01]

For every fold and variant the solver runs to convergence once per ``l1`` value on the training
split (z-scored features, as ``data=mq2008``); the ``l1`` with the best validation MAP is kept
and its test metrics reported. MAP here is :func:`differank.rankers.metrics.letor.letor_metrics`
over the served queries of the split (the same per-query definition as train.py's
``test_metrics.json``). Prints markdown tables: one row per fold and variant, and the means.
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import measure
import torch

from differank.datamodules.letor import LetorDataModule
from differank.rankers.metrics.letor import letor_metrics
from differank.rankers.solvers.domination_cd import DominationCD

ROOT = Path(__file__).resolve().parents[1]

VARIANTS = {
    "sequential (all features)": {"induction": False, "sweeps_per_step": 1000},
    "feature induction": {"induction": True},
}


def evaluate(ranker, batch: dict[str, torch.Tensor]) -> dict[str, float]:
    with torch.no_grad():
        scores = ranker(batch["features"])
    metrics = letor_metrics(scores, batch["labels"], batch["mask"])
    return {key: float(value.mean()) for key, value in metrics.items()}


def fit(options: dict, train: dict[str, torch.Tensor], max_steps: int) -> tuple[DominationCD, dict]:
    solver = DominationCD(train["features"].shape[-1], **options)
    start = time.perf_counter()
    steps = sweeps = 0
    while not solver.converged and steps < max_steps:
        stats = solver.fit_step(train["features"], train["labels"], train["mask"])
        steps += 1
        sweeps += int(stats["sweeps"])
    seconds = time.perf_counter() - start
    return solver, {**stats, "seconds": seconds, "steps": steps, "total_sweeps": sweeps}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--root", default=str(ROOT.parent / "shared" / "data" / "MQ2008"))
    parser.add_argument("--folds", type=int, nargs="*", default=[1, 2, 3, 4, 5])
    parser.add_argument("--l1", type=float, nargs="*", default=[0.0, 0.001, 0.003, 0.01])
    parser.add_argument("--alpha", type=int, default=2)
    parser.add_argument("--tol", type=float, default=1e-3)
    parser.add_argument("--bound", default="range")
    parser.add_argument("--max-steps", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)

    rows = []
    print(
        "| fold | variant | l1 (val) | nnz / F | sweeps | seconds | objective | val MAP "
        "| test MAP | test NDCG@10 |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for fold in args.folds:
        data = LetorDataModule(args.root, fold=fold, normalization="zscore")
        data.setup("fit")
        train, vali, test = (data.full_batch(s) for s in ("train", "val", "test"))
        for variant, extra in VARIANTS.items():
            best = None
            for l1 in args.l1:
                options = {
                    "l1": l1,
                    "alpha": args.alpha,
                    "tol": args.tol,
                    "bound": args.bound,
                    **extra,
                }
                solver, stats = fit(options, train, args.max_steps)
                val = evaluate(solver.ranker, vali)
                if best is None or val["map"] > best[1]["map"]:
                    best = (l1, val, solver, stats)
            l1, val, solver, stats = best
            result = evaluate(solver.ranker, test)
            n_features = train["features"].shape[-1]
            row = {
                "fold": fold,
                "variant": variant,
                "l1": l1,
                "nnz": stats["nnz"],
                "sweeps": stats["total_sweeps"],
                "seconds": stats["seconds"],
                "objective": stats["objective"],
                "val": val["map"],
                "map": result["map"],
                "ndcg@10": result["ndcg@10"],
            }
            rows.append(row)
            print(
                f"| {fold} | {variant} | {l1:g} | {int(row['nnz'])} / {n_features} | "
                f"{row['sweeps']} | {row['seconds']:.1f} | {row['objective']:.4f} | "
                f"{row['val']:.4f} | {row['map']:.4f} | {row['ndcg@10']:.4f} |",
                flush=True,
            )
    print(
        "\n| variant | mean nnz | mean sweeps | mean seconds | mean val MAP | mean test MAP "
        "| std test MAP |"
    )
    print("|---|---|---|---|---|---|---|")
    for variant in VARIANTS:
        chosen = [row for row in rows if row["variant"] == variant]
        mean = {
            key: statistics.fmean(row[key] for row in chosen)
            for key in ("nnz", "sweeps", "seconds", "val", "map")
        }
        spread = statistics.stdev(row["map"] for row in chosen) if len(chosen) > 1 else 0.0
        print(
            f"| {variant} | {mean['nnz']:.1f} | {mean['sweeps']:.0f} | {mean['seconds']:.1f} "
            f"| {mean['val']:.4f} | {mean['map']:.4f} | {spread:.4f} |"
        )
    print("\n" + measure.metadata_line(measure.run_metadata("cpu")), end="")


if __name__ == "__main__":
    main()
