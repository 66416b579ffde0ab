"""ConvexLoss time per batch: the MCMC swap sampler and the set-LSE loss (forward + backward).

    python benchmarks/convex_throughput.py [--batch 64] [--lengths 16 64 128] [--samples 100 1000]
        [--deltas ndcg map auc] [--device cpu] [--epoch-fold 1]

Prints a markdown table of median seconds per batch (process CPU time on CPU, so a shared
machine does not inflate it; wall time on CUDA): the sampler alone (``run_sampler``: S orders
per query with their Δ, coefficients and hashes, updated incrementally), the loss given those
samples (dedup + c·s + log-sum-exp, forward and backward), and their sum (what one training step
pays), plus the pair-space closed form for reference. Labels are uniform on {0, 1, 2} (LETOR 4.0
grades), scores standard normal, every slot real. With ``--epoch-fold N`` it also times one
training epoch over MQ2008 fold N (real batches, Adam on a linear scorer) per setting.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from losses.convex import convex_loss, set_log_sum_exp  # noqa: E402
from losses.ranking_sampler import order_hashes, query_tables, run_sampler  # noqa: E402


def clock(device: torch.device):
    """CPU time of this process on CPU (robust on a shared machine with one thread), else wall."""
    return time.process_time if device.type == "cpu" else time.perf_counter


def median_seconds(fn, device: torch.device, repeats: int) -> float:
    fn()  # warm-up
    now = clock(device)
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        start = now()
        fn()
        if device.type == "cuda":
            torch.cuda.synchronize()
        times.append(now() - start)
    return statistics.median(times)


def batch_table(args, device: torch.device) -> str:
    lines = [
        f"ConvexLoss per batch, B = {args.batch}, device = {device}, "
        f"threads = {torch.get_num_threads()} (median of {args.repeats}; seconds of "
        f"{'process CPU time' if device.type == 'cpu' else 'wall time'})",
        "",
        "| Δ | L | S | sampler | loss fwd+bwd | total | pair-space closed form |",
        "|---|---|---|---|---|---|---|",
    ]
    for delta in args.deltas:
        for length in args.lengths:
            g = torch.Generator(device=device).manual_seed(0)
            labels = torch.randint(0, 3, (args.batch, length), generator=g, device=device).float()
            mask = torch.ones(args.batch, length, dtype=torch.bool, device=device)
            scores = torch.randn(args.batch, length, generator=g, device=device)
            leaf = scores.clone().requires_grad_(True)

            def pairs(leaf=leaf, labels=labels, mask=mask):
                convex_loss(leaf, labels, mask, delta="auc", space="pairs").backward()

            pair_time = median_seconds(pairs, device, args.repeats)
            for samples in args.samples:
                tables = query_tables(labels, mask, delta=delta)

                def sample(tables=tables, samples=samples, g=g, scores=scores):
                    return run_sampler(scores, tables, num_samples=samples, generator=g)

                drawn = sample()
                ideal_hash = order_hashes(tables.ideal.unsqueeze(1), tables)

                def loss(drawn=drawn, ideal_hash=ideal_hash, leaf=leaf):
                    set_log_sum_exp(leaf, drawn, ideal_hash, "convex").mean().backward()

                t_sample = median_seconds(sample, device, args.repeats)
                t_loss = median_seconds(loss, device, args.repeats)
                lines.append(
                    f"| {delta} | {length} | {samples} | {t_sample:.4f} | {t_loss:.4f} | "
                    f"{t_sample + t_loss:.4f} | {pair_time:.4f} |"
                )
    return "\n".join(lines) + "\n"


def epoch_table(args, device: torch.device) -> str:
    """Seconds for one training epoch (sampling + loss + backward + Adam) on MQ2008."""
    from datamodules.letor import LetorDataModule

    data = LetorDataModule(ROOT.parent / "shared" / "data" / "MQ2008", fold=args.epoch_fold)
    data.setup()
    batches = [{k: v.to(device) for k, v in b.items()} for b in data.train_dataloader()]
    queries = sum(b["mask"].shape[0] for b in batches)
    longest = max(b["mask"].shape[1] for b in batches)
    lines = [
        f"One training epoch on MQ2008 fold {args.epoch_fold} train ({queries} queries in "
        f"{len(batches)} batches of 32, lists up to {longest}), linear scorer + Adam, "
        f"device = {device}, threads = {torch.get_num_threads()}",
        "",
        "| setting | seconds / epoch |",
        "|---|---|",
    ]
    settings = [("pairs (auc closed form)", dict(delta="auc", space="pairs"))]
    for delta in args.deltas:
        for samples in args.samples:
            settings.append((f"{delta}, S = {samples}", dict(delta=delta, num_samples=samples)))
    for name, options in settings:
        torch.manual_seed(0)
        linear = torch.nn.Linear(batches[0]["features"].shape[-1], 1).to(device)
        optimizer = torch.optim.Adam(linear.parameters(), lr=0.01)
        now = clock(device)
        start = now()
        for batch in batches:
            scores = linear(batch["features"]).squeeze(-1)
            loss = convex_loss(scores, batch["labels"], batch["mask"], **options)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        if device.type == "cuda":
            torch.cuda.synchronize()
        lines.append(f"| {name} | {now() - start:.2f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lengths", type=int, nargs="*", default=[16, 64, 128])
    parser.add_argument("--samples", type=int, nargs="*", default=[100, 1000])
    parser.add_argument("--deltas", nargs="*", default=["ndcg"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--epoch-fold", type=int, default=None)
    parser.add_argument("--out", type=Path, help="also write the tables (markdown) here")
    args = parser.parse_args()
    device = torch.device(args.device)
    tables = [batch_table(args, device)]
    print(tables[-1], flush=True)
    if args.epoch_fold is not None:
        tables.append(epoch_table(args, device))
        print(tables[-1], flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text("\n".join(tables))


if __name__ == "__main__":
    main()
