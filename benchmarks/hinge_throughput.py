"""Loss-augmented inference throughput for the structured NDCG@k hinge
(docs/objectives/hinge.md#loss-augmented-inference).

Times one batch of exact inference three ways in the same run and prints a markdown table:
the batched label-level DP (``solver="dp"``), the per-query torch Hungarian of
``differank.losses.algorithms.ndcg_assignment`` (``solver="assignment"``), and scipy's
``linear_sum_assignment`` per query (the report's choice; host copy and benefit matrices included).
On CPU the times are process CPU time with one thread. Labels follow MQ2008's
proportions (0: 74 %, 1: 19 %, 2: 7 %); lists are full (every query has L documents).

    python benchmarks/hinge_throughput.py [--device cuda] [--repeats 5]
"""

from __future__ import annotations

import argparse

import measure
import numpy as np
import torch
from scipy.optimize import linear_sum_assignment

from differank.losses.algorithms.ndcg_assignment import (
    assignment_positions,
    gains_and_ideal_dcg,
    label_level_dp,
)


def make_batch(batch, length, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    draw = torch.rand(batch, length, generator=g)
    labels = (draw > 0.74).float() + (draw > 0.93).float()
    scores = torch.randn(batch, length, generator=g)
    mask = torch.ones(batch, length, dtype=torch.bool)
    return scores.to(device), labels.to(device), mask.to(device)


def scipy_per_query(scores, labels, mask, k):
    """The report's route: host copy, one [n, k'] benefit matrix and one LSA per query."""
    s = scores.detach().cpu().double().numpy()
    y = labels.cpu().double().numpy()
    m = mask.cpu().numpy()
    positions = np.full(s.shape, k + 1, dtype=np.int64)
    for b in range(s.shape[0]):
        docs = np.flatnonzero(m[b])
        gains = 2.0 ** y[b, docs] - 1.0
        top = min(len(docs), k)
        ranks = np.arange(1, top + 1)
        discount = 1.0 / np.log2(1.0 + ranks)
        ideal = float(np.sort(gains)[::-1][:top] @ discount)
        if ideal <= 0:
            continue
        benefit = (k + 1 - ranks)[None, :] * s[b, docs][:, None] - gains[:, None] * discount / ideal
        rows, cols = linear_sum_assignment(benefit, maximize=True)
        positions[b, docs[rows]] = cols + 1
    return torch.from_numpy(positions).to(scores.device)


def timed(fn, repeats, device):
    """Median milliseconds per call after a warm-up (DP tables are built and cached there). On
    CPU this is the process's CPU time, not wall time: on a shared machine wall time mostly
    measures the neighbours (every path here is one thread)."""
    return measure.median_seconds(fn, repeats, measure.device_clock(device), device) * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--k", type=int, default=10)
    parser.add_argument("--batches", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--lengths", type=int, nargs="+", default=[32, 128, 512])
    parser.add_argument("--skip-torch-hungarian", action="store_true")
    args = parser.parse_args()
    device = torch.device(args.device)
    k = args.k
    if device.type == "cpu":
        torch.set_num_threads(1)  # every path single-threaded, so CPU time compares like for like
    clock = "wall" if device.type == "cuda" else "process CPU"
    print(
        f"device={device}, k={k}, torch threads={torch.get_num_threads()}, "
        f"median of {args.repeats} ({clock} ms per batch)\n"
    )
    print(
        "| B | L | DP (ms) | scipy LSA per query (ms) | torch Hungarian per query (ms) "
        "| LSA / DP | Hungarian / DP |"
    )
    print("|---|---|---|---|---|---|---|")
    for batch in args.batches:
        for length in args.lengths:
            scores, labels, mask = make_batch(batch, length, device)

            def dp(scores=scores, labels=labels, mask=mask):
                gains, ideal = gains_and_ideal_dcg(labels, mask, k, scores.dtype)
                return label_level_dp(scores, gains, ideal, labels, mask, k)

            def hungarian(scores=scores, labels=labels, mask=mask):
                gains, ideal = gains_and_ideal_dcg(labels, mask, k, scores.dtype)
                return assignment_positions(scores, gains, ideal, mask, k)

            def lsa(scores=scores, labels=labels, mask=mask):
                return scipy_per_query(scores, labels, mask, k)

            t_dp = timed(dp, args.repeats, device)
            t_lsa = timed(lsa, args.repeats, device)
            if args.skip_torch_hungarian:
                t_hu, ratio_hu = float("nan"), float("nan")
            else:
                t_hu = timed(hungarian, max(1, args.repeats // 3), device)
                ratio_hu = t_hu / t_dp
            print(
                f"| {batch} | {length} | {t_dp:.2f} | {t_lsa:.2f} | {t_hu:.1f} | "
                f"{t_lsa / t_dp:.1f}x | {ratio_hu:.0f}x |",
                flush=True,
            )
    print("\n" + measure.metadata_line(measure.run_metadata(device)), end="")


if __name__ == "__main__":
    main()
