"""Run configurations on every fold of a LETOR dataset and print the per-fold and mean table.

    python benchmarks/reproduce.py --experiment domination_layered
    python benchmarks/reproduce.py --overrides model=linear loss=domination --folds 1 2
    python benchmarks/reproduce.py --experiment conerank_paper_sg conerank_tuned --out benchmarks/results/cone.md

Each (configuration, fold) is one ``train.py`` run (model selection on the validation split,
test metrics from the written prediction file by SPEC §6) in ``outputs/reproduce/<name>/foldN``.
Without ``data=...`` among the overrides the data is ``mq2008``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from train import compose_run, train  # noqa: E402

COLUMNS = ["map", "mean_ndcg", "ndcg@1", "ndcg@3", "ndcg@5", "ndcg@10", "p@1", "p@5", "p@10"]


def run_folds(name: str, overrides: list[str], folds: list[int], out_root: Path) -> list[dict]:
    """One train.py run per fold; returns rows of test metrics plus val MAP and seconds."""
    data = [] if any(o.startswith("data=") for o in overrides) else ["data=mq2008"]
    rows = []
    for fold in folds:
        run_dir = out_root / name / f"fold{fold}"
        cfg = compose_run([*data, *overrides, f"data.fold={fold}"], run_dir)
        start = time.perf_counter()
        best_val = train(cfg, run_dir)
        seconds = time.perf_counter() - start
        metrics = json.loads((run_dir / "test_metrics.json").read_text())
        rows.append({"fold": fold, **metrics, "val_map": best_val, "seconds": seconds})
    return rows


def markdown_table(name: str, rows: list[dict]) -> str:
    header = ["fold", *COLUMNS, "val map", "time (s)"]
    lines = [f"**{name}**", "", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    keys = [*COLUMNS, "val_map", "seconds"]
    for row in rows:
        cells = [f"{row[key]:.4f}" if key != "seconds" else f"{row[key]:.1f}" for key in keys]
        lines.append(f"| {row['fold']} | " + " | ".join(cells) + " |")
    means = [statistics.fmean(row[key] for row in rows) for key in keys]
    lines.append("| mean | " + " | ".join(f"{m:.4f}" for m in means[:-1]) + f" | {means[-1]:.1f} |")
    if len(rows) > 1:
        stds = [statistics.stdev(row[key] for row in rows) for key in keys]
        lines.append("| std | " + " | ".join(f"{s:.4f}" for s in stds[:-1]) + f" | {stds[-1]:.1f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--experiment", nargs="*", default=[], help="conf/experiment names")
    parser.add_argument("--overrides", nargs="*", default=[], help="extra Hydra overrides for every run")
    parser.add_argument("--folds", nargs="*", type=int, default=[1, 2, 3, 4, 5])
    parser.add_argument("--out", type=Path, help="also write the tables (markdown) here")
    parser.add_argument("--runs", type=Path, default=ROOT / "outputs" / "reproduce")
    args = parser.parse_args()

    configurations = [(e, [f"experiment={e}", *args.overrides]) for e in args.experiment]
    if not configurations:
        configurations = [(" ".join(args.overrides) or "defaults", args.overrides)]
    tables = []
    for name, overrides in configurations:
        rows = run_folds(name.replace(" ", "_").replace("/", "-"), overrides, args.folds, args.runs)
        tables.append(markdown_table(name, rows))
        print(tables[-1], flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(tables))


if __name__ == "__main__":
    main()
