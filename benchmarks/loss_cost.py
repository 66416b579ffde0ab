"""Cost of one training batch of each objective's default (conf/loss/*.yaml) against the
domination loss's, and of the candidate defaults, all in one run, interleaved.

    python benchmarks/loss_cost.py --out benchmarks/results/loss_cost.md

One forward+backward of ``loss(ranker.loss_target(X), labels, mask, **ranker.loss_inputs())``
at B = 64, L = 128, F = 46 (MQ2008's width; labels 0-4 in MSLR proportions, full lists;
benchmarks/throughput.py's batch), the linear scorer (ConeRank's basis, K = 10, for the cone
loss). Each loss is built from its conf/loss YAML (with the row's overrides), exactly what
``train.py loss=NAME`` builds. Rounds interleave every row (each round times each row once);
the fastest of ``--rounds`` is reported. Time is the process' CPU time (with one torch thread,
``--threads 1``, the seconds an idle core would take, so ratios hold on a shared machine).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import measure
import torch
from throughput import Variant, make_batch, make_ranker, step_fn

ROOT = Path(__file__).resolve().parents[1]

# (row name, conf/loss file, overrides, ranker)
ROWS = [
    ("domination (default)", "domination", {}, "linear"),
    ("hinge (default)", "hinge", {}, "linear"),
    ("cone (default)", "cone", {}, "conerank"),
    ("cone, max_pairs_per_query 32", "cone", {"max_pairs_per_query": 32}, "conerank"),
    ("cone, max_pairs_per_query 16", "cone", {"max_pairs_per_query": 16}, "conerank"),
    ("convex (default)", "convex", {}, "linear"),
    ("convex, num_samples 1000", "convex", {"num_samples": 1000}, "linear"),
    ("convex, num_samples 100", "convex", {"num_samples": 100}, "linear"),
    ("convex, num_samples 64", "convex", {"num_samples": 64}, "linear"),
]


def build_loss(name: str, overrides: dict):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    config = OmegaConf.load(ROOT / "conf" / "loss" / f"{name}.yaml")
    config.merge_with(overrides)
    return instantiate(config)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--features", type=int, default=46)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    device = torch.device("cpu")
    features, labels, mask = make_batch(args.batch, args.length, args.features, device)
    steps = {}
    for row, name, overrides, ranker in ROWS:
        loss = build_loss(name, overrides)
        model = make_ranker(Variant(row, "", "", ranker=ranker), args.features)
        steps[row] = step_fn(loss, model, features, labels, mask)
        steps[row]()  # warm-up (first-call set-up is not a per-batch cost)
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(args.rounds):
        for row, step in steps.items():
            start = time.process_time()
            step()
            best[row] = min(best[row], time.process_time() - start)
    reference = best["domination (default)"]
    lines = [
        f"One forward+backward per batch, B = {args.batch}, L = {args.length}, F = "
        f"{args.features}, CPU, {args.threads} torch thread(s), process CPU time, fastest of "
        f"{args.rounds} "
        "interleaved rounds; losses from conf/loss/*.yaml plus the row's override.",
        "",
        "| loss | ms / batch | x domination |",
        "|---|---:|---:|",
    ]
    for row, seconds in best.items():
        lines.append(f"| {row} | {seconds * 1e3:.2f} | {seconds / reference:.1f} |")
    measure.publish("\n".join(lines), args.out, "cpu")


if __name__ == "__main__":
    main()
