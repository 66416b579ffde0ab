"""Candidate ``differank.Ranker`` defaults (queries per batch, learning rate) chosen on
validation alone: mean validation NDCG@10 over MQ2008's five folds and on lightgbm_rank (its
training file split by query: every fifth query id validates), with the fit's wall time; the
test NDCG@10 is reported beside it, never used to choose. Writes
``benchmarks/results/ranker_defaults.md``.

    python benchmarks/ranker_defaults.py
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

import measure

RESULT = Path(__file__).resolve().parent / "results" / "ranker_defaults.md"
# (batch_size, lr): today's defaults first (lr None: conf/model/mlp.yaml's 0.001)
CANDIDATES = [(32, None), (64, 0.001), (64, 0.002), (128, 0.002), (128, 0.004)]
PARTS = ("S1", "S2", "S3", "S4", "S5")


def mq2008_folds(root: Path) -> dict:
    """MQ2008's five folds (train, validation, test) as arrays, rotated as folds.tsv lists."""
    from differank.datamodules import read_letor

    folds = {}
    for fold in range(1, 6):
        names = PARTS[fold - 1 :] + PARTS[: fold - 1]
        splits = (names[:3], names[3:4], names[4:5])
        folds[f"MQ2008 fold {fold}"] = [
            read_letor([root / f"{name}.txt.gz" for name in split]) for split in splits
        ]
    return folds


def lightgbm_rank(root: Path) -> list:
    """lightgbm_rank's training file split by query id (every fifth validates), its test file."""
    from differank.datamodules import read_query_files

    files = read_query_files(root)
    X, y, qid = files["rank.train.gz"]
    validates = qid % 5 == 0
    train = (X[~validates], y[~validates], qid[~validates])
    return [train, (X[validates], y[validates], qid[validates]), files["rank.test.gz"]]


def fit(splits, batch_size: int, lr: float | None) -> tuple[float, float, float]:
    """(validation NDCG@10 of the chosen epoch, test NDCG@10, fit seconds)."""
    import differank

    (X, y, qid), (Xv, yv, qv), (Xt, yt, qt) = splits
    ranker = differank.Ranker(batch_size=batch_size, lr=lr, verbose=False)
    start = time.perf_counter()
    ranker.fit(X, y, qid=qid, eval_set=[(Xv, yv)], eval_qid=[qv])
    seconds = time.perf_counter() - start
    return float(ranker.best_score_), ranker.score(Xt, yt, qid=qt), seconds


def table(mq2008: dict, second: list) -> str:
    lines = [
        "| batch_size, lr | MQ2008 val NDCG@10 (mean of 5 folds) | lightgbm_rank val NDCG@10 | "
        "MQ2008 fit s (mean) | MQ2008 test NDCG@10 | lightgbm_rank test NDCG@10 |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for batch_size, lr in CANDIDATES:
        rows = [fit(splits, batch_size, lr) for splits in mq2008.values()]
        val, test, seconds = (statistics.mean(column) for column in zip(*rows, strict=True))
        other = fit(second, batch_size, lr)
        shown = "0.001 (default)" if lr is None else lr
        lines.append(
            f"| {batch_size}, {shown} | {val:.4f} | {other[0]:.4f} | {seconds:.2f} | "
            f"{test:.4f} | {other[1]:.4f} |"
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=RESULT, help="the markdown result file")
    args = parser.parse_args()
    from differank.datamodules.download import data_home

    body = table(mq2008_folds(data_home() / "MQ2008"), lightgbm_rank(data_home() / "lightgbm_rank"))
    measure.publish(
        "# Ranker defaults, chosen on validation\n\nCommand: `python benchmarks/ranker_defaults.py`"
        "\n\nThe first row is the default; a row replaces it only if it validates higher on both "
        "datasets. Test columns are reported, never used to choose.\n\n" + body,
        args.out,
    )


if __name__ == "__main__":
    main()
