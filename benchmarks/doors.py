"""What the doors over differank's core cost for their work: ``differank.Ranker().fit`` against
``lightgbm.LGBMRanker().fit`` (defaults, an ``eval_set`` for both; MQ2008 fold 1 and a synthetic
fold of 60 training queries x 150 documents x 45 features), the share of a fit spent outside its
optimisation steps, and ``differank predict`` / ``differank task=export export.format=onnx`` as
fresh processes against a bare ``python -c "import torch"``. Every ratio is of numbers measured
in the same run, interleaved; medians of ``--repeats``. Writes ``benchmarks/results/doors.md``.

    python benchmarks/doors.py --repeats 3
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import measure
import numpy as np
import pytorch_lightning as pl

RESULT = Path(__file__).resolve().parent / "results" / "doors.md"
SYNTHETIC = {"queries": (60, 20, 20), "documents": 150, "features": 45}


class StepClock(pl.Callback):
    """Seconds inside the training batches: forward, backward and the optimizer step."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self._started = 0.0

    def on_train_batch_start(self, *args) -> None:
        self._started = time.perf_counter()

    def on_train_batch_end(self, *args) -> None:
        self.seconds += time.perf_counter() - self._started


def mq2008_fold(root: Path):
    """Fold 1 of MQ2008 (S1-S3 train, S4 validation, S5 test) as X, y, qid arrays."""
    from differank.datamodules import read_letor

    def split(names):
        return read_letor([root / f"{name}.txt.gz" for name in names])

    return split(["S1", "S2", "S3"]), split(["S4"]), split(["S5"])


def synthetic_fold(seed: int = 0):
    """Queries of 150 documents, 45 features, graded labels 0..4 from a planted nonlinear
    signal with noise (train, validation, test)."""
    rng = np.random.default_rng(seed)
    weights = rng.normal(size=SYNTHETIC["features"])
    splits = []
    for queries in SYNTHETIC["queries"]:
        rows = queries * SYNTHETIC["documents"]
        X = rng.normal(size=(rows, SYNTHETIC["features"])).astype(np.float32)
        signal = X @ weights / 6 + 0.5 * X[:, 0] * X[:, 1] + rng.normal(scale=1.0, size=rows)
        y = np.digitize(signal, np.quantile(signal, [0.6, 0.8, 0.9, 0.97]))
        splits.append((X, y, np.repeat(np.arange(queries), SYNTHETIC["documents"])))
    return splits


def group_sizes(qid: np.ndarray) -> np.ndarray:
    _, first, counts = np.unique(qid, return_index=True, return_counts=True)
    return counts[np.argsort(first)]


def fit_pair(splits, repeats: int) -> dict[str, float]:
    """Median fit seconds of Ranker() and LGBMRanker(), interleaved, their test NDCG@10 and the
    Ranker's share of time outside its optimisation steps."""
    import lightgbm

    import differank
    from differank.rankers.metrics.evaluate import evaluate_arrays
    from differank.rankers.training import fitting

    (X, y, q), (Xv, yv, qv), (Xt, yt, qt) = splits
    clock = StepClock()
    plain_fit = fitting.fit_in_memory

    def clocked(*args, callbacks=(), **options):
        return plain_fit(*args, callbacks=[*callbacks, clock], **options)

    fitting.fit_in_memory = clocked
    ours, theirs, outside = [], [], []
    try:
        for _ in range(repeats):
            clock.seconds = 0.0
            ranker = differank.Ranker(verbose=False)
            start = time.perf_counter()
            ranker.fit(X, y, qid=q, eval_set=[(Xv, yv)], eval_qid=[qv])
            ours.append(time.perf_counter() - start)
            outside.append(1 - clock.seconds / ours[-1])
            booster = lightgbm.LGBMRanker(verbose=-1)
            start = time.perf_counter()
            booster.fit(
                X, y, group=group_sizes(q), eval_set=[(Xv, yv)], eval_group=[group_sizes(qv)]
            )
            theirs.append(time.perf_counter() - start)
    finally:
        fitting.fit_in_memory = plain_fit
    return {
        "ranker_s": statistics.median(ours),
        "lightgbm_s": statistics.median(theirs),
        "outside": statistics.median(outside),
        "ranker_ndcg10": ranker.score(Xt, yt, qid=qt),
        "lightgbm_ndcg10": evaluate_arrays(booster.predict(Xt), yt, qt, ks=(10,))["ndcg@10"],
        "epochs": len(ranker.history_),
    }


