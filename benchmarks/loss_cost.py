"""Cost of one training batch of every objective's default (conf/loss/*.yaml) against the
domination loss's, and of the candidate defaults, all in one run, interleaved; the cost of one
training epoch on MQ2008; and the peak memory of one batch at two list lengths.

    python benchmarks/loss_cost.py --rounds 7 --out benchmarks/results/loss_cost.md

One forward+backward of ``loss(ranker.loss_target(X), labels, mask, **ranker.loss_inputs())``
at B = 64, L = 128, F = 46 (MQ2008's width; labels 0-4 in MSLR proportions, full lists;
benchmarks/throughput.py's batch), the linear scorer (ConeRank's basis, K = 10, for the cone
loss). Each loss is built from its conf/loss YAML (with the row's overrides), exactly what
``train.py loss=NAME`` builds. Rounds interleave every row (each round times each row once);
the fastest of ``--rounds`` is reported. Time is the process' CPU time (with one torch thread,
``--threads 1``, the seconds an idle core would take, so ratios hold on a shared machine).
The seed objectives' rows and their candidate defaults come first, then one row per default of
every other conf/loss file (a new file gets its row by existing).

Peak memory: the rise of the process' peak resident set during one forward+backward
(``throughput.peak_bytes``: ``measure.rss_peak_bytes`` with every block over 64 KiB served by
mmap, so freed memory is not reused unseen) at the timed batch and at ``--long-length`` with
``--long-batch`` lists (B x L kept about constant: 8 x 1,024 = 64 x 128).

Epoch: one full training epoch of each row (the same scorer, Adam lr 0.01, batch 32, loader
included, the fastest of ``--epoch-rounds``: ``throughput.epoch_seconds``) on MQ2008 fold 1's
training split when the data is there (``$LETOR_DIR/MQ2008``, else the shared data folder), else
on the synthetic set (``--tiny-epoch``: 40 synthetic queries).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import measure
import torch
from throughput import (
    Variant,
    epoch_datamodule,
    epoch_seconds,
    make_batch,
    make_ranker,
    peak_bytes,
    step_fn,
)

ROOT = Path(__file__).resolve().parents[1]

# the losses that need a scorer other than the linear one (the cone loss reads ConeRank's basis)
RANKERS = {"cone": "conerank"}
# the losses that take more than (scores, labels, mask): distill also reads a teacher's scores
# per document (docs/objectives/distill.md), so its cost is not this table's
NOT_TIMED = {"distill"}

# (row name, conf/loss file, overrides, ranker): the seed objectives and candidate defaults
SEED_ROWS = [
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


def rows() -> list[tuple[str, str, dict, str]]:
    """The seed rows, then each other conf/loss file's default, by name."""
    seeded = {name for _, name, _, _ in SEED_ROWS}
    others = sorted(
        p.stem for p in (ROOT / "conf" / "loss").glob("*.yaml") if p.stem not in seeded | NOT_TIMED
    )
    return SEED_ROWS + [
        (f"{name} (default)", name, {}, RANKERS.get(name, "linear")) for name in others
    ]


def build_loss(name: str, overrides: dict):
    from hydra.utils import instantiate
    from omegaconf import OmegaConf

    config = OmegaConf.load(ROOT / "conf" / "loss" / f"{name}.yaml")
    config.merge_with(overrides)
    return instantiate(config)


def batch_steps(table, batch: int, length: int, n_features: int) -> dict:
    """Each row's forward+backward on one random batch of the shape (fresh losses and scorers,
    seeded, so every shape starts alike)."""
    torch.manual_seed(0)
    features, labels, mask = make_batch(batch, length, n_features, torch.device("cpu"))
    steps = {}
    for row, name, overrides, ranker in table:
        loss = build_loss(name, overrides)
        model = make_ranker(Variant(row, "", "", ranker=ranker), n_features)
        steps[row] = step_fn(loss, model, features, labels, mask)
    return steps


def mebibytes(size: int) -> str:
    """``size`` in MiB, or a dash where the platform gives no peak (``peak_bytes`` returns -1)."""
    return "—" if size < 0 else f"{size / 2**20:.1f}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--length", type=int, default=128)
    parser.add_argument("--features", type=int, default=46)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--long-batch", type=int, default=8, help="B of the long-list memory")
    parser.add_argument("--long-length", type=int, default=1024, help="L of the long-list memory")
    parser.add_argument("--threads", type=int, default=1, help="torch threads")
    parser.add_argument("--epoch-rounds", type=int, default=5, help="epochs per row (fastest)")
    parser.add_argument("--tiny-epoch", action="store_true", help="epochs on 40 synthetic queries")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    device = torch.device("cpu")
    table = rows()
    steps = batch_steps(table, args.batch, args.length, args.features)
    for step in steps.values():
        step()  # warm-up (first-call set-up is not a per-batch cost)
    best = dict.fromkeys(steps, float("inf"))
    for _ in range(args.rounds):
        for row, step in steps.items():
            start = time.process_time()
            step()
            best[row] = min(best[row], time.process_time() - start)
    # memory after the timing, one batch shape at a time (only one shape's steps alive)
    peak = {row: peak_bytes(step, device) for row, step in steps.items()}
    del steps
    long_steps = batch_steps(table, args.long_batch, args.long_length, args.features)
    long_peak = {}
    for row, step in long_steps.items():
        step()  # warm-up, as the timed shape had
        long_peak[row] = peak_bytes(step, device)
    del long_steps
    datamodule, source = epoch_datamodule(args.tiny_epoch)
    epoch = {}
    for row, name, overrides, ranker in table:
        model = make_ranker(Variant(row, "", "", ranker=ranker), datamodule.n_features)
        loss = build_loss(name, overrides)
        epoch[row] = epoch_seconds(loss, model, datamodule, device, args.epoch_rounds)[1]
    reference, epoch_reference = best["domination (default)"], epoch["domination (default)"]
    short, long = (
        f"B = {args.batch}, L = {args.length}",
        f"B = {args.long_batch}, L = {args.long_length}",
    )
    lines = [
        f"One forward+backward per batch, B = {args.batch}, L = {args.length}, F = "
        f"{args.features}, CPU, {args.threads} torch thread(s), process CPU time, fastest of "
        f"{args.rounds} "
        "interleaved rounds; losses from conf/loss/*.yaml plus the row's override. Peak MiB: "
        "the rise of the process' peak resident set during one forward+backward (after the "
        f"timing) at {short} and at {long}. Epoch: one training epoch on {source} (the row's "
        "scorer, Adam, batch 32, loader included, process CPU time, the fastest of "
        f"{args.epoch_rounds}).",
        "",
        f"| loss | ms / batch | x domination | epoch ms | epoch x domination "
        f"| peak MiB, {short} | peak MiB, {long} |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for row, seconds in best.items():
        lines.append(
            f"| {row} | {seconds * 1e3:.2f} | {seconds / reference:.1f} "
            f"| {epoch[row] * 1e3:.0f} | {epoch[row] / epoch_reference:.1f} "
            f"| {mebibytes(peak[row])} | {mebibytes(long_peak[row])} |"
        )
    measure.publish("\n".join(lines), args.out, "cpu")


if __name__ == "__main__":
    main()
