"""ConeRank's Fig. 3 (test MAP / MeanNDCG vs K) and Fig. 4 (pair-difference spectrum) on MQ2008.

Fig. 3 reads a Hydra multirun over K and the folds (each job folder holds ``.hydra/config.yaml``
and ``test_metrics.json``), prints the per-K table (mean ± std over folds) and plots it:

    python train.py -m data=mq2008 model=conerank loss=cone trainer.max_epochs=10 \\
        model.optimizer._target_=torch.optim.Adam model.optimizer.lr=0.01 \\
        model.ranker.n_basis=2,5,10,20,46 data.fold=1,2,3,4,5 hydra.sweep.dir=multirun/cone_fig3
    python benchmarks/cone_figures.py fig3 --sweep multirun/cone_fig3

Fig. 4 computes the eigenvalues of the non-centred second moment ``(1/P) Σ z zᵀ`` of the ordered
pair differences ``z = x_l - x_m`` (``r_l > r_m``) of one fold's training split (z-scored as in
training), prints the spectrum with its cumulative energy and plots it:

    python benchmarks/cone_figures.py fig4 --fold 1

PNGs go to ``benchmarks/results/`` (``cone_fig3.png``, ``cone_fig4.png``).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import measure
import torch
from omegaconf import OmegaConf

from differank.datamodules.letor import LetorDataModule
from differank.losses.algorithms.pairs import preference_mask

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"


def fig3(sweep: Path, out: Path) -> None:
    """Per-K means of test MAP and MeanNDCG over the folds found under ``sweep``."""
    by_k: dict[int, list[dict]] = {}
    for metrics_file in sorted(sweep.rglob("test_metrics.json")):
        config_file = metrics_file.parent / ".hydra" / "config.yaml"
        if not config_file.exists():
            continue
        cfg = OmegaConf.load(config_file)
        k = int(cfg.model.ranker.n_basis)
        row = json.loads(metrics_file.read_text())
        by_k.setdefault(k, []).append({"fold": int(cfg.data.fold), **row})
    if not by_k:
        raise SystemExit(f"no finished jobs (test_metrics.json + .hydra/config.yaml) in {sweep}")
    print("| K | folds | test MAP | test MeanNDCG | NDCG@10 |")
    print("|---|---|---|---|---|")
    ks, maps, ndcgs, map_sd, ndcg_sd = [], [], [], [], []
    for k in sorted(by_k):
        rows = by_k[k]
        col = {key: [r[key] for r in rows] for key in ("map", "mean_ndcg", "ndcg@10")}
        sd = {key: statistics.stdev(v) if len(v) > 1 else 0.0 for key, v in col.items()}
        mean = {key: statistics.fmean(v) for key, v in col.items()}
        print(
            f"| {k} | {len(rows)} | {mean['map']:.4f} ± {sd['map']:.4f} | "
            f"{mean['mean_ndcg']:.4f} ± {sd['mean_ndcg']:.4f} | {mean['ndcg@10']:.4f} |"
        )
        ks.append(k)
        maps.append(mean["map"])
        ndcgs.append(mean["mean_ndcg"])
        map_sd.append(sd["map"])
        ndcg_sd.append(sd["mean_ndcg"])
    figure, axis = plt.subplots(figsize=(5, 3.5))
    axis.errorbar(ks, maps, yerr=map_sd, marker="o", capsize=3, label="MAP")
    axis.errorbar(ks, ndcgs, yerr=ndcg_sd, marker="s", capsize=3, label="MeanNDCG")
    axis.set_xscale("log")
    axis.minorticks_off()
    axis.set_xticks(ks, [str(k) for k in ks])
    axis.set_xlabel("number of basis vectors K")
    axis.set_ylabel("test (mean over folds)")
    axis.set_title("ConeRank on MQ2008 vs K (cf. paper Fig. 3)")
    axis.legend()
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    print(f"\nwrote {out}")


def fig4(root: Path, fold: int, out: Path) -> None:
    """Spectrum of the non-centred second moment of the ordered pair differences."""
    data = LetorDataModule(root=root, fold=fold, normalization="zscore")
    data.setup("fit")
    batch = data.full_batch("train")
    x = batch["features"].double()
    pref = preference_mask(batch["labels"], batch["mask"])
    moment = torch.zeros(x.shape[-1], x.shape[-1], dtype=torch.float64)
    pairs = 0
    for b in range(x.shape[0]):  # one query at a time keeps memory at one query's pairs
        high, low = torch.where(pref[b])
        z = x[b, high] - x[b, low]
        moment += z.T @ z
        pairs += z.shape[0]
    eigenvalues = torch.linalg.eigvalsh(moment / pairs).flip(0).clamp(min=0)
    energy = eigenvalues.cumsum(0) / eigenvalues.sum()
    print(f"MQ2008 fold {fold} train: {x.shape[0]} queries, {pairs} ordered pairs, F={x.shape[-1]}")
    print("\n| rank | eigenvalue | cumulative energy |")
    print("|---|---|---|")
    for i in range(len(eigenvalues)):
        if i < 12 or (i + 1) in (15, 20, 30, 40, len(eigenvalues)):
            print(f"| {i + 1} | {eigenvalues[i]:.4f} | {energy[i]:.3f} |")
    for share in (0.8, 0.9, 0.95, 0.99):
        needed = int((energy < share).sum()) + 1
        print(f"\n{share:.0%} of the energy in the top {needed} eigenvalues", end="")
    print()
    figure, (left, right) = plt.subplots(1, 2, figsize=(9, 3.5))
    ranks = range(1, len(eigenvalues) + 1)
    left.bar(ranks, eigenvalues.numpy())
    left.set_xlabel("eigenvalue rank")
    left.set_ylabel("eigenvalue")
    left.set_title(f"ordered pair differences, MQ2008 fold {fold}")
    right.plot(ranks, energy.numpy(), marker=".")
    right.axvline(10, color="grey", linestyle="--", linewidth=1)
    right.set_xlabel("number of eigenvalues")
    right.set_ylabel("cumulative energy")
    right.set_ylim(0, 1.02)
    figure.tight_layout()
    figure.savefig(out, dpi=120)
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    three = commands.add_parser("fig3", help="test MAP / MeanNDCG vs K from a multirun")
    three.add_argument("--sweep", type=Path, required=True)
    three.add_argument("--out", type=Path, default=RESULTS / "cone_fig3.png")
    four = commands.add_parser("fig4", help="eigenvalues of the ordered pair differences")
    four.add_argument("--root", type=Path, default=ROOT.parent / "shared" / "data" / "MQ2008")
    four.add_argument("--fold", type=int, default=1)
    four.add_argument("--out", type=Path, default=RESULTS / "cone_fig4.png")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.command == "fig3":
        fig3(args.sweep, args.out)
    else:
        fig4(args.root, args.fold, args.out)
    print("\n" + measure.metadata_line(measure.run_metadata()), end="")


if __name__ == "__main__":
    main()