def process_seconds(argv: list[str], cwd: Path) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, cwd=cwd, capture_output=True)
    return time.perf_counter() - start


def command_doors(repeats: int) -> dict[str, float]:
    """``differank predict`` on a 200-row file and ``differank task=export
    export.format=onnx`` of the default MLP, and ``python -c "import torch"``, as fresh
    processes, interleaved."""
    import differank
    from differank.datamodules.reader import write_letor

    folder = Path(tempfile.mkdtemp(prefix="doors-"))
    (X, y, q), _, _ = synthetic_fold(seed=1)
    ranker = differank.Ranker(max_epochs=1, verbose=False).fit(X, y, qid=q)
    checkpoint = ranker.save(folder / "model.ckpt")
    rows = folder / "rows.txt"
    write_letor(rows, X[:200], y[:200], q[:200])
    cli = [sys.executable, "-m", "differank"]
    commands = {
        "torch": [sys.executable, "-c", "import torch"],
        "predict": [*cli, "predict", f"ckpt_path={checkpoint}", f"files=[{rows}]",
                    f"hydra.run.dir={folder / 'predict'}"],
        "export": [*cli, "task=export", "export.format=onnx", f"ckpt_path={checkpoint}",
                   f"hydra.run.dir={folder / 'export'}"],
    }  # fmt: skip
    seconds: dict[str, list[float]] = {name: [] for name in commands}
    for _ in range(repeats):
        for name, argv in commands.items():
            seconds[name].append(process_seconds(argv, folder))
    return {name: statistics.median(values) for name, values in seconds.items()}


def report(fits: dict[str, dict[str, float]], doors: dict[str, float], repeats: int) -> str:
    lines = [
        f"## Fit: `Ranker()` against `LGBMRanker()` (defaults, an eval_set; median of {repeats})",
        "",
        "| data | Ranker s | LGBMRanker s | ratio (target <= 3) | outside the steps "
        "(target <= 25%) | epochs | Ranker NDCG@10 | LGBMRanker NDCG@10 |",
        "|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for name, row in fits.items():
        lines.append(
            f"| {name} | {row['ranker_s']:.2f} | {row['lightgbm_s']:.2f} | "
            f"{row['ranker_s'] / row['lightgbm_s']:.1f}x | {100 * row['outside']:.0f}% | "
            f"{row['epochs']} | {row['ranker_ndcg10']:.4f} | {row['lightgbm_ndcg10']:.4f} |"
        )
    lines += [
        "",
        f"## Commands: fresh processes (median of {repeats}, interleaved)",
        "",
        '| command | s | ratio to `python -c "import torch"` (target <= 3) |',
        "|---|---:|---:|",
        f'| `python -c "import torch"` | {doors["torch"]:.2f} | 1.0x |',
        f"| `differank predict ckpt_path=... files=[200 rows]` | {doors['predict']:.2f} | "
        f"{doors['predict'] / doors['torch']:.1f}x |",
        f"| `differank task=export export.format=onnx ckpt_path=...` (default MLP) | "
        f"{doors['export']:.2f} | {doors['export'] / doors['torch']:.1f}x |",
    ]
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, interleaved")
    parser.add_argument("--mq2008", type=Path, default=None, help="MQ2008 folder (S1..S5)")
    parser.add_argument("--out", type=Path, default=RESULT, help="the markdown result file")
    args = parser.parse_args()
    from differank.datamodules.download import data_home

    fits = {
        "MQ2008 fold 1": fit_pair(mq2008_fold(args.mq2008 or data_home() / "MQ2008"), args.repeats),
        "synthetic 60 x 150 x 45": fit_pair(synthetic_fold(), args.repeats),
    }
    doors = command_doors(args.repeats)
    command = f"python benchmarks/doors.py --repeats {args.repeats}"
    text = f"# The doors' cost\n\nCommand: `{command}`\n\n{report(fits, doors, args.repeats)}"
    measure.publish(text, args.out)


if __name__ == "__main__":
    main()
