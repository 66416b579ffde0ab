"""The slides' two ConvexLoss curves on MQ2008: test accuracy vs the number of MCMC samples, and
vs the restart skew (Dubey et al., ICDM 2009, "Accuracy vs. MCMC samples", "Effect of restart
skew").

    python benchmarks/convex_curves.py [--folds 1 2] [--epochs 15] [--delta ndcg]
        [--samples 3 10 30 100 300 1000 3000] [--samples-skew -20]
        [--skews 5 0 -5 -10 -20] [--skew-samples 1000] [--tag _name]

Every point is a ``train.py`` run per fold (``model=linear loss=convex``, model selection on the
validation MAP) with one setting changed; the table gives the fold means of test MAP, NDCG@1/5/10
(LETOR 4.0 script rules) and the validation MAP. Writes ``benchmarks/results/convex_curves.png``
and ``convex_curves.md``.
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

import measure
from reproduce import Config, run_all

ROOT = Path(__file__).resolve().parents[1]

METRICS = ["map", "ndcg@1", "ndcg@5", "ndcg@10"]


def sweep(name, values, override, base, folds, runs, jobs) -> list[dict]:
    """Fold-mean metrics for each value of one hyperparameter."""
    configs = [Config(f"{name}_{value}", [*base, f"{override}={value}"]) for value in values]
    results = run_all(configs, folds, runs, jobs, tiny=False)
    points = []
    for value, config in zip(values, configs, strict=True):
        rows = [row for row in results[config.name] if "error" not in row]
        if not rows:
            raise RuntimeError(f"{config.name} failed: {results[config.name]}")
        point = {key: statistics.fmean(r[key] for r in rows) for key in [*METRICS, "val_map"]}
        point["seconds"] = statistics.fmean(r["seconds"] for r in rows)
        points.append({"value": value, **point})
        print(f"{override}={value}: " + ", ".join(f"{k} {v:.4f}" for k, v in point.items()),
              flush=True)  # fmt: skip
    return points


def table(title: str, column: str, points: list[dict]) -> str:
    lines = [f"**{title}**", "", f"| {column} | test MAP | NDCG@1 | NDCG@5 | NDCG@10 | val MAP | "
             "s / run |", "|---|---|---|---|---|---|---|"]  # fmt: skip
    for p in points:
        cells = " | ".join(f"{p[k]:.4f}" for k in [*METRICS, "val_map"])
        lines.append(f"| {p['value']} | {cells} | {p['seconds']:.0f} |")
    return "\n".join(lines) + "\n"


def plot(samples: list[dict], skews: list[dict], path: Path, caption: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    labels = {"map": "MAP", "ndcg@1": "NDCG@1", "ndcg@5": "NDCG@5", "ndcg@10": "NDCG@10"}
    for key, label in labels.items():
        left.plot([p["value"] for p in samples], [p[key] for p in samples], "o-", label=label)
        right.plot(range(len(skews)), [p[key] for p in skews], "o-", label=label)
    left.set_xscale("log")
    left.set_xlabel("MCMC samples per query (S)")
    left.set_ylabel("test accuracy (MQ2008)")
    left.set_title("Accuracy vs. MCMC samples")
    right.set_xticks(range(len(skews)), [str(p["value"]) for p in skews])
    right.set_xlabel("restart skew k (restart ∝ exp(k·Δ)); left: toward worst, right: toward ideal")
    right.set_title("Effect of restart skew")
    for axis in (left, right):
        axis.grid(alpha=0.3)
        axis.legend(fontsize=8)
    figure.suptitle(caption, fontsize=9)
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--folds", type=int, nargs="*", default=[1, 2])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--delta", default="ndcg")
    parser.add_argument("--samples", type=int, nargs="*", default=[3, 10, 30, 100, 300, 1000, 3000])
    parser.add_argument("--skews", type=float, nargs="*", default=[5.0, 0.0, -5.0, -10.0, -20.0])
    parser.add_argument("--skew-samples", type=int, default=1000, help="S of the skew curve")
    parser.add_argument("--samples-skew", type=float, default=-20.0, help="k of the S curve")
    parser.add_argument("--tag", default="", help="suffix of the output file names")
    parser.add_argument("--overrides", nargs="*", default=[], help="extra Hydra overrides")
    parser.add_argument("--jobs", type=int, default=1, help="runs in parallel (processes)")
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results")
    parser.add_argument("--runs", type=Path, default=ROOT / "outputs" / "convex_curves")
    args = parser.parse_args()

    base = ["data=mq2008", "model=linear", "loss=convex", f"loss.delta={args.delta}",
            f"trainer.max_epochs={args.epochs}", *args.overrides]  # fmt: skip
    samples_base = [*base, f"loss.restart_skew={args.samples_skew}"]
    samples = sweep(
        f"samples{args.tag}",
        args.samples,
        "loss.num_samples",
        samples_base,
        args.folds,
        args.runs,
        args.jobs,
    )
    skew_base = [*base, f"loss.num_samples={args.skew_samples}"]
    skews = sweep(
        f"skew{args.tag}",
        args.skews,
        "loss.restart_skew",
        skew_base,
        args.folds,
        args.runs,
        args.jobs,
    )
    caption = (f"ConvexLoss_{args.delta.upper()}, linear scorer, MQ2008 folds "
               f"{' '.join(map(str, args.folds))} (fold means), {args.epochs} epochs max, "
               f"best epoch by validation MAP; S curve at k = {args.samples_skew}, "
               f"skew curve at S = {args.skew_samples}")  # fmt: skip
    samples_title = f"Accuracy vs. MCMC samples (restart skew {args.samples_skew})"
    skew_title = f"Effect of restart skew (S = {args.skew_samples})"
    text = "\n".join(
        [
            caption,
            "",
            table(samples_title, "S", samples),
            table(skew_title, "k", skews),
            measure.metadata_line(measure.run_metadata()),
        ]
    )
    print(text)
    args.results.mkdir(parents=True, exist_ok=True)
    (args.results / f"convex_curves{args.tag}.md").write_text(text)
    plot(samples, skews, args.results / f"convex_curves{args.tag}.png", caption)


if __name__ == "__main__":
    main()
